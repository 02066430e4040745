"""Machine micro-benchmarks behind the simulator's physical mechanisms (format: ``executors/PROFILE.md``).

``executors/calibrate.py`` measures what one algorithm step costs (gradients,
copies, locks, CAS); this module measures the machine underneath, for the
simulator's cache / coherence / host-noise / Linux-scheduler mechanisms:

* ``[cache]``         the data-cache hierarchy from sysfs (sizes, sharing, line size);
* ``[copy_by_size]``  one thread's copy and SGD-update bandwidth by working-set size;
* ``[coherence]``     the same when another core wrote the buffer last (lines move core to core);
* ``[noise]``         pauses a spinning thread sees (interrupts, other processes, steal), k threads at once;
* ``[scheduler]``     the kernel's scheduler (EEVDF or CFS) and its slice parameters, when readable.

Every timed loop is a nogil numba function timed with the executor's own clock
(:func:`executors.atomics.now_ns`), so the figures are what the real workers see.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from numba import njit

from executors import atomics as A
from executors import settle
from executors.calibrate import _threads
from simasgd.memops import copy_into
from simasgd.sim.noise import quantile_grid
from simasgd.update_rule import plain_range, step_into

MIN_GAP_S = 2e-6  # a clock jump above this between two reads of a spin loop is a pause (a read is ~25 ns)
KEEP_PAUSES = 500  # pause lengths written per k (sorted, evenly subsampled)
MAX_BUFFER = 1 << 30  # cap on one copy_by_size buffer: a 4 x LLC rule on a 384 MB-L3 server would be 1.5 GB
SIZE_MIN = 16 << 10
LR = 1e-6  # the update's step: tiny, so θ stays finite (and never subnormal) over all repetitions


# --- nopython loops ---------------------------------------------------------------------------------

@njit(nogil=True, cache=True)
def _update(theta: np.ndarray, g: np.ndarray, lr: float) -> None:
    """The executors' update (update_rule's plain form), so the rate measured is the rate they run at."""
    plain_range(theta, g, lr, 1.0, 0, theta.shape[0])


@njit(nogil=True, cache=True)
def _touch(buf: np.ndarray) -> None:
    """Write every element (read-modify-write): leaves every line of ``buf`` modified in this core's cache."""
    for i in range(buf.shape[0]):
        buf[i] = buf[i] + 1.0


@njit(nogil=True, cache=True)
def _batches(dst: np.ndarray, src: np.ndarray, lr: float, update: bool, inner: int, out_ns: np.ndarray) -> None:
    """Time ``out_ns.shape[0]`` batches of ``inner`` copies (or updates ``dst -= lr*src``); batch 0 warms."""
    for b in range(out_ns.shape[0]):
        t0 = A.now_ns()
        for _ in range(inner):
            if update:
                _update(dst, src, lr)
            else:
                copy_into(dst, src)
            A.compiler_barrier()  # keeps LLVM from merging the repetitions into one
        out_ns[b] = A.now_ns() - t0


@njit(nogil=True, cache=True)
def _wait_turn(turn: np.ndarray, me: int) -> None:
    spins = 0
    while A.load_acquire(turn, 0) != me:
        A.cpu_relax()
        spins += 1
        if spins % 4096 == 0:  # the machine may be oversubscribed: let the other thread run
            A.sched_yield()


COPY, UPDATE, FRESH = 0, 1, 2  # B's timed step in a [coherence] round
STREAMS = (2, 3, 4)  # model-sized streams each moves (a fresh buffer's lines are read for ownership first)
# what A does to B's buffer before B's timed step: writes it (B takes its lines from A's cache), nothing (B
# wrote it itself: the control), or reads it (B's lines now shared by both caches: B's write must invalidate
# A's copies, B's read finds its lines downgraded)
OTHERS, OWN, HELD = 0, 1, 2


