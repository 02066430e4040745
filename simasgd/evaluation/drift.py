"""Drift: whether the calibrated profile still describes this host when a prediction is compared.

On a shared host the gradient's speed can move by tens of percent within the hour between calibration and
run: a prediction from the calibrated samples then misses by that much whatever the model. Right before
``simasgd compare`` runs a backend that measures this host, a probe re-times what drifts — the scenario's
gradient (its median at the scenario's batch size, one thread, a fraction of a second) and the CPUs'
placement (the core-to-core hand-off, ``executors/c2c.py``) — and :class:`Drift` sets them beside the
profile's. Where the gradient drifted beyond :data:`THRESHOLD`, the simulator runs on a copy of the profile
whose gradient samples are rescaled by the measured ratio (:func:`refreshed_profile`; the user's profile
file is left as it is), and :func:`verdict` tells model error from a stale calibration (the rule:
docs/model.md, "Calibration that is still true").

The probe is a calibrator's module (:data:`PROBE`), loaded by name like the calibrator: simasgd imports
nothing from ``executors``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from simasgd.machines.profile_model import Profile
    from simasgd.spec.scenario import Scenario, WorkloadConfig

# A gradient median this far from the calibrated one (relative): the host runs differently than at
# calibration (another tenant, clocks). compare refreshes the prediction past it; the fidelity sweep flags it.
THRESHOLD = 0.10
PLACEMENT_RATIO = 2.0  # hand-offs within this ratio are one placement of the CPUs (executors.c2c.same_mode)
PROBE = "executors.calibration.drift_probe"  # module with probe(workload, seed, base_dir, seconds) -> dict
PROBE_SECONDS = 0.3  # the gradient's share of the probe: ~2000 calls of a 150 µs gradient
REFRESHED_PROFILE = "profile-refreshed.toml"  # the copy a refreshed prediction ran on, in the compare's folder
UPDATES = "updates_per_s_rel_err"  # the goal a gradient's speed moves

# probe(workload, seed, base_dir, seconds) -> {"gradient_median_s": s | None, "c2c_ns": ns | None, "reason": str}
Probe = Callable[["WorkloadConfig", int, "str | None", float], dict[str, Any]]


class Fidelity(Protocol):
    """What the verdict reads of a comparison (``simasgd.evaluation.fidelity.Fidelity``; not imported: fidelity imports
    this module)."""

    info: dict[str, Any]
    overall: dict[str, Any]  # goal name -> Metric (value, goal, ok)
    phases: Any

    @property
    def verdicts(self) -> dict[str, bool | None]: ...


@dataclass(frozen=True)
class Drift:
    """The scenario's gradient and the CPUs' placement now, beside the profile's (None: not measured)."""

    workload: str
    gradient_s: float | None  # the gradient's median now (one thread, the scenario's batch size)
    calibrated_gradient_s: float | None  # the median of the samples the simulator draws from
    c2c_ns: float | None
    calibrated_c2c_ns: float | None
    calibrated_at: str | None  # the profile's [calibration] created
    measured_at: str
    refreshed: bool = False  # the prediction ran on the gradient samples rescaled by `ratio`
    note: str | None = None  # why something was not measured

    @property
    def ratio(self) -> float:
        """The gradient's median now over the calibrated one (NaN where either is unknown)."""
        a, b = self.gradient_s, self.calibrated_gradient_s
        return a / b if a and b and a > 0 and b > 0 else math.nan

    @property
    def drifted(self) -> bool:
        return math.isfinite(self.ratio) and abs(self.ratio - 1) > THRESHOLD

    @property
    def moved(self) -> bool:
        """The CPUs are in another placement than the profile's (both hand-offs known, beyond the ratio)."""
        a, b = self.c2c_ns, self.calibrated_c2c_ns
        return bool(a and b and a > 0 and b > 0 and max(a, b) / min(a, b) > PLACEMENT_RATIO)

    @property
    def age_s(self) -> float | None:
        """Seconds from calibration to this measurement."""
        start, now = _when(self.calibrated_at), _when(self.measured_at)
        return (now - start).total_seconds() if start and now else None

    def to_json(self) -> dict[str, Any]:
        r = self.ratio
        return {**asdict(self), "ratio": r if math.isfinite(r) else None, "drifted": self.drifted,
                "moved": self.moved, "age_s": self.age_s, "threshold": THRESHOLD}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Drift:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in doc.items() if k in names})

    def gradient_line(self) -> str:
        """"gradient 24% slower than at calibration 2 h ago (median 152 µs now, 123 µs then)"."""
        r = self.ratio
        if not math.isfinite(r):
            return f"gradient not re-timed ({self.note or 'no calibrated gradient for ' + self.workload})"
        how = (f"{r - 1:.0%} slower" if r >= 1 else f"{1 - r:.0%} faster")
        assert self.gradient_s is not None and self.calibrated_gradient_s is not None  # ratio is finite
        return (f"gradient {how} than at calibration {ago(self.age_s)} (median {self.gradient_s * 1e6:.1f} µs now, "
                f"{self.calibrated_gradient_s * 1e6:.1f} µs then)")

    def placement_line(self) -> str:
        if not self.c2c_ns or not self.calibrated_c2c_ns:
            return "placement not re-checked"
        where = "another placement than at calibration" if self.moved else "the calibrated placement"
        return (f"CPUs in {where} (core-to-core hand-off {self.c2c_ns:.0f} ns now, "
                f"{self.calibrated_c2c_ns:.0f} ns then)")


