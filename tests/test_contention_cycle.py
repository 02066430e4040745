"""``benchmarks/contention.py --cycle``: the mutex executor's cycle on k threads, the lock's two holds timed apart.

The lock's timeline read off constructed holds (closed forms for the hand-offs, the busy share and updates/s),
the window every thread is inside, and the table at k = 1, 2 on a tiny MLP (one compile for the module).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from executors.calibration import contention

CPUS = sorted(os.sched_getaffinity(0))


def test_holds_read_off_a_constructed_timeline() -> None:
    """Two threads taking turns: thread 0 holds [0, 2) and [10, 14) µs a cycle, thread 1 [3, 4) and [15, 20),
    every 20 µs (the read's hold, then the update's). ``warm=1``: each thread's first cycle is before the window."""
    us = 1000
    cycles = 6
    base = np.arange(cycles) * 20 * us
    acq0 = np.stack([base, base + 10 * us], axis=1).ravel()
    rel0 = np.stack([base + 2 * us, base + 14 * us], axis=1).ravel()
    acq1 = np.stack([base + 3 * us, base + 15 * us], axis=1).ravel()
    rel1 = np.stack([base + 4 * us, base + 20 * us], axis=1).ravel()
    row = contention.holds([acq0, acq1], [rel0, rel1], warm=1)
    # the window: from the later thread's second cycle (its read at 23 µs) to the earlier last release (114 µs)
    lo, hi = 23 * us, 114 * us
    assert row["holds"] == 18  # thread 0: reads of cycles 2-5, updates 1-5; thread 1: reads 1-5, updates 1-4
    assert row["read_hold_s"] == pytest.approx(np.median([2e-6] * 4 + [1e-6] * 5))
    assert row["update_hold_s"] == pytest.approx(np.median([4e-6] * 5 + [5e-6] * 4))
    held = (4 * 2 + 5 * 4 + 5 * 1 + 4 * 5) * us
    assert row["busy"] == pytest.approx(held / (hi - lo))
    assert row["updates_per_s"] == pytest.approx(9 / ((hi - lo) / 1e9))
    gaps = [6, 1, 0, 1] * 4 + [6]  # merged from 23 µs: 24 → 30, 34 → 35, 40 → 40, 42 → 43, …, 104 → 110
    assert row["handoff_s"] == pytest.approx(np.median(gaps) * 1e-6)
    assert row["handoff_mean_s"] == pytest.approx(np.mean(gaps) * 1e-6)


def test_threads_that_never_ran_at_once_are_refused_by_name() -> None:
    """Thread 1's cycles all after thread 0's last: no window in which both are past their warm-up."""
    us = 1000
    acq0, rel0 = np.array([0, 5, 10, 15]) * us, np.array([1, 6, 11, 16]) * us
    acq1, rel1 = acq0 + 100 * us, rel0 + 100 * us
    with pytest.raises(ValueError, match=r"contention: the 2 threads' cycles never ran at once past their 1 warm"):
        contention.holds([acq0, acq1], [rel0, rel1], warm=1)


def test_a_ring_unrolls_to_the_cycles_it_keeps_in_the_order_made() -> None:
    """A thread that waits for the others keeps cycling into a ring of its latest cycles: two entries a cycle,
    cycle c in slot c mod 4."""
    ring = np.zeros(8, dtype=np.int64)
    for c in range(3):
        ring[2 * c], ring[2 * c + 1] = 10 * c, 10 * c + 1
    assert contention.unrolled(ring, 3, 2).tolist() == [0, 1, 10, 11, 20, 21]  # never wrapped: what it made
    for c in range(3, 7):
        ring[2 * (c % 4)], ring[2 * (c % 4) + 1] = 10 * c, 10 * c + 1
    assert contention.unrolled(ring, 7, 2).tolist() == [30, 31, 40, 41, 50, 51, 60, 61]  # cycles 3-6


@pytest.fixture(scope="module")
def tiny_cycle() -> dict[str, Any]:
    """The cycle table at k = 1, 2 on a 64-8-10 MLP, 12 cycles a thread (the script's ``--cycle`` writes it into
    the record: tests/test_device_check.py's rehearsal)."""
    if len(CPUS) < 2:
        pytest.skip("k = 2 needs two CPUs")
    return contention.cycle(12, [1, 2], (64, 8, 10))


@pytest.mark.slow
def test_cycle_table_a_row_per_k(tiny_cycle: dict[str, Any]) -> None:
    c = tiny_cycle
    assert c["threads"] == [1, 2] and c["cycles"] == 12 and c["layers"] == [64, 8, 10]
    for key in ("read_hold_s", "update_hold_s", "handoff_s", "busy", "updates_per_s", "gradient_s", "holds"):
        assert len(c[key]) == 2, key
    assert c["holds"][0] == 2 * 12 and not c["wrapped"][0]  # one thread: its timed cycles' holds, from its third read
    # two: each thread cycles until both made their 14, so the window is never empty; where neither outran its
    # ring (a loaded host can keep one thread off its CPU for many of the other's cycles), the later one's timed
    # cycles all lie in it
    assert c["holds"][1] >= (2 if c["wrapped"][1] else 2 * 12)
    assert all(0 < b <= 1.0 for b in c["busy"]) and all(u > 0 for u in c["updates_per_s"])
    assert all(h > 0 for h in c["update_hold_s"]) and all(g > 0 for g in c["gradient_s"])
    assert c["update_hold_s"][0] > c["read_hold_s"][0]  # alone its copy holds θ already: the read is elided


def test_more_threads_than_cpus_are_refused_by_name() -> None:
    k = len(CPUS) + 1
    with pytest.raises(ValueError, match=rf"contention: {k} threads need {k} CPUs"):
        contention.cycle(4, [1, k])  # before the workload is built or anything compiles
