"""``[coherence]``: reading and writing lines another core wrote last (they move core to core).

Two threads pinned to two CPUs take turns on one buffer; one times its copy, update or fresh-vector pass
right after the other wrote the buffer, and the control where it wrote the buffer itself. Every timed loop
is a nogil numba function on the executor's clock (:func:`executors.atomics.now_ns`). Format:
docs/profile.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.calibration.copies import LR, _update
from executors.calibration.timing import run_threads
from simasgd.numerics.memops import copy_into
from simasgd.numerics.update_rule import step_into, step_mirrored


@njit(nogil=True, cache=True)
def _touch(buf: np.ndarray) -> None:
    """Write every element (read-modify-write): leaves every line of ``buf`` modified in this core's cache."""
    for i in range(buf.shape[0]):
        buf[i] = buf[i] + 1.0


@njit(nogil=True, cache=True)
def _wait_turn(turn: np.ndarray, me: int) -> None:
    spins = 0
    while A.load_acquire(turn, 0) != me:
        A.cpu_relax()
        spins += 1
        if spins % 4096 == 0:  # the machine may be oversubscribed: let the other thread run
            A.sched_yield()


@njit(nogil=True, cache=True)
def _wait_for(word: np.ndarray, i: int, value: int) -> None:
    """Spin until ``word[i]`` reaches ``value`` (acquire), yielding now and then as :func:`_wait_turn` does."""
    spins = 0
    while A.load_acquire(word, i) < value:
        A.cpu_relax()
        spins += 1
        if spins % 4096 == 0:
            A.sched_yield()


COPY, UPDATE, FRESH, MIRRORED = 0, 1, 2, 3  # B's timed step in a [coherence] round


# model-sized streams each moves (a fresh buffer's lines are read for ownership first; a mirrored update reads
# and writes θ and the worker's copy)
STREAMS = (2, 3, 4, 4)


# what A does to B's buffer before B's timed step: writes it (B takes its lines from A's cache), or reads it
# (B's lines now shared by both caches: B's write must invalidate A's copies, B's read finds its lines
# downgraded)
OTHERS, HELD = 0, 2


@njit(nogil=True, cache=True)
def _alternate(role: int, buf: np.ndarray, dst: np.ndarray, g: np.ndarray, op: int, lines: int,
               turn: np.ndarray, out_ns: np.ndarray) -> None:
    """Threads A (role 0) and B (role 1) take turns on ``buf`` through the acquire/release ``turn`` word.

    ``lines`` OTHERS: A writes all of ``buf`` (and of ``dst`` for FRESH), then hands over; HELD: B wrote
    ``buf`` in its previous turn and A copies it into a buffer of its own (``dst`` is A's here), so both
    caches hold its lines, as after a lock worker's read of the model the other worker had just updated.
    B then times one copy ``buf -> dst``, one update ``buf -= lr * g``, one fresh-vector pass
    ``dst = buf - lr * g`` (Leashed-SGD's, from a vector another core published into one another core
    wrote before), or one mirrored update ``buf -= lr * dst; dst = buf`` (the lock workers' update, its
    gradient written over B's copy and the new θ left there: ``update_rule.step_mirrored``) and hands back.
    Release/acquire orders A's writes before B's timed reads.
    """
    none = g[:0]
    for r in range(out_ns.shape[0]):
        _wait_turn(turn, role)
        if lines == HELD:
            if role == 0:
                copy_into(dst, buf)
        elif role == 0:  # OTHERS
            _touch(buf)
            if op == FRESH:
                _touch(dst)
        if role == 1:
            t0 = A.now_ns()
            if op == UPDATE:
                _update(buf, g, LR)
            elif op == FRESH:
                step_into(dst, none, buf, none, g, LR, 0.0, 0, False)
            elif op == MIRRORED:
                step_mirrored(buf, none, dst, dst, LR, 0.0, 1.0)
            else:
                copy_into(dst, buf)
            A.compiler_barrier()
            out_ns[r] = A.now_ns() - t0
            if lines == HELD and op == COPY:
                _touch(buf)  # B wrote it last, as a worker whose update the other then read
        A.store_release(turn, 0, 1 - role)


def _median_round(cpus: tuple[int, int], n: int, op: int, lines: int, rounds: int) -> float:
    buf, dst, g = np.ones(n), np.full(n, 0.5), np.ones(n)
    # HELD: A copies into a buffer of its own (B's copy must not find its destination in A's cache)
    dsts = (np.full(n, 0.5) if lines == HELD else dst, dst)
    turn = np.zeros(1, dtype=np.int64)
    outs = [np.zeros(rounds + 1, dtype=np.int64) for _ in range(2)]
    run_threads(_alternate, [(r, buf, dsts[r], g, op, lines, turn, outs[r]) for r in (0, 1)], cpus=list(cpus))
    return float(np.median(outs[1][1:]))  # round 0 warms B's private buffers


