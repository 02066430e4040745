"""``[locks]`` (a token handed between two threads, an uncontended lock) and ``[cas]`` (CAS alone and
two threads on one word). Format: docs/profile.md."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.c2c import ping_pong
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
    word, ready = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    trial = run_threads(ping_pong, [(word, ready, 0, 200), (word, ready, 1, 200)])  # on a loaded machine a
    rounds = int(max(200, min(rounds, seconds / max(max(trial) * 1e-9 / 400, 1e-9))))  # hand-off can take a quantum
    word[0], ready[0] = 0, 0
    ns = run_threads(ping_pong, [(word, ready, 0, rounds), (word, ready, 1, rounds)])
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
