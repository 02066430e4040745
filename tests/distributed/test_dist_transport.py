"""Where a pinned ``dist`` run's threads go: a rank's main thread on its core, gloo's threads off the ranks'
cores (executors/dist/backend.py ``transport_cpus``), and the run's record of both."""

from __future__ import annotations

import os
from typing import Any

import pytest

from executors.dist.backend import transport_cpus


@pytest.mark.parametrize(("cpus", "allowed", "want"), [
    ([0, 1], list(range(16)), list(range(2, 16))),                   # 2 ranks on 16 CPUs: the other 14
    (list(range(8)), list(range(16)), list(range(8, 16))),           # 8 ranks: the 8 no rank computes on
    ([0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3]),                         # one spare CPU: all (loop and collective apart)
    ([0, 1], [0, 1], [0, 1]),                                        # none spare: all
    ([3, 5], [1, 3, 5, 7], [1, 7]),                                  # the allowed set, not 0..n−1
    ([0, 0, 1], [0, 1, 2, 3], [2, 3]),                               # oversubscribed ranks share a core
])
def test_transport_cpus_are_the_spare_ones_when_two_or_more(cpus: list[int], allowed: list[int],
                                                             want: list[int]) -> None:
    assert transport_cpus(cpus, allowed) == want  # type: ignore[arg-type]


def test_a_pinned_rank_s_gloo_threads_run_off_the_ranks_cores(scenario: Any, run_dist: Any) -> None:
    from executors.cpu import placement

    sc = scenario("sync", workers=2, updates=20, pin=True)
    r = run_dist(sc)
    ranks_cpus = placement.plan(2, "uma")[0]
    want = transport_cpus(ranks_cpus, sorted(os.sched_getaffinity(0)))
    assert r.metadata["placement"] == {"cpus": ranks_cpus, "transport_cpus": want}
    for m, cpu in zip(r.metadata["ranks"], ranks_cpus, strict=True):
        assert m["affinity"] == [cpu]  # the main thread: gradients, sends, receives, collectives called
        assert m["threads"]["gloo_tcp_loop"] == want and m["threads"]["pt_gloo_runloop"] == want


def test_an_unpinned_run_records_no_transport_cpus(scenario: Any, run_dist: Any) -> None:
    r = run_dist(scenario("param_server", workers=1, updates=10))
    assert r.metadata["placement"]["transport_cpus"] == []
    assert all("gloo_tcp_loop" in m["threads"] for m in r.metadata["ranks"])
