"""What a result file must carry to be trusted later: where, when, with what."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata as _md
from pathlib import Path
from typing import Any

PACKAGES = ("simasgd", "numpy", "scipy", "numba", "simpy", "pandas", "pyarrow", "pydantic", "scikit-learn")


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the simasgd checkout, if it is one (``+dirty`` when it has changes)."""
    here = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "") if sha else None


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(_md.PackageNotFoundError):
            out[name] = _md.version(name)
    from simasgd.numerics import blas  # numpy and ctypes only: no numba import

    out["sgemm"] = blas.provider()  # the float32 GEMM the MLP kernels call (two OpenBLAS builds differ in speed)
    return out


def collect(backend: str, scenario_hash: str) -> dict[str, Any]:
    return {
        "backend": backend,
        "scenario_hash": scenario_hash,
        "git_commit": git_commit(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "versions": versions(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def host_state() -> dict[str, list[float] | list[int]]:
    """The 1/5/15-minute load averages and this process's CPU affinity, now (a real run takes it at its start and
    end)."""
    try:
        load = [float(x) for x in os.getloadavg()]
    except OSError:
        load = []
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    return {"loadavg": load, "affinity": cpus}


def host_records(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Every run's ``host`` record: ``host_runs`` of a merged result, else its one ``host``."""
    runs = meta.get("host_runs")
    if isinstance(runs, list):
        return [h for h in runs if isinstance(h, dict)]
    host = meta.get("host")
    return [host] if isinstance(host, dict) else []


def run_cpus(meta: dict[str, Any]) -> int | None:
    """The fewest CPUs any run's affinity held at its start (``host`` records: backends that measure this
    host keep them), or None where no run has one (a simulated result)."""
    seen = [len(h["affinity_start"]) for h in host_records(meta) if isinstance(h.get("affinity_start"), list)]
    return min(seen) if seen else None


def busy_host_warnings(meta: dict[str, Any], workers: int) -> list[str]:
    """One line per run whose 1-minute load average, at its start or end, exceeded the CPUs of its affinity
    minus its own workers plus 0.5: the machine was busy with other work, and the run's timings show it."""
    out = []
    for h in host_records(meta):
        for when in ("start", "end"):
            load, cpus = h.get(f"loadavg_{when}"), h.get(f"affinity_{when}")
            if not isinstance(load, list) or not load or not isinstance(cpus, list):
                continue
            limit = len(cpus) - workers + 0.5
            if float(load[0]) > limit:
                out.append(f"run {h.get('run', '?')}: the host was busy — 1-minute load average {float(load[0]):.2f} "
                           f"at its {when} > {len(cpus)} CPUs − {workers} workers + 0.5; its timings include other "
                           f"work")
                break
    return out


def topology_warnings(meta: dict[str, Any], calibrated_ns: float | None, ratio: float = 2.0) -> list[str]:
    """One line per run whose core-to-core hand-off latency (``c2c_ns_start``/``_end`` of its ``host``
    record, executors/c2c.py), at its start or end, is not within ``ratio`` of ``calibrated_ns`` (the
    profile's ``[c2c] latency_ns``): the host had put the CPUs elsewhere (a VM's CPUs on cores that
    share no cache, or back), and every line moved between workers cost what the profile did not
    measure. Also a run whose start and end disagree: the CPUs moved during it."""
    out = []
    for h in host_records(meta):
        probes = [h.get("c2c_ns_start"), h.get("c2c_ns_end")]
        ns = [float(x) for x in probes if isinstance(x, (int, float)) and x > 0]
        if not ns:
            continue
        lo, hi = min(ns), max(ns)
        if hi / lo > ratio:
            out.append(f"run {h.get('run', '?')}: the host moved the CPUs during the run — core-to-core hand-off "
                       f"{ns[0]:.0f} ns at its start, {ns[-1]:.0f} ns at its end")
        elif calibrated_ns and (hi / calibrated_ns > ratio or calibrated_ns / lo > ratio):
            out.append(f"run {h.get('run', '?')}: core-to-core hand-off {lo:.0f}-{hi:.0f} ns, calibrated at "
                       f"{calibrated_ns:.0f} ns: the host had put the CPUs elsewhere (lines between workers "
                       f"cost what the profile did not measure); measure again, or calibrate in this placement")
    return out


def calibrated_c2c_ns(path: os.PathLike[str] | str | None = None) -> float | None:
    """The profile's ``[c2c] latency_ns`` (this machine's profile by default), or None without one."""
    from simasgd.machines import machine, profile

    p = machine.profile_path() if path is None else path
    try:
        doc = profile.read(p)
    except (OSError, profile.ProfileError):
        return None
    ns = None if doc.c2c is None else doc.c2c.latency_ns
    return float(ns) if ns is not None and ns > 0 else None
