"""Figures: they are drawn from the data given (not just written), and `simasgd plot` finds them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.evaluation import plots
from simasgd.runs.results import curve_frame
from simasgd.spec.scenario import Scenario

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


@pytest.mark.slow
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
    assert "± 1 sd" in fig._suptitle.get_text()
    from matplotlib.collections import PolyCollection

    verts = next(c for c in fig.axes[0].collections if isinstance(c, PolyCollection)).get_paths()[0].vertices
    at = np.isclose(verts[:, 0], 1)  # one thread: runs at 100 and 110 updates/s, band 105 ± sd
    assert sorted(set(np.round(verts[at, 1], 6))) == pytest.approx([105 - np.std([100, 110], ddof=1),
                                                                     105 + np.std([100, 110], ddof=1)])


@pytest.mark.slow
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
    from simasgd.runs.results import ResultsError

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


# --- mean and band over runs (simasgd.evaluation.bands) -----------------------------------------------------------

def banded(make_result, initial=(2.0, 2.5, 3.0), ends=(1000, 800, 1200), eps=0.1, crashed=()):
    """Three runs whose losses are sampled every 50 updates up to different ends (a run stops at ε)."""
    import dataclasses

    sc = Scenario(workers={"count": 2}, algorithm={"name": "hogwild"}, stop={"epsilon": eps})
    r = make_result([np.zeros(10, int)] * len(initial), workers=2, scenario=sc)
    parts = []
    for i, (l0, end) in enumerate(zip(initial, ends, strict=True)):
        u = np.arange(0, end + 1, 50)
        loss = l0 * np.exp(-u / (300 + 100 * i))
        if i in crashed:
            loss[-1] = np.inf
        parts.append(curve_frame(i, u / 1000.0, u, loss))
    r.curve = pd.concat(parts, ignore_index=True)
    r.runs = [dataclasses.replace(s, initial_loss=l0, crashed=i in crashed)
              for i, (s, l0) in enumerate(zip(r.runs, initial, strict=True))]
    return r


def test_cycle_bars_cut_each_sides_cycle_into_its_phase_means():
    means = {"measured": {"read": 100e-6, "gradient": 200e-6, "update": 50e-6, "between": 1e-6, "cycle": 351e-6},
             "simulated": {"read": 30e-6, "gradient": 210e-6, "update": float("nan")}}
    fig = plots.cycle_bars(means)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if p.get_width() > 0 or p.get_height() > 0]
    by_row: dict[float, list] = {}
    for b in bars:
        by_row.setdefault(round(b.get_y() + b.get_height() / 2, 6), []).append(b)
    rows = [sorted(v, key=lambda b: b.get_x()) for _, v in sorted(by_row.items())]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["measured", "simulated"]
    # each segment starts where the one before ends, and is its phase's mean in µs (a missing phase: 0)
    want = [[100, 200, 50, 1], [30, 210, 0, 0]]
    for row, widths in zip(rows, want, strict=True):
        assert [b.get_width() for b in row] == pytest.approx(widths)
        assert [b.get_x() for b in row] == pytest.approx(list(np.cumsum([0, *widths[:-1]])))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["read", "gradient", "update", "between"]


def test_loss_band_frame_is_the_mean_and_sd_over_the_span_every_run_covers(make_result):
    from simasgd.evaluation import bands

    r = banded(make_result)
    f = bands.loss_band_frame(r, "updates", points=17)  # 0, 50, …, 800: every grid point a sample
    assert f["x"].tolist() == pytest.approx(np.arange(0, 801, 50))  # up to the shortest run's end
    raw = np.stack([g["loss"].to_numpy()[:17] for _, g in r.curve.groupby("run")])
    assert f["mean"].to_numpy() == pytest.approx(raw.mean(axis=0))
    assert f["sd"].to_numpy() == pytest.approx(raw.std(axis=0, ddof=1))
    assert (f["hi"] - f["mean"]).to_numpy() == pytest.approx(f["sd"].to_numpy())
    assert (f["mean"] - f["lo"]).to_numpy() == pytest.approx(f["sd"].to_numpy())
    assert (f["runs"] == 3).all()
    # between samples the runs are interpolated linearly: at 25 updates, each run's midpoint
    mid = bands.loss_band_frame(r, "updates", points=33)
    assert mid["mean"].iloc[1] == pytest.approx(((raw[:, 0] + raw[:, 1]) / 2).mean())
    with pytest.raises(ValueError, match="x must be"):
        bands.loss_band_frame(r, "seconds")


def test_loss_band_frame_leaves_crashed_runs_out_and_a_single_run_has_no_band(make_result):
    from simasgd.evaluation import bands

    r = banded(make_result, crashed=(2,))
    f = bands.loss_band_frame(r, "t", points=5)
    assert (f["runs"] == 2).all() and f["x"].iloc[-1] == pytest.approx(0.8)
    one = banded(make_result, initial=(2.0,), ends=(500,))
    g = bands.loss_band_frame(one)
    assert g["sd"].isna().all() and (g["runs"] == 1).all()


def test_loss_band_frame_cuts_each_run_where_it_reached_eps(make_result):
    """A backend that evaluates its losses after the run (cpu, torch) has points past ε: not averaged."""
    import dataclasses

    from simasgd.evaluation import bands

    r = banded(make_result, ends=(1000, 1000, 1000))
    r.runs = [dataclasses.replace(s, updates_to_eps=e, time_to_eps=None if e is None else e / 1000)
              for s, e in zip(r.runs, (600, 450, None), strict=True)]
    for x, end in (("updates", 450), ("t", 0.45)):
        f = bands.loss_band_frame(r, x, points=10)
        assert f["x"].iloc[-1] == pytest.approx(end) and (f["runs"] == 3).all()
    assert [g["updates"].max() for g in bands.run_curves(r)] == [600, 450, 1000]


def test_eps_target_is_eps_times_the_mean_initial_loss(make_result):
    from simasgd.evaluation import bands

    assert bands.eps_target(banded(make_result)) == pytest.approx(0.1 * 2.5)
    assert bands.eps_target(banded(make_result, eps=0.0)) is None  # no ε target: no line


def test_loss_band_draws_the_mean_the_band_and_the_eps_line(make_result):
    from matplotlib.collections import PolyCollection

    from simasgd.evaluation import bands

    r = banded(make_result)
    fig = bands.loss_band({"sim": r}, "updates")
    ax = fig.axes[0]
    f = bands.loss_band_frame(r, "updates")
    mean = [ln for ln in ax.get_lines() if ln.get_label() == "sim: mean of 3 runs"]
    assert len(mean) == 1 and np.asarray(mean[0].get_ydata()) == pytest.approx(f["mean"].to_numpy())
    band = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(band) == 1
    verts = band[0].get_paths()[0].vertices
    for k in (0, 50, 199):  # the band's edges are mean ∓ sd at each grid point
        at = np.isclose(verts[:, 0], f["x"].iloc[k])
        assert np.isclose(verts[at, 1], f["lo"].iloc[k]).any() and np.isclose(verts[at, 1], f["hi"].iloc[k]).any()
    eps = [ln for ln in ax.get_lines() if ln.get_label().startswith("ε target")]
    assert len(eps) == 1 and eps[0].get_ydata()[0] == pytest.approx(0.25)
    assert "0.1 × initial loss" in eps[0].get_label()
    assert "mean ± 1 sd" in ax.get_title() and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "applied updates" and "loss" in ax.get_ylabel()
    assert len(ax.get_lines()) == 3 + 1 + 1  # the runs, the mean, ε


def test_loss_band_marks_each_results_eps_when_they_differ(make_result):
    from simasgd.evaluation import bands

    a, b = banded(make_result), banded(make_result, initial=(4.0, 4.0, 4.0))
    ax = bands.loss_band({"a": a, "b": b}, "t", show_runs=False).axes[0]
    eps = {ln.get_label().split(":")[0]: ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_label().startswith("ε")}
    assert eps == pytest.approx({"ε target of a": 0.25, "ε target of b": 0.4})
    assert ax.get_xlabel() == plots.TIME_LABEL


def test_points_band_is_the_mean_and_sd_of_the_runs_that_have_a_value():
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from simasgd.evaluation import bands

    df = pd.DataFrame({"algorithm": ["sync"] * 6 + ["mutex"] * 3, "ratio": [1, 1, 1, 10, 10, 10, 1, 1, 1],
                       "time_to_eps": [1.0, 2.0, 4.0, 0.5, None, 0.7, 3.0, 3.0, 3.0]})
    fig, ax = plt.subplots()
    stats = bands.points_band(df, "ratio", "time_to_eps", "algorithm", ax, order=["sync", "mutex"])
    sync = stats[stats["algorithm"] == "sync"].set_index("ratio")
    assert sync.loc[1, "mean"] == pytest.approx(7 / 3) and sync.loc[1, "sd"] == pytest.approx(np.std([1, 2, 4], ddof=1))
    assert sync.loc[10, "runs"] == 2 and sync.loc[10, "mean"] == pytest.approx(0.6)  # the run without a value left out
    lines = {ln.get_label(): np.asarray(ln.get_ydata()) for ln in ax.get_lines()}
    assert lines["sync"] == pytest.approx([7 / 3, 0.6]) and lines["mutex"] == pytest.approx([3.0])
    verts = next(c for c in ax.collections if isinstance(c, PolyCollection)).get_paths()[0].vertices
    lo, hi = 7 / 3 - np.std([1, 2, 4], ddof=1), 7 / 3 + np.std([1, 2, 4], ddof=1)
    at = np.isclose(verts[:, 0], 1)
    assert np.isclose(verts[at, 1], lo).any() and np.isclose(verts[at, 1], hi).any()
    plt.close(fig)
