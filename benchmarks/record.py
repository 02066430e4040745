"""Benchmark result records: one JSON file per benchmark and machine kind, with a schema and the commit.

Every record is a JSON object whose first keys are an envelope::

    {"schema": "cpu_throughput", "schema_version": 1, "commit": "<sha>[+dirty]" | "unknown",
     "machine": {"cpu_model": ..., "cores": ..., ...}, "date": "2026-01-01T00:00:00Z", ...payload}

``write`` replaces the file atomically (a reader never sees half a record); ``read`` refuses a file of
another benchmark, one without a schema, and one written by a newer version of its writer than the
reader knows, each with a message saying which file and what to do. A benchmark keeps one current file
per machine kind (``current_path``): a rerun on the same kind of machine replaces it, and the earlier
figures stay in git.

The scripts beside this module import it as ``record`` (``python benchmarks/<script>.py`` puts this
folder first on ``sys.path``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

from simasgd.runs.metadata import cpu_model  # the model name a run's own metadata records

RESULTS = Path(__file__).resolve().parent / "results"
ENVELOPE = ("schema", "schema_version", "commit", "machine", "date")
# Words in /proc/cpuinfo model names that say nothing about the kind of machine.
_NOISE = {"r", "tm", "cpu", "processor", "core(tm)", "genuine", "authentic", "with", "radeon", "graphics"}


class RecordError(ValueError):
    """A record file that this reader must not use: another benchmark's, unversioned, or too new."""


def commit(repo: Path | None = None) -> str:
    """``git rev-parse HEAD`` of the checkout (``+dirty`` when tracked files have changes), or ``unknown``."""
    here = str(repo or Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


def machine() -> dict[str, Any]:
    """What a figure was measured on: CPU model, logical CPUs, the ones this process may use, the SIMD
    flags the kernels' speed depends on, the OS and architecture."""
    flags: list[str] = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                flags = [f for f in ("avx", "avx2", "fma", "avx512f", "avx512_vnni") if f in have]
                break
    except OSError:
        pass
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_model": cpu_model(), "cores": os.cpu_count(), "affinity": affinity, "flags": flags,
            "system": platform.system(), "arch": platform.machine()}


def slug(text: str) -> str:
    """Lower-case words joined by ``_``: a safe file-name part."""
    return "_".join(re.findall(r"[a-z0-9]+", text.lower())) or "unknown"


def machine_kind(model: str | None = None) -> str:
    """The kind of machine a CPU model name names: its vendor and family (``AMD EPYC 7B13`` →
    ``amd_epyc``, ``Intel(R) Xeon(R) CPU @ 2.20GHz`` → ``intel_xeon``), so reruns on other hosts of the
    same cloud family replace one file, and another family gets its own."""
    words = [w for w in re.findall(r"[a-z0-9]+", (model if model is not None else cpu_model()).lower())
             if w not in _NOISE]
    return "_".join(words[:2]) or "unknown"


def current_path(name: str, kind: str | None = None, folder: Path = RESULTS) -> Path:
    """The one current file of benchmark ``name`` on machine kind ``kind`` (this machine's by default)."""
    return Path(folder) / f"{name}_{kind or machine_kind()}.json"


def write(path: str | os.PathLike[str], name: str, version: int, payload: dict[str, Any], *,
          commit_: str | None = None, machine_: dict[str, Any] | None = None,
          date: str | None = None) -> Path:
    """Write ``payload`` under the envelope (this checkout's commit, this machine, now unless given) to
    ``path`` atomically, creating its folder. ``payload`` may not use an envelope key."""
    clash = [k for k in ENVELOPE if k in payload]
    if clash:
        raise RecordError(f"{name}: payload keys {clash} are the record's own")
    doc = {"schema": name, "schema_version": int(version),
           "commit": commit_ if commit_ is not None else commit(),
           "machine": machine_ if machine_ is not None else machine(),
           "date": date or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **payload}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read(path: str | os.PathLike[str], name: str, version: int) -> dict[str, Any]:
    """The record at ``path``, if it is benchmark ``name``'s at ``schema_version`` ≤ ``version``;
    otherwise ``RecordError`` saying why. An older version is returned as written: the reader decides
    what it can use of it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not JSON ({e})") from e
    if not isinstance(doc, dict) or "schema" not in doc or "schema_version" not in doc:
        raise RecordError(f"{path}: no schema/schema_version: not a benchmark record (expected {name!r})")
    if doc["schema"] != name:
        raise RecordError(f"{path}: a {doc['schema']!r} record, not {name!r}")
    if int(doc["schema_version"]) > version:
        raise RecordError(f"{path}: {name} schema version {doc['schema_version']} is newer than this reader's "
                          f"{version}: update the checkout")
    return doc
