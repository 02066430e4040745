"""The calibrated machine profile as typed tables: one pydantic model per table of docs/profile.md.

``simasgd calibrate`` writes the tables (``executors/calibration/``), :mod:`simasgd.machines.profile` reads and writes
the file, and the simulator reads each figure by attribute (``profile.coherence.held_read_gbs``) under the one
name the calibrator gave it. Every table is optional: a profile calibrated before a table existed, or on a
machine where it cannot be measured, lacks it, and the mechanism that needs it does not act
(:mod:`simasgd.sim.model_record` says which, from the fields missing here).

Older files keep loading: :func:`migrate` renames the keys of the versions before :data:`FORMAT_VERSION`
(:data:`RENAMED`), and keys no table declares are kept as they are (read by nothing).

Which figures a run read is noted here too: inside :func:`recording`, every field of a table read by attribute
(present, not None) is noted as ``table.key`` (a workload's gradient table as ``gradient.<key>``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator

from simasgd.formats import versioning

FORMAT = "simasgd-profile"
# The version moves with the tables: whenever a table or key the simulator reads is added, removed, renamed or
# changes meaning. OLDEST_VERSION is the oldest version whose tables the simulator reads.
FORMAT_VERSION = 4
OLDEST_VERSION = 1
# The keys each version renamed (``table.key``: old → new), so that one quantity has one name from the
# calibrator to the step it times: a read (a copy of θ), an update (θ −= η·g), a fresh-vector pass.
RENAMED: dict[int, dict[str, str]] = {
    3: {"copy_by_size.gbs": "copy_by_size.read_gbs",
        "coherence.write_gbs": "coherence.update_gbs",
        "coherence.held_write_gbs": "coherence.held_update_gbs"},
}
# The tables and keys a version does not have: in a profile of an older version they are ignored.
DROPPED: dict[int, str] = {2: "`[passes]`, `[noise]` and the in-cycle gradient samples (`cycle_samples_s`, "
                              "`concurrent.cycle_k<k>`)",
                           4: "the steps timed in a worker's cycle (`cycle_read_s`, `cycle_update_s`, "
                              "`cycle_fresh_s` and their medians; the snapshot's stay)"}


class ProfileError(ValueError):
    pass


@dataclass
class Reads:
    """What a run read of its profile: the tables (top level) and the keys (``table.key``)."""

    tables: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)


_reads: ContextVar[Reads | None] = ContextVar("profile_reads", default=None)


@contextlib.contextmanager
def recording() -> Iterator[Reads]:
    """Note every profile figure read by attribute while inside (a run of the simulator)."""
    reads = Reads()
    token = _reads.set(reads)
    try:
        yield reads
    finally:
        _reads.reset(token)


def _holds_tables(value: Any) -> bool:
    return isinstance(value, Table) or (isinstance(value, dict) and any(isinstance(v, Table) for v in value.values()))


class Table(BaseModel):
    """A profile table. Keys it does not declare are kept (an older calibrator's, read by nothing)."""

    model_config = ConfigDict(extra="allow")
    TITLE: ClassVar[str] = ""  # the docs/profile.md heading after the table's name
    KEYS: ClassVar[dict[str, str]] = {}  # keys named by a pattern (not fields), as docs/profile.md lists them
    _path: str = PrivateAttr(default="")

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        reads = _reads.get()
        if reads is not None and value is not None and name in type(self).__pydantic_fields__:
            object.__getattribute__(self, "_note")(reads, name, value)
        return value

    def _note(self, reads: Reads, name: str, value: Any) -> None:
        if not _holds_tables(value):
            reads.keys.add(f"{object.__getattribute__(self, '__pydantic_private__')['_path']}.{name}")

    def _place(self, path: str) -> None:
        """Name this table and the tables inside it by their dotted path (what :class:`Reads` notes)."""
        self.__pydantic_private__["_path"] = path  # type: ignore[index]
        for name, info in type(self).__pydantic_fields__.items():
            value, key = self.__dict__[name], info.alias or name
            if isinstance(value, Table):
                value._place(f"{path}.{key}" if path else key)
            elif isinstance(value, dict):
                for k, sub in value.items():
                    if isinstance(sub, Table):
                        sub._place(f"{path}.{key}.{k}" if path else f"{key}.{k}")


class Head(Table):
    """The file's own description. A profile without this table is read as version 1."""

    TITLE = "the format and its version"
    format: str = Field(default=FORMAT, description=f'`"{FORMAT}"`')
    format_version: int = Field(default=FORMAT_VERSION, description=(
        f"`{FORMAT_VERSION}`; it moves whenever a table or key the simulator reads is added, removed, renamed or "
        f"changes meaning. A reader refuses a newer version, naming the file, its version and the versions it "
        f"reads, and asks to upgrade simasgd or recalibrate (`simasgd calibrate --out FILE`)"))


class MachineTable(Table):
    """The simulated machine: these keys become the machine's (`simasgd.machines.machine.Machine`); any other key of
    the machine given here overrides its default."""

    TITLE = "the simulated machine"
    sockets: int | None = Field(None, description="`/sys/devices/system/cpu/cpu*/topology` (packages)")
    cores_per_socket: int | None = Field(None, description="the same (core ids)")
    threads_per_core: int | None = Field(None, description="the same (siblings)")
    local_latency_ns: float | None = Field(None, description=(
        "pointer chase through a random cycle in a 256 MB array (every load a cache miss)"))
    remote_latency_ns: float | None = Field(None, description=(
        "the same across NUMA nodes; equal to local on one node (`[calibration] remote_latency` says which)"))
    mem_bandwidth_gbs: float | None = Field(None, description="best aggregate copy bandwidth of `[copy]`, per socket")
    link_bandwidth_gbs: float | None = Field(None, description=(
        "best aggregate copy bandwidth (no interconnect to measure on one socket)"))
    gflops_per_core: float | None = Field(None, description=(
        "flops per sample × batch / median gradient time of the largest measured workload"))
    quantum_s: float | None = Field(None, description=(
        "median uninterrupted run of two spinning threads pinned to one CPU"))
    context_switch_s: float | None = Field(None, description=(
        "`sched_yield` ping-pong of two threads on one CPU, per switch"))


class CalibrationTable(Table):
    """How and when the profile was measured."""

    created: str | datetime.datetime | None = Field(None, description="when (UTC)")
    quick: bool | None = Field(None, description="`simasgd calibrate --quick`: shorter measurements")
    seconds: float | None = Field(None, description="how long calibration took")
    numa_nodes: int | None = Field(None, description="NUMA nodes")
    cpu_count: int | None = Field(None, description="logical CPUs")
    loadavg: list[float] | None = Field(None, description="1, 5 and 15 minutes, at the end")
    remote_latency: str | None = Field(None, description='`"measured"` or `"= local (one NUMA node)"`')


class ConcurrentTable(Table):
    """For k = 2 … min(usable CPUs, 4): k independent threads, each with its own θ and random batches, run the
    same timed loop at once (absent on one CPU). Two computing gradients share caches, memory bandwidth and
    clock boost, so these times are longer and have a longer tail than `samples_s`. The simulator draws a
    worker's gradient time from `k<k>` with k = the number of gradients computing at once, else from
    `samples_s`."""

    TITLE = "the same gradient, k threads at once"
    KEYS = {"k<k>": "up to 200 per-call times of all k threads, kept by whole calls (call j of thread 0, of thread "
                    "1, …, then a later call)",
            "k<k>_mean_s, k<k>_median_s, k<k>_p90_s, k<k>_n": "over all measured calls"}
    __pydantic_extra__: dict[str, list[float] | int | float]

    def samples(self, k: int) -> list[float] | None:
        """The per-call times measured with ``k`` threads at once (``k<k>``), None where not measured."""
        extra = self.__pydantic_extra__ or {}
        value = extra.get(f"k{k}")
        if not isinstance(value, list) or not value:
            return None
        reads = _reads.get()
        if reads is not None:
            reads.keys.add(f"{self.__pydantic_private__['_path']}.k{k}")  # type: ignore[index]
        return value

    def summary(self, k: int) -> tuple[float, float, float] | None:
        """(mean, median, 90th percentile) over all the calls measured with ``k`` threads at once, None where not
        recorded."""
        extra = self.__pydantic_extra__ or {}
        names = [f"k{k}_{q}_s" for q in ("mean", "median", "p90")]
        found = _summary([extra.get(n) for n in names])
        reads = _reads.get()
        if found is not None and reads is not None:
            reads.keys.update(f"{self.__pydantic_private__['_path']}.{n}" for n in names)  # type: ignore[index]
        return found


def _summary(values: list[Any]) -> tuple[float, float, float] | None:
    """(mean, median, p90) where all three are recorded and positive, else None."""
    if not all(isinstance(v, (int, float)) and v > 0 for v in values):
        return None
    return float(values[0]), float(values[1]), float(values[2])


class GradientTable(Table):
    """The key is `mlp-<layers joined by ->-<dataset>-b<batch>-<dtype>`, e.g.
    `mlp-784-128-128-128-10-synthetic-b16-float64`; other models `<model>-<dataset>-b<batch>-<dtype>`, and a
    PyTorch module `torch-<module>-<data factory or dataset>-b<batch>-<dtype>`
    (`simasgd.machines.profile.workload_key`). Measured by calling the workload's gradient kernel on random batches in
    a loop, BLAS on one thread. `simasgd calibrate --scenario FILE` adds the scenario's workload.

    The `cycle_snapshot_*` keys are a step timed inside a one-thread worker's cycle, the first 5% dropped."""

    TITLE = "one table per workload and batch size"
    samples_s: list[float] | None = Field(None, description=(
        "up to 200 per-call times (every k-th of the measured calls, in call order); usable as an `empirical` "
        "distribution"))
    mean_s: float | None = Field(None, description="over all `n` measured calls")
    median_s: float | None = Field(None, description="over all `n` measured calls")
    p10_s: float | None = Field(None, description="over all `n` measured calls")
    p90_s: float | None = Field(None, description="over all `n` measured calls")
    std_s: float | None = Field(None, description="over all `n` measured calls")
    n: int | None = Field(None, description="calls measured")
    batch_size: int | None = Field(None, description="the workload's batch size")
    dim: int | None = Field(None, description="the model's parameters")
    dtype: str | None = Field(None, description="the workload's dtype")
    flops_per_sample: float | None = Field(None, description="the workload's flops per sample")
    gflops: float | None = Field(None, description="flops per sample × batch size / median / 10⁹")
    cycle_snapshot_s: list[float] | None = Field(None, description=(
        "the executor's loss snapshot timed in the same cycle: every 10th cycle copies the just-updated θ into "
        "the next slot of a ring built as the executor builds its own; a slot is written once a run or less, so "
        "its lines come from memory (an executor whose traits take loss snapshots: "
        "[the model](model.md#executor-traits-sim-traits))"))
    cycle_snapshot_median_s: float | None = Field(None, description="their median")
    concurrent: ConcurrentTable | None = Field(None, description="`[gradient.\"<key>\".concurrent]` below")

    def summary(self) -> tuple[float, float, float] | None:
        """(mean, median, 90th percentile) over all the measured calls, None where not recorded."""
        return _summary([self.mean_s, self.median_s, self.p90_s])


class CopyTable(Table):
    """The memory model: a read or write of b bytes by one of k concurrent threads takes about
    b / (`gbs[k−1]`/k)."""

    TITLE = "θ-sized copies by k threads at once"
    threads: list[int] | None = Field(None, description="`[1, 2, …]`")
    gbs: list[float] | None = Field(None, description=(
        "the aggregate bandwidth (all threads, over the slowest thread's time); `gbs[0]` is one core's"))
    bytes: int | None = Field(None, description="per copy (at least 8 MB, or the largest θ measured)")


class CopyBySizeTable(Table):
    """`sizes_bytes`: 16 KiB doubling up to max(4 × last-level cache, 64 MiB) (capped at 1 GiB; quick: ×8
    steps up to 8 MiB). For each size, two warm buffers on one thread. Each figure is the median of batches of
    repetitions long enough that the clock's own cost does not count. The simulator reads the bandwidth of a
    θ read or update at the working set's size: L1, L2, last-level cache or DRAM (`[sim] cache_model`)."""

    TITLE = "one thread's bandwidth by working-set size"
    sizes_bytes: list[int] | None = Field(None, description="the working-set sizes")
    read_gbs: list[float] | None = Field(None, description=(
        "a read: (bytes read + written) / time of `dst[:] = src`"))
    update_gbs: list[float] | None = Field(None, description="an update: 3 × bytes / time of `theta[i] -= lr*g[i]`")


class CacheTable(Table):
    """From `/sys/devices/system/cpu/cpu0/cache/index*/`, data and unified caches only, innermost first.
    Without sysfs: `source = "absent"` and empty lists. The simulator uses it to say where a working set
    lives and which cores share the level a line moves through."""

    TITLE = "the data-cache hierarchy"
    levels: list[int] | None = Field(None, description="the levels")
    sizes_bytes: list[int] | None = Field(None, description="their sizes")
    shared_by: list[int] | None = Field(None, description="how many logical CPUs share each (1 = private)")
    line_bytes: int | None = Field(None, description="the line size")
    source: str | None = Field(None, description='`"sysfs"` or `"absent"`')


class CoherenceTable(Table):
    """Two threads pinned to two CPUs (`cpus`) alternate on one float64 buffer through a turn word: A writes
    all of it and hands over; B times one operation and hands back. `rounds` alternations per size and
    variant (round 0 warms and is dropped); each figure is from the median round. The CPUs' placement can
    change under a virtual machine, so each size is measured between two core-to-core probes and measured
    again while the probes differ by more than 2× or are not in the placement of the table's first probe
    (`c2c_ns`).

    The simulator prices a worker's read, update or fresh pass at these rates — or at the warm
    `[copy_by_size]` time where that is slower — when another worker began writing the model since this
    worker last touched it (`[sim] coherence`, `coherence_recency`), and at its own lines' times otherwise.
    On one CPU the table is only `reason = "..."`."""

    TITLE = "reading and writing lines another core wrote last"
    sizes_bytes: list[int] | None = Field(None, description=(
        "the `[copy_by_size]` sizes from 64 KiB up to 2 × the last-level cache (at most 64 MiB): beyond, A's "
        "lines are back in DRAM"))
    read_gbs: list[float] | None = Field(None, description=(
        "B copies the buffer into its own: 2 × bytes / time; every line comes from A's cache"))
    update_gbs: list[float] | None = Field(None, description=(
        "B updates `buf[i] -= lr*g[i]`: 3 × bytes / time; each line read for ownership from A"))
    fresh_gbs: list[float] | None = Field(None, description=(
        "Leashed-SGD's pass `dst[i] = buf[i] − lr*g[i]`, A having written both `buf` and `dst`: 4 × bytes / time"))
    held_read_gbs: list[float] | None = Field(None, description=(
        "B wrote the buffer in its previous turn and A copied it, so its lines are valid in both caches (as after "
        "one lock worker reads the model the other just updated); B times a copy (`[sim] held_lines`)"))
    held_update_gbs: list[float] | None = Field(None, description=(
        "the same lines; B times an update, each write first invalidating A's copy (`[sim] held_lines`)"))
    held_mirrored_gbs: list[float] | None = Field(None, description=(
        "the same lines; B times the lock workers' update, its gradient written over its own copy and the new θ "
        "left there (`update_rule.step_mirrored`): 4 × bytes / time (`[sim] held_lines`, mutex, rwlock and SSP "
        "on an executor that skips reads)"))
    cpus: list[int] | None = Field(None, description="A's and B's CPUs")
    rounds: int | None = Field(None, description="alternations per size and variant")
    c2c_ns: list[float] | None = Field(None, description="the core-to-core probes around the rows")
    reason: str | None = Field(None, description="why the table is empty (one usable CPU)")


class ContentionTable(Table):
    """Not used by the simulator yet: a step on one shared float64 θ of `bytes` while k threads, pinned one a
    CPU, work on it (`executors/calibration/contention.py`), the measurement a many-core memory model needs
    beside `[coherence]`'s two-CPU one. `update`: every thread applies θ -= lr·g to θ, pass after pass;
    `locked`: every thread takes the executors' spin lock, copies θ into its own buffer, applies the update,
    releases. Each figure over `passes` passes a thread (the first two dropped)."""

    TITLE = "a step on θ with k cores on it"
    bytes: int | None = Field(None, description="θ's size (1 MiB)")
    passes: int | None = Field(None, description="passes a thread a count (40 when quick)")
    threads: list[int] | None = Field(None, description="k: 1, 2, 4, … up to the CPUs, and the CPU count")
    update_s: list[float] | None = Field(None, description="median pass of `update` at each k")
    update_p90_s: list[float] | None = Field(None, description="its 90th percentile")
    locked_hold_s: list[float] | None = Field(None, description=(
        "median hold of the lock in `locked` (acquired to released: the copy and the update) at each k"))
    locked_hold_p90_s: list[float] | None = Field(None, description="its 90th percentile")
    locked_per_s: list[float] | None = Field(None, description="`locked`'s passes a second, all threads")
    locked_busy: list[float] | None = Field(None, description=(
        "the lock's busy share: the holds after the first release over the time to the last (1: the lock is "
        "the limit)"))


class C2cTable(Table):
    """A token handed back and forth between two threads pinned to the first two usable CPUs through one
    word: the one-way hand-off in ns (median of three probes of 10,000 hand-offs). On a virtual machine the
    host may move the vCPUs between physical cores (sharing a cache, on different dies, or one core's two
    hardware threads), which changes every coherence figure.

    The cpu backend probes before and after every run of two or more workers (`metadata.host`:
    `c2c_ns_start`, `c2c_ns_end`); `simasgd compare` and `simasgd show` warn about runs not within 2× of
    `latency_ns` or that moved mid-run."""

    TITLE = "where the host put the CPUs"
    latency_ns: float | None = Field(None, description=(
        "the median of `[coherence]`'s probes: the placement the profile describes"))
    samples_ns: list[float] | None = Field(None, description="every probe taken around `[coherence]`'s rows")


class LocksTable(Table):
    """A lock's hand-off between two threads."""

    handoff_s: float | None = Field(None, description=(
        "one hand-off of a token between two threads through one cache line (release store → acquire load seen "
        "by the other), the threads pinned to the core-to-core probe's two CPUs and measured again while it is "
        "not within 2× of the probe's: the lock transfer when a waiter takes over"))
    uncontended_s: float | None = Field(None, description="acquire and release by one thread")
    rounds: int | None = Field(None, description="hand-offs timed")


class CasTable(Table):
    """Compare-and-swap on one word, and a pass of atomic adds over a vector."""

    latency_s: float | None = Field(None, description="an uncontended CAS (one thread, CAS-increment loop)")
    contended_s: float | None = Field(None, description=(
        "wall time per successful increment while two threads CAS-increment one word"))
    failure_rate: float | None = Field(None, description="failed / all CAS in that window")
    failure_cost_s: float | None = Field(None, description="extra time per failed CAS")
    operations: int | None = Field(None, description="CAS in that window")
    pass_s: float | None = Field(None, gt=0, allow_inf_nan=False, description=(
        "one atomic float add in a pass over a vector (`g[i] += x[i]` for every i, Lopez's accumulation) on "
        "lines this core holds, per add: the median pass over `pass_elements`. Read by nothing yet: the "
        "simulator prices a pass by `latency_s` and `[locks] handoff_s` (benchmarks/fidelity.md says why)"))
    held_pass_s: float | None = Field(None, gt=0, allow_inf_nan=False, description=(
        "the same on lines another core has just read whole (each line moves back first, the moves overlapping "
        "the adds). Read by nothing yet"))
    pass_elements: int | None = Field(None, ge=1, description="the vector's length in those passes")
    c2c_ns: list[float] | None = Field(None, description="the placement it was measured in")


class MemoryTable(Table):
    """A load that misses every cache."""

    latency_ns: float | None = Field(None, description="the same figure as `[machine] local_latency_ns`")


class ExecutorTable(Table):
    """After its update a worker of the cpu executor bumps the version, checks whether the loss ring wants a
    snapshot, appends its record, checks the stop word, budget and deadline, reads the clock and loads the
    version its next gradient starts from. The same calls back to back, `calls` of them a round. Used where
    the simulated executor's bookkeeping is the cpu executor's (traits `bookkeeping = "nopython"`,
    [the model](model.md#executor-traits-sim-traits))."""

    TITLE = "the executor's own work between two cycles"
    bookkeeping_s: float | None = Field(None, description="the median of the rounds' mean times")
    p10_s: float | None = Field(None, description="their 10th percentile")
    p90_s: float | None = Field(None, description="their 90th percentile")
    rounds: int | None = Field(None, description="rounds")
    calls: int | None = Field(None, description="calls a round")


class SchedulerTable(Table):
    """The Linux scheduler whose slice the simulator models. Each kernel parameter is read from
    `/proc/sys/kernel/sched_<name>` or `/sys/kernel/debug/sched/<name>` (usually root-only) and left out when
    neither is readable."""

    quantum_s: float | None = Field(None, description="as in `[machine]`")
    context_switch_s: float | None = Field(None, description="as in `[machine]`")
    runs: int | None = Field(None, description="the quantum's runs measured")
    spin_yield_s: float | None = Field(None, description=(
        "the executor's lock-waiting loop (64 pauses, then `sched_yield`) on a taken word, alone on a CPU: "
        "seconds between two `sched_yield` calls (traits `lock_waiters = \"spin_pauses\"`)"))
    source: str | None = Field(None, description="how the figures above were measured")
    kernel: str | None = Field(None, description=(
        '`"eevdf"` if `base_slice_ns` exists; `"cfs"` if `latency_ns` or `wakeup_granularity_ns` exists; '
        'otherwise from the kernel release: 6.6 or later `"eevdf"`, older `"cfs"`, unparsable `"unknown"`'))
    kernel_release: str | None = Field(None, description="that release string")
    latency_s: float | None = Field(None, description=(
        "`sched_latency_ns` (CFS: the period every runnable task gets a turn within)"))
    min_granularity_s: float | None = Field(None, description="`sched_min_granularity_ns` (CFS: the shortest slice)")
    wakeup_granularity_s: float | None = Field(None, description="`sched_wakeup_granularity_ns` (CFS)")
    base_slice_s: float | None = Field(None, description=(
        "`base_slice_ns` (EEVDF: the slice a task runs before the next eligible one)"))
    params_source: str | None = Field(None, description=(
        '`"kernel"` when any of the four was readable; `"measured"` when none was: `quantum_s` then stands for '
        'the slice'))


class TickTable(Table):
    """One thread per usable CPU (up to four), pinned, spins reading the clock for `duration_s` and keeps the
    start and length of every jump above `min_gap_s`. Each candidate frequency (100, 250, 300, 1000 Hz) folds
    the starts onto its period; its hit rate is the share of periods with a pause near the modal phase. The
    timer is the highest frequency within 0.05 of the best hit rate.

    `pause_s` and `skew_s` are present only where `hit_rate` ≥ 0.5 and the pause lasts under a tenth of the
    period; otherwise no timer was found (`[sim] timer_tick` then draws the samples as they are), and `reason`
    says why where the periodic pauses were time slices (a loaded host's threads taking turns)."""

    TITLE = "the timer that stops every CPU at once"
    duration_s: float | None = Field(None, description="the spin's seconds")
    cpus: int | None = Field(None, description="its threads")
    min_gap_s: float | None = Field(None, description="the smallest jump kept")
    pauses_per_s: list[float] | float | None = Field(None, description="pauses above `min_gap_s` a second, per CPU")
    hz: float | None = Field(None, description="the timer's frequency")
    period_s: float | None = Field(None, description="its period")
    hit_rate: float | None = Field(None, description="the share of periods with its pause")
    pause_s: float | None = Field(None, description="the median length of the timer's pauses")
    skew_s: float | None = Field(None, description="the largest difference between two CPUs' timer instants")
    reason: str | None = Field(None, description="why periodic pauses were taken for no timer")


class P2pTable(Table):
    """The ping-pong."""

    bytes: list[int] | None = Field(None, description="message sizes")
    one_way_s: list[float] | None = Field(None, description="one-way times")


class ServerTable(Table):
    """The server test."""

    bytes: int | None = Field(None, description="message size")
    senders: list[int] | None = Field(None, description="N, for each N measured")
    bytes_per_s: list[float] | None = Field(None, description="bytes/s received, by N")


class AllreduceTable(Table):
    """`all_reduce(SUM)` of a float32 vector."""

    bytes: list[int] | None = Field(None, description="sizes")
    ranks: list[int] | None = Field(None, description="rank counts")
    seconds: list[list[float]] | None = Field(None, description="median times, by rank count and size")


PositiveFinite = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _one_each(values: list[float] | None, info: ValidationInfo, key: str, unit: str) -> list[float] | None:
    """A column of one value per entry of the table's ``key`` (absent where ``key`` was refused itself)."""
    ref = info.data.get(key)
    if values is not None and ref is not None and len(values) != len(ref):
        raise ValueError(f"{len(values)} values for the {len(ref)} of `{key}` {ref}: one per {unit}")
    return values


class ServerBySendersTable(Table):
    """The same server loop driven by N worker ranks at once, for N = 1, 2, 4, 7 where the host has N + 1 CPUs:
    each worker pushes its next gradient as soon as its reply arrives (a gradient that costs nothing), rank r's
    main thread on a CPU of its own and gloo's threads on the others, as the backend pins a run (`cpu.pin`). The
    window is `rounds` pushes per worker, after a warm-up, every worker pushing throughout. Not read by the
    simulator (one host's curve; `handling_us` stays the 2-rank figure). With N = 1 the server waits for the
    worker between pushes (1 / `messages_per_s` is about the round trip); with N ≥ 2 a push is waiting whenever
    it is done with one, so 1 / `messages_per_s` is what a push costs it, and a round trip is about N of those
    by queueing alone: a per-message cost that does not depend on the queue keeps 1 / `messages_per_s` and
    `cpu_per_message_s` flat from N = 2 on. One list entry per N, in the order of `senders`."""

    senders: list[Annotated[int, Field(ge=1)]] = Field(description="N, the workers pushing at once")
    round_trip_s: list[PositiveFinite] = Field(description=(
        "the median time from a push's send to its reply's arrival, over every worker's pushes in the window"))
    messages_per_s: list[PositiveFinite] = Field(description=(
        "pushes the server applied a second in the window (its wall clock, read inside `serve`)"))
    cpu_per_message_s: list[PositiveFinite] | None = Field(None, description=(
        "the server process's CPU time per push in the window, all its threads (gloo's transport threads too)"))
    main_cpu_per_message_s: list[PositiveFinite] | None = Field(None, description=(
        "the same for its main thread alone: `serve`'s loop, gloo's receive and send calls, the update"))
    rounds: int | None = Field(None, ge=1, description="pushes per worker in the window")
    pinned: bool | None = Field(None, description="each rank's main thread on a CPU of its own")
    seconds: float | None = Field(None, description="how long it took, every N's start-up included")

    @field_validator("senders")
    @classmethod
    def _each_n_once(cls, senders: list[int]) -> list[int]:
        if not senders:
            raise ValueError("one N at least")
        if sorted(set(senders)) != senders:
            raise ValueError("N must increase, each N once")
        return senders

    @field_validator("round_trip_s", "messages_per_s", "cpu_per_message_s", "main_cpu_per_message_s")
    @classmethod
    def _one_per_n(cls, values: list[float] | None, info: ValidationInfo) -> list[float] | None:
        return _one_each(values, info, "senders", "N")


class ServerByGapTable(Table):
    """The same server loop at 2 ranks with the worker spinning a gap on its own CPU before each push, a
    gradient's place: back to back (gap 0), then longer gaps. A round trip that grows with the gap is the ranks
    waking from idle: the simulator adds to the message a rank takes after idling longer than either rank idles
    back to back the round trip's growth shared by the ranks idle that long, the median over the gaps. One list
    entry per gap, in the order of `gap_s`."""

    gap_s: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(description=(
        "the worker's busy time before each push; the first 0"))
    round_trip_s: list[PositiveFinite] = Field(description="the median time from a push's send to its reply")
    messages_per_s: list[PositiveFinite] = Field(description="pushes the server applied a second")
    cpu_per_message_s: list[PositiveFinite] | None = Field(None, description=(
        "the server process's CPU time per push, all its threads"))
    main_cpu_per_message_s: list[PositiveFinite] = Field(description=(
        "the server's main thread's CPU time per push: a push's cycle less this is the time it waited idle"))
    rounds: int | None = Field(None, ge=1, description="pushes timed at each gap")
    pinned: bool | None = Field(None, description="each rank's main thread on a CPU of its own")
    seconds: float | None = Field(None, description="how long it took")

    @field_validator("gap_s")
    @classmethod
    def _from_zero_up(cls, gaps: list[float]) -> list[float]:
        if len(gaps) < 2 or gaps[0] != 0 or sorted(set(gaps)) != gaps:
            raise ValueError("two gaps at least, the first 0, increasing")
        return gaps

    @field_validator("round_trip_s", "messages_per_s", "cpu_per_message_s", "main_cpu_per_message_s")
    @classmethod
    def _one_per_gap(cls, values: list[float] | None, info: ValidationInfo) -> list[float] | None:
        return _one_each(values, info, "gap_s", "gap")


class ServerLoopTable(Table):
    """Round trips through `dist`'s parameter server at 2 ranks, the measurement `handling_us` is taken from."""

    bytes: int | None = Field(None, description="a message's size (header and payload)")
    round_trip_s: float | None = Field(None, description=(
        "the median time from a push's send to its reply's arrival at the worker"))
    cpu_per_message_s: float | None = Field(None, ge=0, allow_inf_nan=False, description=(
        "the server process's CPU time per timed push, all its threads (gloo's transport thread, `serve`'s loop, "
        "the update): `handling_us` is this less `update_s`"))
    update_s: float | None = Field(None, description=(
        "the median time of the server's update step on the shard alone (`update_rule.step`), in that process"))
    rounds: int | None = Field(None, description="round trips timed")
    by_senders: ServerBySendersTable | None = Field(None, description=(
        "`[network.server_loop.by_senders]` below: the same loop under N senders at once"))
    by_gap: ServerByGapTable | None = Field(None, description=(
        "`[network.server_loop.by_gap]` below: the same loop at 2 ranks with the worker busy before each push, "
        "what a rank adds to a message after idling"))


class NetworkTable(Table):
    """Ranks forked on this host and joined as the `dist` backend joins them (gloo over TCP on loopback), one
    intra-op thread each. `[network] preset = "this"` in a scenario takes `latency_us`, `bandwidth_gbps` and
    `server_bandwidth_gbps` from here, and `handling_us` where present; a profile without it (from a calibrator
    that did not measure it) leaves the ranks' CPUs out of the network model: a message costs no rank's CPU, a
    server's update is free. Likewise `store_round_trip_us`: without it a keuper or simuparallel step does not
    wait for `dist`'s version counter. The figures describe this host's loopback under whatever else runs on it, not a
    NIC: on a cluster, measure there."""

    TITLE = "the `dist` backend's transport (`simasgd calibrate --network`)"
    transport: str | None = Field(None, description='what was measured (`"gloo, TCP loopback (127.0.0.1)"`)')
    latency_us: float | None = Field(None, description=(
        "one-way time of the smallest message: half the median round trip of a ping-pong"))
    bandwidth_gbps: float | None = Field(None, description=(
        "the slope of one-way time against bytes over messages of 64 KiB and more (least squares: t = latency + "
        "bytes / bandwidth)"))
    server_bandwidth_gbps: float | None = Field(None, description=(
        "the most bytes/s one rank received while N others sent to it as fast as it took them"))
    handling_us: float | None = Field(None, ge=0, allow_inf_nan=False, description=(
        "CPU time a rank spends on each message it receives beyond its update: the server process's CPU time per "
        "push in the backend's parameter-server loop (`[network.server_loop]`, 2 ranks, all its threads) less "
        "the server's update step. The simulator charges it to the receiving rank, a server's or centre's "
        "serialised with its updates"))
    store_round_trip_us: float | None = Field(None, ge=0, allow_inf_nan=False, description=(
        "one `add` to the process group's key-value store (a TCPStore served by a thread of rank 0) from a rank "
        "on this host: the median round trip, 2 ranks, one client. `dist`'s `keuper` and `simuparallel` take "
        "each step's global version so (one blocking round trip a step); the simulator charges it to their "
        "workers"))
    p2p: P2pTable | None = Field(None, description="`bytes`, `one_way_s`: the ping-pong's message sizes and times")
    server: ServerTable | None = Field(None, description="`bytes`, `senders`, `bytes_per_s`: the server test")
    allreduce: AllreduceTable | None = Field(None, description=(
        "`bytes`, `ranks`, `seconds`: `all_reduce(SUM)` of a float32 vector: sizes, ranks, median times"))
    server_loop: ServerLoopTable | None = Field(None, description=(
        "`bytes`, `round_trip_s`, `cpu_per_message_s`, `update_s`, `rounds`: the loop `handling_us` is taken "
        "from; `by_senders`: the same loop under N senders at once; `by_gap`: with the worker busy before each "
        "push"))
    loadavg: list[float] | None = Field(None, description="the host's load around it")
    cpus: int | None = Field(None, description="usable CPUs")
    seconds: float | None = Field(None, description="how long it took")


class PeakTable(Table):
    """Not used by the simulator: the roofline the gradient kernels are held to."""

    TITLE = "one core's GEMM peak"
    gemm_n: int | None = Field(None, description="the square GEMM's size (1024; 256 when quick)")
    gemm_gflops_float32: float | None = Field(None, description=(
        "best GFLOP/s of the GEMM the MLP kernels call, on n × n matrices, one BLAS thread"))
    gemm_gflops_float64: float | None = Field(None, description="the same in float64")


class GpuConcurrentTable(Table):
    """A fused multiply-add kernel that fills the GPU, with 1, 2, 4, … streams running it at once: the curve
    the simulator's SM sharing is held to."""

    streams: list[int] | None = Field(None, description="streams at once")
    all_done_s: list[float] | None = Field(None, description="until all are done")
    kernel_threads: int | None = Field(None, description="the kernel's threads")
    kernel_flops: float | None = Field(None, description="its flops")


class GpuBlockTable(Table):
    """One resident worker's rates alone on the GPU. `[gpu.block]` makes the simulator model the `gpu`
    backend's blocks ([the simulator's model](model.md#gpu-the-gpu-backends-blocks-simasgdsimgpu_residentpy)).
    `calibrate --gpu` measures it on a GPU (`executors/calibration/gpu_block.py`: one resident HOGWILD! worker
    alone per study workload, the MLP and the CNN of `benchmarks/gpu_check.py`, and one streams worker; not
    under numba's simulator); `benchmarks/gpu_model_score.py` derives the same table from
    `benchmarks/gpu_check.py`'s 1-worker cells."""

    threads: int | None = Field(None, description=(
        "threads per block the block rates below were measured at (`[gpu] threads_per_worker`)"))
    gradient_flops_per_s: dict[str, float] | None = Field(None, description=(
        "one resident worker's gradient by workload key (as in `[gradient.\"<key>\"]`): the workload's flops "
        "per block-second, alone on the GPU"))
    copy_bytes_per_s: float | None = Field(None, description=(
        "one block copying θ into its own vector: bytes moved (θ in and out) per second"))
    step_bytes_per_s: float | None = Field(None, description=(
        "one block's update step over θ: bytes moved (θ, g, θ') per second"))
    host_launch_s: float | None = Field(None, description=(
        "streams mode: the host's launch call of one attempt, holding the interpreter lock"))
    atomic_latency_s: float | None = Field(None, description=(
        "optional: one device-scope atomic on a shared word (lock, CAS, barrier); 1 µs if absent"))
    gradient_cv: float | None = Field(None, description=(
        "optional: a block's gradient time's coefficient of variation, attempt to attempt (else `[sim] gradient_cv`)"))


class GpuTable(Table):
    """A GPU, measured by `simasgd calibrate --gpu`; preset `this-gpu` simulates it."""

    TITLE = "a GPU (`simasgd calibrate --gpu`, preset `this-gpu`)"
    device: str | None = Field(None, description="the device")
    compute_capability: list[int] | None = Field(None, description="its compute capability (major, minor)")
    simulator: bool | None = Field(None, description=(
        "`true` under numba's CUDA simulator, where the figures mean nothing"))
    sms: int | None = Field(None, description="streaming multiprocessors (a device attribute)")
    clock_ghz: float | None = Field(None, description="the clock (a device attribute)")
    threads_per_sm: int | None = Field(None, description="resident threads an SM holds (a device attribute)")
    fp32_lanes_per_sm: int | None = Field(None, description="FP32 lanes per SM (from the compute capability)")
    launch_latency_s: float | None = Field(None, description=(
        "the mean time of an empty kernel, launched back to back and synchronised"))
    mem_bandwidth_gbs: float | None = Field(None, description="a device-to-device copy kernel")
    atomics_per_s: float | None = Field(None, description="atomic adds from every thread onto a few hundred addresses")
    efficiency: float | None = Field(None, description=(
        "flops/s of a fused multiply-add kernel that fills the GPU, over the peak"))
    concurrent: GpuConcurrentTable | None = Field(None, description="`[gpu.concurrent]` below")
    block: GpuBlockTable | None = Field(None, description="`[gpu.block]` below")


class Profile(Table):
    """A calibrated machine profile: each measured table, None where the profile lacks it."""

    profile: Head = Field(default_factory=lambda: Head())
    machine: MachineTable | None = None
    calibration: CalibrationTable | None = None
    gradient: dict[str, GradientTable] | None = None
    copy_: CopyTable | None = Field(None, alias="copy")
    copy_by_size: CopyBySizeTable | None = None
    cache: CacheTable | None = None
    coherence: CoherenceTable | None = None
    contention: ContentionTable | None = None
    c2c: C2cTable | None = None
    locks: LocksTable | None = None
    cas: CasTable | None = None
    memory: MemoryTable | None = None
    executor: ExecutorTable | None = None
    scheduler: SchedulerTable | None = None
    tick: TickTable | None = None
    network: NetworkTable | None = None
    peak: PeakTable | None = None
    gpu: GpuTable | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def _note(self, reads: Reads, name: str, value: Any) -> None:
        reads.tables.add(type(self).__pydantic_fields__[name].alias or name)

    @classmethod
    def from_doc(cls, doc: dict[str, Any], where: str | os.PathLike[str]) -> Profile:
        """The profile a parsed TOML document holds, its version checked and its keys migrated
        (:func:`migrate`); ProfileError naming ``where``, the table and the key where a value is not allowed."""
        version = check(doc, where)
        try:
            profile = cls.model_validate(migrate(doc, version))
        except ValidationError as e:
            raise ProfileError(f"{where}: {_problems(e)}") from None
        profile._place("")
        return profile

    def to_doc(self) -> dict[str, Any]:
        """The profile as a TOML document (this version's keys, ``[profile]`` first; None values left out)."""
        doc = self.model_dump(by_alias=True, exclude_none=True)
        doc["profile"] = {**doc.get("profile", {}), "format": FORMAT, "format_version": FORMAT_VERSION}
        return _plain({"profile": doc.pop("profile"), **doc})

    @classmethod
    def field_of(cls, table: str) -> str:
        """The field of the table named ``table`` in the file (``copy`` is ``copy_``: a model's own method)."""
        return next((n for n, f in cls.__pydantic_fields__.items() if f.alias == table), table)

    def workload_tables(self) -> dict[str, GradientTable]:
        """The gradient tables by workload key; empty where the profile has none."""
        return self.gradient or {}


def check(doc: dict[str, Any], where: str | os.PathLike[str]) -> int:
    """The format version of ``doc`` if this simasgd reads its format and version, else ProfileError naming
    ``where``. A document without ``[profile]`` (written before the table existed) is version 1."""
    head = doc.get("profile", {})
    if not isinstance(head, dict):
        raise ProfileError(f"{where}: [profile] must be a table")
    fmt = head.get("format", FORMAT)
    if fmt != FORMAT:
        raise ProfileError(f"{where}: [profile] format = {fmt!r}; expected {FORMAT!r}")
    found = versioning.check(where, head.get("format_version", 1), FORMAT_VERSION,
                             "profile", ProfileError,
                             f"upgrade simasgd or recalibrate (`simasgd calibrate --out {where}`)")
    if found < OLDEST_VERSION:
        raise ProfileError(f"{where}: profile format version {found} is older than this simasgd reads "
                           f"({supported()}): its tables have changed since; recalibrate "
                           f"(`simasgd calibrate --out {where}`)")
    return found


def supported() -> str:
    """The profile format versions this simasgd reads, as words."""
    if OLDEST_VERSION == FORMAT_VERSION:
        return f"version {FORMAT_VERSION}"
    return f"versions {OLDEST_VERSION} to {FORMAT_VERSION}"


def migrate(doc: dict[str, Any], version: int) -> dict[str, Any]:
    """``doc`` (of format ``version``) with the keys renamed since (:data:`RENAMED`) under their new names; a
    copy where any is renamed, ``doc`` itself otherwise."""
    renames = [(old, new) for v, names in sorted(RENAMED.items()) if v > version for old, new in names.items()]
    if not renames:
        return doc
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in doc.items()}
    for old, new in renames:
        (table, key), (new_table, new_key) = old.split(".", 1), new.split(".", 1)
        t = out.get(table)
        if isinstance(t, dict) and key in t and new_key not in t:
            out.setdefault(new_table, {})[new_key] = t.pop(key)
    return out


