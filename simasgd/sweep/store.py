"""A sweep's results folder: a manifest, one Parquet file per finished task, optional full runs.

Layout::

    DIR/sweep.json                      manifest: format, scenario, grid, backend, repeats, seeding
    DIR/tasks/<cell>-r<repeat>.parquet  one row, status "ok"
    DIR/tasks/<cell>-r<repeat>.failed.parquet  one row, status "failed", with the error
    DIR/runs/<task id>/                 the task's full results folder (only with keep_runs)

Every file is written to a temporary name and renamed into place, so the
index of finished tasks is simply the set of files present: a killed sweep
leaves complete files or none, and nothing else to repair.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

import simasgd.sweep.grid as gridmod
from simasgd.formats.atomicio import atomic_write
from simasgd.runs.results import ResultsError, RunResult, read_versioned_json

FORMAT = "simasgd-sweep"
FORMAT_VERSION = 2  # 2: a task row's ``diverged`` is ``not_reached`` (tasks of 1 still read)
MANIFEST = "sweep.json"
TASKS = "tasks"
RUNS = "runs"
FAILED_SUFFIX = ".failed.parquet"

# One task's row; fixed types so that thousands of one-row files read back as one table.
ROW_TYPES: dict[str, str] = {
    "task_id": "string", "cell_id": "string", "repeat": "int32", "seed": "int64",
    "status": "string", "error": "string", "host": "string", "wall_s": "float64",
    "updates": "Int64", "time_s": "Float64", "updates_to_eps": "Int64", "time_to_eps": "Float64",
    "crashed": "boolean", "not_reached": "boolean", "initial_loss": "Float64", "final_loss": "Float64",
    "mean_staleness": "Float64", "attempts": "Int64", "updates_per_s": "Float64", "extra": "string",
}
SUMMARY_FIELDS = ("updates", "time_s", "updates_to_eps", "time_to_eps", "crashed", "not_reached", "initial_loss",
                  "final_loss", "mean_staleness", "attempts", "updates_per_s")


class SweepStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def tasks_dir(self) -> Path:
        return self.root / TASKS

    # -- manifest ---------------------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        path = self.root / MANIFEST
        if not path.exists():
            raise ResultsError(f"{self.root}: no {MANIFEST} — not a sweep folder")
        return read_versioned_json(path, FORMAT, FORMAT_VERSION, "sweep manifest")

    def open(self, identity: dict[str, Any], scenario: dict[str, Any], resume: bool) -> None:
        """Create a new sweep folder, or check that ``identity`` matches the one being resumed."""
        exists = (self.root / MANIFEST).exists()
        if exists and not resume:
            raise ResultsError(f"{self.root} already holds a sweep; pass --resume to continue it, "
                               f"or choose another --out")
        if exists:
            self.check_same(identity)
        elif self.root.exists() and any(self.root.iterdir()):
            raise ResultsError(f"{self.root} exists and is not a sweep folder; choose another --out")
        else:
            doc = {"format": FORMAT, "format_version": FORMAT_VERSION, **_jsonable(identity),
                   "scenario": scenario,
                   "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write(self.root / MANIFEST, lambda p: Path(p).write_text(json.dumps(doc, indent=2)))
        self.tasks_dir.mkdir(parents=True, exist_ok=True)

    def check_same(self, identity: dict[str, Any]) -> None:
        """Raise unless this folder's sweep has ``identity`` (scenario hash, grid, backend, repeats, seeding)."""
        doc = self.manifest()
        theirs = {k: doc.get(k) for k in identity}
        ours = _jsonable(identity)
        diff = [f"{k}: the folder has {json.dumps(theirs[k])}, this sweep has {json.dumps(ours[k])}"
                for k in ours if theirs[k] != ours[k]]
        if diff:
            raise ResultsError(f"cannot resume into {self.root}: it was made by a different sweep ("
                               + "; ".join(diff) + "); choose another --out")

    # -- tasks ------------------------------------------------------------------------------------
    def finished(self) -> tuple[set[str], set[str]]:
        """Task ids with a stored result: (ok, failed). A task retried successfully counts as ok only."""
        ok, failed = set(), set()
        if self.tasks_dir.exists():
            for p in self.tasks_dir.iterdir():
                if p.name.endswith(FAILED_SUFFIX):
                    failed.add(p.name[: -len(FAILED_SUFFIX)])
                elif p.suffix == ".parquet" and not p.name.startswith("."):
                    ok.add(p.stem)
        return ok, failed - ok

    def write(self, row: dict[str, Any]) -> Path:
        """Store one task's row; a success replaces an earlier failure of the same task."""
        tid, ok = row["task_id"], row["status"] == "ok"
        path = self.tasks_dir / (f"{tid}.parquet" if ok else f"{tid}{FAILED_SUFFIX}")
        table = arrow_row(row)
        atomic_write(path, lambda p: _write_table(table, p))
        if ok:
            (self.tasks_dir / f"{tid}{FAILED_SUFFIX}").unlink(missing_ok=True)
        return path

    def save_run(self, tid: str, result: RunResult) -> Path:
        return result.save(self.root / RUNS / tid)


