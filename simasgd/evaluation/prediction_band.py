"""Prediction bands: where a further run's metric is expected to fall, as a central 90% interval.

The metrics are a run's mean staleness τ̄, its updates/s, its updates to ε and its time to ε
(:data:`METRICS`). A result with R runs gives, per metric, the band of a *predictive* distribution: that of
one more run of the same scenario, on the same host.

The model, on the log scale (every metric is positive; a metric with a zero among its runs, τ̄ of a lone
worker, is taken on its own scale and the host term below is relative to the runs' mean there)::

    log x_new = μ + e + h,   e ~ N(0, σ_sim²),   h ~ N(0, σ_host²)  (time-based metrics only)

- ``e``: the simulator's own run-to-run spread: its runs differ by their timing draws and seeds. μ and σ_sim
  are estimated from the R runs (mean and sample standard deviation of the logs, R − 1 degrees of freedom).
- ``h``: the host's noise, a factor on the whole run: the speed of the host during a run against the speed
  the calibration measured. It multiplies updates/s and divides the time to ε; τ̄ and the updates to ε are
  ratios of timings and do not move with a factor common to every timing, so they carry no host term.
  σ_host is calibrated, never fitted to measured runs (:class:`HostNoise`): from the profile's gradient
  samples (:func:`calibration_spread`) or, where there are enough of them, from drift probes — the gradient
  re-timed right before measured runs (:func:`drift_spread`).

A third term, ``m ~ N(0, σ_model²)`` on every metric, is the model's own error: what separates the simulator
from a machine beyond both spreads above (a mechanism it lacks, a profile key that does not carry). It is
fitted on machines other than the one predicted (:func:`fit_model_error`: the least σ_model whose bands hold
the level of their measured runs), so a corpus machine's bands never learn from its own runs. The simulator
misses some algorithms more than others, and an algorithm by another measure where its threads outnumber the
CPUs (the OS time-shares them) than where each has a CPU (the rwlock more, mutex less): σ_model is fitted per
algorithm and per those two regimes where the cells allow (:class:`ModelError`).

The band is μ ± t · √V with V = σ_sim²·(1 + 1/R) + σ_host² + σ_model², back-transformed. With R small, σ_sim is
itself uncertain, so the quantile is Student's t, with the Welch–Satterthwaite degrees of freedom
df = V² / ((σ_sim²·(1 + 1/R))² / (R − 1)) (σ_host and σ_model are taken as known: df → ∞ and t → z when the
simulator's runs agree). For normal (log-normal) runs this interval holds a further run 90% of the time whatever R ≥ 2
is; empirical quantiles of R runs cannot (R = 3 runs span a further run only (R − 1)/(R + 1) = 50% of the
time). The price at small R is width: at R = 3 the t quantile with 2 degrees of freedom is 2.92 against
z = 1.645. With fewer than 2 runs there is no spread to estimate and no band.

Where the result has no calibrated host (a preset machine, an older result without its profile) the band is
the simulator's spread alone, and :attr:`HostNoise.source` / :func:`describe` say so.

A host that moves the CPUs between placements (:mod:`simasgd.evaluation.placement`) makes a run of two or more
workers one of two kinds. With the simulator's runs in each placement and the chance of the far one,
:func:`mixture` gives the central interval of the mixture of the two predictive distributions above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from scipy import special

if TYPE_CHECKING:
    from simasgd.evaluation.placement import Placement
    from simasgd.machines.profile_model import Profile
    from simasgd.runs.results import RunResult

LEVEL = 0.90
METRICS: tuple[str, ...] = ("mean_staleness", "updates_per_s", "updates_to_eps", "time_to_eps")
# Metrics a factor common to every timing of a run scales (updates/s by F, time to ε by 1/F).
TIME_BASED = frozenset({"updates_per_s", "time_to_eps"})
LABELS: dict[str, str] = {"mean_staleness": "τ̄", "updates_per_s": "updates/s", "updates_to_eps": "updates to ε",
                          "time_to_eps": "time to ε"}
# The gradient's time-ordered samples in a profile are cut into this many consecutive blocks: a block is a
# stretch of the calibration's time at one host speed, as a run is.
BLOCKS = 8
MIN_BLOCK_SAMPLES = 10
# Permutations of a gradient's samples that give the spread of the block medians sampling alone makes.
PERMUTATIONS = 200
# Drift probes needed before their spread stands for the host's (fewer: the profile's samples).
MIN_PROBES = 5


@dataclass(frozen=True)
class HostNoise:
    """The host's run-level noise: ``sigma`` is the standard deviation of the log of a run's speed factor;
    ``source`` says what it was calibrated from; ``samples`` how many independent figures went into it."""

    sigma: float
    source: str
    samples: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"sigma_log": self.sigma, "source": self.source, "samples": self.samples}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> HostNoise:
        return cls(float(d["sigma_log"]), str(d.get("source", "")), int(d.get("samples", 0)))


Sharing = Literal["time_shared", "cpu_each"]  # threads outnumber the CPUs (the OS time-shares them), or not


def sharing_of(shared: bool) -> Sharing:
    return "time_shared" if shared else "cpu_each"


@dataclass(frozen=True)
class ModelError:
    """The model's own error: per metric of :data:`METRICS` the σ of a factor between the simulator's runs and a
    machine's beyond their spreads (log scale; relative to the runs' mean on a linear one), fitted on
    ``cells`` cells of the machines ``source`` names (:func:`fit_model_error`): ``sigma`` over every algorithm,
    ``by_algorithm`` each algorithm's own where it had cells enough (the simulator misses some algorithms more
    than others), and ``by_sharing`` an algorithm's own in each regime (:data:`Sharing`) where that had cells
    enough (the simulator misses an algorithm by another measure where the OS time-shares its threads). A result
    takes the narrowest that exists: its algorithm's in its regime, else its algorithm's, else ``sigma``."""

    sigma: Mapping[str, float]
    source: str
    cells: int = 0
    by_algorithm: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    by_sharing: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)

    def of(self, metric: str, algorithm: str | None = None, shared: bool | None = None) -> float:
        return float(self._own(metric, algorithm, shared).get(metric, 0.0))

    def regime(self, algorithm: str, shared: bool | None) -> Mapping[str, float] | None:
        """``algorithm``'s own σ in its regime (None: not fitted, or the regime not known)."""
        return None if shared is None else self.by_sharing.get(algorithm, {}).get(sharing_of(shared))

    def _own(self, metric: str, algorithm: str | None, shared: bool | None) -> Mapping[str, float]:
        if algorithm is None:
            return self.sigma
        regime = self.regime(algorithm, shared)
        if regime is not None and metric in regime:
            return regime
        own = self.by_algorithm.get(algorithm)
        return own if own is not None and metric in own else self.sigma

    def text(self, algorithm: str | None = None, shared: bool | None = None) -> str:
        """The σ a result of ``algorithm`` takes, with its threads time-shared (``shared``) or a CPU each (None:
        those over every algorithm, or over both regimes)."""
        sigma = {m: self.of(m, algorithm, shared) for m in METRICS if m in self.sigma}
        whose = ""
        if algorithm is not None and algorithm in self.by_algorithm:
            where = ", threads time-shared" if shared else ", a CPU each"
            whose = f" ({algorithm}'s{where if self.regime(algorithm, shared) else ''})"
        return ", ".join(f"{LABELS[m]} {v:.3f}" for m, v in sigma.items()) + whose

    def to_json(self) -> dict[str, Any]:
        return {"sigma_log": _in_order(self.sigma), "source": self.source, "cells": self.cells,
                "by_algorithm": {a: _in_order(s) for a, s in sorted(self.by_algorithm.items())},
                "by_sharing": {a: {r: _in_order(s) for r, s in sorted(regimes.items())}
                               for a, regimes in sorted(self.by_sharing.items())}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelError:
        return cls(_floats(d["sigma_log"]), str(d.get("source", "")), int(d.get("cells", 0)),
                   {str(a): _floats(s) for a, s in dict(d.get("by_algorithm") or {}).items()},
                   {str(a): {str(r): _floats(s) for r, s in dict(regimes).items()}
                    for a, regimes in dict(d.get("by_sharing") or {}).items()})


def _in_order(sigma: Mapping[str, float]) -> dict[str, float]:
    return {m: sigma[m] for m in METRICS if m in sigma}


def _floats(d: Mapping[str, Any]) -> dict[str, float]:
    return {str(m): float(v) for m, v in dict(d).items()}


@dataclass(frozen=True)
class Band:
    """A metric's central band: ``low`` ≤ ``center`` ≤ ``high``, from ``runs`` runs; ``scale`` is the scale it
    was built on, ``df`` the t quantile's degrees of freedom (inf: the normal's), ``host`` whether the host's
    noise is in it."""

    metric: str
    low: float
    high: float
    center: float
    runs: int
    scale: Literal["log", "linear"]
    df: float
    host: bool
    level: float = LEVEL
    other: float = 0.0  # the weight of the host's other placements mixed into it (mixture); 0: one placement
    model: float = 0.0  # the model error's σ in it (ModelError); 0: none

    def contains(self, x: float) -> bool:
        # a relative tolerance: runs that all agree give a band of one point, which their own values must meet
        tol = 1e-9 * max(abs(self.low), abs(self.high), 1e-300)
        return bool(self.low - tol <= x <= self.high + tol)

    @property
    def width(self) -> float:
        """On the band's own scale: log(high / low) for a log band, high − low otherwise."""
        return math.log(self.high / self.low) if self.scale == "log" else self.high - self.low

    def text(self) -> str:
        return f"{_num(self.center)} [{_num(self.low)}, {_num(self.high)}]"

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "center": self.center, "runs": self.runs, "scale": self.scale,
                "df": None if math.isinf(self.df) else self.df, "host": self.host, "level": self.level,
                **({"other_placement": self.other} if self.other else {}),
                **({"model_sigma": self.model} if self.model else {})}


