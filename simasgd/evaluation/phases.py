"""Where a cycle's time goes: read, gradient, update and the time between cycles, per attempt.

From the phase boundaries of ``updates.parquet`` (docs/reference/results-format.md):

- ``read``     = t_grad_start − t_start   (read-side lock wait and the copy of the model)
- ``gradient`` = t_grad_end − t_grad_start
- ``update``   = t_write − t_grad_end     (update-side lock wait, CAS retries or barrier, the write)
- ``between``  = the same worker's next t_start − t_write (recording, loop overhead, preemption)
- ``cycle``    = the same worker's next t_start − t_start = read + gradient + update + between

Within a run and worker, attempts are ordered by t_start; the first ``warmup`` share of each
(run, worker)'s attempts is discarded. Comparing two results, the difference of mean cycle
times is exactly the sum of the differences of the four phase means on the attempts where all
are defined, so :func:`explain` can name the phase that accounts for most of it — and, since a
worker's updates/s is 1/cycle, for most of the updates/s error (≈ −Δc/c).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from simasgd.runs.results import RunResult

PHASES = ("read", "gradient", "update", "between")  # they partition the cycle
ALL_PHASES = (*PHASES, "cycle")
STATS = ("n", "mean", "median", "p90", "p99")
BOUNDARIES = ("t_start", "t_grad_start", "t_grad_end", "t_write")
WARMUP = 0.05

Side: TypeAlias = RunResult | pd.DataFrame  # a result, or its updates table


def cycle_table(updates: pd.DataFrame, warmup: float = WARMUP) -> pd.DataFrame:
    """Wide: one row per (run, worker, attempt) with every phase in seconds (NaN where unknown), and the
    attempt's ``start`` (its ``t_start``)."""
    n = len(updates)
    col = {c: (updates[c].to_numpy(np.float64) if c in updates.columns else np.full(n, math.nan)) for c in BOUNDARIES}
    run, worker = updates["run"].to_numpy(), updates["worker"].to_numpy()
    # attempts in order of t_start (then t_write; unknown starts last) within each run and worker
    order = np.lexsort((col["t_write"], col["t_start"], worker, run))
    run, worker = run[order], worker[order]
    t = {c: v[order] for c, v in col.items()}
    first = np.ones(n, dtype=bool)
    first[1:] = (run[1:] != run[:-1]) | (worker[1:] != worker[:-1])
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, n))
    attempt = np.arange(n) - np.repeat(starts, sizes)
    nxt = np.append(t["t_start"][1:], math.nan)
    nxt[np.flatnonzero(np.append(first[1:], True))] = math.nan  # a group's last attempt has no next start
    out = pd.DataFrame({
        "run": run, "worker": worker, "attempt": attempt, "start": t["t_start"],
        "read": t["t_grad_start"] - t["t_start"], "gradient": t["t_grad_end"] - t["t_grad_start"],
        "update": t["t_write"] - t["t_grad_end"], "between": nxt - t["t_write"], "cycle": nxt - t["t_start"],
    })
    keep = attempt >= np.floor(warmup * np.repeat(sizes, sizes))
    return out[keep].reset_index(drop=True)


def gradient_concurrency(updates: pd.DataFrame) -> dict[int, float]:
    """Per run: the time-average number of workers inside a gradient at once, from the first gradient's
    start to the last one's end. Two workers on two free CPUs keep it near 2 × their gradient share of
    the cycle; a run whose workers take turns (their CPUs multiplexed by the host, or by the OS on a
    shared CPU) shows it halved, whatever the phases' own lengths say."""
    return concurrency(updates, "t_grad_start", "t_grad_end")


def update_concurrency(updates: pd.DataFrame) -> dict[int, float]:
    """Per run: the time-average number of workers inside their update phase at once (gradient end to
    write, lock waits included). In 2-thread rounds whose workers take turns it rises several-fold,
    every algorithm alike: each worker's update waits out the other's gradient."""
    return concurrency(updates, "t_grad_end", "t_write", span_from="t_grad_start")


