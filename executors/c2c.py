"""Core-to-core hand-off latency: where the host has put this machine's first two CPUs, right now.

On a virtual machine the host may move the guest's CPUs between physical cores while it runs: onto
cores sharing an L3, onto two chiplets (a cache-line hand-off several times slower) or onto the two
hardware threads of one core (faster still: they then share its execution units too), switching every
few seconds to minutes. Everything that moves lines between the two CPUs follows the placement — the
``[coherence]`` rates of lines the other core wrote, the ``[locks]`` hand-off and the ``[cas]``
latency; rates on private lines (``own_*``) do not (one two-CPU guest's figures:
benchmarks/README_cpu.md, design measurements) —
so a run measured in one mode is not the machine the profile calibrated in the other. This module
measures the mode: a token handed back and forth between two pinned threads through one word
(:func:`latency_ns`, a few ms). ``simasgd calibrate`` records it with the tables it affects, measured
row by row, each row between two probes and again while a row straddles a switch; the cpu backend
records it before and after every run (``metadata.host``), and
:func:`simasgd.runs.metadata.topology_warnings` names the runs whose mode is not the profile's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A

ROUNDS = 10_000  # hand-offs a probe times: a few milliseconds in either placement


@njit(nogil=True, cache=True)
def ping_pong(word: np.ndarray, ready: np.ndarray, me: int, rounds: int) -> int:
    """Two threads hand a token back and forth through ``word[0]`` (the lock hand-off path); ns taken from
    the moment both are there (``ready[0]`` counts arrivals: a thread's start-up is not a hand-off)."""
    other = 1 - me
    A.fetch_add(ready, 0, 1)
    spins = 0
    while A.load_acquire(ready, 0) < 2:
        A.cpu_relax()
        spins += 1
        if spins % 4096 == 0:
            A.sched_yield()
    t0 = A.now_ns()
    for _ in range(rounds):
        spins = 0
        while A.load_acquire(word, 0) != me:
            A.cpu_relax()
            spins += 1
            if spins % 4096 == 0:
                A.sched_yield()
        A.store_release(word, 0, other)
    return A.now_ns() - t0


def _pinned(cpu: int, out: list[int], i: int, word: np.ndarray, ready: np.ndarray, rounds: int) -> None:
    os.sched_setaffinity(0, {cpu})
    out[i] = ping_pong(word, ready, i, rounds)


def latency_ns(cpus: Sequence[int] | None = None, rounds: int = ROUNDS) -> float | None:
    """One-way hand-off latency between two CPUs (default: the first two usable), in ns; None with one
    usable CPU. The median of three probes, so one preempted probe does not decide."""
    usable = sorted(os.sched_getaffinity(0))
    pair = list(cpus) if cpus is not None else usable[:2]
    if len(pair) < 2:
        return None
    out = []
    for _ in range(3):
        word, ready = np.zeros(1, np.int64), np.zeros(1, np.int64)
        ns = [0, 0]
        ts = [threading.Thread(target=_pinned, args=(pair[i], ns, i, word, ready, rounds), daemon=True)
              for i in (0, 1)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        out.append(max(ns) / (2 * rounds))
    return float(np.median(out))


def same_mode(a: float | None, b: float | None, ratio: float = 2.0) -> bool:
    """Two hand-off latencies from the same placement of the CPUs (within ``ratio`` of each other); True
    when either is unknown (nothing to compare)."""
    if a is None or b is None or a <= 0 or b <= 0:
        return True
    return max(a, b) / min(a, b) <= ratio


def wait_for(like: float | None, timeout_s: float, gap_s: float = 0.25) -> float | None:
    """Probe every ``gap_s`` until the CPUs are in ``like``'s placement, for at most ``timeout_s``; the
    last probe. A host may move a guest's CPUs back and forth every few seconds: a measurement started
    right after they came home is likelier to stay there than one started at random."""
    deadline = time.monotonic() + timeout_s
    while True:
        ns = latency_ns()
        if same_mode(ns, like) or time.monotonic() >= deadline:
            return ns
        time.sleep(gap_s)


def measured(fn: Any, *args: Any, tries: int = 3, like: float | None = None,
             moved: list[dict[str, Any]] | None = None, settle_s: float = 0.0,
             accept: Callable[[dict[str, Any]], bool] | None = None, **kwargs: Any) -> dict[str, Any]:
    """``fn(*args, **kwargs)`` (a profile table) between two probes; measured again (up to ``tries``
    times) while the two disagree (the host moved the CPUs during it) or, given ``like`` (another
    table's latency), while they are not in its mode. The table gets ``c2c_ns = [before, after]``.
    Given ``moved``, each attempt set aside for another try is appended to it with its probes: the
    evidence of what the other placement did to the measurement. Given ``settle_s`` and ``like``, each
    try first waits up to that long for the CPUs to be in ``like``'s placement (:func:`wait_for`). Given
    ``accept``, a table it refuses is measured again too (a run that shows a move its probes missed)."""
    for k in range(tries):
        if settle_s > 0 and like is not None:
            wait_for(like, settle_s)
        before = latency_ns()
        table = fn(*args, **kwargs)
        after = latency_ns()
        if same_mode(before, after) and same_mode(before, like) and (accept is None or accept(table)):
            break
        if moved is not None and k < tries - 1:
            moved.append({**table, "c2c_ns": [before, after]})
    if before is not None and "reason" not in table:
        table["c2c_ns"] = [before, after]
    return table


def in_placement(ns: Sequence[float | None] | None, like: float | None) -> bool:
    """Whether both probes around a measurement (``c2c_ns``) are in ``like``'s placement and agree:
    the measurement saw one placement of the CPUs, the wanted one. True with nothing to compare."""
    if not ns:
        return True
    return same_mode(ns[0], ns[-1]) and all(same_mode(x, like) for x in ns)


def measured_rows(fn: Any, sizes: Sequence[int], seconds: float, *args: Any, tries: int = 3,
                  like: float | None = None) -> dict[str, Any]:
    """A table of one row per buffer size, ``fn(sizes, seconds, *args)``, measured one row at a time,
    each row between its own two probes and in the placement of ``like`` (else of the first probe).

    Two probes around a whole table do not prove it stayed in one placement: the host can move the CPUs
    away and back within one ``[coherence]`` table, leaving one row at half its neighbours' rate.
    A row is a fraction of a second; it is measured again (up to ``tries`` times) while its probes disagree with each
    other or with the table's placement. Rows keep their
    probes in ``c2c_ns`` (two a row); per-size columns are joined; a whole-number column (rounds, passes
    timed) keeps its smallest value, any other the first row's."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        row = measured(fn, [size], seconds / max(1, len(sizes)), *args, tries=tries, like=like)
        if "reason" in row:
            return row
        if like is None and row.get("c2c_ns"):
            like = row["c2c_ns"][0]
        rows.append(row)
    return _joined(rows)


def _joined(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, first in rows[0].items():
        if key == "c2c_ns" or (isinstance(first, list) and len(first) == len(rows[0]["sizes_bytes"])):
            out[key] = [x for r in rows for x in r.get(key, [])]
        elif isinstance(first, int) and not isinstance(first, bool):
            out[key] = min(r[key] for r in rows)
        else:
            out[key] = first
    return out
