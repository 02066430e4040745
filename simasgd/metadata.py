"""What a result file must carry to be trusted later: where, when, with what."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata as _md
from pathlib import Path

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
    here = Path(__file__).resolve().parent.parent
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
        try:
            out[name] = _md.version(name)
        except _md.PackageNotFoundError:
            pass
    return out


def collect(backend: str, scenario_hash: str) -> dict[str, object]:
    return {
        "backend": backend,
        "scenario_hash": scenario_hash,
        "git_commit": git_commit(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "versions": versions(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
