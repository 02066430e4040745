"""The fidelity corpus: measured cells of every machine the project has run on, kept compact and versioned.

One file per machine, ``<corpus>/<machine>.json.gz`` (format :data:`FORMAT`, version :data:`FORMAT_VERSION`):
the machine (its CPU model, topology, date, the simasgd commit that measured it) and the profile it was
calibrated with, and per cell the scenario as run, the measured runs' summaries and, per run, what the
fidelity goals need of its rows without the rows themselves:

- ``rows``: the run's applied updates, in version order, cut into at most :data:`SEGMENTS` spans growing
  geometrically (:func:`spans`); per span its last version, the staleness histogram of its updates (counts
  at τ = 0, 1, …) and the time of its last write. A prediction that stopped earlier (the simulator at ε; a
  measured run that ran on to its budget) is compared over the versions both made, as
  :func:`simasgd.evaluation.fidelity.compare` cuts them; the corpus cuts at the last span that ends within them, so
  it compares over up to one span fewer updates than ``compare`` would (2.5% of a 10 000-update run);
- ``per_worker``: each worker's staleness histogram over the whole run;
- ``phases``: per phase of a cycle, its mean, median, p90 and p99 (``simasgd.evaluation.phases``);
- ``drift``: the gradient and the CPUs' placement re-timed right before the cell's measured runs, beside the
  profile's (``simasgd.evaluation.drift.Drift``, from the ``fidelity.json`` that ``compare`` and the fidelity sweep
  write beside the results folder); absent where none was measured (format version 1).

A cell is about 8 KB (a wide staleness distribution, Lopez's, up to 20). :mod:`simasgd.corpus.score` judges
today's simulator against every cell.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import itertools
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simasgd.evaluation import analysis, fidelity, phases
from simasgd.formats import corpus_file as files
from simasgd.formats.atomicio import atomic_write
from simasgd.formats.corpus_file import FORMAT, FORMAT_VERSION, READS, SUFFIX  # noqa: F401 - this module's format
from simasgd.machines.profile_model import Profile
from simasgd.runs import metadata
from simasgd.runs.results import ResultsError, RunResult, RunSummary

SEGMENTS = 256
FIRST = 16  # rows kept one span each before the spans grow
NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class CorpusError(ResultsError):
    pass


# --- compact arrays ---------------------------------------------------------------------------

def pack(a: np.ndarray) -> dict[str, Any]:
    """An array as JSON: dtype, shape and its bytes zlib-compressed in base64."""
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape),
            "z": base64.b64encode(zlib.compress(a.tobytes(), 9)).decode("ascii")}


def unpack(d: dict[str, Any]) -> np.ndarray:
    raw = zlib.decompress(base64.b64decode(d["z"]))
    return np.frombuffer(raw, dtype=np.dtype(d["dtype"])).reshape(d["shape"]).copy()


def _small(counts: np.ndarray) -> np.ndarray:
    top = int(counts.max()) if counts.size else 0
    return counts.astype(np.uint16 if top < 2 ** 16 else np.uint32 if top < 2 ** 32 else np.int64)


# --- a measured cell --------------------------------------------------------------------------

@dataclass
class RunRows:
    """One run's rows as the goals need them: per span of versions, its end, staleness counts and last write."""

    run: int
    ends: np.ndarray        # last version of each span (ascending)
    times: np.ndarray       # time of the span's last write, seconds from the run's start
    counts: np.ndarray      # spans × τ: staleness counts of the span's applied updates
    per_worker: dict[int, np.ndarray]

    def cut(self, version: int | None) -> tuple[np.ndarray, int, float]:
        """Staleness counts, updates and the last write's time over the spans that end at ``version`` or
        before (every span with None)."""
        k = len(self.ends) if version is None else int(np.searchsorted(self.ends, version, side="right"))
        hist = self.counts[:k].sum(axis=0) if k else np.zeros(self.counts.shape[1], dtype=np.int64)
        return hist, int(hist.sum()), float(self.times[k - 1]) if k else math.nan

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "ends": pack(np.diff(self.ends, prepend=0)),  # small steps compress
                "times": pack(self.times), "counts": pack(self.counts),
                "per_worker": {str(w): pack(c) for w, c in self.per_worker.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunRows:
        return cls(int(d["run"]), np.cumsum(unpack(d["ends"])), unpack(d["times"]).astype(float), unpack(d["counts"]),
                   {int(w): unpack(c) for w, c in d["per_worker"].items()})

    @classmethod
    def of(cls, updates: Any, run: int, segments: int = SEGMENTS) -> RunRows:
        u = analysis.applied_rows(updates[updates["run"] == run]).sort_values("version")
        tau = u["staleness"].to_numpy(np.int64)
        width = int(tau.max()) + 1 if len(tau) else 1
        version, t = u["version"].to_numpy(np.int64), u["t_write"].to_numpy(float)
        n = len(u)
        if n == 0:
            return cls(run, np.zeros(0, np.int64), np.zeros(0), np.zeros((0, 1), np.uint16), {})
        bounds = spans(n, segments)
        counts = np.stack([np.bincount(tau[a:b], minlength=width) for a, b in itertools.pairwise(bounds)])
        ends = version[bounds[1:] - 1]
        times = np.array([t[a:b].max() for a, b in itertools.pairwise(bounds)])
        workers = u["worker"].to_numpy(np.int64)
        per_worker = {int(w): _small(np.bincount(tau[workers == w], minlength=1)) for w in np.unique(workers) if w >= 0}
        return cls(run, ends.astype(np.int64), times.astype(np.float32), _small(counts), per_worker)


def spans(n: int, segments: int = SEGMENTS) -> np.ndarray:
    """Row bounds of at most ``segments`` spans over ``n`` rows, growing geometrically after the first
    :data:`FIRST` rows: a cut anywhere loses the same share of the rows before it (2.5% at 10 000 rows)."""
    if n <= segments:
        return np.arange(n + 1)
    first = min(FIRST, segments // 2)
    grown = np.geomspace(first, n, segments - first + 1).round().astype(int)
    return np.unique(np.concatenate([np.arange(first + 1), grown]))


@dataclass
class Cell:
    """A measured cell: the scenario as run, its runs' summaries and rows (:class:`RunRows`), phase statistics."""

    name: str
    backend: str
    scenario: dict[str, Any]
    runs: list[RunSummary]
    rows: list[RunRows]
    phases: list[dict[str, Any]] = field(default_factory=list)
    drift: dict[str, Any] | None = None  # simasgd.evaluation.drift.Drift.to_json(), measured right before the runs

    @property
    def last_versions(self) -> list[int]:
        return [int(r.ends[-1]) for r in self.rows if len(r.ends)]

    def stats(self, version: int | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Per-run staleness histograms (runs × τ) and scalars over the versions up to ``version``, as
        :func:`simasgd.evaluation.fidelity.point_metrics` takes them (updates/s: the runs' own, or over the cut as
        :func:`simasgd.evaluation.analysis.up_to_version` has it)."""
        cuts = [r.cut(version) for r in self.rows]
        width = max((len(h) for h, _, _ in cuts), default=1)
        hist = np.array([np.pad(h, (0, width - len(h))) for h, _, _ in cuts], dtype=float).reshape(len(cuts), width)
        rates = (np.array([s.updates_per_s for s in self.runs], dtype=float) if version is None
                 else np.array([n / t if t > 0 else math.nan for _, n, t in cuts]))
        eps = [(s.updates_to_eps, s.time_to_eps) for s in self.runs]
        return hist, {"updates_per_s": rates,
                      "updates_to_eps": np.array([math.nan if u is None else u for u, _ in eps], dtype=float),
                      "time_to_eps": np.array([math.nan if t is None else t for _, t in eps], dtype=float)}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "backend": self.backend, "scenario": self.scenario,
                "runs": [r.to_json() for r in self.runs], "rows": [r.to_json() for r in self.rows],
                "phases": self.phases, "drift": self.drift}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Cell:
        return cls(d["name"], d["backend"], d["scenario"], [RunSummary.from_json(r) for r in d["runs"]],
                   [RunRows.from_json(r) for r in d["rows"]], d.get("phases", []), d.get("drift"))

    @classmethod
    def of(cls, result: RunResult, name: str | None = None, drift: dict[str, Any] | None = None) -> Cell:
        stats = phases.phase_stats(phases.phase_frame(result.updates)) if phases.has_phases(result) else None
        rows = [RunRows.of(result.updates, r.run) for r in result.runs]
        return cls(name or str(result.scenario.get("name", "cell")), result.backend, result.scenario,
                   list(result.runs), rows, [] if stats is None else _records(stats), drift)


def _records(frame: Any) -> list[dict[str, Any]]:
    return [{k: (float(v) if isinstance(v, (float, np.floating)) else v.item() if hasattr(v, "item") else v)
             for k, v in row.items()} for row in frame.to_dict("records")]


# --- a machine's entry ------------------------------------------------------------------------

@dataclass
class Entry:
    """A machine of the corpus: who it is, the profile its cells were calibrated with, its cells."""

    name: str
    machine: dict[str, Any]
    profile: dict[str, Any]
    cells: list[Cell]
    created: str = ""
    commit: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "name": self.name, "created": self.created,
                "commit": self.commit, "machine": self.machine, "profile": self.profile,
                "cells": [c.to_json() for c in self.cells]}


def save(entry: Entry, corpus: Path) -> Path:
    """Write ``<corpus>/<name>.json.gz`` atomically."""
    if not NAME.match(entry.name):
        raise CorpusError(f"machine name {entry.name!r}: use lower-case letters, digits, '_', '-', '.' "
                          f"(at most 64, e.g. amd_epyc_2vcpu)")
    names = [c.name for c in entry.cells]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CorpusError(f"machine {entry.name}: cells measured twice: {', '.join(dup)} (one entry per cell)")
    data = json.dumps(fidelity._finite(entry.to_json()), separators=(",", ":"), allow_nan=False).encode()
    path = corpus / f"{entry.name}{SUFFIX}"
    corpus.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: Path(p).write_bytes(gzip.compress(data, 9, mtime=0)))
    return path


def load(path: Path) -> Entry:
    """One machine's entry, checked for format and version."""
    doc = files.read(path, CorpusError)
    return Entry(doc["name"], doc["machine"], doc["profile"], [Cell.from_json(c) for c in doc["cells"]],
                 doc.get("created", ""), doc.get("commit"))


def machines(corpus: Path) -> list[Path]:
    return sorted(corpus.glob(f"*{SUFFIX}"))


def measured_folders(paths: list[Path]) -> list[Path]:
    """Results folders of measured runs among ``paths``: each a results folder, or a folder holding some
    (a ``fidelity_sweep.py --out`` folder: one sub-folder per cell, with ``cpu/`` beside ``sim/``), the
    simulator's own results left out."""
    found: list[Path] = []
    for p in paths:
        if (p / "summary.json").exists():
            found.append(p)
        elif p.is_dir():
            found.extend(s.parent for s in sorted(p.rglob("summary.json")))
        else:
            raise CorpusError(f"{p}: not a results folder nor a folder of results folders")
    out = [f for f in found if _backend(f) != "sim"]
    if not out:
        raise CorpusError(f"no measured results under {', '.join(map(str, paths))} (only simulated, or none)")
    return out


def _backend(folder: Path) -> str:
    from simasgd.runs.results import FORMAT, FORMAT_VERSION, read_versioned_json

    return str(read_versioned_json(folder / "summary.json", FORMAT, FORMAT_VERSION, "results", CorpusError)
               .get("backend", ""))


def entry_from(folders: list[Path], calibrated: Profile | dict[str, Any], name: str) -> Entry:
    """An entry of measured results folders, calibrated with ``calibrated`` (kept as its TOML document, in this
    format version's keys)."""
    typed = calibrated if isinstance(calibrated, Profile) else Profile.from_doc(calibrated, f"machine {name}")
    cells, first = [], None
    for f in folders:
        result = RunResult.load(f)
        first = first or result
        cells.append(Cell.of(result, _cell_name(f, result), drift_beside(f, result)))
    meta = first.metadata if first else {}
    host = metadata.host_records(meta)
    machine = {"cpu_model": meta.get("cpu_model"), "cpu_count": meta.get("cpu_count"),
               "platform": meta.get("platform"), "hostname": meta.get("hostname"),
               "topology": {} if typed.machine is None else typed.machine.model_dump(exclude_none=True),
               "c2c_ns": None if typed.c2c is None else typed.c2c.latency_ns,
               "run_cpus": meta.get("run_cpus"), "host": host[0] if host else None}
    created = None if typed.calibration is None else typed.calibration.created
    when = created or dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return Entry(name, machine, typed.to_doc(), cells, str(when), meta.get("git_commit"))


def drift_beside(folder: Path, result: RunResult) -> dict[str, Any] | None:
    """The drift re-timed right before these measured runs: ``compare`` (and the fidelity sweep) write it into
    ``fidelity.json`` beside the backends' folders (``<cell>/cpu/``, ``<cell>/fidelity.json``); None without."""
    path = folder.parent / "fidelity.json"
    if folder.name != result.backend or not path.exists():
        return None
    try:
        doc = fidelity.load_json(path).get("metadata", {}).get("drift")
    except fidelity.FidelityError as e:
        raise CorpusError(str(e)) from None
    return doc if isinstance(doc, dict) else None


def _cell_name(folder: Path, result: RunResult) -> str:
    return str(result.scenario.get("name") or (folder.parent.name if folder.name == result.backend else folder.name))


def merged(old: Entry, new: Entry) -> Entry:
    """``old`` with ``new``'s cells added (a cell of the same name replaced); both must share one profile."""
    from simasgd.machines.profile import to_toml

    if to_toml(old.profile) != to_toml(new.profile):
        raise CorpusError(f"machine {old.name}: these results were calibrated with another profile than the "
                          f"entry's; add them under a new machine name (a recalibrated machine is a new entry)")
    names = {c.name for c in new.cells}
    return Entry(old.name, old.machine, old.profile, [c for c in old.cells if c.name not in names] + new.cells,
                 old.created, old.commit)


def describe(entry: Entry) -> dict[str, Any]:
    return {"machine": entry.name, "cpu_model": entry.machine.get("cpu_model"), "cpus": entry.machine.get("cpu_count"),
            "calibrated": entry.created, "cells": len(entry.cells), "runs": sum(len(c.runs) for c in entry.cells)}