def both_updating(updates: pd.DataFrame) -> dict[int, float]:
    """Per run: the share of its time (first gradient start to last write) with two or more workers inside
    their update phase at once. It tells apart what :func:`update_concurrency` cannot: long update phases
    side by side (as HOGWILD!'s colliding writes would give) or in turn (near 0)."""
    out: dict[int, float] = {}
    for run, s, e, span in _intervals(updates, "t_grad_end", "t_write", "t_grad_start"):
        t = np.concatenate([s, e])
        step = np.concatenate([np.ones(len(s)), -np.ones(len(e))])
        order = np.lexsort((step, t))  # at equal times, ends (-1) before starts: touching is not overlapping
        t, count = t[order], np.cumsum(step[order])
        out[run] = float(np.diff(t)[count[:-1] >= 2].sum() / span)
    return out


def concurrency(updates: pd.DataFrame, start: str, end: str, span_from: str | None = None) -> dict[int, float]:
    """Per run: the time-average number of workers between their ``start`` and ``end`` times at once
    (∫ count dt = Σ lengths), over the run from the first ``span_from`` (default ``start``) to the last end."""
    return {run: float((e - s).sum() / span) for run, s, e, span in _intervals(updates, start, end, span_from)}


def _intervals(updates: pd.DataFrame, start: str, end: str,
               span_from: str | None) -> Iterator[tuple[int, np.ndarray, np.ndarray, float]]:
    """Per run with a positive span: the finite ``start``/``end`` intervals and the run's span, from the
    first ``span_from`` (default ``start``) to the last end. Nothing without the columns."""
    first = span_from or start
    if not {start, end, first} <= set(updates.columns):
        return
    for run, g in updates.groupby("run", sort=True):
        s, e, f = (g[c].to_numpy(np.float64) for c in (start, end, first))
        ok = np.isfinite(s) & np.isfinite(e) & np.isfinite(f) & (e >= s)
        s, e, f = s[ok], e[ok], f[ok]
        if len(s) and e.max() > f.min():
            yield int(run), s, e, float(e.max() - f.min())


def absence(updates: pd.DataFrame, factor: float = 2.0) -> dict[int, float]:
    """Per run: the share of its time a worker spent in cycles more than ``factor`` × its median cycle
    (from one attempt's start to its next), mean over workers. With no more workers than CPUs nothing
    in the algorithms holds a worker that long, so such a cycle is the host taking its CPU away (on a
    small VM, milliseconds at a time, far longer than the short pauses calibration sees); each gap
    gives the other worker a run of τ = 0. With more workers than CPUs it includes the OS's time-sharing, which the
    simulator models: compare the two sides."""
    out: dict[int, float] = {}
    if not {"t_start", "worker"} <= set(updates.columns):
        return out
    for run, g in updates.groupby("run", sort=True):
        shares = []
        for _, w in g.groupby("worker", sort=True):
            t = np.sort(w["t_start"].to_numpy(np.float64))
            t = t[np.isfinite(t)]
            if len(t) < 3 or t[-1] <= t[0]:
                continue
            cyc = np.diff(t)
            shares.append(float(cyc[cyc > factor * np.median(cyc)].sum() / (t[-1] - t[0])))
        if shares:
            out[int(run)] = float(np.mean(shares))
    return out


HOST_AWAY = 0.05  # measured workers away this much more of the time than simulated: the host, not the model


def mean_absence(updates: pd.DataFrame) -> float:
    """:func:`absence` averaged over runs; nan without the columns."""
    vals = list(absence(updates).values())
    return float(np.mean(vals)) if vals else math.nan


def host_away(predicted: pd.DataFrame, reference: pd.DataFrame, workers: int, cpus: int) -> float | None:
    """How much more of the time the reference's workers were away than the predicted ones (points), when
    that exceeds :data:`HOST_AWAY` with no more workers than CPUs: the host took their CPUs more than
    the simulated workers lost theirs (each gap gives the other workers a run of τ = 0). None otherwise."""
    if workers > cpus:  # with more workers than CPUs, time-sharing is in both sides' absences
        return None
    gap = mean_absence(reference) - mean_absence(predicted)
    return gap if gap > HOST_AWAY else None  # False for nan


TOOK_TURNS = 0.75  # a measured run with fewer gradients at once than this share of the simulated mean


def took_turns(predicted: pd.DataFrame, reference: pd.DataFrame, workers: int, cpus: int) -> float | None:
    """The lowest of the reference's runs' :func:`gradient_concurrency` over the prediction's mean, when it is
    below :data:`TOOK_TURNS` with 2+ workers and no more workers than CPUs: by the guest's account every
    worker held its CPU, yet they computed in turn (the host ran both CPUs on one: such runs at
    0.34–0.77 of capacity, all algorithms alike). None otherwise."""
    if not 2 <= workers <= cpus:
        return None
    pred = list(gradient_concurrency(predicted).values())
    ref = list(gradient_concurrency(reference).values())
    if not pred or not ref or not np.mean(pred) > 0:
        return None
    low = float(min(ref) / np.mean(pred))
    return low if low < TOOK_TURNS else None


