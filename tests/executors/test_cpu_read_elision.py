"""A worker whose copy of θ still is θ skips its read: replayed exactly, and counted.

The locks' (and SSP's) update leaves the new θ in the worker's copy (``update_rule.step_mirrored``), and the
next read copies θ only when another worker has updated it since (``executors/cpu/locks.py``, ``lockfree.py``). A skipped read
that should have copied would compute a gradient at an older θ than the one the record says it read. The
gradient here is θ itself (``echo_kernel``), so each update is ``θ_v = θ_{v−1} − η·θ_{rv}``, a recurrence the records replay
bit for bit: any gradient taken at the wrong version shows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from executors.cpu.runner import run_workload
from simasgd.numerics.workloads.constant import LR, ConstWorkload

pytestmark = pytest.mark.hardware


def replay(read_version: np.ndarray) -> float:
    """θ after the updates whose read versions, by version 1..n, are ``read_version``: every element alike."""
    th = np.empty(len(read_version) + 1)
    th[0] = 1.0
    for v, rv in enumerate(read_version, start=1):
        th[v] = th[v - 1] - LR * th[rv]
    return float(th[-1])


@pytest.mark.parametrize("alg", [{"name": "mutex"}, {"name": "rwlock"}, {"name": "ssp", "bound": 2}],
                         ids=["mutex", "rwlock", "ssp"])
def test_reads_skipped_and_made_replay_exactly(alg: dict, scenario: Any, echo_kernel: Any) -> None:
    sc = scenario(alg, workers=2, max_updates=1200, placement="uma")
    state: dict = {}
    result = run_workload(sc, 0, ConstWorkload(dim=24, kernel=echo_kernel), state=state)
    u = result.updates.sort_values("version")
    n = result.runs[0].updates
    assert n == len(u) and np.array_equal(u["version"].to_numpy(), np.arange(1, n + 1))
    assert np.all(state["theta"] == replay(u["read_version"].to_numpy()))
    elided = result.runs[0].extra["reads_elided"]
    # both paths ran: reads skipped (a worker updating twice in a row) and made (after the other's update)
    assert 0 < elided < n, (elided, n)
    rv, prev_own = u["read_version"].to_numpy(), _previous_own_version(u)
    # a read can be skipped only where the worker's own update was the latest: at most that many
    assert elided <= int(np.sum(rv == prev_own)) + 1


def _previous_own_version(u: Any) -> np.ndarray:
    """Per update (by version), the version of the same worker's previous update (-1 for its first)."""
    prev = np.full(len(u), -1, dtype=np.int64)
    last: dict[int, int] = {}
    for i, (w, v) in enumerate(zip(u["worker"].to_numpy(), u["version"].to_numpy(), strict=False)):
        prev[i] = last.get(int(w), -1)
        last[int(w)] = int(v)
    return prev


@pytest.mark.parametrize("alg", [{"name": "mutex"}, {"name": "rwlock"}, {"name": "hogwild"},
                                 {"name": "ssp", "bound": 2}], ids=["mutex", "rwlock", "hogwild", "ssp"])
def test_one_worker_reads_theta_once(alg: dict, scenario: Any, echo_kernel: Any) -> None:
    # alone, every update is the latest when the worker reads again: only the first read copies θ
    sc = scenario(alg, workers=1, max_updates=300)
    state: dict = {}
    result = run_workload(sc, 0, ConstWorkload(dim=24, kernel=echo_kernel), state=state)
    n = result.runs[0].updates
    assert n == 300 and result.runs[0].extra["reads_elided"] == n - 1
    assert np.all(state["theta"] == replay(np.arange(n)))  # each gradient at the version before it


def test_hogwild_without_a_local_copy_reads_nothing_to_skip(scenario: Any, echo_kernel: Any) -> None:
    sc = scenario({"name": "hogwild", "local_copy": False}, workers=1, max_updates=100)
    assert run_workload(sc, 0, ConstWorkload(dim=24, kernel=echo_kernel)).runs[0].extra["reads_elided"] == 0


def test_two_hogwild_workers_copy_theta_every_time(scenario: Any, echo_kernel: Any) -> None:
    # a skipped read pulled two HOGWILD! workers into convoys (lockfree.run_hogwild): with two, every read copies
    sc = scenario({"name": "hogwild"}, workers=2, max_updates=300)
    assert run_workload(sc, 0, ConstWorkload(dim=24, kernel=echo_kernel)).runs[0].extra["reads_elided"] == 0
