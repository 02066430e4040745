"""Import the JSON that the C++ framework dcs-chalmers/shared-memory-sgd prints, as a RunResult.

The peer prints aggregates, not events, so the result is a reconstruction:

- ``staleness_dist[τ]`` counts successful updates with staleness τ < 200
  (longer ones are not counted upstream): the updates table gets one row per
  counted update, in ascending staleness (the real order is unknown),
  ``worker = -1`` (unknown), times and lock wait NaN. ``version`` is 1..N and
  ``read_version`` is set so that the table's staleness equals τ.
- ``numtriesdist[k]`` counts successful updates after k failed CAS attempts
  for k below the persistence bound B only (it has B bins). Upstream drops an
  update after B + 1 failures, so the uncounted successes had exactly B
  failures — except for B = 200, upstream's "unbounded", where they are
  unknown (``-1``). The joint law of staleness and retries is not printed,
  so which rows get which retry count carries no information.
- ``epoch_loss`` is the mean *minibatch* loss over each epoch (not an
  evaluation at the epoch's end); ``epoch_time`` the seconds since training
  started at each epoch's end — Leashed runs omit the last, which is then
  taken from ``train_time_s`` when present.
- The initial loss is not printed, so updates/time to ε are unknown (None).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from simasgd.runs import metadata
from simasgd.runs.results import ResultsError, RunResult, RunSummary, curve_frame, updates_frame
from simasgd.spec.scenario import Scenario

BACKEND = "peer"
# C++ iostreams print non-finite floats as nan / -nan / inf, which JSON lacks.
_NONFINITE = re.compile(r"(?<![\w\"])(-?)(nan|inf)(?![\w\"])", re.IGNORECASE)


class PeerError(ResultsError):
    pass


def read(path: str | Path) -> dict[str, Any]:
    """The peer's JSON, checked: one line per problem names the file and the key."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise PeerError(f"{p}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise PeerError(f"{p}: not the peer's JSON (not UTF-8 text: {e.reason})") from None
    text = _NONFINITE.sub(_json_nonfinite, text)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PeerError(f"{p}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise PeerError(f"{p}: expected a JSON object with staleness_dist, epoch_loss, ...")
    problems = _check(doc, str(p))
    if problems:
        raise PeerError("\n".join(problems))
    return doc


def _json_nonfinite(m: re.Match[str]) -> str:
    # Python's JSON reads NaN, Infinity and -Infinity; a NaN's sign means nothing.
    return "NaN" if m.group(2).lower() == "nan" else m.group(1) + "Infinity"


def _check(doc: dict[str, Any], label: str) -> list[str]:
    problems = []
    if "staleness_dist" not in doc:
        problems.append(f"{label}: staleness_dist: required (counts of updates per staleness 0..199)")
    for key in ("staleness_dist", "numtriesdist"):
        v = doc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            problems.append(f"{label}: {key}: must be a list of integer counts >= 0")
    for key in ("epoch_loss", "epoch_time"):
        v = doc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            problems.append(f"{label}: {key}: must be a list of numbers")
    for key in ("numfailedcas", "train_time_s"):
        v = doc.get(key)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0):
            problems.append(f"{label}: {key}: must be a number >= 0")
    losses, times = doc.get("epoch_loss", []), doc.get("epoch_time", [])
    if isinstance(losses, list) and isinstance(times, list) and len(times) not in (len(losses), len(losses) - 1, 0):
        problems.append(f"{label}: epoch_time: has {len(times)} entries for {len(losses)} epochs "
                        f"(expected {len(losses)}, or {len(losses) - 1} for Leashed runs)")
    return problems


def updates_per_epoch(doc: dict[str, Any], scenario: Scenario | None = None,
                      given: int | None = None) -> tuple[float, str]:
    """Updates per epoch and where the number came from."""
    epochs = len(doc.get("epoch_loss", []))
    if given:
        return float(given), "given"
    if scenario is not None and "max_updates" in scenario.stop.model_fields_set and epochs:
        return scenario.stop.max_updates / epochs, "scenario stop.max_updates / epochs"
    total = sum(doc["staleness_dist"])
    # Upstream stops one update short of epochs × rounds and never counts it: round to the whole number.
    return (float(round(total / epochs)) if epochs else math.nan), "staleness_dist total / epochs"