def predictive(metric: str, values: Iterable[float], host_sigma: float = 0.0, level: float = LEVEL,
               model_sigma: float = 0.0) -> Band | None:
    """The band of one more run of ``metric`` given ``values`` (one per run; NaN, a run that never reached ε,
    left out); ``host_sigma`` is the host's σ (applied to :data:`TIME_BASED` metrics only), ``model_sigma`` the
    model error's (every metric). None with fewer than 2 finite values."""
    c = _component(metric, values, host_sigma, model_sigma=model_sigma)
    if c is None:
        return None
    q = float(special.ndtri((1 + level) / 2)) if math.isinf(c.df) else float(special.stdtrit(c.df, (1 + level) / 2))
    back = math.exp if c.log else float
    return Band(metric, back(c.mu - q * c.sd), back(c.mu + q * c.sd), back(c.mu), c.runs, "log" if c.log else "linear",
                c.df, c.host, level, model=model_sigma)


def mixture(metric: str, parts: Sequence[tuple[float, Iterable[float]]], host_sigma: float = 0.0,
            level: float = LEVEL, model_sigma: float = 0.0) -> Band | None:
    """The band of one more run that is, with probability ``w``, a run like ``values`` for each ``(w, values)``
    of ``parts`` (the host's placements, :mod:`simasgd.evaluation.placement`): the central ``level`` interval
    of the mixture of their :func:`predictive` distributions. Its center and degrees of freedom are the first
    part's (the calibrated placement's), and :attr:`Band.other` the weight of the others. A part with fewer
    than 2 finite values drops out and the rest are reweighted; one part left gives :func:`predictive`'s band.
    Every part on the log scale, or else every part on the linear one."""
    values = [list(vals) for _, vals in parts]
    each = [_component(metric, v, host_sigma, model_sigma=model_sigma) for v in values]
    if each[0] is None:  # no band for the calibrated placement
        return None
    kept = [i for i, (w, _) in enumerate(parts) if i == 0 or (w > 0 and each[i] is not None)]
    if len(kept) == 1:
        return predictive(metric, values[0], host_sigma, level, model_sigma)
    comps = [each[i] for i in kept]
    if not all(c is not None and c.log for c in comps):  # a zero among some part's runs: all on the linear scale
        comps = [_component(metric, values[i], host_sigma, True, model_sigma) for i in kept]
    log = comps[0] is not None and comps[0].log
    total = sum(parts[i][0] for i in kept)
    cs = [(parts[i][0] / total, c) for i, c in zip(kept, comps, strict=True) if c is not None]

    def cdf(y: float) -> float:
        return sum(w * _cdf(c, y) for w, c in cs)

    lo, hi = _quantile(cdf, cs, (1 - level) / 2), _quantile(cdf, cs, (1 + level) / 2)
    main = cs[0][1]
    back = math.exp if log else float
    return Band(metric, back(lo), back(hi), back(main.mu), main.runs, "log" if log else "linear", main.df,
                main.host, level, other=1 - cs[0][0], model=model_sigma)


