"""Keuper & Pfreundt's decentralised ASGD in the simulator: Parzen-window acceptance, spread, ε."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simasgd.numerics.parzen import accepts, merge_step
from simasgd.runs import backends
from simasgd.sim.algorithms import decentral
from simasgd.spec import loader


def _scenario(**algorithm: Any) -> Any:
    return loader.from_dict({"name": "keuper-ls", "seed": 2, "workers": {"count": 4},
                             "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 16},
                             "algorithm": {"name": "keuper", **algorithm}, "optimizer": {"lr": 0.01},
                             "stop": {"epsilon": 0.1, "max_updates": 20000},
                             "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3}}})


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_delta_is_whether_the_local_step_moves_towards_the_peer(momentum: float) -> None:
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(400):
        theta, peer, g, vel = (rng.normal(size=5) for _ in range(4))
        lr = 0.5
        step = lr * (momentum * vel + g) if momentum else lr * g
        want = np.sum((theta - step - peer) ** 2) < np.sum((theta - peer) ** 2)
        assert accepts(theta, vel, g, peer, lr, momentum) == want
        seen.add(bool(want))
    assert seen == {True, False}


def test_an_accepted_state_pulls_half_the_difference_into_the_step() -> None:
    theta, peer, g = np.array([1.0, 1.0]), np.array([0.0, 0.0]), np.array([1.0, 1.0])  # step towards the peer
    out = theta.copy()
    assert merge_step(out, np.zeros(0), g.copy(), peer, True, 0.1, 0.0, False)
    np.testing.assert_allclose(out, theta - 0.1 * (g + 0.5 * (theta - peer)))
    out = theta.copy()  # the same step away from the peer: refused, a plain step
    assert not merge_step(out, np.zeros(0), -g, peer, True, 0.1, 0.0, False)
    np.testing.assert_allclose(out, theta + 0.1 * g)


def test_parzen_acceptance_only_takes_states_that_move_a_node_towards_the_sender(monkeypatch: Any) -> None:
    # Every merge decision of a simulated run, with what the node held before and after.
    calls: list[tuple[np.ndarray, ...]] = []

    def spy(theta, vel, g, peer, has, lr, mom, aware):
        before, grad, sent = theta.copy(), g.copy(), peer.copy()
        ok = merge_step(theta, vel, g, peer, has, lr, mom, aware)
        if has:
            calls.append((before, grad, sent, theta.copy(), ok, lr))
        return ok

    monkeypatch.setattr(decentral, "merge_step", spy)
    backends.load("sim").run_once(_scenario(), 0)
    assert len(calls) > 100
    verdicts = []
    for before, g, sent, after, ok, lr in calls:
        towards = np.sum((before - lr * g - sent) ** 2) < np.sum((before - sent) ** 2)
        assert ok == towards
        merged = before - lr * (g + 0.5 * (before - sent)) if ok else before - lr * g
        np.testing.assert_allclose(after, merged, rtol=1e-12, atol=1e-15)
        verdicts.append(ok)
    assert 0 < np.mean(verdicts) < 1  # both verdicts occur: the rule decides, it is not constant


def test_keuper_reaches_epsilon_and_records_the_spread() -> None:
    r = backends.load("sim").run_once(_scenario(), 0)
    run = r.runs[0]
    assert run.updates_to_eps is not None and run.final_loss <= 0.1 * run.initial_loss
    spread = r.curve["spread"].to_numpy()
    assert np.isfinite(spread[1:]).all() and (spread[1:] > 0).all()  # the nodes' states differ, measured
    assert (r.updates["staleness"] == 0).all()  # a node's gradient is on its own current state


def test_exchanging_less_often_lets_the_nodes_drift_further_apart() -> None:
    often = backends.load("sim").run_once(_scenario(exchange_every=1), 0).curve["spread"].iloc[1:]
    rarely = backends.load("sim").run_once(_scenario(exchange_every=50), 0).curve["spread"].iloc[1:]
    assert rarely.dropna().mean() > often.dropna().mean()