_ARROW_TYPES = {"string": "string", "int32": "int32", "int64": "int64", "float64": "float64", "Int64": "int64",
                "Float64": "float64", "boolean": "bool"}


def arrow_row(row: dict[str, Any]) -> Any:
    """One row as a pyarrow table with the fixed schema (much cheaper than a typed pandas frame)."""
    import pyarrow as pa

    schema = pa.schema([(k, _ARROW_TYPES[t]) for k, t in ROW_TYPES.items()])
    return pa.Table.from_pylist([{k: _nullable(row.get(k)) for k in ROW_TYPES}], schema=schema)


def _write_table(table: Any, path: str) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, path)


def typed_rows(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame([{k: _nullable(row.get(k)) for k in ROW_TYPES} for row in rows], columns=list(ROW_TYPES))
    return frame.astype(ROW_TYPES)


def _nullable(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def load(root: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per finished (cell, repeat): grid keys as dotted columns, repeat, status, error, summary fields."""
    store = SweepStore(root)
    doc = store.manifest()
    frame = _read_tasks(store.tasks_dir)
    grid = {k: list(v) for k, v in doc["grid"].items()}
    cells = gridmod.cells(grid)
    by_id = {c.id: c for c in cells}
    frame = frame[frame["cell_id"].isin(list(by_id))]
    # Successes first, so a task retried after failing keeps only its success.
    frame = frame.sort_values("status", key=lambda s: s != "ok", kind="stable")
    frame = frame.drop_duplicates("task_id").copy()
    order = {c.id: c.index for c in cells}
    frame["_cell"] = frame["cell_id"].map(order)
    frame = frame.sort_values(["_cell", "repeat"], kind="stable").reset_index(drop=True)
    keys = pd.DataFrame([dict(by_id[cid].values) for cid in frame["cell_id"]], columns=list(grid),
                        index=frame.index)
    front = [*list(grid), "repeat", "status", "error", *SUMMARY_FIELDS]
    out = pd.concat([keys, frame.drop(columns="_cell")], axis=1)
    return out[front + [c for c in out.columns if c not in front]]


def _read_tasks(folder: Path) -> pd.DataFrame:
    files = sorted(p for p in folder.glob("*.parquet") if not p.name.startswith(".")) if folder.exists() else []
    if not files:
        return typed_rows([])
    import pyarrow.dataset as ds

    # One schema for every file: a task written before the rename (``diverged``, format version 1) reads
    # with its column under the new name, also in a resumed folder holding rows of both versions.
    schema = arrow_row({}).schema.append(_pa_field(OLD_NOT_REACHED, "bool"))
    frame = ds.dataset([str(p) for p in files], format="parquet", schema=schema).to_table().to_pandas()
    frame["not_reached"] = frame["not_reached"].fillna(frame.pop(OLD_NOT_REACHED))
    return frame.astype(ROW_TYPES)


OLD_NOT_REACHED = "diverged"


def _pa_field(name: str, kind: str) -> Any:
    import pyarrow as pa

    return pa.field(name, kind)


def _jsonable(obj: Any) -> Any:
    # Round-trip through JSON so comparisons see what the manifest will hold (tuples -> lists). Python's
    # json keeps inf/nan (as Infinity/NaN), so grid values, and hence cell ids, survive the trip exactly.
    return json.loads(json.dumps(obj, default=str))