@dataclass(frozen=True)
class _Component:
    """One predictive distribution: ``mu`` + ``sd`` × Student's t with ``df`` degrees of freedom, on the log scale
    (``log``) or the linear one."""

    mu: float
    sd: float
    df: float
    log: bool
    runs: int
    host: bool


def _component(metric: str, values: Iterable[float], host_sigma: float,
               force_linear: bool = False, model_sigma: float = 0.0) -> _Component | None:
    x = np.asarray([v for v in values if v is not None], dtype=float)
    x = x[np.isfinite(x)]
    r = len(x)
    if r < 2:
        return None
    host = host_sigma > 0 and metric in TIME_BASED
    log = bool((x > 0).all()) and not force_linear
    y = np.log(x) if log else x
    mu, s2 = float(y.mean()), float(y.var(ddof=1))
    sim = s2 * (1 + 1 / r)
    # on the linear scale the host's relative σ is taken at the runs' mean (first order)
    h2 = (host_sigma if log else host_sigma * abs(mu)) ** 2 if host else 0.0
    m2 = (model_sigma if log else model_sigma * abs(mu)) ** 2
    v = sim + h2 + m2
    df = math.inf if sim == 0 else v ** 2 / (sim ** 2 / (r - 1))
    return _Component(mu, math.sqrt(v), df, log, r, host)


