"""simasgd.evaluation.stability: repeats that disagree, and a run whose machine changed under it (regime_ratios)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from simasgd.evaluation import stability


def _updates(cycles_s: list[np.ndarray], run: int = 0) -> pd.DataFrame:
    """Rows of workers whose k-th cycle lasts cycles_s[w][k] (starts are their running sums)."""
    rows = []
    for w, c in enumerate(cycles_s):
        t = np.concatenate([[0.0], np.cumsum(c)])
        rows.append(pd.DataFrame({"run": run, "worker": w, "t_start": t}))
    return pd.concat(rows, ignore_index=True).sample(frac=1.0, random_state=0)  # row order must not matter


def test_a_steady_run_has_a_ratio_near_one() -> None:
    rng = np.random.default_rng(1)
    ups = _updates([rng.normal(340e-6, 20e-6, 3000) for _ in range(2)])
    ratio = stability.regime_ratios(ups)[0]
    # 8 windows of ~370 cycles each: the medians' spread is a few standard errors of 20 µs / sqrt(370)
    assert 1.0 <= ratio < 1.0 + 6 * (20 / np.sqrt(370)) / 340


def test_a_run_that_changed_regime_partway_shows_the_factor() -> None:
    # the middle third of the time at 800 µs a cycle (two CCXs), the rest at 340
    def worker() -> np.ndarray:
        return np.concatenate([np.full(1000, 340e-6), np.full(400, 800e-6), np.full(1000, 340e-6)])

    ratio = stability.regime_ratios(_updates([worker(), worker()]))[0]
    assert ratio == pytest.approx(800 / 340)
    assert ratio > stability.SHIFT


def test_runs_are_judged_apart_and_short_runs_not_at_all() -> None:
    steady = _updates([np.full(500, 1e-3)], run=0)
    short = _updates([np.full(2 * stability.MIN_PER_WINDOW - 2, 1e-3)], run=1)  # too few cycles
    ratios = stability.regime_ratios(pd.concat([steady, short]))
    assert ratios == {0: pytest.approx(1.0)}
    assert stability.regime_ratios(pd.DataFrame({"run": [0], "worker": [0]})) == {}  # no start times
    assert stability.regime_ratios(None) == {}


def test_the_warning_names_the_run_that_shifted() -> None:
    shifted = _updates([np.concatenate([np.full(800, 300e-6), np.full(800, 700e-6)])], run=1)
    steady = _updates([np.full(1600, 300e-6)], run=0)
    runs = [SimpleNamespace(updates_per_s=3000.0, crashed=False), SimpleNamespace(updates_per_s=3050.0, crashed=False)]
    host = [{"run": k, "affinity_start": [0, 1]} for k in (0, 1)]  # what a backend timing this host records
    result = SimpleNamespace(runs=runs, updates=pd.concat([steady, shifted]), metadata={"host_runs": host},
                             scenario={"workers": {"count": 2}})
    warnings = stability.stability_warnings(result)
    assert len(warnings) == 1 and warnings[0].startswith("run 1: its median cycle changed ×2.33")
    result.updates = steady
    assert stability.stability_warnings(result) == []


def test_no_regime_warning_for_simulated_or_time_sliced_runs() -> None:
    shifted = _updates([np.concatenate([np.full(800, 300e-6), np.full(800, 700e-6)])], run=0)
    runs = [SimpleNamespace(updates_per_s=3000.0, crashed=False)]
    sim = SimpleNamespace(runs=runs, updates=shifted, metadata={}, scenario={"workers": {"count": 2}})
    assert stability.stability_warnings(sim) == []  # no host records: virtual time
    sliced = SimpleNamespace(runs=runs, updates=shifted, metadata={"host": {"affinity_start": [0, 1]}},
                             scenario={"workers": {"count": 4}})
    assert stability.stability_warnings(sliced) == []  # 4 workers on 2 CPUs: SHIFT was not measured there
    sliced.scenario = {"workers": {"count": 2}}
    assert len(stability.stability_warnings(sliced)) == 1
