"""The scaling study of docs/study-scale.md: staleness, updates/s and time to ε from 8 to 1,024 workers.

HOGWILD! and Leashed-SGD as threads on the two-socket ``epyc-7763-2s`` (``shared_memory.toml``); EASGD, a
parameter server and synchronous SGD on the nodes of ``cluster-1024`` over 100 Gb/s InfiniBand
(``cluster_100g_ib.toml``) and over 25 Gb/s Ethernet (``cluster_25gbe.toml``). Every cell is simulated with
its gradients computed for real (``sim.numerics = true``), so updates and time to ε are the workload's own.

One command regenerates the figures, the table and the page's generated blocks::

    .venv/bin/python scenarios/scale_study/study.py            # the full grid (--jobs N: N processes)
    .venv/bin/python scenarios/scale_study/study.py --quick --out /tmp/q   # a tiny grid (the test's)

Each finished repeat of a cell is kept as JSON in ``OUT/cache/``: an interrupted run resumes where it
stopped, and a cell whose scenario changed (file, overrides, simasgd version) runs again. ``--fresh``
ignores the cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "docs" / "img" / "scale_study"
QUICK_OUT = ROOT / "results" / "scale_study_quick"
PAGE = ROOT / "docs" / "study-scale.md"
STUDY_VERSION = 1  # bump when what a cell records changes: cached cells of another version run again

WORKERS = (8, 32, 128, 256, 512, 1024)
QUICK_WORKERS = (8, 32)
QUICK_UPDATES = 300
HW_THREADS = 256  # epyc-7763-2s: 2 sockets × 64 cores × 2 threads

# EASGD (Zhang, Choromanska, LeCun 2015): the moving rate α = β/p with β = pα = 0.9, the value the paper
# suggests (simasgd/spec/algorithms.py, `alpha`), and a communication period of τ = 10 local steps.
EASGD_BETA = 0.9
EASGD_TAU = 10

# The budget of updates per algorithm (stop.max_updates): an update of sync is one round (M gradients), one
# of EASGD an exchange with the centre (τ local steps before it), the others one gradient each.
BUDGET = {"hogwild": 20_000, "leashed": 20_000, "param_server": 20_000, "easgd": 60_000, "sync": 2_000}

NAMES = {"hogwild": "HOGWILD!", "leashed": "Leashed-SGD", "easgd": "EASGD", "param_server": "param_server",
         "sync": "sync"}
COLORS = {"hogwild": "#1f77b4", "leashed": "#2ca02c", "easgd": "#9467bd", "param_server": "#d62728",
          "sync": "#ff7f0e"}
MARKERS = {"hogwild": "o", "leashed": "s", "easgd": "D", "param_server": "^", "sync": "v"}


@dataclass(frozen=True)
class Setting:
    key: str
    title: str  # a figure panel's title
    label: str  # the table's name for it
    scenario: str  # file in this folder
    algorithms: tuple[str, ...]


SETTINGS = (
    Setting("shared", "epyc-7763-2s: 256 hardware threads", "epyc-7763-2s", "shared_memory.toml",
            ("hogwild", "leashed")),
    Setting("ib", "cluster-1024 + 100g_ib (100 Gb/s, 1 µs)", "cluster-1024 + 100g_ib", "cluster_100g_ib.toml",
            ("easgd", "param_server", "sync")),
    Setting("eth", "cluster-1024 + 25gbe (25 Gb/s, 20 µs)", "cluster-1024 + 25gbe", "cluster_25gbe.toml",
            ("easgd", "param_server", "sync")),
)
QUICK_ALGORITHMS = {"shared": ("hogwild",), "ib": ("param_server",)}  # one algorithm per machine kind


@dataclass(frozen=True)
class Cell:
    setting: Setting
    algorithm: str
    workers: int
    max_updates: int

    @property
    def name(self) -> str:
        return f"{self.setting.key}-{self.algorithm}-{self.workers:04d}"

    def overrides(self) -> list[str]:
        out = [f"algorithm.name={self.algorithm}", f"workers.count={self.workers}",
               f"stop.max_updates={self.max_updates}"]
        if self.algorithm == "easgd":
            out += [f"algorithm.alpha={EASGD_BETA / self.workers!r}", f"algorithm.tau={EASGD_TAU}"]
        return out

    def gradients_per_update(self) -> int:
        return {"sync": self.workers, "easgd": EASGD_TAU}.get(self.algorithm, 1)


def grid(quick: bool) -> list[Cell]:
    cells = []
    for s in SETTINGS:
        algorithms = QUICK_ALGORITHMS.get(s.key, ()) if quick else s.algorithms
        for a in algorithms:
            for w in QUICK_WORKERS if quick else WORKERS:
                cells.append(Cell(s, a, w, QUICK_UPDATES if quick else BUDGET[a]))
    return cells


_CODE: list[str] = []


def code_digest() -> str:
    """A digest of simasgd's source: a cell simulated by other code is not this code's result."""
    if not _CODE:
        import simasgd

        h = hashlib.sha256()
        src = Path(simasgd.__file__).parent
        for f in sorted(src.rglob("*.py")):
            h.update(str(f.relative_to(src)).encode() + b"\0" + f.read_bytes())
        _CODE.append(h.hexdigest()[:16])
    return _CODE[0]


def cache_key(cell: Cell, run: int) -> str:
    """What decides a repeat's result: the scenario file, the overrides, the repeat, simasgd's source."""
    text = (HERE / cell.setting.scenario).read_text(encoding="utf-8")
    doc = json.dumps([STUDY_VERSION, code_digest(), text, cell.overrides(), run])
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def run_repeat(scenario: str, overrides: list[str], run: int, gradients_per_update: int) -> dict[str, Any]:
    """One repeat of one cell on the simulator (in a pool's worker): its summary, its staleness counts."""
    from simasgd.runs import backends
    from simasgd.spec import loader

    t0 = time.perf_counter()
    sc = loader.load(HERE / scenario, overrides)
    result = backends.load("sim").run_once(sc, run)
    s = result.runs[0]
    u = result.updates
    applied = u[u["applied"]]
    counts = applied["staleness"].value_counts().sort_index()
    return {
        "run": run, "updates": s.updates, "attempts": s.attempts, "time_s": s.time_s,
        "updates_per_s": s.updates_per_s, "mean_staleness": s.mean_staleness,
        "updates_to_eps": s.updates_to_eps, "time_to_eps": s.time_to_eps,
        "crashed": s.crashed, "not_reached": s.not_reached,
        "initial_loss": s.initial_loss, "final_loss": s.final_loss if math.isfinite(s.final_loss) else None,
        "workers_updated": int(applied["worker"].nunique()),
        "gradients_per_update": gradients_per_update,
        "staleness_counts": {str(int(k)): int(v) for k, v in counts.items()},
        "wall_s": time.perf_counter() - t0,
    }


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def run_grid(cells: Sequence[Cell], repeats: int, cache: Path, jobs: int,
             fresh: bool) -> dict[str, list[dict[str, Any]]]:
    """Every repeat of every cell, from the cache where it holds it, else on ``jobs`` processes."""
    from simasgd.runs import pools

    cache.mkdir(parents=True, exist_ok=True)
    done: dict[str, list[dict[str, Any]]] = {c.name: [] for c in cells}
    todo = []
    for c in cells:
        for r in range(repeats):
            path, key = cache / f"{c.name}-r{r}.json", cache_key(c, r)
            if not fresh and path.exists():
                doc = json.loads(path.read_text(encoding="utf-8"))
                if doc.get("key") == key:
                    done[c.name].append(doc)
                    continue
            todo.append((c, r, path, key))
    print(f"{sum(map(len, done.values()))} repeats cached, {len(todo)} to run on {jobs} processes", flush=True)
    # the largest cells first, so that the pool's last minutes are not one long cell alone
    todo.sort(key=lambda t: -t[0].workers * t[0].gradients_per_update())
    pool = pools.spawn_pool(max(1, min(jobs, len(todo) or 1)))
    ok = False
    try:
        futures = {pools.submit(pool, run_repeat, c.setting.scenario, c.overrides(), r, c.gradients_per_update()):
                   (c, r, path, key) for c, r, path, key in todo}
        from concurrent.futures import as_completed

        for i, f in enumerate(as_completed(futures), 1):
            c, r, path, key = futures[f]
            doc = {"key": key, "cell": c.name, "setting": c.setting.key, "algorithm": c.algorithm,
                   "workers": c.workers, "max_updates": c.max_updates, "overrides": c.overrides(), **f.result()}
            _write_json(path, doc)
            done[c.name].append(doc)
            print(f"[{i}/{len(todo)}] {c.name} run {r}: {_outcome_one(doc)}, wall {doc['wall_s']:.1f} s", flush=True)
        ok = True
    finally:
        pools.close(pool, cancel=not ok)
    for runs in done.values():
        runs.sort(key=lambda d: d["run"])
    return done


def _outcome_one(d: dict[str, Any]) -> str:
    if d["crashed"]:
        return "crashed"
    if d["updates_to_eps"] is None:
        return f"not reached within {d['max_updates']} updates"
    return f"ε after {d['updates_to_eps']} updates"


# ---------------------------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class Row:
    cell: Cell
    runs: list[dict[str, Any]]

    @property
    def tau(self) -> float:
        return statistics.fmean(d["mean_staleness"] for d in self.runs)

    @property
    def updates_per_s(self) -> float:
        return statistics.fmean(d["updates"] / d["time_s"] if d["time_s"] > 0 else 0.0 for d in self.runs)

    @property
    def gradients_per_s(self) -> float:
        return self.updates_per_s * self.cell.gradients_per_update()

    @property
    def workers_updated(self) -> int:
        return min(d["workers_updated"] for d in self.runs)

    def reached(self) -> list[dict[str, Any]]:
        return [d for d in self.runs if d["updates_to_eps"] is not None]

    @property
    def updates_to_eps(self) -> float | None:
        r = self.reached()
        return statistics.median(d["updates_to_eps"] for d in r) if r else None

    @property
    def time_to_eps(self) -> float | None:
        r = self.reached()
        return statistics.median(d["time_to_eps"] for d in r) if r else None

    @property
    def outcome(self) -> str:
        n = len(self.runs)
        reached, crashed = len(self.reached()), sum(d["crashed"] for d in self.runs)
        missed = n - reached - crashed
        if reached == n:
            return "reached"
        parts = [f"reached {reached}/{n}"] if reached else []
        if crashed:
            parts.append("crashed" + (f" {crashed}/{n}" if crashed < n else ""))
        if missed:
            parts.append(f"not reached within {self.cell.max_updates} updates"
                         + (f" {missed}/{n}" if missed < n else ""))
        return ", ".join(parts)


def sig(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, without an exponent where it fits ("—" for None)."""
    if x is None or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x)))
    if e >= 9 or e < -3:
        return f"{x:.{digits - 1}e}"
    return f"{round(x, digits - 1 - e):,.{max(0, digits - 1 - e)}f}"


TABLE_HEAD = ("| machine | algorithm | workers | workers that updated | τ̄ | updates/s | gradients/update | "
              "updates to ε | time to ε (ms) | outcome |")


def table(rows: Iterable[Row]) -> str:
    lines = [TABLE_HEAD, "|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in rows:
        c = r.cell
        t2e = r.time_to_eps
        lines.append(f"| {c.setting.label} | {NAMES[c.algorithm]} | {c.workers:,} | {r.workers_updated:,} | "
                     f"{sig(r.tau)} | {sig(r.updates_per_s)} | {c.gradients_per_update():,} | "
                     f"{sig(r.updates_to_eps)} | {sig(None if t2e is None else t2e * 1e3)} | {r.outcome} |")
    return "\n".join(lines)


def _best(rows: Iterable[Row]) -> Row | None:
    reached = [r for r in rows if r.time_to_eps is not None]
    return min(reached, key=lambda r: r.time_to_eps or math.inf) if reached else None


def findings(rows: list[Row]) -> str:
    """The numbers the page's prose reads off, derived from this run's table."""
    by = {(r.cell.setting.key, r.cell.algorithm, r.cell.workers): r for r in rows}
    workers = sorted({r.cell.workers for r in rows})
    lo, hi = workers[0], workers[-1]
    out = []
    for s in SETTINGS:
        for a in s.algorithms:
            rs = [by[(s.key, a, w)] for w in workers if (s.key, a, w) in by]
            if not rs:
                continue
            taus = ", ".join(f"{sig(r.tau)} at {r.cell.workers:,}" for r in rs)
            ups = ", ".join(f"{sig(r.updates_per_s)}" for r in rs)
            idle = [r for r in rs if r.workers_updated < r.cell.workers]
            line = f"- **{NAMES[a]}, {s.label}**: τ̄ {taus} workers; updates/s {ups}"
            if idle:
                line += "; workers that made an update: " + ", ".join(
                    f"{r.workers_updated:,} of {r.cell.workers:,}" for r in idle)
            best = _best(rs)
            if best is not None:
                line += (f"; fastest to ε with {best.cell.workers:,} workers "
                         f"({sig((best.time_to_eps or 0) * 1e3)} ms, {sig(best.updates_to_eps)} updates)")
            missed = [f"{r.cell.workers:,}: {r.outcome}" for r in rs if r.outcome != "reached"]
            if missed:
                line += "; missed ε at " + "; ".join(missed)
            out.append(line + ".")
    for s in SETTINGS:
        best = _best(r for r in rows if r.cell.setting.key == s.key)
        if best is not None:
            out.append(f"- Fastest to ε on {s.label}: {NAMES[best.cell.algorithm]} with {best.cell.workers:,} "
                       f"workers, {sig((best.time_to_eps or 0) * 1e3)} ms.")
    ib, eth = by.get(("ib", "param_server", hi)), by.get(("eth", "param_server", hi))
    if ib is not None and eth is not None and eth.updates_per_s > 0:
        out.append(f"- param_server at {hi:,} workers: {sig(ib.updates_per_s)} updates/s on 100g_ib, "
                   f"{sig(eth.updates_per_s)} on 25gbe ({sig(ib.updates_per_s / eth.updates_per_s)}×).")
    for k, net in (("ib", "100g_ib"), ("eth", "25gbe")):
        first, last = by.get((k, "sync", lo)), by.get((k, "sync", hi))
        if first is not None and last is not None and first.updates_per_s > 0 and last.updates_per_s > 0:
            out.append(f"- sync on {net}: a round takes {sig(1e6 / first.updates_per_s)} µs with {lo:,} workers, "
                       f"{sig(1e6 / last.updates_per_s)} µs with {hi:,}.")
    return "\n".join(out)


# -------------------------------------------------------------------------------------------- the figures

def _libs() -> tuple[Any, Any]:
    # Lazy, as simasgd.evaluation.plots: Agg on a headless machine, seaborn's theme for the project's look.
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    return plt, sns


def _panels(plt: Any, settings: Sequence[Setting], rows_n: int = 1, height: float = 4.2,
            sharey: bool | str = "row") -> tuple[Any, Any]:
    fig, axes = plt.subplots(rows_n, len(settings), figsize=(5.2 * len(settings), height * rows_n),
                             sharex=True, sharey=sharey, squeeze=False)
    return fig, axes


def _legend(fig: Any, axes: Any, extra: Sequence[tuple[Any, str]] = ()) -> None:
    """One legend for every panel, below them: each label once."""
    seen: dict[str, Any] = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, h)
    for h, label in extra:
        seen.setdefault(label, h)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(4, len(seen)), fontsize=9,
               frameon=False)


def _missed_marker(crashed: bool) -> dict[str, Any]:
    return {"marker": "X" if crashed else "o", "ms": 10, "ls": "none", "clip_on": False}


def _workers_axis(ax: Any, workers: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(workers))
    ax.set_xticklabels([f"{w:,}" for w in workers])
    ax.minorticks_off()
    ax.set_xlim(workers[0] / 1.4, workers[-1] * 1.4)


def _time_sharing(ax: Any, setting: Setting, workers: Sequence[int], label: bool) -> None:
    """Shade where the threads outnumber the shared-memory machine's hardware threads."""
    if setting.key == "shared" and workers[-1] > HW_THREADS:
        ax.axvspan(HW_THREADS * 1.12, workers[-1] * 1.4, color="0.85", alpha=0.5, zorder=0,
                   label=f"epyc-7763-2s: more threads than its {HW_THREADS} CPUs (time-shared)" if label else None)


def _series(rows: Sequence[Row], setting: Setting, algorithm: str) -> list[Row]:
    return sorted((r for r in rows if r.cell.setting.key == setting.key and r.cell.algorithm == algorithm),
                  key=lambda r: r.cell.workers)


def _used(rows: Sequence[Row]) -> list[Setting]:
    keys = {r.cell.setting.key for r in rows}
    return [s for s in SETTINGS if s.key in keys]


def figure_staleness(rows: Sequence[Row], workers: Sequence[int], path: Path) -> None:
    plt, _ = _libs()
    settings = _used(rows)
    fig, axes = _panels(plt, settings)
    for ax, s in zip(axes[0], settings, strict=True):
        ax.plot(workers, [w - 1 for w in workers], color="0.4", ls="--", lw=1, label="τ = M − 1", zorder=1)
        for a in s.algorithms:
            rs = _series(rows, s, a)
            if rs:
                ax.plot([r.cell.workers for r in rs], [r.tau for r in rs], marker=MARKERS[a], color=COLORS[a],
                        label=NAMES[a])
                bad = [r for r in rs if any(d["crashed"] for d in r.runs)]
                ax.plot([r.cell.workers for r in bad], [r.tau for r in bad], marker=MARKERS[a], ms=12, ls="none",
                        mfc="white", mec=COLORS[a], mew=1.8)
        _time_sharing(ax, s, workers, label=True)
        _workers_axis(ax, workers)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(-0.3, workers[-1] * 2)
        ax.set(title=s.title, xlabel="workers M")
    axes[0][0].set_ylabel("mean staleness τ̄ (updates)")
    from matplotlib.lines import Line2D

    hollow = Line2D([], [], marker="o", ls="none", mfc="white", mec="0.3", ms=9, mew=1.8)
    _legend(fig, axes, [(hollow, "hollow: a repeat crashed (τ̄ of the updates before it)")])
    fig.suptitle("Mean staleness τ̄: other workers' updates between a worker's read and its update "
                 "(sync: 0 by construction)", fontsize=12)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_throughput(rows: Sequence[Row], workers: Sequence[int], path: Path) -> None:
    plt, _ = _libs()
    settings = _used(rows)
    fig, axes = _panels(plt, settings)
    for ax, s in zip(axes[0], settings, strict=True):
        for a in s.algorithms:
            rs = _series(rows, s, a)
            if not rs:
                continue
            x = [r.cell.workers for r in rs]
            ax.plot(x, [r.updates_per_s for r in rs], marker=MARKERS[a], color=COLORS[a], label=NAMES[a])
            if a in ("sync", "easgd"):
                what = "M gradients" if a == "sync" else f"{EASGD_TAU} local steps"
                ax.plot(x, [r.gradients_per_s for r in rs], color=COLORS[a], ls=":", marker=MARKERS[a],
                        mfc="none", label=f"{NAMES[a]}: gradients/s ({what} an update)")
        _time_sharing(ax, s, workers, label=True)
        _workers_axis(ax, workers)
        ax.set_yscale("log")
        ax.set(title=s.title, xlabel="workers M")
    axes[0][0].set_ylabel("updates per simulated second")
    _legend(fig, axes)
    fig.suptitle("Throughput: updates applied per simulated second (dotted: gradients per second)", fontsize=12)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_time_to_eps(rows: Sequence[Row], workers: Sequence[int], path: Path) -> None:
    """Updates to ε (top) and time to ε (bottom); a cell that missed ε is marked above the axis' data."""
    plt, _ = _libs()
    settings = _used(rows)
    fig, axes = _panels(plt, settings, rows_n=2, height=3.9)
    for col, s in enumerate(settings):
        for row, (what, scale, label) in enumerate((("updates_to_eps", 1.0, "updates to ε"),
                                                    ("time_to_eps", 1e3, "time to ε (simulated ms)"))):
            ax = axes[row][col]
            values = [getattr(r, what) for r in rows if getattr(r, what) is not None]
            top = (max(values) * scale * 4) if values else 1.0
            for a in s.algorithms:
                rs = _series(rows, s, a)
                ok = [r for r in rs if getattr(r, what) is not None]
                ax.plot([r.cell.workers for r in ok], [getattr(r, what) * scale for r in ok], marker=MARKERS[a],
                        color=COLORS[a], label=NAMES[a])
                for r in rs:
                    crashed = any(d["crashed"] for d in r.runs)
                    missed = any(d["not_reached"] for d in r.runs)
                    if crashed:  # a repeat crashed (the others, if any, are the point below)
                        ax.plot([r.cell.workers], [top], color=COLORS[a], **_missed_marker(True))
                    if missed:  # a repeat ran out of budget
                        ax.plot([r.cell.workers * (1.12 if crashed else 1)], [top], color=COLORS[a], mfc="none",
                                **_missed_marker(False))
            _time_sharing(ax, s, workers, label=row == 0)
            _workers_axis(ax, workers)
            ax.set_yscale("log")
            lo = (min(values) * scale / 2) if values else 0.1
            ax.set_ylim(lo, top * 2.2)
            ax.axhspan(top / 1.6, top * 2.2, color="#fde0dd", alpha=0.6, zorder=0)
            ax.text(workers[0] / 1.3, top * 1.5, "a repeat missed ε:  X crashed   ○ not reached within the budget",
                    fontsize=8, va="center", color="0.25")
            if row == 0:
                ax.set_title(s.title)
            else:
                ax.set_xlabel("workers M")
            if col == 0:
                ax.set_ylabel(label)
    _legend(fig, axes)
    fig.suptitle("Updates to ε (statistical efficiency) and time to ε (simulated): the median of the repeats that "
                 "reached ε", fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_distribution(rows: Sequence[Row], workers: int, path: Path) -> None:
    """The staleness distribution (pooled repeats) of every algorithm at ``workers`` workers, as a CDF."""
    plt, _ = _libs()
    settings = _used(rows)
    fig, axes = _panels(plt, settings)
    for ax, s in zip(axes[0], settings, strict=True):
        ax.axvline(workers - 1, color="0.6", ls="--", lw=1, label=f"τ = M − 1 = {workers - 1:,}", zorder=1)
        if s.key == "shared" and workers > HW_THREADS:
            ax.axvline(HW_THREADS - 1, color="0.6", ls=":", lw=1, label=f"τ = {HW_THREADS - 1} (CPUs − 1)",
                       zorder=1)
        for a in s.algorithms:
            rs = [r for r in _series(rows, s, a) if r.cell.workers == workers]
            if not rs:
                continue
            counts: dict[int, int] = {}
            for d in rs[0].runs:
                for k, v in d["staleness_counts"].items():
                    counts[int(k)] = counts.get(int(k), 0) + v
            if not counts:
                continue
            taus = sorted(counts)
            total = sum(counts.values())
            cdf, acc = [], 0
            for t in taus:
                acc += counts[t]
                cdf.append(acc / total)
            crashed = "; a repeat crashed" if any(d["crashed"] for d in rs[0].runs) else ""
            ax.step([taus[0] - 0.5, *taus], [0.0, *cdf], where="post", color=COLORS[a], lw=2, zorder=2,
                    label=f"{NAMES[a]} (τ̄ {sig(rs[0].tau)}{crashed})")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(-0.6, workers * 3)
        ax.set_ylim(0, 1.02)
        ax.set(title=s.title, xlabel="staleness τ (updates)")
        ax.legend(loc="upper left", fontsize=8)
    axes[0][0].set_ylabel("cumulative fraction of updates")
    fig.suptitle(f"Staleness distribution at {workers:,} workers (cumulative, all repeats)", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


FIGURES = {"staleness": "staleness.png", "throughput": "throughput.png", "time_to_eps": "time_to_eps.png",
           "distribution": "staleness_distribution.png"}


def figures(rows: Sequence[Row], out: Path) -> list[Path]:
    workers = sorted({r.cell.workers for r in rows})
    figure_staleness(rows, workers, out / FIGURES["staleness"])
    figure_throughput(rows, workers, out / FIGURES["throughput"])
    figure_time_to_eps(rows, workers, out / FIGURES["time_to_eps"])
    figure_distribution(rows, workers[-1], out / FIGURES["distribution"])
    return [out / f for f in FIGURES.values()]


# --------------------------------------------------------------------------------------------- the page

BLOCK = re.compile(r"^(<!-- study\.py: (\w+) -->\n)(?:.*?\n)??(<!-- study\.py: end \2 -->)$",
                   re.DOTALL | re.MULTILINE)


def write_page(page: Path, blocks: dict[str, str]) -> None:
    """Replace each ``<!-- study.py: NAME -->`` ... ``<!-- study.py: end NAME -->`` block of ``page`` by
    ``blocks[NAME]``. A page that does not exist is written as the blocks alone; one that exists must
    hold a block for each name (nothing else of it is touched)."""
    if not page.exists():
        text = "\n\n".join(f"<!-- study.py: {k} -->\n{v}\n<!-- study.py: end {k} -->" for k, v in blocks.items())
        page.write_text(text + "\n", encoding="utf-8")
        return
    text = page.read_text(encoding="utf-8")
    missing = set(blocks) - {m.group(2) for m in BLOCK.finditer(text)}
    if missing:
        raise SystemExit(f"{page}: no '<!-- study.py: NAME -->' ... '<!-- study.py: end NAME -->' block for "
                         f"{sorted(missing)}; the page is left as it is")
    new = BLOCK.sub(lambda m: f"{m.group(1)}{blocks[m.group(2)]}\n{m.group(3)}" if m.group(2) in blocks
                    else m.group(0), text)
    page.write_text(new, encoding="utf-8")


def write_csv(rows: Sequence[Row], path: Path) -> None:
    import csv

    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["machine", "algorithm", "workers", "repeats", "workers_updated", "mean_staleness",
                    "updates_per_s", "gradients_per_update", "updates_to_eps", "time_to_eps_s", "outcome"])
        for r in rows:
            w.writerow([r.cell.setting.label, r.cell.algorithm, r.cell.workers, len(r.runs), r.workers_updated,
                        repr(r.tau), repr(r.updates_per_s), r.cell.gradients_per_update(),
                        "" if r.updates_to_eps is None else r.updates_to_eps,
                        "" if r.time_to_eps is None else repr(r.time_to_eps), r.outcome])


def main(argv: Sequence[str] | None = None) -> int:
    from simasgd.runs import pools

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true",
                   help=f"a tiny grid: workers {', '.join(map(str, QUICK_WORKERS))}, one algorithm per machine kind, "
                        f"{QUICK_UPDATES} updates at most, one repeat")
    p.add_argument("--jobs", type=int, default=None, help="processes (default: every CPU, or $SIMASGD_JOBS)")
    p.add_argument("--repeats", type=int, default=None, help="repeats of each cell (default 2; --quick: 1)")
    p.add_argument("--out", type=Path, default=None,
                   help=f"figures, results.csv and cache/ (default {OUT.relative_to(ROOT)}; --quick: "
                        f"{QUICK_OUT.relative_to(ROOT)})")
    p.add_argument("--page", type=Path, default=None,
                   help=f"the page whose generated blocks get the table and findings (default "
                        f"{PAGE.relative_to(ROOT)} for the full grid into the default --out, else OUT/results.md)")
    p.add_argument("--fresh", action="store_true", help="run every cell again, ignoring the cache")
    args = p.parse_args(argv)

    out = (args.out or (QUICK_OUT if args.quick else OUT)).resolve()
    page = args.page or (PAGE if (not args.quick and out == OUT) else out / "results.md")
    repeats = args.repeats or (1 if args.quick else 2)
    jobs = args.jobs or pools.default_jobs()
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    cells = grid(args.quick)
    runs = run_grid(cells, repeats, out / "cache", jobs, args.fresh)
    rows = [Row(c, runs[c.name]) for c in cells]
    text = table(rows)
    found = findings(rows)
    print(text)
    print(found)
    written = figures(rows, out)
    write_csv(rows, out / "results.csv")
    write_page(page, {"table": text, "findings": found})
    wall = time.perf_counter() - t0
    print(f"wrote {', '.join(str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f) for f in written)}, "
          f"{out / 'results.csv'} and the blocks of {page}; {wall:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
