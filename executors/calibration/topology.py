"""The ``[machine]`` table's topology and ``[cache]`` (the data-cache hierarchy), read from sysfs.

Format: docs/profile.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def topology() -> dict[str, int]:
    from executors.cpu.placement import read_topology

    t = read_topology()
    return {"sockets": t.machine.sockets, "cores_per_socket": t.machine.cores_per_socket,
            "threads_per_core": t.machine.threads_per_core, "numa_nodes": t.numa_nodes}


def read_text(path: Path) -> str | None:
    """A sysfs/procfs file's text, or None when absent or unreadable (debugfs is root-only)."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _size_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)", text.strip(), re.IGNORECASE)
    if not m:
        raise ValueError(f"cache size {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def _cpu_count(cpu_list: str) -> int:
    """Number of CPUs in a Linux cpu list such as ``0-3,8-11``."""
    n = 0
    for part in filter(None, cpu_list.strip().split(",")):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def cache_levels(root: Path = Path("/sys/devices/system/cpu")) -> dict[str, Any]:
    """cpu0's data and unified caches, innermost first (instruction caches hold no model lines)."""
    rows = []
    for d in sorted((root / "cpu0" / "cache").glob("index*")):
        kind, level, size = read_text(d / "type"), read_text(d / "level"), read_text(d / "size")
        if kind not in ("Data", "Unified") or not level or not size:
            continue
        try:
            shared = _cpu_count(read_text(d / "shared_cpu_list") or "0")
            rows.append((int(level), _size_bytes(size), shared, int(read_text(d / "coherency_line_size") or 0)))
        except ValueError:
            continue  # a malformed entry: leave that level out rather than guess
    rows.sort()
    if not rows:
        return {"levels": [], "sizes_bytes": [], "shared_by": [], "source": "absent"}
    out: dict[str, Any] = {"levels": [r[0] for r in rows], "sizes_bytes": [r[1] for r in rows],
                           "shared_by": [r[2] for r in rows], "source": "sysfs"}
    if rows[0][3] > 0:
        out = {"line_bytes": rows[0][3], **out}
    return out
