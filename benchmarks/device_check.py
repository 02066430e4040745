"""The Python half of ``benchmarks/device_check.sh``: which part is due, status lines, the gpu part's record.

    python benchmarks/device_check.py pending [--results DIR] [--corpus DIR] [--gpu KIND] [--machine NAME]
    python benchmarks/device_check.py gpu-kind | machine
    python benchmarks/device_check.py gpu-status PART_DIR SECTIONS RC
    python benchmarks/device_check.py merge-gpu --out FILE --status FILE [--tiny] PART_DIR|RECORD ...
    python benchmarks/device_check.py ek-cells OUT_DIR --threads 7 8 [--updates N] [--algorithms ...] [--samples N]

**Which part is due** (``pending``: the part ``device_check.sh OUT`` runs when no part is named):

- ``gpu`` when this machine has an NVIDIA GPU and ``benchmarks/results/gpu_check_<gpu>.json`` (``<gpu>``: the
  first word with a digit of the GPU's name, lower case: ``NVIDIA H200`` → ``h200``, ``NVIDIA H100 80GB HBM3``
  → ``h100``) is not a record written by ``device_check.sh``'s gpu part (one with a ``device_check`` key, not
  tiny): a record of ``gpu_check.py`` alone lacks what the part adds (the anchor, the calibration, the host's
  time to ε), so its GPU is due once more;
- else ``cores`` when ``corpus/<machine>.json.gz`` is absent, ``<machine>`` being ``many_cores.py``'s name of
  this machine (``record.machine_kind()`` and the CPUs of this process: ``amd_epyc_16cpu``), or when
  ``benchmarks/results/contention_<machine>.json`` is absent or lacks the ``beside``, ``cycle``, ``timeshare`` or
  ``held`` or ``sharers`` table (``contention.py --beside --cycle --timeshare --held --sharers``; a schema-2
  record predates them), or
  ``benchmarks/results/idle_gap_<machine>.json`` (``dist_idle_gap.py``) is absent, or no committed
  ``benchmarks/results/dist_fidelity_<machine>*.md`` was simulated with the wake calibrated in its run at three
  gaps or more (its ``[network]:`` line names ``wake ... over N gaps``; then ``calibrate_network`` and
  ``dist_fidelity``): with the entry in, those
  sections alone are due (below);
- else ``none``: both are in the repository; name a part to run it again.

The command prints the part, and ``cores:SECTIONS`` (``cores:idle_gap``, ``cores:contention,idle_gap``) where
the cores part's corpus entry is in and only those records are due: ``device_check.sh OUT`` then runs those
sections alone (as ``DEVICE_CHECK_ONLY``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import record  # noqa: E402 - beside this file

GPU_SCHEMA, GPU_SCHEMA_VERSION = "gpu_check", 1  # gpu_check.py's (not imported: it needs numpy)
EK_SCHEMA, EK_SCHEMA_VERSION = "ek_numa_measured", 1
CONTENTION_SCHEMA, CONTENTION_SCHEMA_VERSION = "contention", 3  # contention.py's (not imported: it needs numba)
STATUS = re.compile(r"^\[status\] (?P<section>[\w.-]+): (?P<word>ok|failed|skipped) \((?P<detail>.*)\)$")


# --------------------------------------------------------------------------- names

def gpu_name() -> str | None:
    """The first GPU's name as ``nvidia-smi`` gives it, or None where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out and out[0].strip() else None


def gpu_kind(name: str | None) -> str:
    """The kind a GPU's result files are named by: its name's first word with a digit (``NVIDIA H200`` → ``h200``),
    else the whole name as a slug; ``none`` without a GPU."""
    if not name:
        return "none"
    words = re.findall(r"[a-z0-9]+", name.lower())
    return next((w for w in words if any(ch.isdigit() for ch in w)), record.slug(name))


def machine_name() -> str:
    """This machine's corpus entry name, as ``many_cores.py`` gives it."""
    import many_cores

    return str(many_cores.machine_name())


# --------------------------------------------------------------------------- which part

def gpu_done(results: Path, kind: str) -> tuple[bool, str]:
    path = record.current_path(GPU_SCHEMA, kind, results)
    if not path.exists():
        return False, f"{path} is absent"
    try:
        doc = record.read(path, GPU_SCHEMA, GPU_SCHEMA_VERSION)
    except record.RecordError as e:
        return False, str(e)
    if "device_check" not in doc or doc.get("tiny"):
        return False, f"{path} was not written by device_check.sh's gpu part"
    return True, f"{path} (device_check.sh, {doc.get('date')})"