def _cdf(c: _Component, y: float) -> float:
    if c.sd == 0:
        return 1.0 if y >= c.mu else 0.0
    z = (y - c.mu) / c.sd
    return float(special.ndtr(z)) if math.isinf(c.df) else float(special.stdtr(c.df, z))


def _quantile(cdf: Callable[[float], float], cs: Sequence[tuple[float, _Component]], p: float) -> float:
    """The ``p`` quantile of a mixture's ``cdf`` by bisection (it may step: a part whose runs all agree)."""
    lo = min(c.mu - 1e3 * max(c.sd, abs(c.mu) * 1e-9, 1e-300) for _, c in cs)
    hi = max(c.mu + 1e3 * max(c.sd, abs(c.mu) * 1e-9, 1e-300) for _, c in cs)
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-300):
            break
    return (lo + hi) / 2


def bands(per_run: Mapping[str, Sequence[float]], host: HostNoise | None = None,
          level: float = LEVEL, other: Mapping[str, Sequence[float]] | None = None,
          share: float = 0.0, model: ModelError | None = None, algorithm: str | None = None,
          shared: bool | None = None) -> dict[str, Band]:
    """:func:`predictive` of every metric of :data:`METRICS` in ``per_run`` (metric → one value per run); with
    ``other``, the same runs in the host's other placement, the :func:`mixture` of both, ``share`` of it
    ``other``'s; with ``model``, its σ of each metric (``algorithm``'s, with its threads time-shared or not
    (``shared``), where it has one) in the band."""
    sigma = host.sigma if host is not None else 0.0
    out = {}
    for m in METRICS:
        if m not in per_run:
            continue
        ms = model.of(m, algorithm, shared) if model is not None else 0.0
        if other is not None and share > 0 and m in other:
            b = mixture(m, [(1 - share, per_run[m]), (share, other[m])], sigma, level, ms)
        else:
            b = predictive(m, per_run[m], sigma, level, ms)
        if b is not None:
            out[m] = b
    return out


def per_run_of(result: RunResult) -> dict[str, list[float]]:
    """A result's metrics, one value per run (NaN where a run did not reach ε)."""
    return {m: [math.nan if (v := getattr(r, m)) is None else float(v) for r in result.runs] for m in METRICS}


def per_run_of_stats(hist: np.ndarray, scalars: Mapping[str, np.ndarray]) -> dict[str, list[float]]:
    """The metrics of runs given as per-run staleness histograms (runs × τ) and scalars, as
    :func:`simasgd.evaluation.fidelity.run_stats` and :meth:`simasgd.corpus.store.Cell.stats` give them."""
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = hist @ np.arange(hist.shape[1]) / hist.sum(axis=1)
    return {"mean_staleness": [float(t) for t in tau],
            **{m: [float(v) for v in np.asarray(scalars[m], dtype=float)] for m in METRICS if m in scalars}}


# --- the host's noise -------------------------------------------------------------------------

def calibration_spread(profile: Profile, blocks: int = BLOCKS, seed: int = 0) -> HostNoise | None:
    """The host's σ from a profile's gradient samples: each workload's samples, in the order they were timed, cut
    into ``blocks`` consecutive blocks; the variance of the blocks' median log time beyond what sampling alone
    gives it (the same samples in a random order, :data:`PERMUTATIONS` times) is the variance of the host's
    speed from one stretch of time to the next. Pooled over the workloads (the mean of their excess
    variances); None where no workload has ``blocks`` × :data:`MIN_BLOCK_SAMPLES` samples.

    A run lasts longer than a block: treating a block's speed as a run's holds for changes slower than a run
    and overstates faster ones, which a run averages out."""
    rng = np.random.default_rng(seed)
    excess = []
    for g in (profile.gradient or {}).values():
        s = np.asarray(g.samples_s or [], dtype=float)
        s = s[np.isfinite(s) & (s > 0)]
        if len(s) < blocks * MIN_BLOCK_SAMPLES:
            continue
        y = np.log(s)
        between = float(_block_median_var(y[None, :], blocks)[0])
        null = float(_block_median_var(rng.permuted(np.tile(y, (PERMUTATIONS, 1)), axis=1), blocks).mean())
        excess.append(max(0.0, between - null))
    if not excess:
        return None
    return HostNoise(math.sqrt(float(np.mean(excess))),
                     f"the calibration's gradient samples ({len(excess)} workloads × {blocks} blocks in time)",
                     len(excess))


