"""The staleness histogram's axis fits the data: it ends where the distributions lie, says what it leaves out,
and its bars stay fractions of every update; a simulated machine is named with its numbers."""

from __future__ import annotations

import numpy as np
import pytest

from simasgd.evaluation import analysis, plots
from simasgd.machines import machine


def bar_top_is(ax, k: int, height: float) -> bool:
    """The filled step outline reaches ``height`` at τ = k and no higher."""
    (path,) = ax.collections[0].get_paths()
    return bool(path.contains_point((k, height - 1e-4)) and not path.contains_point((k, height + 1e-4)))


def test_a_thin_far_tail_does_not_stretch_the_axis_and_is_named():
    rng = np.random.default_rng(3)
    body = analysis.counts(rng.geometric(0.6, size=20_000) - 1)
    far = np.zeros(181)
    far[180] = 40  # 0.2% of the updates far out: a descheduled worker's
    a = np.zeros(181)
    a[:len(body)] += body
    a += far
    fig = plots.staleness_counts_histogram({"a": a})
    ax = fig.axes[0]
    # the last bar one can see, from the counts (τ = 0..MIN_TAU at least)
    cut = max(int(np.flatnonzero(a >= plots.VISIBLE * a.max())[-1]), plots.MIN_TAU)
    assert cut < 20 and ax.get_xlim() == (-0.5, cut + 0.5)
    beyond = a[cut + 1:].sum() / a.sum()
    assert f"τ > {cut}, at most {beyond:.1%}" in ax.get_xlabel() and "largest τ 180" in ax.get_xlabel()
    # the bars are fractions of all the updates, the tail included, not of those drawn
    for k in (0, 1, 2):
        assert bar_top_is(ax, k, a[k] / a.sum())
        assert not bar_top_is(ax, k, a[k] / a[:cut + 1].sum())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"a ({analysis.mean_from_counts(a):.2f})"]


def test_nothing_left_out_says_nothing_and_max_tau_wins():
    fig = plots.staleness_counts_histogram({"a": np.array([5.0, 3.0, 2.0])})
    ax = fig.axes[0]
    assert "not drawn" not in ax.get_xlabel()
    assert ax.get_xlim()[1] == pytest.approx(plots.MIN_TAU + 0.5)
    assert all(float(t).is_integer() for t in ax.get_xticks())
    wide = plots.staleness_counts_histogram({"a": np.array([5.0, 3.0, 2.0])}, max_tau=10).axes[0]
    assert wide.get_xlim() == (-0.5, 10.5)


def test_machine_line_names_the_machine_and_its_numbers():
    m = machine.PRESETS["xeon-e5-2687w-v2"]
    line = plots.machine_line(m)
    assert line.startswith(f"{m.name}: {m.sockets} sockets × {m.cores_per_socket} cores × {m.threads_per_core} SMT")
    assert f"{m.gflops_per_core:.1f} GFLOP/s" in line and "calibrated" not in line
    name = machine.corpus_names()[0]
    corpus = plots.machine_line(machine.corpus_machine(name))
    created = machine.corpus_machine(name).profile.calibration.created  # type: ignore[union-attr]
    assert corpus.startswith(f"{name}: ") and str(created) in corpus