@njit(nogil=True, cache=True)
def _alternate(role: int, buf: np.ndarray, dst: np.ndarray, g: np.ndarray, op: int, lines: int,
               turn: np.ndarray, out_ns: np.ndarray) -> None:
    """Threads A (role 0) and B (role 1) take turns on ``buf`` through the acquire/release ``turn`` word.

    ``lines`` OTHERS: A writes all of ``buf`` (and of ``dst`` for FRESH), then hands over; OWN (the control
    without a core-to-core transfer): B writes them itself; HELD: B wrote ``buf`` in its previous turn and
    A copies it into a buffer of its own (``dst`` is A's here), so both caches hold its lines, as after a
    lock worker's read of the model the other worker had just updated. B then times one copy
    ``buf -> dst``, one update ``buf -= lr * g``, or one fresh-vector pass ``dst = buf - lr * g``
    (Leashed-SGD's, from a vector another core published into one another core wrote before) and hands
    back. Release/acquire orders A's writes before B's timed reads.
    """
    none = g[:0]
    for r in range(out_ns.shape[0]):
        _wait_turn(turn, role)
        if lines == HELD:
            if role == 0:
                copy_into(dst, buf)
        elif (role == 0) == (lines == OTHERS):
            _touch(buf)
            if op == FRESH:
                _touch(dst)
        if role == 1:
            t0 = A.now_ns()
            if op == UPDATE:
                _update(buf, g, LR)
            elif op == FRESH:
                step_into(dst, none, buf, none, g, LR, 0.0, 0, False)
            else:
                copy_into(dst, buf)
            A.compiler_barrier()
            out_ns[r] = A.now_ns() - t0
            if lines == HELD and op == COPY:
                _touch(buf)  # B wrote it last, as a worker whose update the other then read
        A.store_release(turn, 0, 1 - role)


@njit(nogil=True, cache=True)
def _race(buf: np.ndarray, local: np.ndarray, g: np.ndarray, arrived: np.ndarray, out_ns: np.ndarray) -> None:
    """Both threads copy ``buf`` (its lines now shared by both caches, as after two workers' reads), meet,
    then update it at once and time their own update: HOGWILD!'s two writers of one model. Measured on
    the 2-vCPU Intel Xeon at 680 KB: 121 µs each, where one update after the other core's took 35."""
    for r in range(out_ns.shape[0]):
        copy_into(local, buf)
        A.fetch_add(arrived, 0, 1)
        spins = 0
        while A.load_acquire(arrived, 0) < 2 * (r + 1):
            A.cpu_relax()
            spins += 1
            if spins % 4096 == 0:  # the machine may be oversubscribed: let the other thread run
                A.sched_yield()
        t0 = A.now_ns()
        _update(buf, g, LR)
        A.compiler_barrier()
        out_ns[r] = A.now_ns() - t0


@njit(nogil=True, cache=True)
def _pauses(duration_ns: int, min_gap_ns: int, go: np.ndarray, out: np.ndarray, stats: np.ndarray) -> None:
    """Spin reading the clock for ``duration_ns`` after ``go``; every jump > ``min_gap_ns`` is a pause.

    ``out`` gets the first pause lengths (ns); ``stats`` = [pauses, total paused ns, spun ns], counted
    even when ``out`` is full.
    """
    while A.load(go, 0) == 0:
        A.cpu_relax()
    start = A.now_ns()
    last = start
    n, paused = 0, 0
    while last - start < duration_ns:
        now = A.now_ns()
        gap = now - last
        if gap > min_gap_ns:
            if n < out.shape[0]:
                out[n] = gap
            n += 1
            paused += gap
        last = now
    stats[0], stats[1], stats[2] = n, paused, last - start


# --- [cache] ----------------------------------------------------------------------------------------

def _read(path: Path) -> str | None:
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
        kind, level, size = _read(d / "type"), _read(d / "level"), _read(d / "size")
        if kind not in ("Data", "Unified") or not level or not size:
            continue
        try:
            shared = _cpu_count(_read(d / "shared_cpu_list") or "0")
            rows.append((int(level), _size_bytes(size), shared, int(_read(d / "coherency_line_size") or 0)))
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


def copy_sizes(cache: dict[str, Any], quick: bool) -> list[int]:
    """16 KiB doubling up to max(4 x last-level cache, 64 MiB): every level, then DRAM (x8 steps when quick)."""
    top = min(max(4 * max(cache.get("sizes_bytes") or [0]), 64 << 20), MAX_BUFFER)
    if quick:
        top, step = 8 << 20, 8
    else:
        step = 2
    sizes, s = [], SIZE_MIN
    while s <= top:
        sizes.append(s)
        s *= step
    return sizes


# --- [copy_by_size] ---------------------------------------------------------------------------------