_TYPES = frozenset({"int", "float", "str", "bool", "list", "dict", "datetime"})


def _problems(e: ValidationError) -> str:
    """A validation error's problems, one ``[table] key: what is wrong`` each (``key[i]``: its i-th value)."""
    lines = []
    for err in e.errors():
        # a union's members name themselves in the location (``list[float]``, ``float``): not the file's keys
        loc = [x for x in err["loc"] if isinstance(x, int) or not (x in _TYPES or "[" in x or x.startswith("function"))]
        while loc and isinstance(loc[-1], int):
            loc = loc[:-1]
        names = [str(x) for x in loc]
        at = "".join(f"[{x}]" for x in err["loc"][len(loc):] if isinstance(x, int))
        where = f"[{'.'.join(names[:-1])}] {names[-1]}{at}" if len(names) > 1 else \
            (f"[{names[0]}]" if names else "the profile")
        lines.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(dict.fromkeys(lines))


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and tuples made the Python numbers and lists TOML writers take."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# The tables in the order docs/profile.md gives them, by their name in the file.
TABLES: dict[str, type[Table]] = {
    "profile": Head, "machine": MachineTable, "calibration": CalibrationTable, "gradient": GradientTable,
    "copy": CopyTable, "copy_by_size": CopyBySizeTable, "cache": CacheTable, "coherence": CoherenceTable,
    "contention": ContentionTable, "c2c": C2cTable, "locks": LocksTable, "cas": CasTable, "memory": MemoryTable,
    "executor": ExecutorTable, "scheduler": SchedulerTable, "tick": TickTable, "network": NetworkTable,
    "peak": PeakTable, "gpu": GpuTable,
}
