"""Numerics mode: real gradients at the parameters each worker read, applied in simulated order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from simasgd.runs import serial
from simasgd.sim import backend
from simasgd.spec import loader

BASE: dict[str, Any] = {
    "name": "numerics", "seed": 3,
    "machine": {"preset": "xeon-e5-2687w-v2"},
    "workers": {"count": 4},
    "workload": {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16},
    "algorithm": {"name": "mutex"},
    "optimizer": {"lr": 0.05},
    "stop": {"epsilon": 0.2, "max_updates": 3000, "max_time_s": 1e9, "eval_every_updates": 50},
}


def scenario(*overrides: str) -> Any:
    return loader.from_dict(loader.apply_overrides(BASE, overrides))


def slope_upper(curve: pd.DataFrame) -> float:
    """Upper end of the 95% confidence interval of the slope of log-loss against updates (OLS)."""
    fit = stats.linregress(curve["updates"], np.log(curve["loss"]))
    return float(fit.slope + stats.t.ppf(0.975, len(curve) - 2) * fit.stderr)


def test_sequential_sim_follows_the_serial_reference_and_reaches_eps() -> None:
    sc = scenario("algorithm.name=\"sequential\"", "workers.count=1")
    sim = backend.run_once(sc, 0)
    ref = serial.run_once(sc, 0)
    s, r = sim.runs[0], ref.runs[0]
    assert s.updates_to_eps is not None and r.updates_to_eps is not None
    assert s.final_loss <= sc.stop.epsilon * s.initial_loss < s.initial_loss
    # Same θ0, same minibatch stream, same optimizer: the same trajectory, update for update.
    assert s.updates_to_eps == r.updates_to_eps
    merged = sim.curve.merge(ref.curve, on="updates", suffixes=("_sim", "_serial"))
    assert len(merged) == len(ref.curve)
    np.testing.assert_allclose(merged.loss_sim, merged.loss_serial, rtol=1e-9)
    assert (sim.updates.staleness == 0).all()


def test_same_seed_is_bit_identical_and_runs_differ() -> None:
    sc = scenario("stop.max_updates=400", "timing.gradient.dist=\"exponential\"", "timing.gradient.mean_s=1e-3")
    a, b, other = backend.run_once(sc, 0), backend.run_once(sc, 0), backend.run_once(sc, 1)
    pd.testing.assert_frame_equal(a.updates, b.updates)
    pd.testing.assert_frame_equal(a.curve, b.curve)
    assert a.runs[0].to_json() == b.runs[0].to_json()
    assert not np.array_equal(a.updates.t_write, other.updates.t_write)
    assert a.curve.loss.iloc[-1] != other.curve.loss.iloc[-1]


@pytest.mark.parametrize("algorithm,extra", [
    ("mutex", ()), ("rwlock", ()), ("hogwild", ()), ("leashed", ("algorithm.persistence=1",)),
    ("sync", ()), ("k_sync", ("algorithm.k=2",)), ("k_async", ("algorithm.k=2",)), ("lopez", ()),
])
def test_every_algorithm_learns(algorithm: str, extra: tuple[str, ...]) -> None:
    sc = scenario(f"algorithm.name=\"{algorithm}\"", "stop.max_updates=600", "stop.epsilon=0", *extra)  # the whole budget
    result = backend.run_once(sc, 0)
    assert not result.runs[0].crashed
    assert slope_upper(result.curve) < 0  # the loss falls with updates: the slope's whole 95% CI is below 0


def test_hogwild_torn_reads_change_the_trajectory_but_not_the_timing() -> None:
    # Reads as long as a third of a gradient: other workers' chunked writes land mid-read.
    timed = ("algorithm.name=\"hogwild\"", "stop.max_updates=400", "stop.epsilon=0",
             "timing.gradient.dist=\"exponential\"", "timing.gradient.mean_s=1e-3",
             "timing.read.dist=\"deterministic\"", "timing.read.mean_s=3e-4",
             "timing.update.dist=\"deterministic\"", "timing.update.mean_s=3e-4")
    torn = backend.run_once(scenario(*timed, "sim.read_chunks=16"), 0)
    whole = backend.run_once(scenario(*timed, "sim.read_chunks=1"), 0)
    np.testing.assert_allclose(torn.updates.t_write, whole.updates.t_write, rtol=1e-9)
    assert not np.allclose(torn.curve.loss, whole.curve.loss, rtol=1e-9)
    assert slope_upper(torn.curve) < 0


def test_staleness_aware_step_changes_the_run() -> None:
    budget = ("stop.max_updates=300", "stop.epsilon=0.001")  # neither stops early at ε
    plain = backend.run_once(scenario(*budget), 0)
    aware = backend.run_once(scenario(*budget, "optimizer.staleness_aware=true"), 0)
    pd.testing.assert_series_equal(plain.updates.staleness, aware.updates.staleness)  # same timing
    assert plain.curve.loss.iloc[-1] != aware.curve.loss.iloc[-1]


def test_timing_only_mode_has_no_curve_but_a_full_summary() -> None:
    r = backend.run_once(scenario("sim.numerics=false"), 0)
    s = r.runs[0]
    assert r.curve.empty and s.updates == 3000 and not s.not_reached and s.updates_to_eps is None
    assert s.time_s > 0 and s.mean_staleness == pytest.approx(r.updates.staleness.mean())
