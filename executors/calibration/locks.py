"""``[locks]`` (a token handed between two threads, an uncontended lock) and ``[cas]`` (CAS alone, two
threads on one word, and a pass of atomic adds over a vector). Format: docs/profile.md."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.c2c import ping_pong
from executors.calibration.coherence import _wait_turn
from executors.calibration.timing import run_threads


@njit(nogil=True, cache=True)
def _lock_cycle(word: np.ndarray, n: int) -> int:
    t0 = A.now_ns()
    for _ in range(n):
        while A.cas(word, 0, 0, 1) != 0:
            A.cpu_relax()
        A.store_release(word, 0, 0)
    return A.now_ns() - t0


@njit(nogil=True, cache=True)
def _cas_window(word: np.ndarray, duration_ns: int, counts: np.ndarray, slot: int, go: np.ndarray) -> None:
    """CAS-increment one word for a fixed window after ``go``; counts successes and failures."""
    while A.load(go, 0) == 0:
        A.cpu_relax()
    until = A.now_ns() + duration_ns
    ok, fail = 0, 0
    while A.now_ns() < until:
        for _ in range(64):
            old = A.load(word, 0)
            if A.cas(word, 0, old, old + 1) == old:
                ok += 1
            else:
                fail += 1
    counts[2 * slot] = ok
    counts[2 * slot + 1] = fail


def lock_figures(rounds: int, seconds: float = 1.0) -> dict[str, Any]:
    """The hand-off between two CPUs — the first two usable, as the core-to-core probe's
    (:func:`executors.c2c.latency_ns`) — and an uncontended lock cycle. Pinned: two threads the OS put
    on one CPU hand the token over at a context switch, not at a line's move between two cores."""
    usable = sorted(os.sched_getaffinity(0))
    cpus = usable[:2] if len(usable) > 1 else None
    word, ready = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    trial = run_threads(ping_pong, [(word, ready, 0, 200), (word, ready, 1, 200)], cpus)  # on a loaded machine a
    rounds = int(max(200, min(rounds, seconds / max(max(trial) * 1e-9 / 400, 1e-9))))  # hand-off can take a quantum
    word[0], ready[0] = 0, 0
    ns = run_threads(ping_pong, [(word, ready, 0, rounds), (word, ready, 1, rounds)], cpus)
    handoff = max(ns) * 1e-9 / (2 * rounds)
    w = np.zeros(1, dtype=np.int64)
    unc = _lock_cycle(w, rounds * 10) * 1e-9 / (rounds * 10)
    return {"handoff_s": handoff, "uncontended_s": unc, "rounds": rounds}


def cas_figures(seconds: float) -> dict[str, Any]:
    """CAS cost alone, then two threads on one word for the same window (time-sliced threads overlap less)."""
    word = np.zeros(1, dtype=np.int64)
    counts = np.zeros(4, dtype=np.int64)
    go = np.ones(1, dtype=np.int64)
    window = int(seconds * 1e9)
    _cas_window(word, window, counts, 0, go)
    latency = seconds / max(1, counts[0] + counts[1])
    go[0], counts[:] = 0, 0
    timer = threading.Timer(0.05, lambda: go.__setitem__(0, 1))
    timer.start()
    run_threads(_cas_window, [(word, window, counts, 0, go), (word, window, counts, 1, go)])
    ok, fail = int(counts[0] + counts[2]), int(counts[1] + counts[3])
    contended = seconds / max(1, ok)  # wall time per successful increment, both threads together
    return {"latency_s": latency, "contended_s": contended, "failure_rate": fail / max(1, ok + fail),
            "failure_cost_s": max(0.0, (contended - latency) * ok / fail) if fail else 0.0,
            "operations": ok + fail}


@njit(nogil=True, cache=True)
def _add_pass(g: np.ndarray, x: np.ndarray) -> int:
    """``g[i] += x[i]`` for every i as one atomic float add each (Lopez's accumulation: ``atomicrmw fadd``, a
    locked compare-and-swap loop on x86); its nanoseconds."""
    t0 = A.now_ns()
    for i in range(g.size):
        A.fetch_add(g, i, x[i])
    return A.now_ns() - t0


@njit(nogil=True, cache=True)
def _passes_after_reads(g: np.ndarray, x: np.ndarray, turn: np.ndarray, me: int, rounds: int,
                        times: np.ndarray) -> float:
    """Two threads taking turns ``rounds`` times: thread 1 reads ``g`` whole (its lines then in its cache), then
    thread 0 times its pass of atomic adds over it (each line moving back first). Returns thread 1's sum."""
    s = 0.0
    for r in range(rounds):
        _wait_turn(turn, me)
        if me == 1:
            for i in range(g.size):
                s += g[i]
        else:
            times[r] = _add_pass(g, x)
        A.store_release(turn, 0, 1 - me)
    return s


PASS_ELEMENTS = 131072  # a 1 MiB vector of float64: past L1 and L2 on the machines measured, as θ is


def add_pass_figures(dim: int, rounds: int, cpus: tuple[int, int] | None = None) -> dict[str, Any]:
    """A pass of ``dim`` atomic float adds over a vector: per add on lines this core holds (``pass_s``) and on
    lines another core has just read (``held_pass_s``), medians over ``rounds`` passes; on two CPUs of
    ``cpus`` where given. A one-word CAS chain (``latency_s``) waits for each CAS before the next load; a pass's
    adds are to other words, and its lines' moves overlap."""
    if cpus is None:
        allowed = sorted(os.sched_getaffinity(0))
        cpus = (allowed[0], allowed[1]) if len(allowed) >= 2 else None
    g, x = np.zeros(dim), np.full(dim, 1e-12)
    own = np.array([_add_pass(g, x) for _ in range(rounds + 2)][2:], dtype=np.float64)
    turn, times = np.ones(1, dtype=np.int64), np.zeros(rounds, dtype=np.int64)
    run_threads(_passes_after_reads, [(g, x, turn, 0, rounds, times), (g, x, turn, 1, rounds, times)],
                cpus=list(cpus) if cpus is not None else None)
    return {"pass_s": float(np.median(own)) * 1e-9 / dim, "held_pass_s": float(np.median(times)) * 1e-9 / dim,
            "pass_elements": dim}