def _block_median_var(y: np.ndarray, blocks: int) -> np.ndarray:
    """Per row of ``y`` (rows × samples): the variance of its ``blocks`` consecutive blocks' medians."""
    medians = np.stack([np.median(b, axis=1) for b in np.array_split(y, blocks, axis=1)], axis=1)
    return np.asarray(medians.var(axis=1, ddof=1))


def drift_spread(ratios: Iterable[float]) -> HostNoise | None:
    """The host's σ from drift probes: each the gradient re-timed right before measured runs over the calibrated
    gradient (``simasgd.evaluation.drift.Drift.ratio``). A run's speed against the calibration's is what such a ratio
    measures, its offset included, so σ² is the mean square of the log ratios (not their variance). None with
    fewer than :data:`MIN_PROBES` probes."""
    r = np.asarray([x for x in ratios if x is not None and math.isfinite(x) and x > 0], dtype=float)
    if len(r) < MIN_PROBES:
        return None
    return HostNoise(float(np.sqrt(np.mean(np.log(r) ** 2))), f"{len(r)} drift probes (gradient re-timed before "
                                                               f"measured runs)", len(r))


def host_noise_of_entry(profile: Profile, drifts: Iterable[Mapping[str, Any] | None],
                        refresh: bool = False) -> HostNoise | None:
    """A corpus machine's σ: its cells' drift probes where it has :data:`MIN_PROBES` of them (with ``refresh`` a
    drifted cell is simulated at its re-timed speed, so its ratio counts as 1), else its profile's samples. Not
    both added: a probe is itself a short stretch of timing, so its ratio already holds the movement from one
    stretch to the next that the samples measure."""
    ratios = []
    for d in drifts:
        if not d or d.get("ratio") is None:
            continue
        ratios.append(1.0 if refresh and d.get("drifted") else float(d["ratio"]))
    return drift_spread(ratios) or calibration_spread(profile)


def host_noise_for(result: RunResult) -> HostNoise | None:
    """The host noise that belongs with ``result``'s band: the one recorded with it (``metadata["host_noise"]``),
    else the profile it ran on (``metadata["profile"]``) if that file is still the one it read (same sha256);
    None for a result that did not simulate a calibrated host (a measured one carries the host's noise in its
    runs already)."""
    meta = result.metadata
    if isinstance(meta.get("host_noise"), Mapping):
        return HostNoise.from_json(meta["host_noise"])
    rec = meta.get("profile")
    corpus = (meta.get("machine") or {}).get("corpus") if isinstance(meta.get("machine"), Mapping) else None
    if (not isinstance(rec, Mapping) or not rec.get("path")) and corpus:
        return _corpus_host(Path(str(corpus)))
    typed = profile_of(result)
    return None if typed is None else calibration_spread(typed)


def profile_of(result: RunResult) -> Profile | None:
    """The profile ``result`` ran on (``metadata["profile"]``) if that file is still the one it read (same
    sha256); else None."""
    from simasgd.machines import profile

    rec = result.metadata.get("profile")
    if not isinstance(rec, Mapping) or not rec.get("path"):
        return None
    path = Path(str(rec["path"]))
    try:
        if not path.is_file() or (rec.get("sha256") and profile.digest(path) != rec["sha256"]):
            return None
        return profile.read(path)
    except (OSError, profile.ProfileError):
        return None


def _corpus_host(path: Path) -> HostNoise | None:
    """The host noise of a corpus machine simulated by name (``machine.preset``): its entry's, as the corpus
    score takes it (:func:`host_noise_of_entry`); None where the entry cannot be read. Read from the entry's file
    as the machine presets read it, below the corpus's own store."""
    from simasgd.formats import corpus_file as files
    from simasgd.machines import profile

    try:
        doc = files.read(path, ValueError)
        return host_noise_of_entry(profile.typed(doc["profile"], path), [c.get("drift") for c in doc["cells"]])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def other_placement(result: RunResult) -> tuple[float, dict[str, list[float]] | None]:
    """The share of the host's far placement and the result's runs simulated in it (NaN: one that did not reach
    ε), as recorded with it (``metadata["placement"]``: :func:`simulate_far`); (0, None) where none was."""
    rec = result.metadata.get("placement")
    if not isinstance(rec, Mapping) or not isinstance(rec.get("runs"), Mapping):
        return 0.0, None
    return float(rec.get("share", 0.0)), {m: [math.nan if v is None else float(v) for v in vs]
                                          for m, vs in rec["runs"].items()}


def far_placement(result: RunResult) -> Placement | None:
    """The host's far placement whose runs are recorded with ``result`` (:func:`other_placement`), else None."""
    from simasgd.evaluation.placement import Placement

    share, _ = other_placement(result)
    return Placement.from_json(result.metadata["placement"]) if share > 0 else None


