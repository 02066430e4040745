"""Test accuracy in results: measured on held-out rows of classification workloads, kept in curve.parquet
(``accuracy``), summarised as ``final_accuracy``, plotted; old folders without the column still load."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simasgd.evaluation import analysis
from simasgd.numerics.workloads import build_workload
from simasgd.runs.convergence import Monitor, accuracy_of
from simasgd.runs.results import RunResult
from simasgd.sim import backend
from simasgd.spec import loader, seeds

MLP = {"model": "mlp", "layers": [64, 16, 10], "dataset": "digits", "batch_size": 16}


def _scenario(workload: dict, **stop: float) -> object:
    return loader.from_dict({"name": "acc", "seed": 4, "workers": {"count": 1}, "algorithm": {"name": "sequential"},
                             "workload": workload, "optimizer": {"lr": 0.05},
                             "timing": {"gradient": {"dist": "deterministic", "mean_s": 1e-3}},
                             "stop": {"max_updates": 600, "max_time_s": 1e9, "eval_every_updates": 100, **stop}})


@pytest.fixture(scope="module")
def sim_result() -> tuple[object, RunResult]:
    sc = _scenario(MLP)
    return sc, backend.run_once(sc, 0)


def test_curve_accuracy_is_the_held_out_accuracy_of_theta(sim_result: tuple[object, RunResult]) -> None:
    sc, r = sim_result
    wl = build_workload(sc.workload, sc.seed)
    theta0 = wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT))
    acc = r.curve["accuracy"].to_numpy()
    assert len(acc) == len(r.curve) and np.isfinite(acc).all()
    # The first point is θ0, measured independently here on the test rows (not the training rows).
    assert acc[0] == pytest.approx(float(np.mean(wl.predict(theta0, test=True) == wl.y_test)))
    # Training lowers the loss; held-out accuracy ends above chance (10 classes) and above its start.
    assert acc[-1] > max(0.1, acc[0])
    assert r.runs[0].extra["final_accuracy"] == acc[-1]
    assert analysis.run_table(r)["final_accuracy"].iloc[0] == acc[-1]


def test_no_accuracy_where_nothing_is_classified_or_held_out() -> None:
    lsq = build_workload(_scenario({"model": "least_squares", "dataset": "synthetic", "batch_size": 8,
                                    "samples": 200}).workload, 4)
    assert accuracy_of(lsq) is None
    no_test = build_workload(_scenario({**MLP, "test_fraction": 0.0}).workload, 4)
    assert no_test.n_test == 0 or accuracy_of(no_test) is not None  # digits may ship a split: then measured
    if no_test.n_test == 0:
        assert accuracy_of(no_test) is None
    r = backend.run_once(_scenario({"model": "least_squares", "dataset": "synthetic", "batch_size": 8,
                                    "samples": 200}), 0)
    assert r.curve["accuracy"].isna().all() and "final_accuracy" not in r.runs[0].extra


def test_monitor_skips_accuracy_of_a_crashed_point() -> None:
    sc = _scenario(MLP)
    calls: list[int] = []
    mon = Monitor(sc.stop, 0, accuracy_of=lambda th: calls.append(1) or 0.5)
    mon.observe(0.0, 0, 2.0, np.zeros(3))
    mon.observe(1.0, 10, math.nan, np.zeros(3))
    mon.observe(2.0, 20, 1.0)  # no θ given: not measured
    assert calls == [1] and mon.accuracy[0] == 0.5 and math.isnan(mon.accuracy[1]) and math.isnan(mon.accuracy[2])


def test_folders_without_the_accuracy_column_still_load(sim_result: tuple[object, RunResult], tmp_path: Path) -> None:
    _, r = sim_result
    folder = r.save(tmp_path / "new")
    back = RunResult.load(folder)
    np.testing.assert_array_equal(back.curve["accuracy"].to_numpy(), r.curve["accuracy"].to_numpy())
    old = pd.read_parquet(folder / "curve.parquet").drop(columns=["accuracy"])
    old.to_parquet(folder / "curve.parquet", index=False)  # as a folder written before the column existed
    loaded = RunResult.load(folder)
    assert loaded.curve["accuracy"].isna().all() and len(loaded.curve) == len(r.curve)


def test_plots_show_accuracy_when_measured(sim_result: tuple[object, RunResult], tmp_path: Path) -> None:
    from simasgd.evaluation import plots

    _, r = sim_result
    assert plots.has_accuracy({"a": r})
    written = plots.save(plots.accuracy_curves({"a": r}), tmp_path / "accuracy", False)
    assert any(p.suffix == ".png" and p.stat().st_size > 0 for p in written)
    no = RunResult(r.scenario, r.backend, r.runs, r.updates, r.curve.assign(accuracy=math.nan))
    assert not plots.has_accuracy({"a": no})
