"""What a RunResult says: staleness distributions, quantiles, efficiency, outcomes.

Everything here reads the tables of :mod:`simasgd.runs.results` and nothing else,
so it works the same for every backend (and for imported peer results).
Staleness is an integer count, so distributions are kept as histograms
(counts per τ = 0, 1, …): exact, small, and cheap to resample for bootstrap
confidence intervals in :mod:`simasgd.evaluation.fidelity`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from simasgd.runs.results import RunResult, RunSummary

QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
ALL = "all"  # the label of the pooled (all-workers) group


# --- staleness ---------------------------------------------------------------------------------

def applied(result: RunResult) -> pd.DataFrame:
    """The applied updates: dropped attempts have no staleness of their own in the model."""
    return applied_rows(result.updates)


def staleness(result: RunResult, worker: int | None = None, runs: Iterable[int] | None = None) -> np.ndarray:
    """Staleness of the applied updates, optionally of one worker and some runs."""
    u = applied(result)
    if worker is not None:
        u = u[u["worker"] == worker]
    if runs is not None:
        u = u[u["run"].isin(list(runs))]
    return u["staleness"].to_numpy(dtype=np.int64)


def counts(values: np.ndarray, length: int | None = None) -> np.ndarray:
    """Histogram of non-negative integers: ``out[k]`` = number of values equal to k."""
    values = np.asarray(values, dtype=np.int64)
    if len(values) and values.min() < 0:
        raise ValueError(f"staleness must be >= 0 (found {values.min()})")
    size = max(length or 0, int(values.max()) + 1 if len(values) else 1)
    return np.bincount(values, minlength=size)


def run_counts(result: RunResult, worker: int | None = None) -> dict[int, np.ndarray]:
    """Per-run staleness histograms (all the same length), keyed by run index."""
    u = applied(result)
    if worker is not None:
        u = u[u["worker"] == worker]
    runs = [r.run for r in result.runs] or sorted(u["run"].unique())
    length = int(u["staleness"].max()) + 1 if len(u) else 1
    groups = dict(tuple(u.groupby("run")["staleness"]))
    return {r: counts(groups[r].to_numpy(), length) if r in groups else np.zeros(length, np.int64)
            for r in runs}


def histogram(result: RunResult, by_worker: bool = False) -> pd.DataFrame:
    """Staleness histogram: columns ``worker`` (``"all"`` when pooled), ``staleness``, ``count``, ``fraction``."""
    u = applied(result)
    keys = [(ALL, u)] + ([(int(w), g) for w, g in u.groupby("worker")] if by_worker else [])
    frames = []
    for key, g in keys:
        c = counts(g["staleness"].to_numpy())
        total = c.sum()
        frames.append(pd.DataFrame({"worker": key, "staleness": np.arange(len(c)), "count": c,
                                    "fraction": c / total if total else np.zeros(len(c))}))
    return pd.concat(frames, ignore_index=True)


def quantile_from_counts(c: np.ndarray, q: float) -> float:
    """The q-quantile (lower, as numpy's ``inverted_cdf``) of the integer sample with histogram ``c``."""
    total = c.sum()
    if total == 0:
        return math.nan
    cdf = np.cumsum(c)
    return float(np.searchsorted(cdf, q * total, side="left"))


def mean_from_counts(c: np.ndarray) -> float:
    total = c.sum()
    return float(np.dot(np.arange(len(c)), c) / total) if total else math.nan


def quantiles(result: RunResult, qs: Sequence[float] = QUANTILES, by_worker: bool = False) -> pd.DataFrame:
    """Mean and quantiles of staleness, pooled and (optionally) per worker."""
    h = histogram(result, by_worker)
    rows = []
    for key, g in h.groupby("worker", sort=False):
        c = g["count"].to_numpy()
        rows.append({"worker": key, "updates": int(c.sum()), "mean": mean_from_counts(c),
                     **{f"p{_pct(q)}": quantile_from_counts(c, q) for q in qs}})
    return pd.DataFrame(rows)


def _pct(q: float) -> str:
    return f"{q * 100:g}".replace(".", "_")


# --- distances between two integer distributions (used by fidelity) ---------------------------

def _pad(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(a), len(b))
    return np.pad(a, (0, n - len(a))), np.pad(b, (0, n - len(b)))


def ks_from_counts(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample KS statistic sup |F_a − F_b| (equals ``scipy.stats.ks_2samp(...).statistic``)."""
    a, b = _pad(np.asarray(a, float), np.asarray(b, float))
    if a.sum() == 0 or b.sum() == 0:
        return math.nan
    return float(np.max(np.abs(np.cumsum(a) / a.sum() - np.cumsum(b) / b.sum())))


def wasserstein_from_counts(a: np.ndarray, b: np.ndarray) -> float:
    """First Wasserstein distance (``scipy.stats.wasserstein_distance``): Σ_k |F_a(k) − F_b(k)| for unit steps."""
    a, b = _pad(np.asarray(a, float), np.asarray(b, float))
    if a.sum() == 0 or b.sum() == 0:
        return math.nan
    return float(np.sum(np.abs(np.cumsum(a) / a.sum() - np.cumsum(b) / b.sum())))


# --- efficiency and outcomes ------------------------------------------------------------------

def run_table(result: RunResult) -> pd.DataFrame:
    """One row per run: throughput, statistical efficiency, outcomes, lock wait, retries, drops."""
    rows = []
    u = result.updates
    groups = dict(tuple(u.groupby("run")))
    for r in result.runs:
        g = groups.get(r.run, u.iloc[:0])
        ok = g[g["applied"].astype(bool)]
        retries = g["retries"][g["retries"] >= 0]  # -1 = unknown (imported results)
        c = counts(ok["staleness"].to_numpy())
        rows.append({
            "run": r.run, "updates": r.updates, "time_s": r.time_s, "updates_per_s": _rate(r),
            "updates_to_eps": _opt(r.updates_to_eps), "time_to_eps": _opt(r.time_to_eps),
            "reached": r.updates_to_eps is not None, "crashed": r.crashed, "not_reached": r.not_reached,
            "mean_staleness": mean_from_counts(c) if c.sum() else r.mean_staleness,
            **{f"p{_pct(q)}_staleness": quantile_from_counts(c, q) for q in QUANTILES},
            "mean_lock_wait_s": float(g["lock_wait_s"].mean()) if len(g) else math.nan,
            "mean_retries": float(retries.mean()) if len(retries) else math.nan,
            "dropped_fraction": float(1 - len(ok) / len(g)) if len(g) else math.nan,
            # test accuracy at the run's last evaluation (convergence.accuracy_of); NaN where not measured
            "final_accuracy": float(r.extra.get("final_accuracy", math.nan)),
        })
    return pd.DataFrame(rows)


def _rate(r: RunSummary) -> float:
    if r.updates_per_s:
        return float(r.updates_per_s)
    return r.updates / r.time_s if r.time_s and math.isfinite(r.time_s) and r.time_s > 0 else math.nan


def _opt(v: float | int | None) -> float:
    return math.nan if v is None else float(v)


# --- a common window of versions ---------------------------------------------------------------

def common_version(*results: RunResult) -> int | None:
    """The last version every run of every result made (runs with no applied row left out); None when
    no run goes past it (nothing to cut) or no run has rows. A run stopped at ε and one that ran on to its
    budget (a cpu run whose losses are evaluated after it) then compare over the same versions."""
    last = [int(g.max()) for r in results for _, g in applied(r).groupby("run")["version"] if len(g)]
    if not last or min(last) == max(last):
        return None
    return min(last)


def up_to_version(result: RunResult, v: int) -> RunResult:
    """``result`` cut at version ``v``: its rows of versions ≤ v; each run's updates, time, updates/s and
    mean staleness over them (the time: when the last of them was written). Curves and ε are kept."""
    u = result.updates[result.updates["version"] <= v]
    groups = dict(tuple(applied_rows(u).groupby("run")))
    runs = []
    for r in result.runs:
        g = groups.get(r.run)
        if g is None or not len(g):
            runs.append(r)
            continue
        t = float(g["t_write"].max())
        runs.append(replace(r, updates=len(g), time_s=t, updates_per_s=len(g) / t if t > 0 else math.nan,
                            mean_staleness=float(g["staleness"].mean())))
    return replace(result, runs=runs, updates=u)


def applied_rows(u: pd.DataFrame) -> pd.DataFrame:
    return u[u["applied"].astype(bool)]


def outcomes(result: RunResult) -> dict[str, int]:
    """How the runs ended: reached ε, crashed (NaN/exploded), not_reached (budget spent)."""
    return {"runs": len(result.runs),
            "reached": sum(r.updates_to_eps is not None for r in result.runs),
            "crashed": sum(r.crashed for r in result.runs),
            "not_reached": sum(r.not_reached for r in result.runs)}


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t interval of the finite values (NaN interval for fewer than 2)."""
    from scipy import stats

    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - half, m + half


def efficiency(result: RunResult, level: float = 0.95) -> pd.DataFrame:
    """Efficiency table of one result: each metric's mean over runs with its t-interval."""
    t = run_table(result)
    rows = []
    for col in ("updates_per_s", "mean_staleness", "p50_staleness", "p90_staleness", "p99_staleness",
                "updates_to_eps", "time_to_eps", "mean_lock_wait_s", "mean_retries", "dropped_fraction",
                "final_accuracy"):
        m, lo, hi = mean_ci(t[col].tolist(), level)
        rows.append({"metric": col, "mean": m, "ci_low": lo, "ci_high": hi,
                     "runs": int(t[col].notna().sum())})
    return pd.DataFrame(rows)


def workers(result: RunResult) -> list[int]:
    """Worker ids that carry updates (-1, "unknown", excluded)."""
    return sorted(int(w) for w in applied(result)["worker"].unique() if w >= 0)
