"""Python's cyclic garbage collector, kept out of a simulated run's way.

A run allocates an event or more per simulated step, and many of its objects (processes, CPU grants,
transfers in flight, a cancelled round's interrupts) live across many steps: at a thousand workers tens of
thousands are alive at any moment. CPython collects its young generation every 700 net allocations, and
each collection traverses every young object still alive, so the same live objects are traversed again and
again as the workers grow; every object that existed before the run (the interpreter's modules, the
workload, the scenario) is traversed again at each full collection. At 16 workers a run triggers almost no
collection; at 1,024 workers the collector took 22–34% of the CPU time of a run of k-sync, k-async, sync and
backup (benchmarks/README_sim.md, ``sim_collector.py``).

The run's own garbage cycles are few (about one object an update attempt), so while a run goes the
collector runs rarely: its young generation is collected every :data:`YOUNG_THRESHOLD` net allocations, and
the objects made before the run are frozen out of its collections (``gc.freeze``) unless the caller froze
its own. Both are given back as they were when the last run in the process ends, however it ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG_THRESHOLD = 20_000  # net allocations between two young collections while a run goes (CPython's: 700)

_lock = threading.Lock()
_runs = 0  # runs going in this process (threads may run several at once)
_saved: tuple[int, int, int] | None = None  # the thresholds the first of them found
_froze = False  # whether the first of them froze the heap (a caller's own freeze is left alone)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The collector as a run wants it, for the duration of the block; nested and concurrent blocks share it,
    and the last to leave restores what the first found."""
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _runs, _saved, _froze
    with _lock:
        _runs += 1
        if _runs > 1:
            return
        _saved = gc.get_threshold()
        _froze = gc.get_freeze_count() == 0
        if _froze:
            gc.freeze()
        gc.set_threshold(max(_saved[0], YOUNG_THRESHOLD), *_saved[1:])


def _leave() -> None:
    global _runs, _saved, _froze
    with _lock:
        _runs -= 1
        if _runs:
            return
        assert _saved is not None  # set by the first to enter
        gc.set_threshold(*_saved)
        if _froze:
            gc.unfreeze()
        _saved, _froze = None, False
