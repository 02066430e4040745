"""Figures of results (seaborn on the Agg backend; imported only when a figure is drawn).

Each function takes labelled results — ``{"sim": result, "cpu": result}`` —
and returns a matplotlib Figure; :func:`save` writes PNG (and SVG on request).
:func:`plot_folder` draws everything a results or compare folder supports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from simasgd.evaluation import analysis, phases
from simasgd.evaluation.fidelity import GOALS
from simasgd.runs.results import ResultsError, RunResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from simasgd.evaluation.fidelity import Fidelity
    from simasgd.machines.machine import Machine

TIME_LABEL = "time (s; simulated for sim, wall clock otherwise)"


def libs() -> tuple[Any, Any]:
    # Lazy: the CLI must start fast, and a headless machine needs Agg before pyplot loads.
    import os
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")  # a notebook kernel sets MPLBACKEND (inline) and keeps it
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    return plt, sns


def _tail_cut(frames: pd.DataFrame, share: float = 0.999) -> int:
    """Largest staleness worth showing: where every result has `share` of its mass."""
    cut = 0
    for _, g in frames.groupby("label"):
        c = g.groupby("staleness")["count"].sum().sort_index()
        cdf = c.cumsum() / c.sum()
        cut = max(cut, int(cdf.index[np.searchsorted(cdf.to_numpy(), share - 1e-12)]))
    return max(cut, 1)


# The histogram's axis ends at the last bar one can see: the largest τ whose bar is at least this share of its
# distribution's tallest bar (a bar under 1% of the axis' height is under a pixel or two). A thin tail far out
# (one worker descheduled a few times) would otherwise stretch the axis to 50 times the width of what is drawn.
VISIBLE = 0.01
MIN_TAU = 5  # the axis shows τ = 0..5 at least: two or three bars alone read as categories, not a distribution


def _visible_cut(frames: pd.DataFrame) -> int:
    """The largest staleness, over the labels, whose count is at least :data:`VISIBLE` of its label's largest
    (:data:`MIN_TAU` at least)."""
    cut = 0
    for _, g in frames.groupby("label"):
        seen = g[g["count"] >= VISIBLE * g["count"].max()]
        cut = max(cut, int(seen["staleness"].max()) if len(seen) else 0)
    return max(cut, MIN_TAU)


def staleness_frame(results: Mapping[str, RunResult], by_worker: bool = False) -> pd.DataFrame:
    frames = []
    for label, r in results.items():
        h = analysis.histogram(r, by_worker)
        frames.append(h.assign(label=label))
    return pd.concat(frames, ignore_index=True)


def staleness_histogram(results: Mapping[str, RunResult], max_tau: int | None = None) -> Figure:
    """Pooled staleness distributions overlaid (one step outline per result)."""
    df = staleness_frame(results)
    df = df[df["worker"] == analysis.ALL]
    return staleness_counts_histogram({label: g.sort_values("staleness")["count"].to_numpy()
                                       for label, g in df.groupby("label", sort=False)}, max_tau)


def staleness_counts_histogram(counts: Mapping[str, np.ndarray], max_tau: int | None = None) -> Figure:
    """Staleness distributions given as histograms (``counts[label][k]``: updates at τ = k), overlaid.

    Each bar is the fraction of *all* the label's updates; the axis ends at ``max_tau``, else at the last bar
    one can see (:data:`VISIBLE`, :data:`MIN_TAU` at least), and the axis label says how many updates lie
    beyond it and how far out. The legend's mean is the whole distribution's, tail included."""
    plt, sns = libs()
    frames = []
    for label, c in counts.items():
        c = np.asarray(c, dtype=float)
        total = c.sum()
        frames.append(pd.DataFrame({"label": label, "staleness": np.arange(len(c)), "count": c,
                                    "fraction": c / total if total else np.zeros(len(c))}))
    full = pd.concat(frames, ignore_index=True)
    cut = max_tau if max_tau is not None else _visible_cut(full)
    df = full[full["staleness"] <= cut]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    sns.histplot(df, x="staleness", weights="fraction", hue="label", discrete=True, stat="count",
                 element="step", fill=True, alpha=0.25, ax=ax)
    ax.set(xlabel="staleness τ (updates by others between read and write)", ylabel="fraction of updates",
           title="Staleness distribution", xlim=(-0.5, cut + 0.5))
    ax.xaxis.get_major_locator().set_params(integer=True)  # τ is a count: no tick at 0.25
    _legend_title(ax, "result (mean τ)")
    leg = ax.get_legend()
    if leg is not None:  # the mean of the whole distribution, tail included, next to each name
        for text in leg.get_texts():
            named = counts.get(text.get_text())
            if named is not None:
                text.set_text(f"{text.get_text()} ({analysis.mean_from_counts(np.asarray(named)):.2f})")
    beyond = full[(full["staleness"] > cut) & (full["count"] > 0)]
    if len(beyond):  # what the axis leaves out, so that a cut tail is never mistaken for no tail
        share = beyond.groupby("label")["fraction"].sum().max()
        ax.set_xlabel(f"{ax.get_xlabel()}\nnot drawn: τ > {cut}, at most {share:.1%} of a result's updates "
                      f"(largest τ {int(beyond['staleness'].max())})")
    fig.tight_layout()
    return fig


def staleness_by_worker(results: Mapping[str, RunResult], max_tau: int | None = None) -> Figure:
    """One panel per worker, results overlaid (as Ek 2021, figs. 4.13–4.18)."""
    _, sns = libs()
    df = staleness_frame(results, by_worker=True)
    df = df[df["worker"] != analysis.ALL].astype({"worker": int})
    if df.empty:
        raise ResultsError("no per-worker staleness: the workers are unknown (imported results?)")
    cut = max_tau if max_tau is not None else _tail_cut(df)
    df = df[df["staleness"] <= cut]
    grid = sns.displot(df, x="staleness", weights="count", hue="label", col="worker",
                       col_wrap=min(4, df["worker"].nunique()),
                       discrete=True, stat="probability", common_norm=False, element="step", alpha=0.25,
                       height=2.6, aspect=1.2, facet_kws={"sharey": False})
    grid.set_axis_labels("staleness τ", "fraction of the worker's updates")
    grid.set_titles("worker {col_name}")
    grid.figure.suptitle("Staleness per worker", y=1.02)
    if grid.legend is not None:
        grid.legend.set_title("result")
    return grid.figure


def loss_curves(results: Mapping[str, RunResult]) -> Figure:
    """Loss against time and against updates, side by side (as Lopez et al. 2020, figs. 1–2)."""
    return _against_time_and_updates(results, "loss", "training loss", "loss", log=True)


def has_accuracy(results: Mapping[str, RunResult]) -> bool:
    """Some curve measured the test accuracy (a classification workload with held-out rows)."""
    return any("accuracy" in r.curve.columns and r.curve["accuracy"].notna().any() for r in results.values())


def accuracy_curves(results: Mapping[str, RunResult]) -> Figure:
    """Test accuracy against time and against updates (Lopez et al. 2020, figs. 1–2, plot accuracy
    against training time)."""
    return _against_time_and_updates(results, "accuracy", "test accuracy", "accuracy", log=False)


def _against_time_and_updates(results: Mapping[str, RunResult], y: str, ylabel: str, title: str,
                              log: bool) -> Figure:
    """Curve column ``y`` against time and against updates, side by side, one line per run; ``log``: on a
    log scale (positive values only), else a fraction on [0, 1]."""
    plt, sns = libs()
    df = pd.concat([r.curve.assign(label=label) for label, r in results.items()], ignore_index=True)
    df = df[np.isfinite(df[y]) & (df[y] > 0)] if log else df[np.isfinite(df[y])]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, x, xlabel in ((axes[0], "t", TIME_LABEL), (axes[1], "updates", "applied updates")):
        sns.lineplot(df[np.isfinite(df[x])], x=x, y=y, hue="label", units="run", estimator=None,
                     lw=1.2, alpha=0.8, ax=ax, legend=ax is axes[0])
        if log:
            ax.set(xlabel=xlabel, ylabel=ylabel, yscale="log")
            plain_log_ticks(ax)
        else:
            ax.set(xlabel=xlabel, ylabel=ylabel, ylim=(0, 1))
    axes[0].set_title(f"{title} vs time")
    axes[1].set_title(f"{title} vs updates")
    if axes[0].get_legend() is not None:
        _legend_title(axes[0], "result (one line per run)")
    fig.tight_layout()
    return fig


def time_to_eps_boxes(results: Mapping[str, RunResult]) -> Figure:
    """Time to ε per result, one point per run that reached it; crashed and ε-not-reached runs counted above."""
    plt, sns = libs()
    rows = [{"label": label, "time_to_eps": run.time_to_eps} for label, r in results.items() for run in r.runs
            if run.time_to_eps is not None]
    df = pd.DataFrame(rows, columns=["label", "time_to_eps"])
    order = list(results)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(order)), 4.2))
    if not df.empty:
        groups = [df.loc[df["label"] == label, "time_to_eps"].to_numpy() for label in order]
        at = [i for i, g in enumerate(groups) if len(g)]
        # Matplotlib's own boxes: seaborn 0.13's boxplot passes bxp the `vert` that Matplotlib 3.11
        # deprecated and 3.13 removes
        ax.boxplot([groups[i] for i in at], positions=at, orientation="vertical", widths=0.6, patch_artist=True,
                   showfliers=False, manage_ticks=False, boxprops={"facecolor": "lightsteelblue"},
                   medianprops={"color": "black"})
        sns.stripplot(df, x="label", y="time_to_eps", order=order, ax=ax, color="black", size=4)
    ax.set_xticks(range(len(order)), order)
    top = float(df["time_to_eps"].max()) if not df.empty else 1.0
    for i, label in enumerate(order):
        o = analysis.outcomes(results[label])
        ax.text(i, top * 1.05,
                f"reached {o['reached']}/{o['runs']}\ncrashed {o['crashed']} · not reached {o['not_reached']}",
                ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.3)
    ax.set(xlabel="", ylabel="time to ε (s)", title="Time to ε (runs that reached it)")
    fig.tight_layout()
    return fig


def throughput_frame(results: Sequence[RunResult], labels: Sequence[str] | None = None) -> pd.DataFrame:
    rows = []
    for i, r in enumerate(results):
        label = labels[i] if labels else f"{r.scenario['algorithm']['name']} ({r.backend})"
        for run in analysis.run_table(r).itertuples():
            rows.append({"threads": int(r.scenario["workers"]["count"]), "updates_per_s": run.updates_per_s,
                         "mean_staleness": run.mean_staleness, "label": label})
    return pd.DataFrame(rows)


def throughput_vs_threads(results: Sequence[RunResult], labels: Sequence[str] | None = None) -> Figure:
    """Updates/s and mean staleness against the number of threads (mean and ± 1 sd band over runs)."""
    plt, sns = libs()
    df = throughput_frame(results, labels)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, y, ylabel in ((axes[0], "updates_per_s", "updates / s"),
                          (axes[1], "mean_staleness", "mean staleness τ (updates)")):
        sns.lineplot(df, x="threads", y=y, hue="label", marker="o", errorbar="sd", ax=ax,
                     legend=ax is axes[0])
        ax.set(xlabel="threads (workers)", ylabel=ylabel, xscale="log")
        ticks = sorted(df["threads"].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    axes[0].set_title("throughput")
    axes[1].set_title("staleness")
    _legend_title(axes[0], "algorithm (backend)" if not labels else "result")
    fig.suptitle("Throughput and staleness against threads: mean over runs, band ± 1 sd")
    fig.tight_layout()
    return fig


def phase_distributions(results: Mapping[str, RunResult], warmup: float | None = None,
                        max_points: int = 50_000) -> Figure:
    """Per phase of the cycle, each result's distribution of durations (boxen, log y, µs).

    Durations ≤ 0 cannot sit on a log axis and are left out; at most ``max_points`` per result and
    phase are drawn (a fixed-seed subsample), which keeps the boxes' quantiles but not the extremes."""
    plt, sns = libs()
    rng = np.random.default_rng(0)
    frames = []
    for label, r in results.items():
        f = phases.phase_frame(r.updates, phases.WARMUP if warmup is None else warmup)
        f = f[f["seconds"] > 0]
        parts = [g.iloc[np.sort(rng.choice(len(g), max_points, replace=False))] if len(g) > max_points else g
                 for _, g in f.groupby("phase", sort=False, observed=True)]
        if parts:
            frames.append(pd.concat(parts).assign(label=label, us=lambda d: d["seconds"] * 1e6))
    if not frames:
        raise ResultsError("no phase durations: the results have no phase columns (t_start, t_grad_start, t_grad_end)")
    df = pd.concat(frames, ignore_index=True)
    order = [p for p in phases.ALL_PHASES if p in set(df["phase"])]
    fig, ax = plt.subplots(figsize=(max(7.0, 1.7 * len(order)), 4.4))
    sns.boxenplot(df, x="phase", y="us", hue="label", order=order,
                  hue_order=[k for k in results if k in set(df["label"])], log_scale=True, showfliers=False, ax=ax)
    ax.set(xlabel="phase of a worker's cycle", ylabel="duration (µs)", title="Where a cycle's time goes")
    _legend_title(ax, "result")
    fig.tight_layout()
    return fig