def _bandwidth(dst: np.ndarray, src: np.ndarray, update: bool, seconds: float) -> float:
    """GB/s of the median batch: batches of >= ~50 us so the clock's cost and resolution don't count."""
    probe = np.zeros(2, dtype=np.int64)
    _batches(dst, src, LR, update, 1, probe)  # warms both buffers (and compiles)
    one = max(float(probe[1]), 20.0)
    inner = int(max(1, 50_000 / one))
    batches = int(min(200, max(3, seconds / (one * inner * 1e-9))))
    out = np.zeros(batches + 1, dtype=np.int64)
    _batches(dst, src, LR, update, inner, out)
    moved = (3 if update else 2) * dst.nbytes * inner  # update: read θ, read g, write θ; copy: read + write
    return moved / max(float(np.median(out[1:])), 1.0)  # bytes/ns = GB/s


def copy_by_size(sizes: Sequence[int], seconds: float) -> dict[str, Any]:
    """One thread, warm buffers of each size: bandwidth where the working set lives (L1 ... DRAM)."""
    per = seconds / max(1, 2 * len(sizes))
    gbs, upd = [], []
    for size in sizes:
        n = size // 8
        src, dst = np.ones(n), np.full(n, 0.5)  # filled, so no first-touch page faults are timed
        gbs.append(_bandwidth(dst, src, False, per))
        upd.append(_bandwidth(dst, src, True, per))
    return {"sizes_bytes": list(sizes), "gbs": gbs, "update_gbs": upd}


# --- [coherence] ------------------------------------------------------------------------------------

def _median_round(cpus: tuple[int, int], n: int, op: int, lines: int, rounds: int) -> float:
    buf, dst, g = np.ones(n), np.full(n, 0.5), np.ones(n)
    # HELD: A copies into a buffer of its own (B's copy must not find its destination in A's cache)
    dsts = (np.full(n, 0.5) if lines == HELD else dst, dst)
    turn = np.zeros(1, dtype=np.int64)
    outs = [np.zeros(rounds + 1, dtype=np.int64) for _ in range(2)]
    _threads(_alternate, [(r, buf, dsts[r], g, op, lines, turn, outs[r]) for r in (0, 1)], cpus=list(cpus))
    return float(np.median(outs[1][1:]))  # round 0 warms B's private buffers


def _median_race(cpus: tuple[int, int], n: int, rounds: int) -> float:
    buf, g = np.ones(n), np.ones(n)
    arrived = np.zeros(1, dtype=np.int64)
    outs = [np.zeros(rounds + 1, dtype=np.int64) for _ in range(2)]
    _threads(_race, [(buf, np.zeros(n), g, arrived, outs[r]) for r in (0, 1)], cpus=list(cpus))
    return float(np.median(np.concatenate([o[1:] for o in outs])))  # round 0 warms the private buffers


