"""Figures: they are drawn from the data given (not just written), and `simasgd plot` finds them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simasgd import plots
from simasgd.cli import app
from simasgd.results import curve_frame
from simasgd.scenario import Scenario

US = 1e-6


@pytest.fixture(scope="module")
def pair(make_result, geometric):
    rng = np.random.default_rng(20)
    a = make_result([geometric(rng, 4, 2000) for _ in range(3)], updates_to_eps=[300, None, 400])
    b = make_result([geometric(rng, 6, 2000) for _ in range(3)], updates_to_eps=[350, 380, 420], backend="cpu")
    for r in (a, b):
        r.curve = pd.concat([curve_frame(i, np.linspace(0, 2, 20), np.arange(20) * 100,
                                         np.exp(-np.linspace(0, 2, 20))) for i in range(3)], ignore_index=True)
    return {"sim": a, "cpu": b}


def test_staleness_histogram_bars_are_the_fractions(pair):
    fig = plots.staleness_histogram(pair, max_tau=10)
    ax = fig.axes[0]
    legend = {t.get_text() for t in ax.get_legend().get_texts()}
    means = {k: r.updates["staleness"].mean() for k, r in pair.items()}
    assert legend == {f"{k} ({m:.2f})" for k, m in means.items()}
    assert "staleness" in ax.get_xlabel() and "fraction" in ax.get_ylabel()
    # the tallest outline sits at τ = 0 with height P(τ=0), about 1/M = 0.25 for the sim sample
    h = plots.staleness_frame({"sim": pair["sim"]})
    p0 = h[(h["worker"] == "all") & (h["staleness"] == 0)]["fraction"].iloc[0]
    assert ax.get_ylim()[1] >= p0 > 0.2


def test_per_worker_has_one_panel_per_worker(pair):
    fig = plots.staleness_by_worker(pair)
    titles = sorted(ax.get_title() for ax in fig.axes if ax.get_title())
    assert titles == [f"worker {w}" for w in range(4)]


def test_loss_curves_draw_one_line_per_run_per_result(pair):
    fig = plots.loss_curves(pair)
    left, right = fig.axes[:2]
    assert len(left.get_lines()) >= 6 and right.get_xlabel() == "applied updates"
    assert left.get_yscale() == "log"


def test_time_to_eps_boxes_count_outcomes(pair):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # Matplotlib's deprecations included
        fig = plots.time_to_eps_boxes(pair)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "reached 2/3\ncrashed 0 · not reached 1" in texts and "reached 3/3\ncrashed 0 · not reached 0" in texts
    assert [t.get_text() for t in ax.get_xticklabels()] == list(pair)  # one box per result, in order
    assert len(ax.patches) == len(pair)


def test_throughput_vs_threads_x_is_the_thread_count(make_result, geometric):
    rng = np.random.default_rng(21)
    rs = [make_result([geometric(rng, m, 200)] * 2, workers=m, rates=[100.0 * m, 110.0 * m],
                      scenario=Scenario(workers={"count": m}, algorithm={"name": "hogwild"})) for m in (1, 2, 4)]
    df = plots.throughput_frame(rs)
    assert sorted(df["threads"].unique()) == [1, 2, 4]
    assert df.groupby("threads")["updates_per_s"].mean().tolist() == pytest.approx([105, 210, 420])
    fig = plots.throughput_vs_threads(rs)
    assert fig.axes[0].get_xlabel() == "threads (workers)"


def test_plot_command_on_a_compare_folder_writes_png_and_svg(pair, tmp_path):
    for label, r in pair.items():
        r.save(tmp_path / label)
    res = CliRunner().invoke(app, ["plot", str(tmp_path), "--svg"])
    assert res.exit_code == 0, res.output
    names = {p.name for p in (tmp_path / "figures").iterdir()}
    for stem in ("staleness", "staleness_per_worker", "loss", "time_to_eps"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names
    assert (tmp_path / "figures" / "staleness.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_command_on_a_non_results_folder_exits_2(tmp_path):
    res = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert res.exit_code == 2 and "neither a results folder" in res.output


def test_phase_distributions_draw_each_phase_for_each_result_on_a_log_axis(make_result, cycles):
    from simasgd.results import ResultsError

    labelled = {"sim": make_result([np.zeros(10, int)]), "cpu": make_result([np.zeros(10, int)], backend="cpu")}
    labelled["sim"].updates = cycles(gradient=220 * US)
    labelled["cpu"].updates = cycles(gradient=lambda g, n: g.exponential(200 * US, n))
    fig = plots.phase_distributions(labelled)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["read", "gradient", "update", "between", "cycle"]
    assert ax.get_yscale() == "log" and "µs" in ax.get_ylabel()
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"sim", "cpu"}
    lo, hi = ax.get_ylim()
    assert lo <= 3 and hi >= 220  # between (3 µs) … gradient (220 µs) on the axis, in µs
    labelled["cpu"].updates = make_result([np.zeros(10, int)]).updates  # no phase columns
    with pytest.raises(ResultsError, match="no phase"):
        plots.phase_distributions({"cpu": labelled["cpu"]})
