"""Fidelity: how far a predicted result (the simulator) is from a reference (a measurement).

``compare(predicted, reference)`` gives, pooled over workers and per worker,
the KS statistic and Wasserstein distance of the staleness distributions,
the relative error of mean staleness, the errors of its quantiles, and the
relative errors of updates/s, updates to ε and time to ε — each with a
bootstrap confidence interval over the runs (repeats) of both sides — and
where a cycle's time goes on each side (``simasgd.evaluation.phases``: per phase means
and quantiles, and the phase that explains most of the cycle-time error).

Runs, not updates, are the resampling unit: updates within a run are
correlated (they share the run's contention history), runs are independent.
A side with a single run carries no run-to-run variation, so the interval is
then reported as unknown (NaN) rather than as a falsely narrow one.

``floor``: how well the reference reproduces itself (:func:`repeatability`), the
error a simulator that ran exactly like the machine would still show against
it; a goal tighter than the floor cannot tell the simulator from the machine's
own run-to-run variation at this many runs (pyperf's "unstable" warning).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simasgd.evaluation import analysis
from simasgd.evaluation import phases as _phases
from simasgd.formats.atomicio import atomic_write_text
from simasgd.runs import metadata
from simasgd.runs.results import ResultsError, RunResult, read_versioned_json

if TYPE_CHECKING:
    from simasgd.evaluation.drift import Drift, Probe
    from simasgd.machines.profile import Calibrate
    from simasgd.spec.scenario import Scenario

FORMAT = "simasgd-fidelity"
FORMAT_VERSION = 1

# The targets the simulator is held to (absolute value of the point estimate).
GOALS: dict[str, float] = {
    "mean_staleness_rel_err": 0.05, "ks": 0.10, "updates_per_s_rel_err": 0.10, "updates_to_eps_rel_err": 0.15,
}
STALENESS_METRICS = ("ks", "wasserstein", "mean_staleness_rel_err", "p50_err", "p90_err", "p99_err")
RUN_METRICS = ("updates_per_s_rel_err", "updates_to_eps_rel_err", "time_to_eps_rel_err")
# Keys two results may differ in and still be compared: what is being modelled versus where it ran.
COMPARABLE_DIFFS = ("name", "repeats", "machine.preset", "sim.traits")


class FidelityError(ResultsError):
    pass


@dataclass
class Metric:
    value: float
    ci_low: float = math.nan
    ci_high: float = math.nan
    goal: float | None = None

    @property
    def ok(self) -> bool | None:
        """Within the goal (None: no goal, or the value is undefined)."""
        if self.goal is None or not math.isfinite(self.value):
            return None
        return abs(self.value) <= self.goal

    def to_json(self) -> dict[str, Any]:
        return {"value": _num(self.value), "ci_low": _num(self.ci_low), "ci_high": _num(self.ci_high),
                "goal": self.goal, "ok": self.ok}


@dataclass
class Side:
    backend: str
    scenario_hash: str
    runs: int
    label: str
    outcomes: dict[str, int]


@dataclass
class Fidelity:
    predicted: Side
    reference: Side
    overall: dict[str, Metric]
    per_worker: dict[int, dict[str, Metric]]
    scenario_diff: list[str] = field(default_factory=list)
    level: float = 0.95
    resamples: int = 1000
    info: dict[str, Any] = field(default_factory=dict)  # scenario name, folders, simasgd commit
    phases: _phases.PhaseComparison | None = None  # where a cycle's time goes, both sides
    floor: dict[str, float] = field(default_factory=dict)  # the reference's repeatability, per goal
    self_share: float | None = None  # the reference's runs that predict the others within every goal (self_prediction)

    @property
    def reproducible(self) -> dict[str, bool | None]:
        """Per goal: the reference meets it against itself (its floor is within the goal); None: unknown."""
        return {k: (self.floor[k] <= g if math.isfinite(self.floor.get(k, math.nan)) else None)
                for k, g in GOALS.items() if k in self.overall}

    @property
    def verdicts(self) -> dict[str, bool | None]:
        return {k: self.overall[k].ok for k in GOALS if k in self.overall}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "predicted": asdict(self.predicted), "reference": asdict(self.reference),
            "scenario_diff": self.scenario_diff, "goals": GOALS,
            "confidence_level": self.level, "bootstrap_resamples": self.resamples,
            "overall": {k: m.to_json() for k, m in self.overall.items()},
            "per_worker": {str(w): {k: m.to_json() for k, m in ms.items()} for w, ms in self.per_worker.items()},
            "metadata": self.info,
            "reference_floor": {k: _num(v) for k, v in self.floor.items()},
            "reference_self_prediction": self.self_share,
        } | ({"phases": self.phases.to_json()} if self.phases is not None else {})

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_text(path, json.dumps(_finite(self.to_json()), indent=2, allow_nan=False))


def load_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A fidelity.json, checked for format and version (``phases`` is absent from older files)."""
    return read_versioned_json(path, FORMAT, FORMAT_VERSION, "fidelity", FidelityError)


