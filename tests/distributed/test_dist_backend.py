"""The ``dist`` backend on loopback: what each algorithm's messages do to θ, the rows, the bytes, failures.

The conformance suite (tests/conformance) holds every listed algorithm to its definition with the
defaults; here are the parameters and properties particular to a transport: several shards, groups,
1-bit gradients, the round-robin centre, message accounting, a rank that fails, the refusals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.dist.world import FAIL_ENV, DistError
from simasgd.numerics import update_rule
from simasgd.numerics.workloads.constant import LR, STEP
from simasgd.runs import backends
from simasgd.spec import algorithms


def _theta(r: Any) -> float:
    return float(r.curve["loss"].iloc[-1])


def test_param_server_theta_replays_from_the_rows_with_a_gradient_that_is_theta(scenario: Any, run_dist: Any,
                                                                                echo_kernel: Any) -> None:
    """g = θ as pulled: version v is θ_v = θ_{v−1} − η·θ_{rv} (rv the row's read version), so the final
    θ follows exactly from the rows only if each push landed on the θ its row says, with the θ it says."""
    r = run_dist(scenario("param_server", workers=2, updates=80), echo_kernel)
    u = r.updates.sort_values("version")
    assert list(u["version"]) == list(range(1, 81))
    history = [np.ones(1)]
    for rv, tau in zip(u["read_version"], u["staleness"], strict=True):
        theta = history[-1].copy()
        update_rule.step(theta, np.zeros(0), history[int(rv)].copy(), LR, 0.0, int(tau), False)
        history.append(theta)
    assert _theta(r) == history[-1][0]


def test_param_server_two_shards_each_apply_every_push_once(scenario: Any, run_dist: Any) -> None:
    r = run_dist(scenario("param_server", workers=2, updates=100, shards=2))
    run = r.runs[0]
    assert run.extra["processes"] == 4 and run.updates == 100
    assert sorted(r.updates["version"]) == list(range(1, 101))
    assert _theta(r) == 1.0 - 100 * STEP  # θ[0] is shard 0's: it applied exactly the budget's pushes too
    roles = [m["role"] for m in r.metadata["ranks"]]
    assert roles[:2] == ["server 0", "server 1"] and [m["pushes"] for m in r.metadata["ranks"][:2]] == [100, 100]


def test_every_message_sent_is_received(scenario: Any, run_dist: Any) -> None:
    r = run_dist(scenario("param_server", workers=2, updates=60))
    ranks = r.metadata["ranks"]
    assert sum(m["messages_sent"] for m in ranks) == sum(m["messages_received"] for m in ranks) == r.runs[0].extra[
        "messages"]
    assert sum(m["bytes_sent"] for m in ranks) == sum(m["bytes_received"] for m in ranks) == r.runs[0].extra[
        "bytes_sent"]
    # a push carries a 32-byte header and 16 float64s, and so does its reply: at least one of each per row
    assert r.runs[0].extra["bytes_sent"] >= 60 * 2 * (32 + 16 * 8)


def test_easgd_centre_serves_the_workers_round_robin(scenario: Any, run_dist: Any) -> None:
    r = run_dist(scenario("easgd", workers=2, updates=60, tau=2))
    order = r.updates.sort_values("version")["worker"].to_numpy()
    np.testing.assert_array_equal(order, np.arange(60) % 2)
    assert r.updates["distance"].notna().all() and _theta(r) < 1.0


def test_eawild_groups_exchange_through_their_leaders(scenario: Any, run_dist: Any) -> None:
    r = run_dist(scenario("eawild", workers=4, updates=40, group_size=2))
    u = r.updates
    assert set(u["worker"]) <= {0, 2} and sorted(u["version"]) == list(range(1, 41))
    assert r.runs[0].extra["processes"] == 5
    assert _theta(r) < 1.0


def test_sync_onebit_sends_the_quantised_gradient(scenario: Any, run_dist: Any) -> None:
    """A constant gradient quantises to itself (each bucket's one level is its mean): θ stays exact."""
    r = run_dist(scenario("sync", workers=2, updates=50, onebit=True))
    assert _theta(r) == 1.0 - 50 * STEP
    assert r.runs[0].extra["onebit_message_bytes"] == 2 + 8  # 16 signs, one bucket's two float32 levels


def test_ssp_holds_every_worker_within_the_bound_of_a_straggler(scenario: Any, run_dist: Any) -> None:
    """Worker 0 takes 6× its gradient: without the gate the others would run ahead by tens of clocks."""
    from simasgd.sim.algorithms.bounded import clock_gaps

    r = run_dist(scenario("ssp", workers=3, updates=120, slowdown=6.0, bound=1))
    gaps = clock_gaps(r.updates)
    assert gaps.max() == 1, np.bincount(gaps - gaps.min())
    assert sorted(r.updates["version"]) == list(range(1, 121)) and _theta(r) == 1.0 - 120 * STEP


@pytest.mark.hardware  # which gradients come last is timing: on CPUs other tests keep busy, not always the straggler's
def test_backup_discards_the_straggler_and_applies_n_a_round(scenario: Any, run_dist: Any,
                                                             half_ms_kernel: Any) -> None:
    """N + b = 3, b = 1, worker 0 8× slow (4 ms to the others' 0.5): each round applies the first 2
    gradients, so θ is exact, and the straggler's, cancelled or late, are dropped with the round's version."""
    r = run_dist(scenario("backup", workers=3, updates=60, slowdown=8.0, backup=1), half_ms_kernel)
    u = r.updates
    applied = u[u["applied"]]
    assert (applied.groupby("version").size() == 2).all() and applied["version"].nunique() == 60
    assert _theta(r) == 1.0 - 60 * STEP
    dropped = u[~u["applied"]]
    mine = dropped[dropped["worker"] == 0]
    assert len(mine) > len(dropped) / 2, dropped["worker"].value_counts()  # evenly: a third
    assert (dropped["version"] == dropped["read_version"] + 1).all()


def test_pinned_ranks_run_on_the_placement_s_cpus_servers_first(scenario: Any, run_dist: Any) -> None:
    from executors.cpu import placement

    sc = scenario("param_server", workers=1, updates=20, pin=True)
    r = run_dist(sc)
    want = placement.plan(2, "uma")[0]
    assert r.metadata["placement"]["cpus"] == want
    assert [m["affinity"] for m in r.metadata["ranks"]] == [[c] for c in want]


@pytest.mark.slow
def test_a_failed_rank_ends_the_run_with_its_name_and_no_results(scenario: Any, tmp_path: Path, jitter_kernel: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.numerics.workloads.constant import ConstWorkload

    monkeypatch.setattr("simasgd.numerics.workloads.build_workload",
                        lambda cfg, seed, base_dir=None: ConstWorkload(dim=16, kernel=jitter_kernel))
    monkeypatch.setenv(FAIL_ENV, "2")
    sc = scenario("param_server", workers=2, updates=50)
    with pytest.raises(DistError, match=r"rank 2 \(worker 1\) failed: RuntimeError: .*fails on purpose"):
        backends.run(sc, "dist", out=tmp_path / "r")
    assert not (tmp_path / "r" / "summary.json").exists()


@pytest.mark.parametrize("name", ["mutex", "hogwild", "lopez"])
def test_a_shared_memory_algorithm_is_refused_with_the_backends_that_run_it(name: str, scenario: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def built(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the workload was built before the refusal")

    monkeypatch.setattr("simasgd.numerics.workloads.build_workload", built)
    with pytest.raises(algorithms.UnsupportedAlgorithm) as e:
        backends.load("dist").run_once(scenario(name, workers=2), 0)
    msg = str(e.value)
    assert f"backend 'dist' does not implement algorithm {name!r}" in msg
    runners = msg.split("backends that run it: ")[1].rstrip(")").split(", ")
    assert "cpu" in runners and "sim" in runners and "dist" not in runners


def test_the_layout_puts_the_servers_first(scenario: Any) -> None:
    from executors.dist.world import Layout

    lay = Layout.of(scenario("param_server", workers=3, shards=2), 16)
    assert (lay.world, lay.role(0), lay.role(1), lay.role(2), lay.role(4)) == (5, "server 0", "server 1",
                                                                              "worker 0", "worker 2")
    assert Layout.of(scenario("sync", workers=3), 16).world == 3
    assert Layout.of(scenario("eawild", workers=4, group_size=2), 16).role(0) == "centre"


@pytest.mark.parametrize(("algorithm", "params"), [("param_server", {}), ("sync", {}), ("easgd", {})])
def test_epsilon_stops_the_run_where_one_rank_holds_theta(algorithm: str, params: dict[str, Any], scenario: Any,
                                                          run_dist: Any) -> None:
    """loss = θ[0]; with every gradient applied once it falls by 2⁻¹⁶ an update, so ε = 1 − 30·2⁻¹⁶ is
    reached at version 30 exactly (the centre of easgd moves by α of its workers' moves: later)."""
    sc = scenario(algorithm, workers=2, updates=5000, **params)
    sc = sc.model_copy(update={"stop": sc.stop.model_copy(update={"epsilon": 1 - 30 * STEP,
                                                                  "eval_every_updates": 5})})
    r = run_dist(sc)
    run = r.runs[0]
    assert run.extra["stop_reason"] == "epsilon" and run.updates_to_eps is not None
    assert run.updates_to_eps == 30 or algorithm == "easgd", run.updates_to_eps
    assert run.updates_to_eps <= run.updates < 1000, (run.updates_to_eps, run.updates)  # stopped, not at 5000