def of_result(result: RunResult, host: HostNoise | None = None, level: float = LEVEL,
              model: ModelError | None = None) -> dict[str, Band]:
    """The result's bands; mixed with its runs in the host's far placement where those were simulated; with
    ``model``'s error (:func:`model_error_for`)."""
    share, other = other_placement(result)
    return bands(per_run_of(result), host, level, other, share, model, algorithm_of(result), shared_of(result))


def algorithm_of(result: RunResult) -> str | None:
    """The algorithm a result ran, whose model error its bands take."""
    return algorithm_name(result.scenario)


def shared_of(result: RunResult) -> bool | None:
    """Whether a simulated result's threads outnumber its machine's CPUs (the simulator records the CPUs in
    ``metadata["machine"]["cpus"]``); None where it did not record them (a measured result, a GPU, a network of
    nodes, an older result)."""
    machine = result.metadata.get("machine")
    cpus = machine.get("cpus") if isinstance(machine, Mapping) else None
    workers = result.scenario.get("workers")
    count = workers.get("count") if isinstance(workers, Mapping) else None
    if not isinstance(cpus, int) or not isinstance(count, int):
        return None
    return count > cpus


def algorithm_name(scenario: Mapping[str, Any]) -> str | None:
    """A scenario document's ``algorithm.name`` (None where it names none)."""
    algorithm = scenario.get("algorithm")
    return str(algorithm["name"]) if isinstance(algorithm, Mapping) and "name" in algorithm else None


def model_error_for(result: RunResult, host: HostNoise | None) -> ModelError | None:
    """The model error that belongs with ``result``'s bands: the one recorded with it (``metadata["model_error"]``),
    else, for a simulated calibrated host (``host`` given), the corpus's (:mod:`simasgd.formats.model_error_file`,
    beside the corpus machines) where it has been fitted. None for a preset machine: the corpus measures the
    model on calibrated machines, not on data sheets."""
    meta = result.metadata
    if isinstance(meta.get("model_error"), Mapping):
        return ModelError.from_json(meta["model_error"])
    if host is None:
        return None
    return corpus_model_error()


def corpus_model_error(corpus: Path | None = None) -> ModelError | None:
    """The corpus's fitted model error (None where it has none, or its file cannot be read)."""
    fit = corpus_fit(corpus)
    return None if fit is None else fit[0]


def corpus_fit(corpus: Path | None = None) -> tuple[ModelError, tuple[str, ...]] | None:
    """The corpus's fitted model error with the machines it was fitted on (None where it has none, or its file
    cannot be read)."""
    from simasgd.formats import model_error_file as files
    from simasgd.machines.machine import corpus_folder

    path = files.path_in(corpus or corpus_folder())
    if not path.is_file():
        return None
    try:
        doc = files.read(path)
    except files.ModelErrorFileError:
        return None
    commit = f", simulator {doc.simulator_commit[:12]}" if doc.simulator_commit else ""
    source = f"fitted on the corpus's {len(doc.machines)} machines ({', '.join(doc.machines)}{commit})"
    fit = ModelError({str(m): v for m, v in doc.sigma_log.items()}, source, doc.cells,
                     {a: {str(m): v for m, v in s.items()} for a, s in doc.by_algorithm.items()},
                     {a: {str(r): {str(m): v for m, v in s.items()} for r, s in regimes.items()}
                      for a, regimes in doc.by_sharing.items()})
    return fit, tuple(doc.machines)


def simulate_far(result: RunResult, rerun: Callable[[], RunResult]) -> Placement | None:
    """A simulated result of two or more workers on a calibrated profile whose core-to-core probes saw a far
    placement (:func:`simasgd.evaluation.placement.of_entry`): ``rerun()`` simulates it again on that profile
    moved there (:func:`simasgd.evaluation.placement.moved`), and those runs' metrics go into
    ``result.metadata["placement"]`` for its bands. Returns the placement (None where there is none to
    simulate: nothing is run)."""
    import tempfile

    from simasgd.evaluation import drift, placement
    from simasgd.machines import profile

    workers = int((result.scenario.get("workers") or {}).get("count", 1))
    typed = profile_of(result) if workers >= 2 and inputs(result)[0] else None
    if typed is None:
        return None
    where = placement.of_entry(typed, [])
    if where is None or where.share <= 0:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        far = Path(tmp) / "profile-far.toml"
        far.write_text(profile.to_toml(placement.moved(typed, where.factor)))
        with drift.using_profile(far):
            runs = per_run_of(rerun())
    result.metadata["placement"] = where.to_json() | {  # null: a run that did not reach ε (JSON has no NaN)
        "runs": {m: [v if math.isfinite(v) else None for v in vs] for m, vs in runs.items()}}
    return where