def coherence(sizes: Sequence[int], seconds: float, copy_gbs: dict[int, float] | None = None) -> dict[str, Any]:
    """B's copy / update / fresh pass of a buffer right after A (another CPU) wrote it, and the control where
    B did; ``held_*``: B's copy / update of a buffer it wrote, right after A copied it (both caches hold its
    lines); ``race_gbs``: both updating it at once after both read it (:func:`_race`)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"reason": "one usable CPU: no second core to move lines from"}
    pair = (cpus[0], cpus[1])
    rows = (("read_gbs", COPY, OTHERS), ("write_gbs", UPDATE, OTHERS), ("fresh_gbs", FRESH, OTHERS),
            ("own_read_gbs", COPY, OWN), ("own_write_gbs", UPDATE, OWN), ("own_fresh_gbs", FRESH, OWN),
            ("held_read_gbs", COPY, HELD), ("held_write_gbs", UPDATE, HELD))
    per = seconds / max(1, len(rows) * len(sizes))
    out: dict[str, Any] = {"sizes_bytes": list(sizes), **{key: [] for key, _, _ in rows}, "race_gbs": []}
    rounds_used = []
    for size in sizes:
        # a round is A's write + B's op, about 5 x size bytes moved; bandwidth from copy_by_size if known
        bw = max((copy_gbs or {}).get(size, 5.0), 0.5) * 1e9
        rounds = int(min(200, max(5, per / (5 * size / bw + 2e-6))))
        rounds_used.append(rounds)
        for key, op, lines in rows:
            ns = _median_round(pair, size // 8, op, lines, rounds)
            out[key].append(STREAMS[op] * size / max(ns, 1.0))  # bytes/ns = GB/s
        out["race_gbs"].append(STREAMS[UPDATE] * size / max(_median_race(pair, size // 8, rounds), 1.0))
    out["rounds"] = min(rounds_used)
    out["cpus"] = list(pair)
    return out


# --- [noise] ----------------------------------------------------------------------------------------

def _spin_k(cpus: Sequence[int], duration_s: float, min_gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    k = len(cpus)
    go = np.zeros(1, dtype=np.int64)
    cap = int(min(1_000_000, max(1000, duration_s * 100_000)))  # >= 100k pauses/s would be one every 10 us
    outs = [np.zeros(cap, dtype=np.int64) for _ in range(k)]
    stats = [np.zeros(3, dtype=np.int64) for _ in range(k)]
    settle.settle()  # first, so the go word below still flips after the threads exist
    # all k start together: the go word flips once every thread has been created and pinned
    threading.Timer(0.02, lambda: go.__setitem__(0, 1)).start()
    _threads(_pauses, [(int(duration_s * 1e9), int(min_gap_s * 1e9), go, outs[i], stats[i]) for i in range(k)],
             cpus=list(cpus))
    kept = np.concatenate([o[:min(int(s[0]), cap)] for o, s in zip(outs, stats)])
    return kept, np.sum(np.stack(stats), axis=0)


def noise(duration_s: float, min_gap_s: float = MIN_GAP_S, max_k: int | None = None) -> dict[str, Any]:
    """Pauses of k = 1 .. usable CPUs spinning threads, each pinned to its own CPU (pooled per k)."""
    cpus = sorted(os.sched_getaffinity(0))
    ks = range(1, min(len(cpus), max_k or len(cpus)) + 1)
    _pauses(1000, 1000, np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(3, dtype=np.int64))
    out: dict[str, Any] = {"min_gap_s": min_gap_s}
    for k in ks:
        kept, (n, paused, spun) = _spin_k(cpus[:k], duration_s, min_gap_s)
        d: dict[str, Any] = {"threads": k, "duration_s": float(spun) / k * 1e-9,
                             "rate_per_s": float(n) / (float(spun) * 1e-9),
                             "busy_fraction": 1.0 - float(paused) / float(spun)}
        s = np.sort(kept) * 1e-9
        if len(s):
            grid, top = quantile_grid(s, KEEP_PAUSES)  # the longest verbatim, the rest by rank
            d.update(pauses_s=[float(x) for x in grid], count=int(len(s)), top=int(top))
            d.update(mean_s=float(paused) / float(n) * 1e-9, p50_s=float(np.median(s)),
                     p90_s=float(np.quantile(s, 0.9)), p99_s=float(np.quantile(s, 0.99)), max_s=float(s[-1]))
        else:
            d["pauses_s"] = []
        out[f"k{k}"] = d
    return out


# --- [scheduler] kernel parameters ------------------------------------------------------------------

_PARAMS = {"latency_s": "latency_ns", "min_granularity_s": "min_granularity_ns",
           "wakeup_granularity_s": "wakeup_granularity_ns", "base_slice_s": "base_slice_ns"}


def _kernel_version(release: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else None


def scheduler_params(root: Path = Path("/"), release: str | None = None) -> dict[str, Any]:
    """Which fair scheduler runs (EEVDF from 6.6) and its slice parameters where readable (ns -> s).

    CFS exposed them as sysctls (``/proc/sys/kernel/sched_*_ns``, before 5.13) or in debugfs
    (``/sys/kernel/debug/sched/*_ns``); EEVDF keeps only ``base_slice_ns`` there. debugfs is
    root-only, so usually none is readable: then the measured quantum stands for the slice.
    """
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for key, name in _PARAMS.items():
        for path in (root / "proc/sys/kernel" / f"sched_{name}", root / "sys/kernel/debug/sched" / name):
            text = _read(path)
            if text is not None:
                seen.add(name)
                try:
                    out[key] = int(text) * 1e-9
                    break
                except ValueError:
                    pass
    if release is None:
        release = _read(root / "proc/sys/kernel/osrelease") or os.uname().release
    version = _kernel_version(release)
    if "base_slice_ns" in seen:
        kernel = "eevdf"  # the file EEVDF renamed min_granularity to
    elif "wakeup_granularity_ns" in seen or "latency_ns" in seen:
        kernel = "cfs"  # both went away with EEVDF
    elif version is not None:
        kernel = "eevdf" if version >= (6, 6) else "cfs"
    else:
        kernel = "unknown"
    out.update(kernel=kernel, kernel_release=release,
               params_source="kernel" if any(k in out for k in _PARAMS) else "measured")
    return out
