"""What this host holds: the memory a run may still allocate and the threads it may still start. A backend
checks a scenario against them before it allocates (``workers.count = 100000`` on threads), so the user reads one
line naming the key and the limit instead of numpy's or threading's error from deep inside the run."""

from __future__ import annotations

import resource
import threading
from collections.abc import Generator
from functools import lru_cache
from pathlib import Path
from typing import Any

_CGROUP = Path("/sys/fs/cgroup")



class CapacityError(ValueError):
    """The scenario asks for more than this machine holds: refused before the run allocates."""


def _read_int(path: Path) -> int | None:
    """An integer file of /proc or /sys; None where absent, unreadable or "max"."""
    try:
        text = path.read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def available_memory() -> int | None:
    """Bytes a new allocation may take now: the kernel's MemAvailable, and no more than the cgroup's
    ``memory.max`` less its ``memory.current`` (a container's limit). None where neither can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    cap, used = _read_int(_CGROUP / "memory.max"), _read_int(_CGROUP / "memory.current")
    if cap is not None and used is not None:
        found.append(max(0, cap - used))
    return min(found) if found else None


def thread_room(processes: bool = False) -> int | None:
    """Threads this process may still start: the least of the user's process limit (RLIMIT_NPROC, which counts
    threads; root is exempt), the kernel's ``threads-max`` and the cgroup's ``pids.max`` less ``pids.current``,
    less the threads this process already runs; and the memory maps it may still make (``vm.max_map_count``
    less its own), two a thread (its stack and the stack's guard page; ``processes``: new processes, which map
    into their own space, are not held by it). None where no limit can be read."""
    import os

    limits: list[int] = []
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        limits.append(soft)
    maps = _read_int(Path("/proc/sys/vm/max_map_count"))
    if maps is not None and not processes:
        try:
            mine = len(Path("/proc/self/maps").read_text().splitlines())
        except OSError:
            mine = 0
        limits.append((maps - mine) // 2 + threading.active_count())
    kernel = _read_int(Path("/proc/sys/kernel/threads-max"))
    if kernel is not None:
        limits.append(kernel)
    cap, used = _read_int(_CGROUP / "pids.max"), _read_int(_CGROUP / "pids.current")
    if cap is not None and used is not None:
        limits.append(cap - used + threading.active_count())
    return max(0, min(limits) - threading.active_count()) if limits else None


def size(n: float) -> str:
    """Bytes as a short figure: 8.2 GiB, 80 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def check_workers(backend: str, workers: int, per_worker: int, what: str, shared: int = 0,
                  task: str | None = "thread") -> None:
    """Raise :class:`CapacityError` naming ``workers.count`` when ``workers`` workers of ``per_worker`` bytes each
    (``what`` they hold, in words), plus ``shared`` bytes, exceed the memory available now, or (``task``: a
    "thread" or a "process" per worker, both counted by the same limits) the tasks this process may start. The
    limit is the most workers that fit."""
    avail = available_memory()
    room = thread_room(processes=task == "process") if task else None
    by_memory = None if avail is None else max(0, (avail - shared) // max(1, per_worker))
    limits = [x for x in (by_memory, room) if x is not None]
    if not limits or workers <= min(limits):
        return
    why = []
    if by_memory is not None and workers > by_memory:
        why.append(f"{size(per_worker)} per worker ({what}) against {size(avail or 0)} of memory available now")
    if room is not None and workers > room:
        why.append(f"one {task} per worker against {room} more this process may start")
    raise CapacityError(f"workers.count = {workers}: more than backend {backend!r} can run on this machine "
                        f"(at most {min(limits)}: {'; '.join(why)})")


@lru_cache(maxsize=1)
def simulated_worker_bytes() -> int:
    """The least memory one simulated worker holds, measured here: its placement slot, its random stream
    (``seeds.rng``) and its SimPy process, allocated for a few workers under tracemalloc. A lower bound (a worker
    holds more as it runs), so a refusal on it is never wrong. Measured once a process (tracemalloc costs tens of
    milliseconds, and every simulated run asks)."""
    import sys
    import tracemalloc

    import simpy

    from simasgd.spec import seeds

    def idle(env: simpy.Environment) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1)

    n = 64
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        env = simpy.Environment()
        held = [(seeds.rng(0, 0, seeds.Role.TIMING, w), env.process(idle(env))) for w in range(n)]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        if not was:
            tracemalloc.stop()
    del held
    return max(grown // n, sys.getsizeof(None))