def record(folder: str | Path, result: RunResult, host: HostNoise | None) -> dict[str, Band]:
    """Write ``result``'s bands (``metadata["bands"]``: metric → :meth:`Band.to_json`), the host noise and model
    error they used (``metadata["host_noise"]``, ``metadata["model_error"]``, each absent without one) into its
    results folder's ``summary.json``, and into ``result.metadata``, with its runs in the host's far placement
    where those were simulated (``metadata["placement"]``). All are derived figures in the free-form metadata:
    the results format is unchanged, and a folder without them gets the same bands on read
    (:func:`host_noise_for`, :func:`model_error_for`) while the profile and the corpus's fit stay as they were."""
    import json

    from simasgd.formats.atomicio import atomic_write_text
    from simasgd.runs.results import FORMAT, FORMAT_VERSION, read_versioned_json

    model = model_error_for(result, host)
    found = of_result(result, host, model=model)
    extra: dict[str, Any] = {"bands": {m: b.to_json() for m, b in found.items()}}
    if host is not None:
        extra["host_noise"] = host.to_json()
    if model is not None:
        extra["model_error"] = model.to_json()
    if "placement" in result.metadata:
        extra["placement"] = result.metadata["placement"]
    path = Path(folder) / "summary.json"
    doc = read_versioned_json(path, FORMAT, FORMAT_VERSION, "results")
    doc["metadata"] = dict(doc.get("metadata") or {}) | extra
    atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False))
    result.metadata.update(extra)
    return found


def describe(result_runs: int, host: HostNoise | None, simulated: bool, level: float = LEVEL,
             placement: Placement | None = None, model: ModelError | None = None, algorithm: str | None = None,
             shared: bool | None = None) -> str:
    """One line: what the bands are made of (``placement``: the host's far placement mixed in; ``model``: the
    model error in them, ``algorithm``'s in its regime ``shared``)."""
    head = f"{level:.0%} bands of one more run (Student's t on the log scale, {result_runs} runs)"
    if not simulated:
        return f"{head}: these runs' own spread, the host's noise in it"
    if host is None:
        line = f"{head}: the simulator's spread alone — no calibrated host noise for this result"
    else:
        line = (f"{head}: the simulator's spread and the host's noise on updates/s and time to ε, "
                f"σ = {host.sigma:.3f} on the log scale, from {host.source}")
    if model is not None:
        line += f"; the model's error, σ on the log scale {model.text(algorithm, shared)}, {model.source}"
    if placement is not None:
        line += f"; mixed with the same runs simulated in the far placement: {placement.text()}"
    return line


# --- judging bands against measured runs --------------------------------------------------------

def measured_spread(metric: str, values: Iterable[float], scale: str, level: float = LEVEL) -> float:
    """The central ``level`` spread of measured runs, on a band's scale: the width of a normal's central interval
    with their mean and sample standard deviation (log values on the log scale); NaN with fewer than 2 runs."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    x = x[np.isfinite(x)]
    if len(x) < 2 or (scale == "log" and not (x > 0).all()):
        return math.nan
    y = np.log(x) if scale == "log" else x
    return float(2 * special.ndtri((1 + level) / 2) * y.std(ddof=1))


@dataclass(frozen=True)
class BandCheck:
    """A band against measured runs: how many fell inside, and its width over theirs (NaN: undefined)."""

    metric: str
    band: Band
    inside: int
    runs: int
    sharpness: float

    def to_json(self) -> dict[str, Any]:
        return {"band": self.band.to_json(), "inside": self.inside, "runs": self.runs,
                "sharpness": None if not math.isfinite(self.sharpness) else self.sharpness}


def check(predicted: Mapping[str, Sequence[float]], measured: Mapping[str, Sequence[float]],
          host: HostNoise | None, level: float = LEVEL, other: Mapping[str, Sequence[float]] | None = None,
          share: float = 0.0, model: ModelError | None = None,
          algorithm: str | None = None, shared: bool | None = None) -> dict[str, BandCheck]:
    """Per metric, the band of ``predicted``'s runs (with ``host``; mixed with ``other``'s, the runs in the
    host's other placement, at ``share``; with ``model``'s error for ``algorithm`` in its regime ``shared``:
    :func:`bands`) against ``measured``'s runs."""
    out = {}
    for m, b in bands(predicted, host, level, other, share, model, algorithm, shared).items():
        ms = [float(v) for v in measured.get(m, []) if v is not None and math.isfinite(v)]
        if not ms:
            continue
        spread = measured_spread(m, ms, b.scale, level)
        sharp = b.width / spread if spread > 0 else math.nan
        out[m] = BandCheck(m, b, sum(b.contains(v) for v in ms), len(ms), sharp)
    return out


