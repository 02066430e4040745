"""Mean and band over runs: a result's repeats summarised, with the ε target marked.

Repeats of one scenario differ (each run draws its own θ₀, samples and timings), so one run's curve is
an anecdote. These figures draw, per result, the mean over its runs and a band of ± one sample standard
deviation (``ddof=1``) around it — :data:`BAND` says so in every legend — and the ε target as a
labelled horizontal line at ε × the initial loss.

The numbers behind each figure are frames (:func:`loss_band_frame`, :func:`points_frame`), so what is
drawn can be checked against what was computed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from simasgd.evaluation.plots import TIME_LABEL, libs, plain_log_ticks
from simasgd.runs.results import ResultsError, RunResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BAND = "mean ± 1 sd over runs"
X_LABELS = {"updates": "applied updates", "t": TIME_LABEL}
STYLES = ("-", "-.", ":")  # one per result, so that a mean drawn over another stays visible; ε is dashed


def subplots(nrows: int = 1, ncols: int = 1, **kw: Any) -> tuple[Figure, Any]:
    """``plt.subplots`` with the figures' theme (seaborn's whitegrid), for a figure drawn by hand."""
    plt, _ = libs()
    return plt.subplots(nrows, ncols, **kw)


def _mean_sd(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample sd over axis 0 (sd NaN for a single run: one run has no spread to show)."""
    mean = values.mean(axis=0)
    sd = values.std(axis=0, ddof=1) if len(values) > 1 else np.full(values.shape[1:], np.nan)
    return mean, sd


def loss_band_frame(result: RunResult, x: str = "updates", points: int = 200) -> pd.DataFrame:
    """The training loss's mean and sd over the runs, on ``points`` evenly spaced values of ``x``.

    Each run's curve (:func:`run_curves`: up to where it reached ε) is linearly interpolated onto the
    grid, which spans only the ``x`` every run covers (the runs reach ε at different points: past the
    shortest the mean would be of the runs still going — the slow ones). Crashed runs are left out
    (their loss is not finite). Columns: ``x, mean, sd, lo, hi, runs`` with ``lo, hi = mean ∓ sd``.
    """
    curves = [g for g in run_curves(result, x) if len(g) >= 2]
    if not curves:
        raise ResultsError("no loss curve with two points or more: nothing to average")
    start = max(float(g[x].iloc[0]) for g in curves)
    end = min(float(g[x].iloc[-1]) for g in curves)
    grid = np.linspace(start, end, points) if end > start else np.array([start])
    losses = np.stack([np.interp(grid, g[x].to_numpy(float), g["loss"].to_numpy(float)) for g in curves])
    mean, sd = _mean_sd(losses)
    return pd.DataFrame({"x": grid, "mean": mean, "sd": sd, "lo": mean - sd, "hi": mean + sd,
                         "runs": len(curves)})


def run_curves(result: RunResult, x: str = "updates") -> list[pd.DataFrame]:
    """Each run's loss curve that did not crash, sorted by ``x`` and cut where the run reached ε: the
    stop rule ends a run there, though a backend that evaluates its losses after the run (cpu, torch)
    records points past it — kept, they would stretch one side's curves past the other's."""
    if x not in X_LABELS:
        raise ValueError(f"x must be one of {sorted(X_LABELS)}, not {x!r}")
    stop = {s.run: s.updates_to_eps if x == "updates" else s.time_to_eps for s in result.runs}
    crashed = {s.run for s in result.runs if s.crashed}
    curve = result.curve[np.isfinite(result.curve["loss"]) & np.isfinite(result.curve[x])]
    out = []
    for run, g in curve.groupby("run"):
        if run in crashed:
            continue
        g = g.sort_values(x, kind="stable")
        end = stop.get(int(run))
        out.append(g[g[x] <= end] if end is not None else g)
    return out


def eps_target(result: RunResult) -> float | None:
    """ε × the initial loss, averaged over the runs (each run's θ₀ is its own); None without a target."""
    eps = float(result.scenario.get("stop", {}).get("epsilon", 0.0) or 0.0)
    initial = [s.initial_loss for s in result.runs if math.isfinite(s.initial_loss)]
    if eps <= 0 or not initial:
        return None
    return eps * float(np.mean(initial))


def _draw_band(ax: Axes, x: np.ndarray, mean: np.ndarray, lo: np.ndarray, hi: np.ndarray, color: Any,
               label: str, floor: float | None = None, marker: str | None = None, ls: str = "-") -> None:
    """The mean as a line and ± sd as a shaded band (``floor``: the band's lowest edge on a log axis)."""
    ax.plot(x, mean, color=color, lw=2, marker=marker, ls=ls, label=label)
    if np.isfinite(lo).any():
        low = np.where(lo > 0, lo, floor) if floor is not None else lo
        ax.fill_between(x, low, hi, color=color, alpha=0.25, lw=0)