TABLES = ("beside", "cycle", "timeshare", "held", "sharers")  # contention.py's optional tables the cores part writes


def cores_done(results: Path, corpus: Path, machine: str) -> tuple[bool, str]:
    """Done when the machine's corpus entry and the records of :func:`due_sections` are all in."""
    entry = corpus / f"{machine}.json.gz"
    if not entry.exists():
        return False, f"{entry} is absent"
    due = due_sections(results, machine)
    if due:
        return False, "; ".join(dict.fromkeys(why for _, why in due))
    return True, (f"{machine}'s corpus entry, contention record (with the {', '.join(TABLES)} tables), "
                  f"idle-gap record and dist cells with the wake are in the repository")


# the wake timed at several gaps (their median; one 1-ms gap overstated it on the 16-core host: README_dist.md)
WOKEN = re.compile(r"^\[network\]:.* wake [\d.]+ us past [\d.]+ us idle over [3-9] gaps", flags=re.MULTILINE)


def due_sections(results: Path, machine: str) -> list[tuple[str, str]]:
    """The cores part's sections whose records are missing, each with why: ``contention`` where
    ``contention_<machine>.json`` is absent or lacks a table of ``TABLES`` (``contention.py --beside --cycle
    --timeshare --held --sharers``), ``idle_gap`` where ``idle_gap_<machine>.json`` (``dist_idle_gap.py``) is absent,
    ``calibrate_network,dist_fidelity`` where no committed ``dist_fidelity_<machine>*.md`` was simulated with the
    wake (``[network] wake_us``) calibrated in its run."""
    due = []
    path = results / f"contention_{machine}.json"
    if not path.exists():
        due.append(("contention", f"{path} is absent"))
    else:
        try:
            doc = record.read(path, CONTENTION_SCHEMA, CONTENTION_SCHEMA_VERSION)
            lacking = [t for t in TABLES if t not in doc]
            if lacking:
                due.append(("contention", f"{path} has no {lacking[0]} table: the contention section is due"))
        except record.RecordError as e:
            due.append(("contention", str(e)))
    gap = results / f"idle_gap_{machine}.json"
    if not gap.exists():
        due.append(("idle_gap", f"{gap} is absent"))
    if not any(WOKEN.search(f.read_text(encoding="utf-8")) for f in results.glob(f"dist_fidelity_{machine}*.md")):
        why = (f"no {results}/dist_fidelity_{machine}*.md whose simulator priced waking timed at three gaps or more "
               "(a `[network]:` line naming `wake ... over N gaps`): the dist cells with the wake calibrated in their "
               "run are due")
        due += [("calibrate_network", why), ("dist_fidelity", why)]
    return due


def only_sections(part: str, results: Path, corpus: Path, machine: str) -> str:
    """The sections of a due part that are all it needs (for a cores part whose corpus entry is in: those of
    :func:`due_sections`, comma-separated), or empty: the whole part."""
    if part != "cores" or not (corpus / f"{machine}.json.gz").exists():
        return ""
    return ",".join(dict.fromkeys(name for name, _ in due_sections(results, machine)))


def pending(results: Path, corpus: Path, kind: str, machine: str) -> tuple[str, list[str]]:
    """The first part whose records are not in the repository (``gpu``, ``cores``), or ``none``; and why."""
    why = []
    if kind == "none":
        why.append("gpu: no NVIDIA GPU here")
    else:
        done, w = gpu_done(results, kind)
        why.append(f"gpu: {w}")
        if not done:
            return "gpu", why
    done, w = cores_done(results, corpus, machine)
    why.append(f"cores: {w}")
    return ("none" if done else "cores"), why


# --------------------------------------------------------------------------- the gpu part's record

def status_line(section: str, word: str, detail: str) -> str:
    detail = " ".join(detail.split())[:300]
    return f"[status] {section}: {word} ({detail})"


def gpu_status(doc_path: Path, sections: list[str], rc: int) -> list[str]:
    """One status line per ``gpu_check.py`` section asked of one process, from its record's ``sections``: a
    section the process never reached (cut by the timeout, or its own deadline) is said so, never left out."""
    try:
        done = record.read(doc_path, GPU_SCHEMA, GPU_SCHEMA_VERSION).get("sections", {})
    except (OSError, record.RecordError) as e:
        done = {}
        print(f"{doc_path}: {e}", file=sys.stderr)
    lines = []
    for name in sections:
        s = done.get(name)
        key = f"gpu_check.{name}"
        if s is None:
            lines.append(status_line(key, "skipped", f"not reached: gpu_check.py ended with rc {rc}"))
        elif s["status"] == "running":
            lines.append(status_line(key, "failed", f"cut inside it: gpu_check.py rc {rc}"))
        else:
            word, _, why = s["status"].partition(": ")
            secs = f"{s.get('seconds', 0):.0f} s"
            lines.append(status_line(key, word, f"{why}, {secs}" if why else secs))
    return lines