def phase_frame(updates: pd.DataFrame, warmup: float = WARMUP) -> pd.DataFrame:
    """Long: one row per (run, worker, attempt, phase) with ``seconds``; undefined phases left out.
    ``phase`` is an ordered categorical in cycle order."""
    return _long(cycle_table(updates, warmup))


def _long(wide: pd.DataFrame) -> pd.DataFrame:
    k, n = len(ALL_PHASES), len(wide)
    long = pd.DataFrame({c: np.tile(wide[c].to_numpy(), k) for c in ("run", "worker", "attempt")})
    long["phase"] = pd.Categorical.from_codes(np.repeat(np.arange(k), n), categories=list(ALL_PHASES), ordered=True)
    long["seconds"] = wide[list(ALL_PHASES)].to_numpy().T.reshape(-1)
    return long[np.isfinite(long["seconds"].to_numpy())].reset_index(drop=True)


@dataclass(frozen=True)
class Cycles:
    """One side's cycle table (wide) and phase frame (long), computed once and shared by the comparisons."""

    wide: pd.DataFrame
    long: pd.DataFrame

    @classmethod
    def of(cls, x: Side | Cycles, warmup: float = WARMUP) -> Cycles:
        if isinstance(x, Cycles):
            return x
        wide = cycle_table(x.updates if isinstance(x, RunResult) else x, warmup)
        return cls(wide, _long(wide))


def has_phases(x: Side | Cycles, warmup: float = WARMUP) -> bool:
    """Whether any attempt has every phase defined (old results and imports have no boundaries)."""
    return bool(len(_complete(Cycles.of(x, warmup).wide)))


def _complete(wide: pd.DataFrame) -> pd.DataFrame:
    return wide[np.isfinite(wide[list(ALL_PHASES)]).all(axis=1)]


def phase_stats(frame: pd.DataFrame, by_worker: bool = False) -> pd.DataFrame:
    """Per phase (and worker): n, mean, median, p90, p99 in seconds; phases in cycle order."""
    keys = ["worker", "phase"] if by_worker else ["phase"]
    g = frame.groupby(keys, sort=False, observed=True)["seconds"]
    s = pd.DataFrame({"n": g.size(), "mean": g.mean(), "median": g.median(),
                      "p90": g.quantile(0.90), "p99": g.quantile(0.99)}).reset_index()
    s["n"] = s["n"].astype("int64")
    s["phase"] = pd.Categorical(s["phase"].astype(str), categories=list(ALL_PHASES), ordered=True)
    s = s.sort_values(keys).reset_index(drop=True)
    s["phase"] = s["phase"].astype(str)
    return s


def _labels(labels: tuple[str, str]) -> tuple[str, str]:
    la, lb = labels
    return (f"{la} (a)", f"{lb} (b)") if la == lb else (la, lb)


