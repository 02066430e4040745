"""What the simulator reads from a calibrated machine profile (docs/profile.md), table by table.

Each function returns None (or an empty result) where the profile lacks the table, so a preset machine,
or a profile calibrated before a table existed, simulates as without that mechanism.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from simasgd.machines.machine import Machine
from simasgd.machines.profile_model import GradientTable, Profile
from simasgd.sim.executor import executor_traits
from simasgd.spec import distributions
from simasgd.spec.scenario import Scenario, WorkloadConfig

READ_COPIES, UPDATE_COPIES = 2, 3  # model-sized streams per read / per update
FRESH_COPIES = 4  # an update written into another buffer: its lines are read for ownership first


def workload_table(profile: Profile | None, workload: WorkloadConfig) -> tuple[int, GradientTable] | None:
    """The profile's ``[gradient."<workload>"]`` table of this workload at the nearest measured batch size
    (its batch size, the table), or None when the workload was not calibrated."""
    tables = {} if profile is None else profile.workload_tables()
    if not tables:
        return None
    from simasgd.machines.profile import workload_key

    def key(batch: int) -> str:
        return workload_key(workload.model_copy(update={"batch_size": batch}))

    same = {int(t.batch_size): t for k, t in tables.items()
            if t.samples_s and t.batch_size is not None and k == key(int(t.batch_size))}
    if not same:
        return None
    near = min(same, key=lambda b: (abs(math.log(b / workload.batch_size)), b))
    return near, same[near]


def profile_gradient(profile: Profile | None, workload: WorkloadConfig,
                     concurrent: int = 1) -> distributions.Distribution | None:
    """Gradient times measured by ``simasgd calibrate`` for this workload (docs/profile.md).

    The table of the same workload and batch size when there is one; else the
    same workload at the nearest measured batch size, scaled by the batch ratio;
    else None (the time is then derived from ``gflops_per_core``). With
    ``concurrent`` = k > 1 gradients computing at once, the table's samples
    measured with the largest k' ≤ k threads at once (``concurrent.k<k'>``) when
    it has them, else the single-thread ``samples_s``.
    """
    found = workload_table(profile, workload)
    if found is None:
        return None
    near, table = found
    batch = workload.batch_size
    samples, whole = table.samples_s, table.summary()
    conc = table.concurrent
    if concurrent > 1 and conc is not None:
        measured = [(s, conc.summary(k)) for k in range(2, concurrent + 1) if (s := conc.samples(k)) is not None]
        if measured:
            samples, whole = measured[-1]
    kept = np.asarray(samples, dtype=float)
    if whole is not None:
        kept = representative(kept, *whole)
    return distributions.Empirical(kept * (batch / near))


# A stored call slower than the median by this many spreads (p90 − median, over all the measured calls), and than
# INTERRUPTED_MEDIANS medians, is one the host interrupted (another thread ran on its CPU for a time slice), not the
# gradient's own spread: the two bounds keep a tight table's ordinary slow calls and a wide table's tail out.
INTERRUPTED_SPREADS = 10.0
INTERRUPTED_MEDIANS = 3.0


def representative(kept: np.ndarray, mean: float, median: float, p90: float) -> np.ndarray:
    """The stored calls (``kept``: up to 200, every so many of the measured ones) as draws with the interrupted
    calls' share of all the measured calls. A rare interruption (a few in ten thousand calls) lands in such a
    sample as often as 1 in 200 or as never; drawn at the sample's share it would slow every run by a share of a
    millisecond-long pause it does not have. So where the kept calls' mean exceeds the mean over all the measured
    calls, the interrupted ones (:data:`INTERRUPTED_SPREADS`, :data:`INTERRUPTED_MEDIANS`) keep the share that
    brings the kept mean to it: the others are repeated ``m`` times (``m`` = 1 / that share's ratio, rounded, at
    most 1,000: the whole sample's share where the others alone come to its mean, or below). Unchanged where no
    call is interrupted, or the kept calls' mean is not above the whole's."""
    slow = kept > max(median + INTERRUPTED_SPREADS * max(p90 - median, 0.0), INTERRUPTED_MEDIANS * median)
    if not slow.any() or slow.all() or kept.mean() <= mean:
        return kept
    body, out = kept[~slow], kept[slow]
    weight = (mean * len(body) - body.sum()) / (out.sum() - mean * len(out))  # the interrupted calls' weight
    m = 1000 if weight <= 1e-3 else round(1.0 / weight)
    if m <= 1:
        return kept
    return np.concatenate([np.repeat(body, m), out])


def profile_machine(machine: Machine) -> Machine:
    """The machine with the profile's single-thread copy bandwidth, when calibrated."""
    copy = None if machine.profile is None else machine.profile.copy_
    gbs = None if copy is None else copy.gbs
    if gbs and gbs[0] > 0:
        return replace(machine, core_bandwidth_gbs=float(gbs[0]))
    return machine


def _latency(value: float | None) -> float | None:
    """A calibrated latency, if the profile has it (and it is no negative)."""
    return float(value) if value is not None and value >= 0 else None


def cas_latency_s(machine: Machine) -> float | None:
    """An uncontended CAS (``[cas] latency_s``), if calibrated."""
    p = machine.profile
    return None if p is None or p.cas is None else _latency(p.cas.latency_s)


def handoff_s(machine: Machine) -> float | None:
    """A lock's hand-off between two threads (``[locks] handoff_s``), if calibrated."""
    p = machine.profile
    return None if p is None or p.locks is None else _latency(p.locks.handoff_s)


def bookkeeping_s(machine: Machine) -> float | None:
    """The executor's own work between two cycles (``[executor] bookkeeping_s``), if calibrated."""
    p = machine.profile
    return None if p is None or p.executor is None else _latency(p.executor.bookkeeping_s)


def spin_yield_s(sc: Scenario, machine: Machine) -> float:
    """A spinning lock waiter's time between two sched_yield calls (profile ``[scheduler] spin_yield_s``), where
    the executor pauses before yielding (traits ``lock_waiters = "spin_pauses"``); else 0: it yields at once."""
    if executor_traits(sc).lock_waiters != "spin_pauses":
        return 0.0
    p = machine.profile
    v = None if p is None or p.scheduler is None else p.scheduler.spin_yield_s
    return float(v) if v is not None and v > 0 else 0.0


def _seconds(profile: Profile | None, workload: WorkloadConfig, keys: dict[Any, str]) -> dict[Any, float]:
    """The positive figures ``keys`` name in this workload's gradient table at the nearest batch size, by
    the same labels; those the table lacks (or the whole table) left out."""
    found = workload_table(profile, workload)
    if found is None:
        return {}
    table = found[1]
    return {c: float(v) for c, k in keys.items() if (v := getattr(table, k)) is not None and v > 0}


def profile_snapshot(profile: Profile | None, workload: WorkloadConfig) -> float | None:
    """Seconds of the executor's loss snapshot for this workload (``cycle_snapshot_median_s`` of the gradient
    table at the nearest batch size, docs/profile.md); None when the profile has none."""
    found = _seconds(profile, workload, {0: "cycle_snapshot_median_s"})
    return found[0] if found else None