@dataclass(frozen=True)
class Verdict:
    """Whether a comparison's misses are the model's or a stale calibration's: ``kind`` is ``"stale"``,
    ``"model"``, ``"current"`` or ``"unchecked"`` (the gradient not re-timed); ``line`` says it in one line."""

    kind: str
    line: str


def _when(iso: str | None) -> _dt.datetime | None:
    if not iso:
        return None
    try:
        t = _dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.UTC)


def ago(seconds: float | None) -> str:
    """"2 h ago", "35 min ago", "3 days ago"; "(date unknown)" without one."""
    if seconds is None or not math.isfinite(seconds):
        return "(date unknown)"
    if seconds < 90 * 60:
        return f"{max(0, round(seconds / 60))} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


# --- what the profile says ---------------------------------------------------------------------------


def calibrated_gradient_s(doc: Profile | dict[str, Any], workload: WorkloadConfig) -> float | None:
    """The median of the one-thread gradient samples the simulator draws for this workload (scaled from the
    nearest calibrated batch size, as it does); None where the profile has no table for it."""
    from simasgd.machines.profile import typed
    from simasgd.sim.profile_tables import profile_gradient

    dist = profile_gradient(typed(doc), workload)
    samples = getattr(dist, "samples", None)
    return float(np.median(samples)) if samples is not None and len(samples) else None


def calibrated_c2c_ns(profile: Profile) -> float | None:
    """The profile's ``[c2c] latency_ns``, None without it."""
    ns = None if profile.c2c is None else profile.c2c.latency_ns
    return float(ns) if ns is not None and ns > 0 else None


# --- measuring now ---------------------------------------------------------------------------------------


def load_probe() -> Probe:
    """The probe (:data:`PROBE`'s ``probe``), imported by name; ImportError where this build lacks it."""
    probe: Probe = importlib.import_module(PROBE).probe
    return probe


def measure(scenario: Scenario, profile_path: Path, probe: Probe | None = None,
            seconds: float = PROBE_SECONDS) -> Drift:
    """Re-time the scenario's gradient and the placement, and set them beside the profile at ``profile_path``.
    A probe that fails leaves the figures unknown, with the reason in ``note``: a check never stops a compare."""
    from simasgd.machines import profile
    from simasgd.machines.profile import workload_key

    doc = profile.read(profile_path)
    got: dict[str, Any] = {}
    note = None
    try:
        got = (probe or load_probe())(scenario.workload, scenario.seed, scenario.base_dir, seconds)
    except Exception as e:  # advisory: the compare runs on, saying the calibration was not re-checked
        note = f"drift probe failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return Drift(workload=workload_key(scenario.workload), gradient_s=_positive(got.get("gradient_median_s")),
                 calibrated_gradient_s=calibrated_gradient_s(doc, scenario.workload),
                 c2c_ns=_positive(got.get("c2c_ns")), calibrated_c2c_ns=calibrated_c2c_ns(doc),
                 calibrated_at=_text(None if doc.calibration is None else doc.calibration.created),
                 measured_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                 note=note or got.get("reason"))


