"""Gradients that slow each other while they compute at once (simasgd/sim/interference.py).

The profile's gradient table gives one-thread samples of W seconds and two-thread samples of s·W; a
gradient is W of work done at rate 1/s while two compute, 1 while one does. Closed forms on whole
simulated runs (deterministic steps): started together, both take s·W; started d apart, the first runs
alone for d, then both at 1/s until it is done at d + (W − d)·s, and the second is alone only while the
first updates and reads; one worker takes W; `[sim] gradient_interference = false`, or more
workers than CPUs, every gradient s·W (the two-thread samples).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simpy

from simasgd import loader, machine
from simasgd.sim.interference import Overlap, slowdowns

W, S = 1e-4, 1.25  # a gradient's work alone, and the two-at-once slowdown
READ, UPDATE = 2e-6, 3e-6


def _scenario(workers: int, stagger: float = 0.0, **switches):
    return loader.from_dict({
        "name": "i", "seed": 5, "workers": {"count": workers, "placement": "uma"}, "machine": {"preset": "this"},
        "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8},
        "timing": {"read": {"dist": "deterministic", "mean_s": READ},
                   "update": {"dist": "deterministic", "mean_s": UPDATE}},
        "algorithm": {"name": "hogwild"}, "stop": {"max_updates": 200, "max_time_s": 10},
        "sim": {"numerics": False, "host_noise": False, "startup_stagger_s": stagger, "gradient_interference": True,
                **switches}})


@pytest.fixture
def profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cpu_profile) -> Path:
    from simasgd.profile import workload_key

    path = two_cpu_profile(tmp_path / "this.toml", workload_key(_scenario(1).workload), 8, [W] * 20,
                           {"k2": [S * W] * 20})
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    return path


def _first_gradients(sc) -> np.ndarray:
    from simasgd.sim import backend

    u = backend.run_once(sc, 0).updates.sort_values("t_grad_start")
    return (u.groupby("worker")["t_grad_end"].first() - u.groupby("worker")["t_grad_start"].first()).to_numpy()


def test_two_gradients_share_the_slowdown_while_they_overlap(profile: Path) -> None:
    np.testing.assert_allclose(_first_gradients(_scenario(2)), S * W, rtol=1e-9)  # together from the start
    # d apart: the first alone for d, then both until it is done; the second runs alone only while the
    # first updates and reads again (g = UPDATE + READ < d), then both again for its last d − g of work
    d, g = 3e-5, UPDATE + READ
    first, second = _first_gradients(_scenario(2, d))
    assert first == pytest.approx(d + (W - d) * S, rel=1e-9)
    assert second == pytest.approx((W - d) * S + g + (d - g) * S, rel=1e-9)


def test_one_worker_alone_and_the_switch_and_time_sharing(profile: Path) -> None:
    from simasgd.sim import backend

    g = backend.run_once(_scenario(1), 0).updates
    np.testing.assert_allclose(g["t_grad_end"] - g["t_grad_start"], W, rtol=1e-9)
    np.testing.assert_allclose(_first_gradients(_scenario(2, 3e-5, gradient_interference=False)), S * W, rtol=1e-9)
    # 4 workers on 2 CPUs: time-shared, every gradient from the two-at-once samples (work S·W, sliced)
    four = backend.run_once(_scenario(4), 0).updates
    assert (four["t_grad_end"] - four["t_grad_start"]).min() == pytest.approx(S * W, rel=1e-9)


def test_rates_follow_the_count_and_slowdowns_come_from_the_medians() -> None:
    """Three gradients on an Overlap with s = [1, 2, 4], work 1, 2 and 3 started together, end as processor
    sharing gives: all three at 1/4 until the first is done (t = 4), the two left at 1/2 until the second
    is (t = 4 + 2 = 6), the last alone (t = 6 + 1 = 7)."""
    env = simpy.Environment()
    ov = Overlap(env, [1.0, 2.0, 4.0])
    ends = {}

    def run(work: float):
        yield from ov.gradient(work)
        ends[work] = env.now

    for work in (1.0, 2.0, 3.0):
        env.process(run(work))
    env.run()
    assert ends == pytest.approx({1.0: 4.0, 2.0: 6.0, 3.0: 7.0}, rel=1e-12)
    table = {"samples_s": [1.0, 2.0, 3.0], "cycle_samples_s": [2.0, 2.0],
             "concurrent": {"k2": [3.0, 3.0, 3.0], "cycle_k2": [3.0, 3.0], "k3": [0.5]}}
    assert slowdowns(table, 2, in_cycle=False) == [1.0, 1.5]
    assert slowdowns(table, 2, in_cycle=True) == [1.0, 1.5]
    assert slowdowns(table, 3, in_cycle=False) == [1.0, 1.5, 1.0]  # never faster together than alone
    assert slowdowns(table, 3, in_cycle=True) is None  # no cycle_k3
    assert slowdowns(table, 1, in_cycle=False) is None