@dataclass(frozen=True)
class Case:
    """One cell's runs as a band is judged on them (:func:`check`): the simulator's, the machine's, and the host
    noise and far placement its band takes."""

    predicted: Mapping[str, Sequence[float]]
    measured: Mapping[str, Sequence[float]]
    host: HostNoise | None = None
    other: Mapping[str, Sequence[float]] | None = None
    share: float = 0.0
    algorithm: str | None = None
    shared: bool | None = None  # its threads outnumber the CPUs (None: not known)


MODEL_STEP = 0.005  # the model error's σ (log scale) is fitted to this step
MODEL_MAX = 2.0  # and at most this: a factor of e^(1.645·2) ≈ 27 either way at the 90% level
MIN_ALGORITHM_CELLS = 5  # an algorithm's own σ is fitted on this many cells at least (a 90% quantile needs runs)


def fit_model_error(cases: Sequence[Case], source: str, level: float = LEVEL) -> ModelError:
    """Per metric, the least σ_model whose bands (:func:`check`) hold at least ``level`` of ``cases``' measured
    runs: 0 where the simulator's and the host's spreads already do; a metric no case judges is left out. Over
    every case, over each algorithm's with :data:`MIN_ALGORITHM_CELLS` cases or more, and over each algorithm's
    in each regime (threads time-shared or a CPU each) with as many.

    Scanned up from 0 in steps of 10 × :data:`MODEL_STEP`, then in steps of :data:`MODEL_STEP` below the first
    that holds. Coverage need not grow with σ_model everywhere: a known term raises the Welch–Satterthwaite
    degrees of freedom, so the t quantile shrinks as √V grows and a band of few runs can narrow a little before
    it widens; the scan takes the first σ that holds."""
    names = sorted({c.algorithm for c in cases if c.algorithm is not None})
    own = {a: _fit_sigma(of, level) for a in names
           if len(of := [c for c in cases if c.algorithm == a]) >= MIN_ALGORITHM_CELLS}
    regimes: dict[str, dict[str, dict[str, float]]] = {}
    for a in own:
        for shared in (True, False):
            of = [c for c in cases if c.algorithm == a and c.shared is shared]
            if len(of) >= MIN_ALGORITHM_CELLS:
                regimes.setdefault(a, {})[sharing_of(shared)] = _fit_sigma(of, level)
    return ModelError(_fit_sigma(cases, level), source, len(cases), own, regimes)


def _fit_sigma(cases: Sequence[Case], level: float) -> dict[str, float]:
    sigma: dict[str, float] = {}
    for m in METRICS:
        judged = [c for c in cases if m in c.predicted and m in c.measured]

        def holds(s: float, m: str = m, judged: list[Case] = judged) -> bool | None:
            inside = total = 0
            for c in judged:
                b = check({m: c.predicted[m]}, c.measured, c.host, level, c.other, c.share,
                          ModelError({m: s}, "")).get(m)
                if b is not None:
                    inside, total = inside + b.inside, total + b.runs
            return None if total == 0 else inside >= level * total

        if (first := holds(0.0)) is None:
            continue
        found = 0.0 if first else _first_holding(holds)
        sigma[m] = round(found, 6)
    return sigma


def _first_holding(holds: Callable[[float], bool | None]) -> float:
    steps = round(MODEL_MAX / MODEL_STEP)
    hi = next((k for k in range(10, steps + 1, 10) if holds(k * MODEL_STEP)), None)
    if hi is None:
        return MODEL_MAX
    return MODEL_STEP * next((k for k in range(hi - 9, hi) if holds(k * MODEL_STEP)), hi)


def coverage(checks: Iterable[BandCheck]) -> tuple[int, int]:
    """(measured runs inside their bands, measured runs) over ``checks``."""
    cs = list(checks)
    return sum(c.inside for c in cs), sum(c.runs for c in cs)


def sharpness(checks: Iterable[BandCheck]) -> float:
    """The median of the checks' width ratios (those defined); NaN where none is."""
    v = [c.sharpness for c in checks if math.isfinite(c.sharpness)]
    return float(np.median(v)) if v else math.nan


def _num(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.4g}"


def inputs(result: RunResult) -> tuple[bool, HostNoise | None]:
    """Whether ``result`` was simulated (its backend simulates a machine), and the host noise its bands take:
    :func:`host_noise_for` for a simulated one, none for a measured one (its runs carry the host's noise)."""
    from simasgd.runs import backends

    try:
        simulated = hasattr(backends.load(result.backend), "simulated_machine")
    except backends.BackendError:  # imported (peer) or absent here: measured elsewhere
        simulated = False
    return simulated, host_noise_for(result) if simulated else None