def to_result(doc: dict[str, Any], scenario: Scenario | None = None, *, source: str = "",
              per_epoch: int | None = None) -> RunResult:
    """The peer's aggregates as a one-run RunResult of backend ``peer``."""
    hist = np.asarray(doc["staleness_dist"], dtype=np.int64)
    tau = np.repeat(np.arange(len(hist)), hist)
    n = len(tau)
    versions = np.arange(1, n + 1)
    updates = updates_frame(0, -1, versions, versions - 1 - tau, math.nan, math.nan,
                            lock_wait_s=math.nan, retries=_retries(doc.get("numtriesdist", []), n))
    losses = np.asarray(doc.get("epoch_loss", []), dtype=float)
    times = _epoch_times(doc, len(losses))
    upe, upe_source = updates_per_epoch(doc, scenario, per_epoch)
    curve = curve_frame(0, times, np.round(upe * np.arange(1, len(losses) + 1)).astype(np.int64)
                        if math.isfinite(upe) else np.zeros(len(losses), np.int64), losses)
    time_s = float(doc["train_time_s"]) if doc.get("train_time_s") is not None else (
        float(times[-1]) if len(times) and math.isfinite(times[-1]) else math.nan)
    summary = RunSummary(
        run=0, updates=n, time_s=time_s, updates_to_eps=None, time_to_eps=None,
        crashed=bool(len(losses) and not np.all(np.isfinite(losses))), not_reached=False,
        initial_loss=math.nan, final_loss=float(losses[-1]) if len(losses) else math.nan,
        mean_staleness=float(tau.mean()) if n else math.nan, attempts=n,
        updates_per_s=n / time_s if math.isfinite(time_s) and time_s > 0 else math.nan,
        extra={"numfailedcas": doc.get("numfailedcas"), "epochs": len(losses),
               "updates_per_epoch": upe, "updates_per_epoch_source": upe_source,
               "staleness_bins": len(hist), "eps_unknown": True})
    sc = scenario or Scenario(name=Path(source).stem or "peer")
    meta = {"backend": BACKEND, "scenario_hash": sc.hash if scenario is not None else "",
            "scenario_known": scenario is not None, "source": source,
            "imported": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "importer_git_commit": metadata.git_commit(), "producer": "dcs-chalmers/shared-memory-sgd"}
    return RunResult(sc.to_dict(), BACKEND, [summary], updates, curve, meta)


UNBOUNDED_PERSISTENCE = 200  # upstream's CAS_backoff value meaning "retry forever"


def _retries(tries: list[int], n: int) -> np.ndarray:
    known = np.repeat(np.arange(len(tries)), tries)[:n]
    rest = len(tries) if len(tries) < UNBOUNDED_PERSISTENCE else -1
    return np.concatenate([known, np.full(n - len(known), rest)]).astype(np.int32)


def _epoch_times(doc: dict[str, Any], epochs: int) -> np.ndarray:
    times = list(map(float, doc.get("epoch_time", [])))
    if len(times) == epochs - 1:  # Leashed omits the last epoch's time: the run ends with training
        times.append(float(doc["train_time_s"]) if doc.get("train_time_s") is not None else math.nan)
    return np.asarray(times if times else [math.nan] * epochs, dtype=float)


def import_file(path: str | Path, scenario: Scenario | None = None, out: str | Path | None = None,
                per_epoch: int | None = None) -> RunResult:
    """Read the peer's JSON, convert it, and (with ``out``) write the results folder."""
    p = Path(path)
    result = to_result(read(p), scenario, source=str(p), per_epoch=per_epoch)
    result.metadata["source_sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    if out is not None:
        result.save(out)
    return result