def coherence(sizes: Sequence[int], seconds: float, read_gbs: dict[int, float] | None = None) -> dict[str, Any]:
    """B's copy / update / fresh pass of a buffer right after A (another CPU) wrote it; ``held_*``: B's copy /
    update, and mirrored update, of a buffer it wrote, right after A copied it (both caches hold its lines)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"reason": "one usable CPU: no second core to move lines from"}
    pair = (cpus[0], cpus[1])
    rows = (("read_gbs", COPY, OTHERS), ("update_gbs", UPDATE, OTHERS), ("fresh_gbs", FRESH, OTHERS),
            ("held_read_gbs", COPY, HELD), ("held_update_gbs", UPDATE, HELD),
            ("held_mirrored_gbs", MIRRORED, HELD))
    per = seconds / max(1, len(rows) * len(sizes))
    out: dict[str, Any] = {"sizes_bytes": list(sizes), **{key: [] for key, _, _ in rows}}
    rounds_used = []
    for size in sizes:
        # a round is A's write + B's op, about 5 x size bytes moved; bandwidth from copy_by_size if known
        bw = max((read_gbs or {}).get(size, 5.0), 0.5) * 1e9
        rounds = int(min(200, max(5, per / (5 * size / bw + 2e-6))))
        rounds_used.append(rounds)
        for key, op, lines in rows:
            ns = _median_round(pair, size // 8, op, lines, rounds)
            out[key].append(STREAMS[op] * size / max(ns, 1.0))  # bytes/ns = GB/s
    out["rounds"] = min(rounds_used)
    out["cpus"] = list(pair)
    return out


@njit(nogil=True, cache=True)
def _shared_by(role: int, readers: int, buf: np.ndarray, dst: np.ndarray, op: int, ctrl: np.ndarray,
               out_ns: np.ndarray) -> None:
    """Thread B (role 0) and ``readers`` threads: each round B releases ``buf`` (which it wrote last), every
    reader copies it into a buffer of its own (so ``readers`` other caches share its lines, as after the other
    lock workers' reads of θ), and B then times one update ``buf -= lr * dst`` (UPDATE) or one mirrored
    update (MIRRORED: the new θ into B's copy ``dst`` too) of the lines they all hold. ``ctrl[0]``: the round
    the readers may copy in; ``ctrl[1]``: copies done."""
    none = buf[:0]
    for r in range(out_ns.shape[0]):
        if role == 0:
            A.store_release(ctrl, 0, r + 1)
            _wait_for(ctrl, 1, (r + 1) * readers)
            t0 = A.now_ns()
            if op == MIRRORED:
                step_mirrored(buf, none, dst, dst, LR, 0.0, 1.0)
            else:
                _update(buf, dst, LR)
            A.compiler_barrier()
            out_ns[r] = A.now_ns() - t0
        else:
            _wait_for(ctrl, 0, r + 1)
            copy_into(dst, buf)
            A.fetch_add(ctrl, 1, 1)


def shared_by(nbytes: int, threads: Sequence[int], rounds: int) -> dict[str, Any]:
    """B's update and mirrored update of a model-sized buffer it wrote last, right after k − 1 other cores
    copied it, for each k of ``threads`` that has a CPU per thread (k = 1: no reader, its own lines): the
    median ns of ``rounds`` (the first warms), as µs a step — what a lock worker's update costs when the lines
    of θ are in that many caches."""
    cpus = sorted(os.sched_getaffinity(0))
    ks = [k for k in threads if k <= len(cpus)]
    n = nbytes // 8
    out: dict[str, Any] = {"bytes": 8 * n, "threads": ks, "update_s": [], "mirrored_s": [], "rounds": rounds}
    for k in ks:
        for key, op in (("update_s", UPDATE), ("mirrored_s", MIRRORED)):
            buf = np.ones(n)
            dsts = [np.full(n, 0.5) for _ in range(k)]
            ctrl = np.zeros(8, dtype=np.int64)
            times = np.zeros(rounds + 1, dtype=np.int64)
            run_threads(_shared_by, [(role, k - 1, buf, dsts[role], op, ctrl, times if role == 0 else
                                      np.zeros(rounds + 1, dtype=np.int64)) for role in range(k)],
                        cpus=cpus[:k])
            out[key].append(float(np.median(times[1:])) * 1e-9)
    out["cpus"] = cpus[:max(ks, default=0)]
    return out