def loss_band(results: Mapping[str, RunResult], x: str = "updates", title: str | None = None,
              show_runs: bool = True, ax: Axes | None = None) -> Figure:
    """Training loss against ``x`` (``"updates"`` or ``"t"``): per result its runs (thin), their mean
    and ± 1 sd band (:func:`loss_band_frame`), and the ε target (dashed) on a log axis."""
    plt, sns = libs()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
    else:
        fig = ax.figure
    colors = dict(zip(results, sns.color_palette(n_colors=max(len(results), 1)), strict=True))
    frames = {label: loss_band_frame(r, x) for label, r in results.items()}
    # A band edge at or below 0 cannot sit on a log axis: drawn at half the lowest positive value instead.
    positive = [float(v[v > 0].min()) for f in frames.values() for v in (f["mean"], f["lo"]) if (v > 0).any()]
    floor = min(positive) / 2 if positive else None
    for i, (label, r) in enumerate(results.items()):
        f = frames[label]
        if show_runs:
            for g in run_curves(r, x):
                g = g[g["loss"] > 0]
                ax.plot(g[x], g["loss"], color=colors[label], lw=0.7, alpha=0.35)
        n = int(f["runs"].iloc[0])
        _draw_band(ax, f["x"].to_numpy(), f["mean"].to_numpy(), f["lo"].to_numpy(), f["hi"].to_numpy(),
                   colors[label], f"{label}: mean of {n} run{'s' * (n != 1)}", floor, ls=STYLES[i % len(STYLES)])
    _eps_lines(ax, results, colors)
    ax.set(xlabel=X_LABELS[x], ylabel="training loss (log scale)", yscale="log",
           title=title or f"Training loss, {BAND}")
    plain_log_ticks(ax)
    ax.legend(title="band: ± 1 sd; thin: each run" if show_runs else "band: ± 1 sd", fontsize=8,
              title_fontsize=8)
    fig.tight_layout()
    return fig


def _eps_lines(ax: Axes, results: Mapping[str, RunResult], colors: Mapping[str, Any]) -> None:
    """One dashed line at ε × L₀ where every result shares it (same seed: same θ₀), else one per result."""
    targets = {label: eps_target(r) for label, r in results.items()}
    known = {k: v for k, v in targets.items() if v is not None}
    if not known:
        return
    eps = {float(results[k].scenario["stop"]["epsilon"]) for k in known}
    values = list(known.values())
    if max(values) - min(values) <= 1e-9 * max(abs(v) for v in values) and len(eps) == 1:
        varies = any(np.ptp([s.initial_loss for s in results[k].runs]) > 0 for k in known)
        ax.axhline(values[0], color="black", ls="--", lw=1.2, label=f"ε target: {eps.pop():g} × initial loss = "
                   f"{values[0]:.3g}" + (" (mean over runs)" if varies else ""))
        return
    for label, v in known.items():
        e = float(results[label].scenario["stop"]["epsilon"])
        ax.axhline(v, color=colors[label], ls="--", lw=1.2,
                   label=f"ε target of {label}: {e:g} × initial loss = {v:.3g}")


def points_frame(df: pd.DataFrame, x: str, y: str, hue: str) -> pd.DataFrame:
    """Per ``hue`` and ``x``: the mean of ``y`` over the rows (one row per run), its sample sd and the
    number of runs with a finite ``y`` (a run that never reached ε has no time to ε)."""
    d = df[[hue, x, y]].copy()
    d[y] = pd.to_numeric(d[y], errors="coerce").astype(float)
    d = d[np.isfinite(d[y])]
    g = d.groupby([hue, x], sort=True)[y]
    out = pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "runs": g.size()}).reset_index()
    out["lo"], out["hi"] = out["mean"] - out["sd"], out["mean"] + out["sd"]
    return out


def points_band(df: pd.DataFrame, x: str, y: str, hue: str, ax: Axes, order: Sequence[str] | None = None,
                log_y: bool = False) -> pd.DataFrame:
    """Draw :func:`points_frame`: per ``hue`` a line through the means (markers at each ``x``) and the
    ± 1 sd band; returns the frame drawn."""
    _, sns = libs()
    stats = points_frame(df, x, y, hue)
    labels = list(order) if order is not None else list(dict.fromkeys(df[hue]))
    colors = dict(zip(labels, sns.color_palette(n_colors=max(len(labels), 1)), strict=True))
    positive = pd.concat([stats["mean"], stats["lo"]])
    positive = positive[positive > 0]
    floor = float(positive.min()) / 2 if log_y and len(positive) else None
    for label in labels:
        s = stats[stats[hue] == label]
        if len(s):
            _draw_band(ax, s[x].to_numpy(float), s["mean"].to_numpy(), s["lo"].to_numpy(), s["hi"].to_numpy(),
                       colors[label], str(label), floor, marker="o")
    return stats