def cycle_bars(means_s: Mapping[str, Mapping[str, float]], title: str = "Where a cycle's time goes") -> Figure:
    """One horizontal bar a side (``means_s[label][phase]``: a phase's mean, seconds), cut into the phases of a
    cycle (read, gradient, update, between) in µs, each segment labelled where it is wide enough: which phase
    makes two sides' cycles differ, at a glance. A phase a side lacks counts 0 there."""
    plt, sns = libs()
    labels = list(means_s)
    colors = sns.color_palette("colorblind", len(phases.PHASES))

    def us(label: str, phase: str) -> float:
        v = means_s[label].get(phase, 0.0) * 1e6
        return v if math.isfinite(v) and v > 0 else 0.0

    widest = max((sum(us(label, p) for p in phases.PHASES) for label in labels), default=0.0)
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.9 * len(labels)))
    for y, label in enumerate(labels):
        left = 0.0
        for phase, color in zip(phases.PHASES, colors, strict=True):
            w = us(label, phase)
            ax.barh(y, w, height=0.6, left=left, color=color, label=phase if y == 0 else None, edgecolor="white")
            if w > 0.07 * widest:
                ax.text(left + w / 2, y, f"{w:,.0f}", ha="center", va="center", fontsize=9)
            left += w
        ax.text(left, y, f"  {left:,.0f}", va="center", fontsize=9)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set(xlabel="mean time a cycle (µs)", title=title, xlim=(0, widest * 1.15 if widest > 0 else 1.0))
    ax.legend(title="phase", loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


def plain_log_ticks(ax: Any) -> None:
    # 0.3, 1, 2 rather than 3×10⁻¹: losses span a decade or two, not many. Minor ticks are labelled at
    # 2× and 5× a power of ten only, so that the labels of a decade do not run into each other.
    from matplotlib.ticker import FuncFormatter

    def minor(v: float, _: Any) -> str:
        lead = round(v / 10 ** math.floor(math.log10(v))) if v > 0 else 0
        return f"{v:g}" if lead in (2, 5) else ""

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def _legend_title(ax: Any, title: str) -> None:
    leg = ax.get_legend()
    if leg is not None:
        leg.set_title(title)


def save(fig: Figure, path: str | Path, svg: bool = False) -> list[Path]:
    """Write ``path``.png (and .svg); close the figure. Returns the files written."""
    plt, _ = libs()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = [path.with_suffix(".png")]
    fig.savefig(out[0], dpi=120, bbox_inches="tight")
    if svg:
        out.append(path.with_suffix(".svg"))
        fig.savefig(out[1], bbox_inches="tight")
    plt.close(fig)
    return out


# --- whole folders ----------------------------------------------------------------------------

def load_labelled(folder: str | Path) -> dict[str, RunResult]:
    """A results folder → {backend: result}; a compare (or sweep) folder → one entry per results subfolder."""
    folder = Path(folder)
    if (folder / "summary.json").exists():
        r = RunResult.load(folder)
        return {r.backend: r}
    subs = sorted(p for p in folder.iterdir() if (p / "summary.json").exists()) if folder.is_dir() else []
    if not subs:
        raise ResultsError(f"{folder}: neither a results folder (summary.json) nor a folder of results folders")
    return {p.name: RunResult.load(p) for p in subs}


def plot_folder(folder: str | Path, out: str | Path | None = None, svg: bool = False) -> list[Path]:
    """Every figure the folder supports, written to ``out`` (default ``folder/figures``)."""
    results = load_labelled(folder)
    out = Path(out) if out is not None else Path(folder) / "figures"
    written: list[Path] = []
    threads = {int(r.scenario["workers"]["count"]) for r in results.values()}
    if len(threads) > 1:
        written += save(throughput_vs_threads(list(results.values()), list(results)), out / "throughput_vs_threads",
                        svg)
    written += save(staleness_histogram(results), out / "staleness", svg)
    if any(analysis.workers(r) for r in results.values()) and max(threads) > 1:
        written += save(staleness_by_worker({k: r for k, r in results.items() if analysis.workers(r)}),
                        out / "staleness_per_worker", svg)
    if any(len(r.curve) for r in results.values()):
        written += save(loss_curves(results), out / "loss", svg)
    if has_accuracy(results):
        written += save(accuracy_curves(results), out / "accuracy", svg)
    written += save(time_to_eps_boxes(results), out / "time_to_eps", svg)
    if all(phases.has_phases(r) for r in results.values()):
        written += save(phase_distributions(results), out / "phases", svg)
    return written


def machine_line(m: Machine) -> str:
    """A simulated machine's name and the numbers that set its speed, in one line (a notebook prints it
    beside its figures, so that a figure is never read as another machine's)."""
    smt = f" × {m.threads_per_core} SMT" if m.threads_per_core > 1 else ""
    cal = m.profile.calibration if m.profile else None
    return (f"{m.name}: {m.sockets} socket{'s' * (m.sockets > 1)} × {m.cores_per_socket} cores{smt}, "
            f"{m.gflops_per_core:.1f} GFLOP/s per core, {m.mem_bandwidth_gbs:.0f} GB/s memory per socket, "
            f"{m.local_latency_ns:.0f} ns memory latency"
            + (f", calibrated profile ({'quick' if cal and cal.quick else 'full'} "
               f"calibration of {(cal and cal.created) or 'unknown date'})" if m.profile else ""))


# --- the fidelity report (tables in words; shared by compare, its report and the benchmark) -------------------------

UNITS = {"ks": "", "wasserstein": "updates", "p50_err": "updates", "p90_err": "updates", "p99_err": "updates"}
METRIC_ORDER = ("mean_staleness_rel_err", "ks", "wasserstein", "p50_err", "p90_err", "p99_err",
                "updates_per_s_rel_err", "updates_to_eps_rel_err", "time_to_eps_rel_err")


def fmt_value(name: str, v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:+.1%}" if name.endswith("rel_err") else f"{v:.3g}"


def fmt_goal(name: str, goal: float) -> str:
    return "≤ " + (f"{goal:.0%}" if name.endswith("rel_err") else f"{goal:g}")


def label(name: str) -> str:
    """The metric's name with its unit, for tables."""
    return f"{name} ({UNITS[name]})" if UNITS.get(name) else name


def why_undefined(name: str) -> str:
    if name == "mean_staleness_rel_err":
        return "the reference's mean staleness is 0: a relative error is undefined"
    if name in ("updates_to_eps_rel_err", "time_to_eps_rel_err"):
        return "no run reached ε on one side (or a timing-only simulation, which has no loss)"
    return "not computable from these results"


def verdict_mark(ok: bool | None) -> str:
    return {True: "✓", False: "✗", None: "·"}[ok]


def summary_rows(fid: Fidelity) -> list[dict[str, str]]:
    """The pooled metrics as display rows: metric, value, interval, goal, verdict."""
    rows = []
    for name in METRIC_ORDER:
        m = fid.overall.get(name)
        if m is None:
            continue
        if math.isfinite(m.ci_low):
            ci = f"[{fmt_value(name, m.ci_low)}, {fmt_value(name, m.ci_high)}]"
        else:
            ci = "n/a" if not math.isfinite(m.value) or min(fid.predicted.runs, fid.reference.runs) >= 2 \
                else "n/a (needs ≥ 2 runs each)"
        goal = "" if m.goal is None else fmt_goal(name, m.goal)
        rows.append({"metric": label(name), "value": fmt_value(name, m.value), "ci": ci, "goal": goal,
                     "verdict": verdict_mark(m.ok)})
    return rows


def disagreements(fid: Fidelity) -> list[str]:
    """Plain sentences for each goal missed, pooled and per worker."""
    out = []
    for name, m in fid.overall.items():
        if m.ok is False and m.goal is not None:  # a verdict needs a goal: ok is None without one
            out.append(f"{name} = {fmt_value(name, m.value)} misses the goal (|·| {fmt_goal(name, m.goal)})")
    for w, ms in fid.per_worker.items():
        bad = [n for n in ("mean_staleness_rel_err", "ks") if ms[n].ok is False]
        if bad:
            out.append(f"worker {w}: " + ", ".join(f"{n} = {fmt_value(n, ms[n].value)}" for n in bad))
    return out


def window_line(fid: Fidelity) -> str:
    """Which versions were compared, when one side's runs went on past the other's."""
    return (f"Compared over versions 1–{fid.info['up_to_version']}, the ones every run of both sides made (a side that "
            "ran on past ε, e.g. a cpu run whose losses were evaluated after it, is cut there).")


def unstable(fid: Fidelity) -> list[str]:
    """Plain warnings for each goal the reference misses against itself (``Fidelity.floor``): there, a
    simulator that ran exactly like the machine would miss it too, about as often; and how many of the
    reference's runs, each taken as the prediction of the others, meet every goal (``Fidelity.self_share``)."""
    out = [f"{label(k)}: the {fid.reference.label} runs differ among themselves by "
           f"±{fmt_value(k, fid.floor[k]).lstrip('+')} "
           f"(|·| {fmt_goal(k, GOALS[k])} is the goal); more or longer runs narrow that"
           for k, ok in fid.reproducible.items() if ok is False]
    share = fid.self_share
    if share is not None and share < 1.0:
        n = fid.reference.runs
        out.append(f"{round(share * n)} of the {n} {fid.reference.label} runs, each taken as the prediction of the "
                   "others, meet every goal: a predictor that ran exactly like this machine would meet them as rarely")
    return out


def undefined(fid: Fidelity) -> list[str]:
    """Goal metrics that could not be computed here."""
    return [k for k in GOALS if k in fid.overall and not math.isfinite(fid.overall[k].value)]


def to_markdown(fid: Fidelity, figures: list[str] | None = None) -> str:
    p, r = fid.predicted, fid.reference
    lines = [f"# Fidelity: {p.label} ({p.backend}, {p.runs} runs) against {r.label} ({r.backend}, {r.runs} runs)",
             "", f"Errors are {p.label} − {r.label}; intervals: {fid.level:.0%} bootstrap over runs "
             f"({fid.resamples} resamples).", ""]
    if fid.scenario_diff:
        lines += ["Scenarios differ only in: " + "; ".join(fid.scenario_diff), ""]
    if fid.info.get("up_to_version"):
        lines += [window_line(fid), ""]
    lines += ["| metric | value | interval | goal | |", "|---|---|---|---|---|"]
    lines += [f"| {x['metric']} | {x['value']} | {x['ci']} | {x['goal']} | {x['verdict']} |" for x in summary_rows(fid)]
    lines += ["", "Outcomes: " + "; ".join(f"{s.label}: {s.outcomes}" for s in (p, r)), ""]
    bad = disagreements(fid)
    lines += ["## Where they disagree", ""] + ([f"- {b}" for b in bad] or ["- nowhere: every goal checked is met"])
    lines += [f"- {k}: not checked — {why_undefined(k)}" for k in undefined(fid)] + [""]
    warn = unstable(fid)
    if warn:
        lines += ["## Unstable reference", ""] + [f"- ⚠ {u}" for u in warn] + [""]
    if fid.per_worker:
        lines += ["## Per worker", "", "| worker | mean staleness rel err | KS | Wasserstein | updates/s rel err |",
                  "|---|---|---|---|---|"]
        for w, ms in fid.per_worker.items():
            lines.append(f"| {w} | " + " | ".join(fmt_value(n, ms[n].value) for n in
                         ("mean_staleness_rel_err", "ks", "wasserstein", "updates_per_s_rel_err")) + " |")
        lines.append("")
    comparison = getattr(fid, "phases", None)
    if comparison is not None:
        lines += [comparison.markdown()]
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures] + [""]
    return "\n".join(lines)


