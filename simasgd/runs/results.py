"""RunResult and the results folder (docs/reference/results-format.md).

A folder holds ``updates.parquet``, ``curve.parquet`` and ``summary.json``.
Each file is written to a temporary name and renamed into place, and
``summary.json`` — which records the row counts of the two tables — is
written last: a killed run leaves either no summary (the folder does not
load) or a complete, consistent one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simasgd.formats import versioning
from simasgd.formats.atomicio import atomic_write, atomic_write_text
from simasgd.runs.metadata import host_records

FORMAT = "simasgd-results"
FORMAT_VERSION = 2
# Version 2 renamed the run summary's ``diverged`` (ε set and not reached within the budget, without
# crashing) to ``not_reached``: "diverged" reads as "blew up", which is ``crashed``. Version 1 folders
# still load, the field renamed on the way in (RENAMED_FIELDS).
RENAMED_FIELDS: dict[int, dict[str, str]] = {1: {"diverged": "not_reached"}}

UPDATE_COLUMNS: dict[str, str] = {
    "run": "int32", "worker": "int32", "version": "int64", "read_version": "int64",
    "staleness": "int64", "t_read": "float64", "t_write": "float64",
    "lock_wait_s": "float64", "retries": "int32", "applied": "bool",
    # Phase boundaries of the attempt's cycle (seconds from the run's start; NaN where a backend does
    # not know them, e.g. imported runs): the cycle starts at t_start (before any read-side wait), the
    # read ends and the gradient starts at t_grad_start, the gradient ends at t_grad_end; the update
    # side (its lock wait, CAS retries or barrier included) ends at t_write. simasgd.evaluation.phases reads them.
    "t_start": "float64", "t_grad_start": "float64", "t_grad_end": "float64",
    # Elastic algorithms (easgd, eawild): ‖x_j − x̃‖ between the worker's state and the centre it read, at
    # the exchange the row records (before the elastic move); NaN for every other algorithm. A
    # decentralised algorithm may record its node's distance to the state it merges (keuper).
    "distance": "float64",
}
# Columns added after format version 1 files were written: a file without them loads with NaN.
OPTIONAL_UPDATE_COLUMNS = ("t_start", "t_grad_start", "t_grad_end", "distance")
# spread: at each curve point, sqrt(mean over workers of their latest row's distance²) among the rows
# applied so far (spread_curve): how far the workers are from the centre (or the nodes from each other)
# over time; NaN where no row has a distance. Added after format version 1: old files load with NaN.
# accuracy: the fraction of the workload's held-out (test) rows the model classifies right at that point
# (convergence.accuracy_of); NaN for regression workloads, without test rows, or where a backend does
# not evaluate it. Added after format version 1: old files load with NaN.
CURVE_COLUMNS: dict[str, str] = {"run": "int32", "t": "float64", "updates": "int64", "loss": "float64",
                                 "spread": "float64", "accuracy": "float64"}
OPTIONAL_CURVE_COLUMNS = ("spread", "accuracy")


class ResultsError(ValueError):
    pass


@dataclass
class RunSummary:
    """The outcome of one repeat. ``updates`` counts applied updates."""

    run: int
    updates: int
    time_s: float
    updates_to_eps: int | None
    time_to_eps: float | None
    crashed: bool
    not_reached: bool  # ε was set and not reached within the budget, without crashing
    initial_loss: float
    final_loss: float
    mean_staleness: float
    attempts: int = 0
    updates_per_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: _json_float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, d: dict[str, Any], format_version: int = FORMAT_VERSION) -> RunSummary:
        d = upgrade_summary(d, format_version)
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ResultsError(f"run summary has unknown fields {sorted(unknown)}")
        return cls(**{k: _float_back(v) for k, v in d.items()})


@dataclass
class RunResult:
    """What every backend returns: the scenario as run, per-run summaries and the two tables."""

    scenario: dict[str, Any]
    backend: str
    runs: list[RunSummary]
    updates: pd.DataFrame
    curve: pd.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Tables built before the optional columns existed (imports, older code) get them here, once;
        # the curve's spread follows from the rows' distances (spread_curve), on every backend alike.
        for c in OPTIONAL_UPDATE_COLUMNS:
            if c not in self.updates.columns:
                self.updates = self.updates.assign(**{c: math.nan})
        if "accuracy" not in self.curve.columns:
            self.curve = self.curve.assign(accuracy=math.nan)
        if "spread" not in self.curve.columns or self.curve["spread"].isna().all():
            self.curve = self.curve.assign(spread=spread_curve(self.updates, self.curve))

    @property
    def scenario_hash(self) -> str:
        return str(self.metadata.get("scenario_hash", ""))

    def summary_frame(self) -> pd.DataFrame:
        rows = [{k: v for k, v in asdict(r).items() if k != "extra"} | r.extra for r in self.runs]
        return pd.DataFrame(rows)

    def save(self, folder: str | os.PathLike[str]) -> Path:
        out = Path(folder)
        try:
            self._write(out)
        except OSError as e:  # a file in its place, no permission, a full disk: the folder and why
            raise ResultsError(f"{out}: cannot write the results folder ({e.strerror or e}"
                               f"{f': {e.filename}' if e.filename else ''})") from None
        return out

    def _write(self, out: Path) -> None:
        """A new folder is written under a hidden name and renamed into place: complete or absent. An existing
        one (a run's folder rewritten after each repeat) file by file, summary.json last: ``load`` refuses tables
        that do not match it."""
        if out.exists():
            self._write_files(out)
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.{os.getpid()}.tmp"
        try:
            tmp.mkdir()
            self._write_files(tmp)
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _write_files(self, out: Path) -> None:
        atomic_write(out / "updates.parquet", lambda p: _typed(self.updates, UPDATE_COLUMNS).to_parquet(p, index=False))
        atomic_write(out / "curve.parquet", lambda p: _typed(self.curve, CURVE_COLUMNS).to_parquet(p, index=False))
        doc = {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            # a crashed run's θ has no finite norm: its metadata says so instead of losing the run
            "backend": self.backend, "metadata": _json_float(self.metadata), "scenario": self.scenario,
            "rows": {"updates": len(self.updates), "curve": len(self.curve)},
            "runs": [r.to_json() for r in self.runs],
        }
        text = json.dumps(doc, indent=2, allow_nan=False)
        atomic_write_text(out / "summary.json", text)

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> RunResult:
        src = Path(folder)
        summary = src / "summary.json"
        if not summary.exists():
            raise ResultsError(f"{src}: no summary.json — not a results folder, or the run did not finish")
        doc = read_versioned_json(summary, FORMAT, FORMAT_VERSION, "results")
        missing = [k for k in ("scenario", "backend", "runs") if k not in doc]
        if missing or not isinstance(doc.get("runs"), list) or not isinstance(doc.get("scenario"), dict):
            raise ResultsError(f"{summary}: lacks {', '.join(missing) or 'a valid runs list or scenario table'} "
                               f"(damaged, or not written by simasgd)")
        updates = _read_table(src / "updates.parquet")
        for c in OPTIONAL_UPDATE_COLUMNS:
            if c not in updates.columns:
                updates[c] = math.nan
        curve = _read_table(src / "curve.parquet")
        for c in OPTIONAL_CURVE_COLUMNS:
            if c not in curve.columns:
                curve[c] = math.nan
        rows = doc.get("rows", {})
        if rows.get("updates") != len(updates) or rows.get("curve") != len(curve):
            raise ResultsError(f"{src}: tables do not match summary.json (a run was interrupted mid-write?)")
        return cls(scenario=doc["scenario"], backend=doc["backend"],
                   runs=[RunSummary.from_json(r, doc["format_version"]) for r in doc["runs"]],
                   updates=updates, curve=curve, metadata=doc.get("metadata", {}))


def _read_table(path: Path) -> pd.DataFrame:
    """One parquet table of a results folder; a missing or damaged one is a ResultsError naming it."""
    import pyarrow

    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing — the run did not finish, or the folder was damaged") from None
    except (OSError, pyarrow.ArrowException) as e:  # cut short, overwritten, unreadable
        raise ResultsError(f"{path}: not a readable parquet table ({e})") from None


def upgrade_summary(d: dict[str, Any], format_version: int) -> dict[str, Any]:
    """A run summary of an older results format with its fields under this format's names."""
    out = dict(d)
    for version, renames in RENAMED_FIELDS.items():
        if format_version <= version:
            for old, new in renames.items():
                if old in out and new not in out:
                    out[new] = out.pop(old)
    return out


def read_versioned_json(path: str | os.PathLike[str], fmt: str, version: int, kind: str,
                        error: type[Exception] = ResultsError) -> dict[str, Any]:
    """A simasgd JSON document (results summary, sweep manifest, fidelity file), checked for its format
    name and refused when its format version is newer than this simasgd reads."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise error(f"{path}: cannot read the {kind} file ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        got = doc.get("format") if isinstance(doc, dict) else None
        raise error(f"{path}: not a simasgd {kind} file (format = {got!r})")
    versioning.check(path, doc.get("format_version"), version, kind, error)
    return doc


def merge(results: list[RunResult]) -> RunResult:
    """Repeats of one scenario on one backend, as one result; refuses to mix anything else."""
    if not results:
        raise ResultsError("nothing to merge")
    first = results[0]
    for r in results[1:]:
        if r.backend != first.backend:
            raise ResultsError(f"cannot merge results of backends {first.backend!r} and {r.backend!r}")
        if r.scenario_hash != first.scenario_hash:
            raise ResultsError(f"cannot merge results of different scenarios "
                               f"({first.scenario_hash} vs {r.scenario_hash})")
    runs = [run for r in results for run in r.runs]
    if len({r.run for r in runs}) != len(runs):
        raise ResultsError("cannot merge: run indices repeat")
    meta = dict(first.metadata)
    hosts = [h for r in results for h in host_records(r.metadata)]
    if hosts:  # each repeat's host state (cpu), not only the first's
        meta["host_runs"] = hosts
    return RunResult(first.scenario, first.backend, sorted(runs, key=lambda r: r.run),
                     pd.concat([r.updates for r in results], ignore_index=True),
                     pd.concat([r.curve for r in results], ignore_index=True), meta)


def updates_frame(run: int, worker: Any, version: Any, read_version: Any, t_read: Any, t_write: Any,
                  lock_wait_s: Any = 0.0, retries: Any = 0, applied: Any = True, t_start: Any = math.nan,
                  t_grad_start: Any = math.nan, t_grad_end: Any = math.nan, distance: Any = math.nan) -> pd.DataFrame:
    """The updates table from per-attempt arrays; staleness is derived here, once, for all backends."""
    version = np.asarray(version, dtype=np.int64)
    n = len(version)
    cols = {
        "run": np.full(n, run), "worker": np.broadcast_to(worker, n), "version": version,
        "read_version": np.broadcast_to(read_version, n),
        "staleness": version - 1 - np.asarray(read_version, dtype=np.int64),
        "t_read": np.broadcast_to(t_read, n), "t_write": np.broadcast_to(t_write, n),
        "lock_wait_s": np.broadcast_to(lock_wait_s, n), "retries": np.broadcast_to(retries, n),
        "applied": np.broadcast_to(applied, n), "t_start": np.broadcast_to(t_start, n),
        "t_grad_start": np.broadcast_to(t_grad_start, n), "t_grad_end": np.broadcast_to(t_grad_end, n),
        "distance": np.broadcast_to(distance, n),
    }
    return _frame(cols, UPDATE_COLUMNS)


def empty_updates() -> pd.DataFrame:
    return _typed(pd.DataFrame({c: [] for c in UPDATE_COLUMNS}), UPDATE_COLUMNS)


def curve_frame(run: int, t: Any, updates: Any, loss: Any, spread: Any = math.nan,
                accuracy: Any = math.nan) -> pd.DataFrame:
    t = np.asarray(t, dtype=np.float64)
    return _frame({"run": np.full(len(t), run), "t": t, "updates": updates, "loss": loss,
                   "spread": np.broadcast_to(spread, len(t)), "accuracy": np.broadcast_to(accuracy, len(t))},
                  CURVE_COLUMNS)


def spread_curve(updates: pd.DataFrame, curve: pd.DataFrame) -> np.ndarray:
    """The curve's ``spread`` from the rows' ``distance`` (CURVE_COLUMNS): at each point (run, updates = u),
    sqrt(mean over workers of d_w²), d_w the distance of worker w's applied row with the largest
    version ≤ u; NaN before any such row, and wherever no row has a distance."""
    out = np.full(len(curve), np.nan)
    if "distance" not in updates.columns or not len(curve):
        return out
    rows = updates[updates["applied"] & updates["distance"].notna()] if len(updates) else updates
    if not len(rows):
        return out
    for run, points in curve.groupby("run").groups.items():
        mine = rows[rows["run"] == run].sort_values("version", kind="stable")
        if not len(mine):
            continue
        u = curve.loc[points, "updates"].to_numpy()
        total, count = np.zeros(len(u)), np.zeros(len(u))
        for _w, r in mine.groupby("worker"):
            v, d = r["version"].to_numpy(), r["distance"].to_numpy()
            i = np.searchsorted(v, u, side="right") - 1  # the latest row at or before each point
            have = i >= 0
            total[have] += d[i[have]] ** 2
            count[have] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            out[np.asarray([curve.index.get_loc(p) for p in points])] = np.where(count > 0, np.sqrt(total / count),
                                                                                  np.nan)
    return out


def _frame(cols: dict[str, Any], columns: dict[str, str]) -> pd.DataFrame:
    """A table of ``columns`` (each of its dtype, in that order) from one array (or scalar) a column. A column
    already of its dtype is taken as it is, the others go through pandas' ``astype`` (and its errors: a NaN
    where an integer belongs): converting a whole frame costs a copy and a check a column, and results are
    built often (every backend's run, a sweep's every task, a corpus score's every cell)."""
    n = len(next(iter(cols.values())))
    typed = {}
    for c, dtype in columns.items():
        a = np.asarray(cols[c])
        if a.ndim == 0:
            a = np.broadcast_to(a, n)
        typed[c] = a if a.dtype == dtype else pd.Series(a).astype(dtype).to_numpy()
    return pd.DataFrame(typed, copy=True)


def _typed(df: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """``columns`` of ``df``, in that order, each of its dtype, on a fresh index (:func:`_frame`)."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ResultsError(f"table lacks columns {missing}")
    return _frame({c: df[c].to_numpy() for c in columns}, columns)


def _json_float(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _json_float(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_float(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return _json_float(float(v))
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _float_back(v: Any) -> Any:
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    if isinstance(v, dict):
        return {k: _float_back(x) for k, x in v.items()}
    return v