def _rel(a: Any, b: Any) -> Any:
    """(a − b)/b; 0 when both are 0, NaN when only b is."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((a == 0) & (b == 0), 0.0, (a - b) / b)


def compare_phases(a: Side | Cycles, b: Side | Cycles, labels: tuple[str, str] = ("sim", "cpu"),
                   warmup: float = WARMUP) -> pd.DataFrame:
    """Index phase; columns ``"<label> <stat>"`` for both sides, then mean/median rel err (a vs b)."""
    la, lb = _labels(labels)
    sa = phase_stats(Cycles.of(a, warmup).long).set_index("phase")
    sb = phase_stats(Cycles.of(b, warmup).long).set_index("phase")
    t = pd.DataFrame(index=pd.Index(list(ALL_PHASES), name="phase"))
    for label, s in ((la, sa), (lb, sb)):
        for stat in STATS:
            t[f"{label} {stat}"] = s[stat].reindex(t.index).fillna(0 if stat == "n" else math.nan)
    t[[f"{la} n", f"{lb} n"]] = t[[f"{la} n", f"{lb} n"]].astype("int64")
    t["mean_rel_err"] = _rel(t[f"{la} mean"], t[f"{lb} mean"])
    t["median_rel_err"] = _rel(t[f"{la} median"], t[f"{lb} median"])
    return t


def compare_by_worker(a: Side | Cycles, b: Side | Cycles, labels: tuple[str, str] = ("sim", "cpu"),
                      warmup: float = WARMUP) -> pd.DataFrame:
    """Long: worker, phase, ``"<label> mean"`` of both sides (seconds) and mean_rel_err."""
    la, lb = _labels(labels)
    ma = phase_stats(Cycles.of(a, warmup).long, by_worker=True).set_index(["worker", "phase"])["mean"]
    mb = phase_stats(Cycles.of(b, warmup).long, by_worker=True).set_index(["worker", "phase"])["mean"]
    t = pd.concat({f"{la} mean": ma, f"{lb} mean": mb}, axis=1).reset_index()
    t["phase"] = pd.Categorical(t["phase"], categories=ALL_PHASES, ordered=True)
    t = t.sort_values(["worker", "phase"]).reset_index(drop=True)
    t["phase"] = t["phase"].astype(str)
    t["mean_rel_err"] = _rel(t[f"{la} mean"], t[f"{lb} mean"])
    return t


@dataclass
class Explanation:
    """Δ = a − b of mean phase times (seconds) on the attempts with every phase defined."""

    phase: str            # the phase with the largest |Δ|
    delta_s: float        # its Δ
    cycle_delta_s: float  # Δc = Σ Δ over PHASES
    share: float          # delta_s / cycle_delta_s (NaN when Δc = 0)
    deltas_s: dict[str, float]
    cycle_mean_s: tuple[float, float]

    @property
    def cycle_rel_err(self) -> float:
        """Δc / c of the reference; the updates/s error is about minus this."""
        ref = self.cycle_mean_s[1]
        return self.cycle_delta_s / ref if ref > 0 else math.nan

    def sentence(self) -> str:
        share = f"{self.share:.0%}" if math.isfinite(self.share) else "n/a"
        return (f"phase explaining most of the cycle-time error: {self.phase} "
                f"(Δ = {_us(self.delta_s, '+')} µs of {_us(self.cycle_delta_s, '+')} µs, {share})")

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "delta_s": _num(self.delta_s), "cycle_delta_s": _num(self.cycle_delta_s),
                "share": _num(self.share), "deltas_s": {k: _num(v) for k, v in self.deltas_s.items()},
                "cycle_mean_s": [_num(x) for x in self.cycle_mean_s], "cycle_rel_err": _num(self.cycle_rel_err)}


def explain(a: Side | Cycles, b: Side | Cycles, warmup: float = WARMUP) -> Explanation | None:
    """The phase whose mean-time difference explains most of the mean-cycle difference (None: no phases)."""
    wa, wb = _complete(Cycles.of(a, warmup).wide), _complete(Cycles.of(b, warmup).wide)
    if wa.empty or wb.empty:
        return None
    d = wa[list(ALL_PHASES)].mean() - wb[list(ALL_PHASES)].mean()
    phase = max(PHASES, key=lambda p: abs(d[p]))
    dc = float(d["cycle"])
    share = float(d[phase]) / dc if dc != 0 else math.nan
    return Explanation(phase, float(d[phase]), dc, share, {p: float(d[p]) for p in ALL_PHASES},
                       (float(wa["cycle"].mean()), float(wb["cycle"].mean())))


@dataclass
class PhaseComparison:
    """Everything compare reports about phases: the table, per worker, the explaining phase."""

    labels: tuple[str, str]
    table: pd.DataFrame
    per_worker: pd.DataFrame
    explanation: Explanation | None
    missing: list[str]  # labels of the sides without phase boundaries
    warmup: float = WARMUP

    @property
    def available(self) -> bool:
        return not self.missing

    def unavailable_line(self) -> str:
        return (f"phase breakdown: not available — {' and '.join(self.missing)} "
                f"{'has' if len(self.missing) == 1 else 'have'} no phase columns (t_start, t_grad_start, t_grad_end)")

    def rows(self) -> list[dict[str, str]]:
        """Display rows (µs): phase, a mean, b mean, err, a p90, b p90, a p99, b p99."""
        la, lb = self.labels
        out = []
        for phase, r in self.table.iterrows():
            out.append({"phase": str(phase), f"{la} mean": _us(r[f"{la} mean"]), f"{lb} mean": _us(r[f"{lb} mean"]),
                        "err": _pct(r["mean_rel_err"]), f"{la} p90": _us(r[f"{la} p90"]),
                        f"{lb} p90": _us(r[f"{lb} p90"]), f"{la} p99": _us(r[f"{la} p99"]),
                        f"{lb} p99": _us(r[f"{lb} p99"])})
        return out

    def worker_rows(self) -> list[dict[str, str]]:
        """One row per worker: per phase ``a / b (err)`` of the means, µs."""
        la, lb = self.labels
        out = []
        for w, g in self.per_worker.groupby("worker", sort=True):
            row = {"worker": str(w)}
            for phase, va, vb, err in zip(g["phase"], g[f"{la} mean"], g[f"{lb} mean"], g["mean_rel_err"],
                                          strict=True):
                row[phase] = f"{_us(va)} / {_us(vb)} ({_pct(err)})"
            out.append(row)
        return out

    def markdown(self) -> str:
        if not self.available:
            return f"## Where a cycle's time goes\n\n{self.unavailable_line()}\n"
        la, lb = self.labels
        rows = self.rows()
        head = list(rows[0])
        lines = ["## Where a cycle's time goes", "",
                 f"Per phase, µs (first {self.warmup:.0%} of each worker's attempts discarded); err = mean rel err "
                 f"of {la} against {lb}.", "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        lines += ["| " + " | ".join(r[h] for h in head) + " |" for r in rows]
        if self.explanation is not None:
            lines += ["", self.explanation.sentence() + "."]
        wrows = self.worker_rows()
        if wrows:
            phases = [p for p in ALL_PHASES if any(p in r for r in wrows)]
            lines += ["", f"### Per worker: mean µs, {la} / {lb} (err)", "",
                      "| worker | " + " | ".join(phases) + " |", "|---" * (len(phases) + 1) + "|"]
            lines += ["| " + " | ".join([r["worker"]] + [r.get(p, "n/a") for p in phases]) + " |" for r in wrows]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        la, lb = self.labels
        def stat(p: str, label: str, s: str) -> float | int | None:
            v = self.table.loc[p, f"{label} {s}"]
            return int(v) if s == "n" else _num(v)

        sides = {role: {"label": label, "stats": {p: {s: stat(p, label, s) for s in STATS}
                                                  for p in self.table.index}}
                 for role, label in (("predicted", la), ("reference", lb))}
        per_worker: dict[str, dict[str, dict[str, float | None]]] = {}
        for r in self.per_worker.itertuples(index=False):
            per_worker.setdefault(str(r[0]), {})[str(r[1])] = {
                "predicted_mean": _num(r[2]), "reference_mean": _num(r[3]), "mean_rel_err": _num(r[4])}
        return {"unit": "s", "warmup": self.warmup, "available": self.available, "missing": self.missing,
                "sides": sides,
                "errors": {p: {"mean_rel_err": _num(self.table.loc[p, "mean_rel_err"]),
                               "median_rel_err": _num(self.table.loc[p, "median_rel_err"])} for p in self.table.index},
                "explain": self.explanation.to_json() if self.explanation is not None else None,
                "per_worker": per_worker}


def breakdown(a: Side | Cycles, b: Side | Cycles, labels: tuple[str, str] = ("sim", "cpu"),
              warmup: float = WARMUP) -> PhaseComparison:
    """The phase comparison of ``a`` against ``b`` (errors are a − b, relative to b)."""
    la, lb = _labels(labels)
    a, b = Cycles.of(a, warmup), Cycles.of(b, warmup)
    missing = [lab for lab, x in ((la, a), (lb, b)) if not has_phases(x, warmup)]
    return PhaseComparison((la, lb), compare_phases(a, b, (la, lb), warmup), compare_by_worker(a, b, (la, lb), warmup),
                           None if missing else explain(a, b, warmup), missing, warmup)


def _us(v: Any, sign: str = "") -> str:
    """Seconds as microseconds, one decimal."""
    v = float(v)
    return f"{v * 1e6:{sign}.1f}" if math.isfinite(v) else "n/a"


def _pct(v: Any) -> str:
    v = float(v)
    if not math.isfinite(v):
        return "n/a"
    return f"{0.0 if abs(v) < 5e-4 else v:+.1%}"  # no "-0.0%" from rounding noise


def _num(v: Any) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None