def write_report(folder: str | Path, fid: Any, results: Mapping[str, RunResult], svg: bool = False) -> Path:
    """``folder/report.md``: the fidelity table, where they disagree, and the overlaid figures."""
    folder = Path(folder)
    figs = folder / "figures"
    written = save(staleness_histogram(results), figs / "staleness", svg)
    if all(analysis.workers(r) for r in results.values()) and fid.per_worker:
        written += save(staleness_by_worker(results), figs / "staleness_per_worker", svg)
    if any(len(r.curve) for r in results.values()):
        written += save(loss_curves(results), figs / "loss", svg)
    if has_accuracy(results):
        written += save(accuracy_curves(results), figs / "accuracy", svg)
    written += save(time_to_eps_boxes(results), figs / "time_to_eps", svg)
    if getattr(fid, "phases", None) is not None and fid.phases.available:
        written += save(phase_distributions(results, fid.phases.warmup), figs / "phases", svg)
    pngs = [str(p.relative_to(folder)) for p in written if p.suffix == ".png"]
    report = folder / "report.md"
    report.write_text(to_markdown(fid, pngs) + sides_markdown(results))
    return report


def sides_markdown(results: Mapping[str, RunResult]) -> str:
    """Each result on its own: mean over runs with a 95% t-interval, and staleness quantiles."""
    lines = ["## Each side on its own", "", "| metric | " + " | ".join(results) + " |",
             "|---|" + "---|" * len(results)]
    tables = {k: analysis.efficiency(r).set_index("metric") for k, r in results.items()}
    for metric in next(iter(tables.values())).index:
        cells = []
        for t in tables.values():
            m, lo, hi = (float(t.loc[metric, c]) for c in ("mean", "ci_low", "ci_high"))
            ci = f" [{lo:.4g}, {hi:.4g}]" if math.isfinite(lo) else ""
            cells.append("n/a" if not math.isfinite(m) else f"{m:.4g}{ci}")
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