def _positive(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


# --- refreshing the prediction ---------------------------------------------------------------------------

_SCALED = ("samples_s", "mean_s", "median_s", "p10_s", "p90_s", "std_s")
_CONCURRENT = re.compile(r"^k\d+(_(mean|median|p90)_s)?$")  # k threads at once: samples, stats


def refreshed_profile(profile: Profile | dict[str, Any], workload: WorkloadConfig, ratio: float) -> Profile:
    """A copy of the profile whose gradient table for this workload (the nearest calibrated batch size, the
    one the simulator draws from) has every gradient time × ``ratio``: alone, in a cycle, k at once. The
    model's steps and every other table are as calibrated (the probe timed the gradient only)."""
    from simasgd.machines.profile import typed
    from simasgd.sim.profile_tables import workload_table

    out = typed(profile).model_copy(deep=True)
    found = workload_table(out, workload)
    if found is None:
        return out
    table = found[1]
    for key in _SCALED:
        setattr(table, key, _times(getattr(table, key), ratio))
    conc = table.concurrent
    if conc is not None and conc.__pydantic_extra__ is not None:
        extra = conc.__pydantic_extra__
        for key in [k for k in extra if _CONCURRENT.match(k)]:
            extra[key] = _times(extra[key], ratio)
    if table.gflops is not None:
        table.gflops = table.gflops / ratio
    return out


def _times(v: Any, f: float) -> Any:
    if isinstance(v, list):
        return [float(x) * f for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) * f
    return v


def write_refreshed(profile_path: Path, scenario: Scenario, ratio: float, folder: Path) -> Path:
    """The refreshed copy of the profile (:func:`refreshed_profile`), written into ``folder``."""
    from simasgd.machines import profile

    return profile.write(refreshed_profile(profile.read(profile_path), scenario.workload, ratio),
                         Path(folder) / REFRESHED_PROFILE)


@contextlib.contextmanager
def using_profile(path: Path | None) -> Iterator[None]:
    """The simulator reads ``path`` as this machine's profile inside the block (None: as it is)."""
    from simasgd.machines.machine import PROFILE_ENV

    if path is None:
        yield
        return
    old = os.environ.get(PROFILE_ENV)
    os.environ[PROFILE_ENV] = str(Path(path).resolve())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PROFILE_ENV, None)
        else:
            os.environ[PROFILE_ENV] = old


# --- model error or a stale calibration ------------------------------------------------------------------


def at_speed(err: float, ratio: float) -> float:
    """An updates/s error with the prediction's gradient time × ``ratio``: (1 + err) / ratio − 1. Exact where
    the cycle is all gradient; elsewhere the most a gradient's speed can move it (the drift's bound)."""
    return (1 + err) / ratio - 1


def recorded(fid: Fidelity) -> Drift | None:
    """The drift a comparison recorded (``metadata.drift``), None where none was measured."""
    doc = fid.info.get("drift")
    return Drift.from_json(doc) if isinstance(doc, dict) else None


def verdict(fid: Fidelity, drift: Drift | None = None) -> Verdict | None:
    """Model error or a stale calibration, by the rule of docs/model.md ("Calibration that is still true");
    None without a drift measurement."""
    d = drift or recorded(fid)
    if d is None:
        return None
    misses = [k for k, ok in fid.verdicts.items() if ok is False]
    err = fid.overall[UPDATES].value if UPDATES in fid.overall else math.nan
    if d.moved and misses:
        return Verdict("stale", f"calibration stale: {d.placement_line()}; the misses ({_named(fid, misses)}) cannot "
                                f"be told from model error — measure again once the host puts the CPUs back, or "
                                f"calibrate in this placement")
    if d.moved and not d.drifted:
        return Verdict("stale", f"calibration stale: {d.placement_line()}; every goal met all the same")
    if not math.isfinite(d.ratio):
        return Verdict("unchecked", f"calibration not re-checked: {d.gradient_line()}; {d.placement_line()}")
    if not d.drifted:
        checked = f"{_gradient_now(d)}, {d.placement_line()}, calibrated {ago(d.age_s)}"
        if misses:
            return Verdict("model", f"model error: {_named(fid, misses)} with the calibration current ({checked})")
        return Verdict("current", f"calibration current: {checked}")
    return _refreshed(fid, d, misses, err) if d.refreshed else _stale(fid, d, misses, err)


