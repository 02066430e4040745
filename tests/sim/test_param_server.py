"""The parameter server in the simulator (simasgd/sim/algorithms/param_server.py): ε, staleness, shards, network."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simasgd.numerics import compression
from simasgd.numerics.workloads.constant import STEP, ConstWorkload
from simasgd.runs import backends
from simasgd.spec import loader

SIM = backends.load("sim")


def scenario(alg: dict, workers: int = 4, momentum: float = 0.0, network: dict | None = None,
             timing: dict | None = None, features: int = 32, numerics: bool = True, **stop: Any) -> Any:
    d = {"seed": 9, "workers": {"count": workers}, "machine": {"sockets": 1, "cores_per_socket": 16},
         "workload": {"model": "least_squares", "dataset": "synthetic", "features": features, "samples": 2000,
                      "batch_size": 16},
         "algorithm": alg, "optimizer": {"lr": 0.01, "momentum": momentum},
         "stop": {"epsilon": 0.05, "max_updates": 20000, "max_time_s": 60.0, **stop},
         "timing": timing or {"gradient": {"dist": "exponential", "mean_s": 1e-3},
                              "read": {"dist": "deterministic", "mean_s": 1e-5},
                              "update": {"dist": "deterministic", "mean_s": 1e-5}},
         "sim": {"numerics": numerics}}
    if network:
        d["network"] = network
    return loader.from_dict(d)


CASES = {
    "async_sgd": ({"name": "param_server"}, 0.0, None),
    "async_msgd": ({"name": "param_server"}, 0.5, {"preset": "10gbe"}),
    "downpour_shards": ({"name": "param_server", "shards": 4}, 0.0, {"preset": "100g_ib"}),
    "onebit": ({"name": "param_server", "onebit": True}, 0.0, {"preset": "10gbe"}),
    "sync_onebit": ({"name": "sync", "onebit": True}, 0.0, {"preset": "10gbe"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reaches_epsilon_on_least_squares(case: str) -> None:
    alg, mom, net = CASES[case]
    run = SIM.run_once(scenario(alg, momentum=mom, network=net), 0).runs[0]
    assert run.updates_to_eps is not None and not run.crashed, run
    assert run.final_loss <= 0.05 * run.initial_loss


def test_staleness_is_geometric_with_exponential_gradients_and_free_server() -> None:
    # DESIGN/THEORY: i.i.d. exponential gradient times, M workers, free pull and push: P(τ = k) = (1/M)(1 − 1/M)^k.
    m = 4
    free = {"dist": "deterministic", "mean_s": 0.0}
    r = SIM.run_once(scenario({"name": "param_server"}, workers=m, numerics=False, epsilon=0.0, max_updates=20000,
                              timing={"gradient": {"dist": "exponential", "mean_s": 1e-3}, "read": free,
                                      "update": free}), 0)
    tau = r.updates["staleness"].to_numpy()[1000:]
    for k in range(3):
        p = (1 / m) * (1 - 1 / m) ** k
        se = np.sqrt(p * (1 - p) / len(tau))
        assert abs(np.mean(tau == k) - p) < 4 * se, (k, np.mean(tau == k), p)


def test_every_push_lands_once_in_every_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    # Shards are updated independently (pushes of different workers interleave across them over a
    # network), yet every push reaches every shard exactly once: θ = 1 − N·lr·G in every element.
    wl = ConstWorkload(dim=64)
    monkeypatch.setattr("simasgd.numerics.workloads.build_workload", lambda cfg, seed, base_dir=None: wl)
    sc = loader.from_dict({"workers": {"count": 4}, "workload": {"model": "least_squares", "batch_size": 1},
                           "algorithm": {"name": "param_server", "shards": 4}, "optimizer": {"lr": 2.0 ** -8},
                           "stop": {"max_updates": 500, "max_time_s": 60.0, "eval_every_updates": 500},
                           "network": {"bandwidth_gbps": 0.001, "latency_us": 1},
                           "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-4}}})
    r = SIM.run_once(sc, 0)
    n = r.runs[0].updates
    assert n == 500 and r.curve["loss"].iloc[-1] == pytest.approx(1.0 - n * STEP, abs=0)
    assert r.runs[0].mean_staleness > 0.5                  # pushes did overlap


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.slow
def test_the_server_link_bounds_the_update_rate(shards: int) -> None:
    # Many workers, negligible compute: each server's incoming side carries every push's shard of
    # m/S bytes back to back, so the run makes S·B/m updates per second (m = model bytes, B = bandwidth).
    zero = {"dist": "deterministic", "mean_s": 0.0}
    sc = scenario({"name": "param_server", "shards": shards}, workers=8, numerics=False, features=1023,
                  epsilon=0.0, max_updates=4000, network={"bandwidth_gbps": 1.0, "latency_us": 0},
                  timing={"gradient": {"dist": "deterministic", "mean_s": 1e-7}, "read": zero, "update": zero})
    r = SIM.run_once(sc, 0)
    m = 1024 * 8
    expected = shards * 1e9 / 8 / m
    assert r.runs[0].updates_per_s == pytest.approx(expected, rel=0.05)
    assert r.runs[0].extra["bytes_per_row"] == 2 * m


def test_onebit_pushes_are_smaller_and_exact_on_a_constant_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    # Q(G) = G for a constant gradient (one sign, one level) and the residual stays 0: θ is exact.
    wl = ConstWorkload(dim=300)
    monkeypatch.setattr("simasgd.numerics.workloads.build_workload", lambda cfg, seed, base_dir=None: wl)
    sc = loader.from_dict({"workers": {"count": 3}, "workload": {"model": "least_squares", "batch_size": 1},
                           "algorithm": {"name": "param_server", "onebit": True}, "optimizer": {"lr": 2.0 ** -8},
                           "stop": {"max_updates": 300, "max_time_s": 60.0, "eval_every_updates": 300}})
    r = SIM.run_once(sc, 0)
    assert r.curve["loss"].iloc[-1] == 1.0 - 300 * STEP
    assert r.runs[0].extra["bytes_per_row"] == 300 * 8 + compression.message_bytes(300)