def read_statuses(path: Path) -> list[dict[str, str]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            m = STATUS.match(line)
            if m:
                out.append(m.groupdict())
    return out


def merge_gpu(out: Path, parts: list[Path], status: Path, tiny: bool, kind: str, deadline_s: float) -> Path:
    """``gpu_check.py`` records as one: the gpu part's processes' (a folder holding ``gpu_check.json``), or whole
    records of earlier runs (a file: a part run again with ``DEVICE_CHECK_ONLY``), in order. A section a later
    record ran replaces what an earlier one has of it (cells, checks, skips: ``check_section``); ``parts`` lists
    each process's sections, ``device_check`` the status lines (the earlier records' first, then ``status``)."""
    docs = []
    for p in parts:
        f = p if p.is_file() else p / "gpu_check.json"
        if f.exists():
            docs.append(record.read(f, GPU_SCHEMA, GPU_SCHEMA_VERSION))
    if not docs:
        raise SystemExit(f"no gpu_check record in {', '.join(map(str, parts))}")
    first = docs[0]
    payload: dict[str, Any] = {"tiny": tiny, "started": first.get("started"), "ended": docs[-1].get("ended"),
                               "env": first.get("env"), "parts": [], "checks": [], "cells": [], "skipped": [],
                               "sections": {}}
    statuses: list[dict[str, str]] = []
    for d in docs:
        ran = {name for name, s in d.get("sections", {}).items() if not s["status"].startswith("skipped")}
        for key in ("checks", "cells"):
            payload[key] = [r for r in payload[key] if r.get("check_section") not in ran] + d.get(key, [])
        payload["skipped"] = [r for r in payload["skipped"] if r.get("section") not in ran] + d.get("skipped", [])
        for name, s in d.get("sections", {}).items():
            if name in ran or name not in payload["sections"]:
                payload["sections"][name] = s
        merged = d.get("device_check")
        payload["parts"] += d["parts"] if merged and "parts" in d else [",".join(d.get("sections", {}))]
        statuses += merged.get("statuses", []) if merged else []
        for key, value in d.items():
            if key.startswith("resident_max_"):
                payload[key] = value
    payload["device_check"] = {"part": "gpu", "gpu": kind, "deadline_s": deadline_s,
                               "statuses": statuses + read_statuses(status)}
    return record.write(out, GPU_SCHEMA, GPU_SCHEMA_VERSION, payload, commit_=first.get("commit") or "unknown",
                        machine_=first.get("machine"))


# --------------------------------------------------------------------------- Ek's UMA-vs-NUMA cell, measured

def ek_cells(out: Path, threads: list[int], algorithms: list[str], updates: int, samples: int | None = None) -> int:
    """Ek 2021 S1 on this machine's cores (backend ``cpu``): each algorithm at each thread count under ``uma``
    (socket 0 first) and ``numa`` (sockets alternated) placement, beside ``ek_numa.py``'s simulated cell of
    the thesis machine and the thesis' 1.6–1.8. One process: the data are built once (``samples``: fewer rows
    than the scenario's 60,000, for the rehearsal)."""
    import ek_numa

    from simasgd.runs import backends
    from simasgd.spec import loader

    out.mkdir(parents=True, exist_ok=True)
    cells, failed = [], 0
    print("| algorithm | threads | UMA updates/s | NUMA updates/s | NUMA/UMA measured | simulated (thesis machine) "
          "| thesis |", flush=True)
    for m in threads:
        for a in algorithms:
            rates: dict[str, float] = {}
            for p in ("uma", "numa"):
                sc = loader.load(ek_numa.S1, [f"algorithm.name={a}", f"workers.placement={p}",
                                              f"workers.count={m}", f"stop.max_updates={updates}",
                                              "stop.max_time_s=30",
                                              *([f"workload.samples={samples}"] if samples else [])])
                try:
                    r = backends.run(sc, "cpu", repeats=1, out=out / f"cpu-{a}-n{m}-{p}")
                    rates[p] = float(r.runs[0].updates_per_s)
                except Exception as e:  # one failing cell is a row saying why
                    failed += 1
                    rates[p] = math.nan
                    print(f"  {a} n={m} {p}: {type(e).__name__}: {e}", flush=True)
            try:
                (sim,) = ek_numa.run_variant(ek_numa.VARIANTS["socket model (preset)"], updates, (a,), (m,))
                sim_ratio = sim.ratio
            except Exception as e:
                failed += 1
                sim_ratio = math.nan
                print(f"  simulated {a} n={m}: {type(e).__name__}: {e}", flush=True)
            ratio = rates["numa"] / rates["uma"] if rates["uma"] > 0 else math.nan
            cells.append({"algorithm": a, "threads": m, "uma_per_s": rates["uma"], "numa_per_s": rates["numa"],
                          "ratio": ratio, "simulated_ratio": sim_ratio})
            print(f"| {a} | {m} | {rates['uma']:,.0f} | {rates['numa']:,.0f} | {ratio:.2f} | {sim_ratio:.2f} | "
                  f"{ek_numa.THESIS[0]:.1f}–{ek_numa.THESIS[1]:.1f} |", flush=True)
            record.write(out / "ek_numa_measured.json", EK_SCHEMA, EK_SCHEMA_VERSION,
                         json.loads(json.dumps({"updates": updates, "scenario": str(ek_numa.S1.relative_to(ROOT)),
                                                "simulated_preset": ek_numa.PRESET,
                                                "thesis_ratio": list(ek_numa.THESIS), "cells": cells})))
    return 1 if failed else 0


# --------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pending", help="the part due here: gpu, cores[:SECTIONS] or none (why on stderr)")
    p.add_argument("--results", type=Path, default=record.RESULTS)
    p.add_argument("--corpus", type=Path, default=ROOT / "corpus")
    p.add_argument("--gpu", default=None, help="the GPU's kind (default: nvidia-smi's first GPU)")
    p.add_argument("--machine", default=None, help="the corpus entry's name (default: many_cores.py's)")
    sub.add_parser("gpu-kind", help="this machine's GPU kind (none without one)")
    sub.add_parser("machine", help="this machine's corpus entry name")
    p = sub.add_parser("gpu-status", help="status lines of one gpu_check.py process's sections")
    p.add_argument("part", type=Path)
    p.add_argument("sections")
    p.add_argument("rc", type=int)
    p = sub.add_parser("merge-gpu", help="gpu_check.py records as one (folders of the part's processes, or "
                                         "records of earlier runs of the part)")
    p.add_argument("parts", type=Path, nargs="+")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--status", type=Path, required=True)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--gpu", default="none")
    p.add_argument("--deadline", type=float, default=math.nan)
    p = sub.add_parser("ek-cells", help="Ek's UMA-vs-NUMA cell measured on this machine")
    p.add_argument("out", type=Path)
    p.add_argument("--threads", type=int, nargs="+", default=[7, 8])
    p.add_argument("--algorithms", nargs="+", default=["mutex", "rwlock", "hogwild", "leashed"])
    p.add_argument("--updates", type=int, default=2000)
    p.add_argument("--samples", type=int, default=None, help="the data's rows (default: the scenario's)")
    a = ap.parse_args(argv)
    if a.cmd == "pending":
        kind = a.gpu or gpu_kind(gpu_name())
        machine = a.machine or machine_name()
        part, why = pending(a.results, a.corpus, kind, machine)
        for w in why:
            print(f"  {w}", file=sys.stderr)
        only = only_sections(part, a.results, a.corpus, machine)
        print(f"{part}:{only}" if only else part)
    elif a.cmd == "gpu-kind":
        print(gpu_kind(gpu_name()))
    elif a.cmd == "machine":
        print(machine_name())
    elif a.cmd == "gpu-status":
        print("\n".join(gpu_status(a.part / "gpu_check.json", a.sections.split(","), a.rc)))
    elif a.cmd == "merge-gpu":
        t = time.perf_counter()
        path = merge_gpu(a.out, a.parts, a.status, a.tiny, a.gpu, a.deadline)
        doc = json.loads(path.read_text())
        print(f"{path}: {len(doc['cells'])} cells, {len(doc['checks'])} checks, {len(doc['skipped'])} skipped "
              f"({time.perf_counter() - t:.1f} s)")
    elif a.cmd == "ek-cells":
        os.environ.setdefault("MPLBACKEND", "Agg")
        return ek_cells(a.out, a.threads, a.algorithms, a.updates, a.samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