def _refreshed(fid: Fidelity, d: Drift, misses: list[str], err: float) -> Verdict:
    """The prediction ran at today's speed: what it still misses is the model's."""
    stale = f"calibration stale: {d.gradient_line()}; prediction refreshed (gradient samples ×{d.ratio:.2f})"
    if misses:
        return Verdict("model", f"model error: {_named(fid, misses)} with the gradient re-timed before the run "
                                f"({stale})")
    before = at_speed(err, 1 / d.ratio) if math.isfinite(err) else math.nan
    goal = fid.overall[UPDATES].goal if UPDATES in fid.overall else None
    if goal is not None and math.isfinite(before) and abs(before) > goal:
        stale += f"; it meets the updates/s goal, which the calibrated samples would miss (by up to {before:+.0%})"
    return Verdict("stale", stale)


def _stale(fid: Fidelity, d: Drift, misses: list[str], err: float) -> Verdict:
    """The prediction ran on the calibrated samples: an updates/s miss within the drift is the calibration's."""
    stale = f"calibration stale: {d.gradient_line()}"
    now = at_speed(err, d.ratio) if math.isfinite(err) else math.nan
    goal = fid.overall[UPDATES].goal if UPDATES in fid.overall else None
    explained = UPDATES in misses and goal is not None and math.isfinite(now) and abs(now) <= goal
    rest = [k for k in misses if not (explained and k == UPDATES)]
    if rest:
        return Verdict("model", f"model error: {_named(fid, rest)}"
                                + (f" ({_within(err, now)}; {stale})" if explained else f" ({stale})"))
    if explained:
        return Verdict("stale", f"{stale}; {_within(err, now)}: recalibrate, or let compare refresh the prediction")
    return Verdict("stale", f"{stale}; prediction not refreshed (--no-refresh)")


def within_drift(fid: Fidelity) -> bool:
    """The comparison missed a goal, and the gradient's recorded drift explains every miss (:func:`verdict`)."""
    d = recorded(fid)
    v = verdict(fid, d)
    return (d is not None and d.drifted and not d.moved and v is not None and v.kind == "stale"
            and any(ok is False for ok in fid.verdicts.values()))


def _within(err: float, now: float) -> str:
    return f"the updates/s error {err:+.0%} is within the drift ({now:+.0%} at today's gradient speed)"


def _gradient_now(d: Drift) -> str:
    r = d.ratio
    return f"gradient {r - 1:+.0%} of calibration" if math.isfinite(r) else d.gradient_line()


def _named(fid: Fidelity, keys: list[str]) -> str:
    short = {"mean_staleness_rel_err": "τ̄", "ks": "KS", UPDATES: "updates/s", "updates_to_eps_rel_err": "updates to ε"}
    out = []
    for k in keys:
        v = fid.overall[k].value
        out.append(f"{short.get(k, k)} {v:.3f}" if k == "ks" else f"{short.get(k, k)} {v:+.0%}")
    return ", ".join(out)


# --- the gradient measured during the runs (the fidelity sweep's check) ----------------------------------


def phase_gradient_err(fid: Fidelity) -> float:
    """The gradient phase's median, simulated against measured, relative (``phases``: NaN without it). With
    every worker on a CPU of its own, beyond :data:`THRESHOLD` the host ran the gradient at another speed
    during the runs than at calibration."""
    ph = fid.phases
    if ph is None or not ph.available or "gradient" not in ph.table.index:
        return math.nan
    return float(ph.table.loc["gradient", "median_rel_err"])


def with_drift(fid: Fidelity, d: Drift) -> Fidelity:
    """Record the drift, and its verdict, in the comparison's metadata."""
    fid.info["drift"] = d.to_json()
    v = verdict(fid, d)
    if v is not None:
        fid.info["drift"]["verdict"] = {"kind": v.kind, "line": v.line}
    return fid