# --- comparability ----------------------------------------------------------------------------

def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def scenario_diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    fa, fb = flatten(a), flatten(b)
    return [(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def check_comparable(predicted: RunResult, reference: RunResult) -> list[str]:
    """The (allowed) differences between the two scenarios; raise naming the others."""
    from simasgd.spec.scenario import REMOVED

    diffs = scenario_diff(predicted.scenario, reference.scenario)
    # a result written before a key was removed records it: not a difference in what either run was asked
    bad = [d for d in diffs if d[0] not in COMPARABLE_DIFFS and d[0] not in REMOVED]
    if bad:
        what = "; ".join(f"{k} = {a!r} vs {b!r}" for k, a, b in bad)
        raise FidelityError(f"refusing to compare results of different scenarios "
                            f"({predicted.scenario_hash or '?'} vs {reference.scenario_hash or '?'}): {what} "
                            f"(only {', '.join(COMPARABLE_DIFFS)} and the backend may differ)")
    return [f"{k} = {a!r} vs {b!r}" for k, a, b in diffs]


# --- the comparison ---------------------------------------------------------------------------

def compare(predicted: RunResult, reference: RunResult, *, level: float = 0.95, resamples: int = 1000,
            seed: int = 0, labels: tuple[str, str] | None = None, check: bool = True) -> Fidelity:
    """Fidelity of ``predicted`` against ``reference`` (errors are predicted − reference), over the versions
    every run of both made (:func:`analysis.common_version`): a side that ran on past ε (a cpu run whose
    losses are evaluated after it) is not compared on updates the other never made."""
    diffs = check_comparable(predicted, reference) if check else []
    cut = analysis.common_version(predicted, reference)
    if cut is not None:
        predicted, reference = analysis.up_to_version(predicted, cut), analysis.up_to_version(reference, cut)
    rng = np.random.default_rng(seed)  # local, seeded: the intervals are reproducible
    wa = _weights(rng, len(predicted.runs), resamples)
    wb = _weights(rng, len(reference.runs), resamples)
    overall = _group(predicted, reference, None, wa, wb, level)
    per_worker = {w: _group(predicted, reference, w, wa, wb, level)
                  for w in analysis.workers(predicted) if w in analysis.workers(reference)}
    la, lb = labels or (predicted.backend, reference.backend)
    info = {"scenario": predicted.scenario.get("name"), "git_commit": metadata.git_commit(), "seed": seed,
            "up_to_version": cut}
    breakdown = _phases.breakdown(predicted, reference, (la, lb))
    return Fidelity(_side(predicted, la), _side(reference, lb), overall, per_worker, diffs, level, resamples, info,
                    breakdown, repeatability(reference, len(predicted.runs)),
                    self_prediction(reference, len(predicted.runs)))


def repeatability(r: RunResult, predicted_runs: int | None = None) -> dict[str, float]:
    """The error a prediction that behaved exactly like ``r``'s machine would show against ``r``, per goal.

    Each of ``r``'s n runs is compared, as a prediction, with the other n − 1 pooled (leave-one-out),
    with the same metrics as :func:`compare`. For a statistic that averages over runs (mean
    staleness, updates/s; the KS distance under sampling noise scales alike) the error of m runs
    against n independent ones has variance ∝ 1/m + 1/n, and a leave-one-out error ∝ 1 + 1/(n − 1);
    so the floor is the root mean square of the leave-one-out errors × √((1/m + 1/n) / (1 + 1/(n − 1))),
    m = ``predicted_runs`` (default n). Empty with fewer than 2 runs."""
    scaled = _scaled_leave_one_out(r, predicted_runs)
    if scaled is None:
        return {}
    out = {}
    for k in GOALS:
        e = scaled[k][np.isfinite(scaled[k])]
        out[k] = float(np.sqrt(np.mean(e ** 2))) if len(e) >= 2 else math.nan
    return out


def self_prediction(r: RunResult, predicted_runs: int | None = None) -> float | None:
    """The share of ``r``'s runs that, each taken as the prediction of the other runs pooled, meet every goal
    of :data:`GOALS` (a goal the run cannot be judged on, such as ε never reached, does not count against it).

    Each leave-one-out error is scaled as :func:`repeatability` scales them, to the error of
    ``predicted_runs`` (default n) runs against n. It is the *replica share*: a simulator that behaved exactly
    like the machine (its prediction drawn from the machine's own run distribution) would meet all four goals
    in about this share of comparisons; summed over a sweep's cells, the number of cells such a simulator
    would meet. It is not an upper bound: a predictor with less spread than the machine (one at the runs'
    true mean) scores higher in expectation. :func:`bound_of` is one. None with fewer than 2 runs."""
    return self_prediction_of(_run_hist(r, None), _run_scalars(r, None), predicted_runs)


def _scaled_leave_one_out(r: RunResult, predicted_runs: int | None) -> dict[str, np.ndarray] | None:
    """Per goal, each of ``r``'s n runs' error against the other n − 1 pooled, × √((1/m + 1/n) / (1 + 1/(n − 1)))
    with m = ``predicted_runs`` (default n) (:func:`repeatability`); None with fewer than 2 runs."""
    return scaled_leave_one_out(_run_hist(r, None), _run_scalars(r, None), predicted_runs)


def self_prediction_of(h: np.ndarray, s: dict[str, np.ndarray], predicted_runs: int | None = None) -> float | None:
    """:func:`self_prediction` of runs given as per-run staleness histograms ``h`` (runs × τ) and per-run
    scalars ``s`` (``updates_per_s``, ``updates_to_eps``, ``time_to_eps``): a reference kept without its
    rows (``simasgd.corpus``)."""
    scaled = scaled_leave_one_out(h, s, predicted_runs)
    if scaled is None:
        return None
    met = np.ones(h.shape[0], dtype=bool)
    for k, goal in GOALS.items():
        met &= ~(np.isfinite(scaled[k]) & (np.abs(scaled[k]) > goal))
    return float(met.mean())


# --- the ceiling: what the best predictor meets, above any predictor's expected score ------------

def meets(values: dict[str, np.ndarray]) -> np.ndarray:
    """Per row of metric values (as :func:`_metrics` gives them): no goal of :data:`GOALS` fails and at least
    one can be judged (a goal with an undefined value, such as ε never reached, judges nothing) — the rule
    ``simasgd corpus score`` judges a cell by."""
    shape = np.shape(next(iter(values.values())))
    fail, judged = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    for k, goal in GOALS.items():
        v = np.asarray(values[k], dtype=float)
        fin = np.isfinite(v)
        fail |= fin & (np.abs(np.where(fin, v, 0.0)) > goal)
        judged |= fin
    return judged & ~fail


def bound_of(h: np.ndarray, s: dict[str, np.ndarray]) -> float | None:
    """The ceiling of a cell: the probability that the best constant prediction — the machine's true mean —
    meets every goal against a reference of n runs, estimated from the runs themselves (per-run staleness
    histograms ``h`` (runs × τ) and scalars ``s``, as :func:`self_prediction_of` takes them). None with fewer
    than 2 runs.

    The math. The reference S pools n runs X₁, …, Xₙ drawn independently from the machine's distribution F;
    A(S) is the set of predictions that meet every goal against it. A predictor whose output q is independent
    of the reference's draw (the simulator: its randomness is not the machine's) meets every goal with
    probability E_q[P_F(q ∈ A(S))] ≤ U(F) = sup_q P_F(q ∈ A(S)): no predictor passes U in expectation, however
    it is built, and the best one is a constant. To first order each goal's error is linear in the runs'
    statistics, and S − μ is normal with covariance Σ/n (Σ: one run's); the goals' region K (every |error| ≤
    its goal, the KS distance a maximum of |CDF differences|) is convex and symmetric, so by Anderson's
    theorem the best constant is μ itself and U = P(Z ∈ K), Z ~ N(0, Σ/n).

    The estimate. Run i against the other n − 1 pooled differs by Xᵢ − X̄₋ᵢ, covariance Σ · n/(n − 1); scaled
    by √(n − 1)/n it has covariance Σ/n, the distribution of S − μ. So each run, taken as the prediction of
    the others with its errors × √(n − 1)/n, meets every goal with probability U, and the share of the runs
    that do is an unbiased estimate of it:

        Û = (1/n) Σᵢ 1[√(n − 1)/n · err(Xᵢ, X̄₋ᵢ) ∈ K].

    This is :func:`self_prediction_of` for a prediction of infinitely many runs (1/m → 0 in its scale
    √((1/m + 1/n)/(1 + 1/(n − 1)))): the replica share counts a prediction that scatters as m runs of the
    machine do, the ceiling one that does not scatter at all. Û averages n indicators of probability U, so
    its variance is at most U(1 − U), the variance of one cell's verdict for a predictor at the ceiling:
    :func:`count_spread` bounds the ceiling's standard error over a machine's cells and is the spread of a
    score that reaches it. ``tests/test_ceiling.py`` checks on constructed cells that a prediction at the true
    mean meets no more cells than Û in expectation, and more than the replica share."""
    n = h.shape[0]
    if n < 2:
        return None
    one, rest = np.eye(n), 1.0 - np.eye(n)
    loo = _metrics(one @ h, rest @ h, s, s, one, rest)
    scale = math.sqrt(n - 1) / n
    return float(meets({k: np.asarray(loo[k], dtype=float) * scale for k in GOALS}).mean())


def count_spread(shares: list[float]) -> float:
    """The standard deviation of the number of cells met by a predictor that meets cell c with probability
    ``shares[c]``, the cells independent: √Σ p(1 − p). A score within about twice this of a ceiling is not
    told from it by this many cells."""
    p = np.asarray(shares, dtype=float)
    return float(np.sqrt(np.sum(p * (1 - p)))) if p.size else 0.0


def point_metrics(ha: np.ndarray, sa: dict[str, np.ndarray], hb: np.ndarray,
                  sb: dict[str, np.ndarray]) -> dict[str, float]:
    """Every metric of :func:`compare`'s overall group, point estimates only, of runs given as per-run
    histograms and scalars (``a`` predicted, ``b`` reference; as :func:`self_prediction_of` takes them)."""
    ones_a, ones_b = np.ones((1, ha.shape[0])), np.ones((1, hb.shape[0]))
    return {k: float(v[0]) for k, v in _metrics(ones_a @ ha, ones_b @ hb, sa, sb, ones_a, ones_b).items()}


def run_stats(r: RunResult) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``r``'s per-run staleness histograms (runs × τ) and scalars, as :func:`point_metrics` takes them."""
    return _run_hist(r, None), _run_scalars(r, None)


def scaled_leave_one_out(h: np.ndarray, s: dict[str, np.ndarray],
                         predicted_runs: int | None) -> dict[str, np.ndarray] | None:
    """:func:`_scaled_leave_one_out` of per-run histograms ``h`` and scalars ``s``."""
    n = h.shape[0]
    if n < 2:
        return None
    m = predicted_runs or n
    one, rest = np.eye(n), 1.0 - np.eye(n)
    loo = _metrics(one @ h, rest @ h, s, s, one, rest)
    scale = math.sqrt((1 / m + 1 / n) / (1 + 1 / (n - 1)))
    return {k: np.asarray(loo[k], dtype=float) * scale for k in GOALS}


def _side(r: RunResult, label: str) -> Side:
    return Side(r.backend, r.scenario_hash, len(r.runs), label, analysis.outcomes(r))


def _weights(rng: np.random.Generator, runs: int, resamples: int) -> np.ndarray | None:
    """Bootstrap weights (resamples × runs): row i counts how often each run was drawn."""
    if runs < 2 or resamples < 1:
        return None
    return rng.multinomial(runs, np.full(runs, 1.0 / runs), size=resamples).astype(float)


def _group(a: RunResult, b: RunResult, worker: int | None, wa: np.ndarray | None, wb: np.ndarray | None,
           level: float) -> dict[str, Metric]:
    ha, hb = _run_hist(a, worker), _run_hist(b, worker)
    sa, sb = _run_scalars(a, worker), _run_scalars(b, worker)
    ones_a, ones_b = np.ones((1, ha.shape[0])), np.ones((1, hb.shape[0]))
    point = _metrics(ones_a @ ha, ones_b @ hb, sa, sb, ones_a, ones_b)
    boot = (_metrics(wa @ ha, wb @ hb, sa, sb, wa, wb) if wa is not None and wb is not None else None)
    if worker is not None:  # ε is reached by the run, not by a worker: those errors are pooled only
        point = {k: v for k, v in point.items() if "eps" not in k}
    out = {}
    for name, value in point.items():
        lo = hi = math.nan
        if boot is not None:
            finite = boot[name][np.isfinite(boot[name])]
            if len(finite) >= 0.9 * len(boot[name]):
                lo, hi = (float(x) for x in np.quantile(finite, [(1 - level) / 2, (1 + level) / 2]))
        out[name] = Metric(float(value[0]), lo, hi, GOALS.get(name))
    return out


def _run_hist(r: RunResult, worker: int | None) -> np.ndarray:
    per_run = analysis.run_counts(r, worker)
    k = max((len(c) for c in per_run.values()), default=1)
    return np.array([np.pad(c, (0, k - len(c))) for c in per_run.values()], dtype=float).reshape(len(per_run), k)


def _run_scalars(r: RunResult, worker: int | None) -> dict[str, np.ndarray]:
    t = analysis.run_table(r)
    if worker is None:
        rate = t["updates_per_s"].to_numpy(float)
    else:  # a worker's own update rate within each run
        u = analysis.applied(r)
        n = u[u["worker"] == worker].groupby("run").size()
        rate = np.array([n.get(run.run, 0) / run.time_s if run.time_s > 0 else math.nan for run in r.runs])
    return {"updates_per_s": rate, "updates_to_eps": t["updates_to_eps"].to_numpy(float),
            "time_to_eps": t["time_to_eps"].to_numpy(float)}


def _metrics(ha: np.ndarray, hb: np.ndarray, sa: dict[str, np.ndarray], sb: dict[str, np.ndarray],
             wa: np.ndarray, wb: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric for each row of pooled histograms / run weights (vectorised over resamples)."""
    k = max(ha.shape[1], hb.shape[1])
    ha, hb = np.pad(ha, ((0, 0), (0, k - ha.shape[1]))), np.pad(hb, ((0, 0), (0, k - hb.shape[1])))
    fa, fb = _cdf(ha), _cdf(hb)
    diff = np.abs(fa - fb)
    out = {"ks": diff.max(axis=1), "wasserstein": diff.sum(axis=1),
           "mean_staleness_rel_err": _rel(_hist_mean(ha), _hist_mean(hb))}
    for q in analysis.QUANTILES:
        out[f"p{q * 100:g}_err"] = _hist_quantile(fa, q) - _hist_quantile(fb, q)
    for name in ("updates_per_s", "updates_to_eps", "time_to_eps"):
        out[f"{name}_rel_err"] = _rel(_weighted_mean(sa[name], wa), _weighted_mean(sb[name], wb))
    return out


def _cdf(h: np.ndarray) -> np.ndarray:
    total = h.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.cumsum(h, axis=1) / total


def _hist_mean(h: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return h @ np.arange(h.shape[1]) / h.sum(axis=1)


def _hist_quantile(cdf: np.ndarray, q: float) -> np.ndarray:
    # Lower quantile (numpy "inverted_cdf"): the first k with F(k) >= q; a small tolerance for rounding.
    hit = cdf >= q - 1e-12
    return np.where(hit.any(axis=1), hit.argmax(axis=1), np.nan).astype(float)


def _weighted_mean(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mean over runs of the finite values (runs that did not reach ε have NaN and are left out)."""
    ok = np.isfinite(x)
    wx = w[:, ok]
    with np.errstate(invalid="ignore", divide="ignore"):
        return wx @ x[ok] / wx.sum(axis=1) if ok.any() else np.full(w.shape[0], np.nan)


def _rel(pred: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(pred − ref)/ref; 0 when both are 0, NaN when only the reference is 0 (undefined)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (pred - ref) / ref
    return np.where((pred == 0) & (ref == 0), 0.0, np.where(ref == 0, np.nan, r))


def _num(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def _finite(doc: Any) -> Any:
    """``doc`` with every non-finite float (in metadata, a side's figures) as null, as the metrics write it:
    JSON has no NaN, and a run that never reached ε leaves some (a Lopez cell's sweep row failed on one)."""
    if isinstance(doc, dict):
        return {k: _finite(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_finite(v) for v in doc]
    if isinstance(doc, float | np.floating):
        return _num(float(doc))
    return doc


# --- the compare workflow: run both backends, or load two folders -----------------------------

MEASURED = ("cpu", "cuda", "peer", "serial")


def roles(backends: list[str]) -> tuple[str, str]:
    """(predicted, reference) of two backends: the simulator predicts; otherwise the second is the reference."""
    if len(backends) != 2 or backends[0] == backends[1]:
        raise FidelityError(f"--backends: give two different backends, e.g. sim,cpu (got {','.join(backends)})")
    a, b = backends
    return (b, a) if b == "sim" else (a, b)


def _measures_host(name: str) -> bool:
    from simasgd.runs import backends as registry

    try:
        return registry.measures_host(name)
    except registry.BackendError:  # not a backend of this build (e.g. a label): measures nothing here
        return False


def traits_of(backends: list[str]) -> str | None:
    """The backend among ``backends`` that declares executor traits (the simulator does not): the executor the
    simulator models when it is compared with it; None where none does."""
    from simasgd.runs import backends as registry

    for b in backends:
        try:
            if registry.traits(b) is not None:
                return b
        except registry.BackendError:  # not a backend of this build (e.g. a label)
            continue
    return None


def sim_scenario(scenario: Scenario, backends: list[str], quick_calibration: bool = False,
                 calibrate: Calibrate | None = None) -> Scenario:
    """The scenario the simulator runs: with the executor traits of the backend it is compared with, where that
    one declares them (``[sim] traits``); against a backend that measures this host, on the calibrated preset
    ``this``."""
    whose = traits_of(backends)
    if whose is not None and whose != scenario.sim.traits:
        scenario = scenario.model_copy(update={"sim": scenario.sim.model_copy(update={"traits": whose})})
    if not any(_measures_host(b) for b in backends):
        return scenario
    from simasgd.machines.machine import is_gpu
    if is_gpu(scenario.machine):  # a GPU scenario (cuda): the calibrated GPU, `simasgd calibrate --gpu`
        return scenario.model_copy(update={"machine": scenario.machine.model_copy(update={"preset": "this-gpu"})})
    ensure_profile(scenario, quick=quick_calibration, calibrate=calibrate)
    return scenario.model_copy(update={"machine": scenario.machine.model_copy(update={"preset": "this"})})


def ensure_profile(scenario: Scenario | None = None, quick: bool = False,
                   also: list[Any] | None = None, calibrate: Calibrate | None = None) -> Path:
    """The calibrated profile of this machine; calibrate first (including the scenario's workload and the
    workloads in ``also``, e.g. the same model at every batch size a sweep runs) if there is none.

    ``calibrate(workloads, quick=, seed=, base_dir=) -> profile dict`` measures; by default the calibrator
    named by ``simasgd.machines.profile.CALIBRATOR`` (loaded by name, like a backend). ``simasgd compare`` passes
    its own.
    """
    from simasgd.machines import machine, profile

    path = machine.profile_path()
    if path.exists():
        if scenario is not None and scenario.workload.model == "torch":
            _add_torch_gradients(path, scenario, quick)
        return path
    try:
        cal = profile.calibrator()
    except profile.ProfileError as e:
        raise FidelityError(f"no calibrated profile at {path}, and {e}; "
                            f"run `simasgd calibrate --out {path}` or set SIMASGD_PROFILE") from None
    from simasgd.spec.scenario import WorkloadConfig

    defaults = cal.DEFAULT_WORKLOADS[:1] if quick else cal.DEFAULT_WORKLOADS
    workloads = [WorkloadConfig(**w) for w in defaults]
    for wl in ([scenario.workload] if scenario is not None else []) + list(also or []):
        if profile.workload_key(wl) not in map(profile.workload_key, workloads):
            workloads.append(wl)  # the gradient times the simulator will need most
    measure = calibrate or cal.calibrate
    doc = measure(workloads, quick=quick, seed=scenario.seed if scenario else 0,
                  base_dir=scenario.base_dir if scenario else None)
    return profile.write(doc, path)


def _add_torch_gradients(path: Path, scenario: Scenario, quick: bool) -> None:
    """A profile without the user's torch module: measure its gradient times and add them. Timed from
    Python in worker processes, they are far from what the profile's FLOP rate would derive."""
    from simasgd.machines import profile

    doc = profile.read(path).to_doc()
    key = profile.workload_key(scenario.workload)
    measure = getattr(profile.calibrator(), "gradient_times", None)
    if key in doc.get("gradient", {}) or measure is None:
        return
    doc.setdefault("gradient", {})[key] = measure(scenario.workload, scenario.seed, scenario.base_dir,
                                                  0.4 if quick else 4.0)
    profile.write(doc, path)


def run_and_compare(scenario: Scenario, backends: list[str], out: str | Path, *, repeats: int | None = None,
                    advance: Any = None, resamples: int = 1000, quick_calibration: bool = False,
                    calibrate: Calibrate | None = None, refresh: bool = False,
                    probe: Probe | None = None, placements: bool = True,
                    measured: tuple[RunResult, Drift | None] | None = None) -> tuple[Fidelity, dict[str, RunResult]]:
    """Run the scenario on both backends into ``out/<backend>/`` and compare them (predicted first).

    Where the simulator runs on the calibrated profile against this host, the gradient and the CPUs'
    placement are re-measured first (``simasgd.evaluation.drift``; ``probe``: by default the one it loads by name) and
    the measured side runs right after. With ``refresh``, a gradient drifted beyond ``drift.THRESHOLD`` is
    simulated at today's speed: on a copy of the profile, its gradient samples rescaled
    (``out/profile-refreshed.toml``; the profile itself is left as it is). ``metadata.drift`` records the
    drift and its verdict: model error or a stale calibration. With ``placements``, a simulated side of two or
    more workers on a calibrated profile whose probes saw a far placement is simulated there too, for its
    bands (:func:`simasgd.evaluation.prediction_band.simulate_far`, recorded in ``out/<backend>/``).

    ``measured``: the measured side already run, with the drift re-timed right before its first run (a sweep
    that takes the runs of several cells in turn); only the prediction runs here."""
    from simasgd.evaluation import drift, prediction_band
    from simasgd.runs import backends as registry

    pred, ref = roles(backends)
    for b in (pred, ref):
        registry.load(b)  # fail before running anything if a backend is missing
    out = Path(out)
    scenarios = {b: sim_scenario(scenario, backends, quick_calibration, calibrate) if b == "sim" else scenario
                 for b in (pred, ref)}
    results = {}
    if measured is None:
        found, fresh = _drift_check(scenarios, out, refresh, probe)
    else:
        results[ref] = measured[0]
        found, fresh = _refreshed(measured[1], refresh, out, scenarios)
    for b in ((ref, pred) if found is not None else (pred, ref)):  # the probe right before the measured runs
        if b in results:
            continue
        with drift.using_profile(fresh if b == "sim" else None):
            results[b] = registry.run(scenarios[b], b, repeats=repeats, out=out / b, advance=advance)
    if placements:  # on the profile the result read (a refreshed one's copy included), moved
        far = prediction_band.simulate_far(results[pred], lambda: registry.run(scenarios[pred], pred, repeats=repeats))
        if far is not None:
            prediction_band.record(out / pred, results[pred], prediction_band.inputs(results[pred])[1])
    fid = compare(results[pred], results[ref], resamples=resamples)
    fid.info["folders"] = {pred: str(out / pred), ref: str(out / ref)}
    if found is not None:
        drift.with_drift(fid, found)
    fid.save(out / "fidelity.json")
    return fid, {b: results[b] for b in (pred, ref)}


def _drift_check(scenarios: dict[str, Scenario], out: Path, refresh: bool,
                 probe: Probe | None) -> tuple[Drift | None, Path | None]:
    """The drift since calibration where the simulator runs on this machine's profile (preset ``this``), and
    the refreshed copy of the profile it is to run on instead (None: the profile as it is)."""
    from simasgd.evaluation import drift
    from simasgd.machines import machine

    sc = scenarios.get("sim")
    if sc is None or sc.machine.preset != "this" or not any(_measures_host(b) for b in scenarios):
        return None, None
    return _refreshed(drift.measure(sc, machine.profile_path(), probe), refresh, out, scenarios)


def _refreshed(found: Drift | None, refresh: bool, out: Path,
               scenarios: dict[str, Scenario]) -> tuple[Drift | None, Path | None]:
    """The drift, marked refreshed where ``refresh`` simulates it at today's speed, and the refreshed copy of
    the profile the simulator then runs on (None: the profile as it is)."""
    from dataclasses import replace

    from simasgd.evaluation import drift
    from simasgd.machines import machine

    if found is None or not (refresh and found.drifted):
        return found, None
    return (replace(found, refreshed=True),
            drift.write_refreshed(machine.profile_path(), scenarios["sim"], found.ratio, out))


def compare_folders(predicted: str | Path, reference: str | Path, out: str | Path | None = None,
                    resamples: int = 1000) -> tuple[Fidelity, dict[str, RunResult]]:
    """Compare two existing results folders (``predicted`` against ``reference``)."""
    a, b = RunResult.load(predicted), RunResult.load(reference)
    la, lb = _labels(Path(predicted), Path(reference), a, b)
    fid = compare(a, b, resamples=resamples, labels=(la, lb))
    fid.info["folders"] = {la: str(predicted), lb: str(reference)}
    if out is not None:
        fid.save(Path(out) / "fidelity.json")
    return fid, {la: a, lb: b}


def _labels(pa: Path, pb: Path, a: RunResult, b: RunResult) -> tuple[str, str]:
    if a.backend != b.backend:
        return a.backend, b.backend
    return (pa.resolve().name, pb.resolve().name) if pa.resolve().name != pb.resolve().name else ("A", "B")


def histogram_metrics(predicted: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """KS, Wasserstein and the mean staleness's relative error between two staleness histograms (counts at
    τ = 0, 1, …), for references kept only as histograms (``benchmarks/gpu_model_score.py``)."""
    a, b = np.asarray(predicted, float)[None], np.asarray(reference, float)[None]
    k = max(a.shape[1], b.shape[1])
    a, b = np.pad(a, ((0, 0), (0, k - a.shape[1]))), np.pad(b, ((0, 0), (0, k - b.shape[1])))
    diff = np.abs(_cdf(a) - _cdf(b))
    return {"ks": float(diff.max()), "wasserstein": float(diff.sum()),
            "mean_staleness_rel_err": float(_rel(_hist_mean(a), _hist_mean(b))[0])}
