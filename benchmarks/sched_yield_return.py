"""When does the CPU come back to a thread that yielded it? Two threads pinned to one CPU.

Run: ``.venv/bin/python benchmarks/sched_yield_return.py [--seconds 4]`` (Linux; needs a CPU to pin to)

One thread computes without pause (it reads the clock in a loop). The other computes for a random
0.02–3.5 ms, then waits as the executor's lock waiters do (64 pauses, ``sched_yield``, again) for 30 µs of
wall time, and so on. Each of its absences (a clock jump over 20 µs) begins at a yield; the
script fits the scheduler tick to the absences' ends (the period whose phase they share best) and prints
how long the absences were, by how far before the next tick the yield came and by how long the yielder
had run. On the 2-vCPU Intel Xeon (kernel 6.18, benchmarks/fidelity.md 2026-11-25 03:09): every return at
a 4.000 ms tick (within −10…+30 µs), the next tick when the yield came ≥ 1.5 ms before it, the one after
when less, one more when the yielder had run over 3 ms.
"""

from __future__ import annotations

import argparse
import os
import threading

import numpy as np
from numba import njit

from executors import atomics as A
from executors.cpu.shared import spin_pause

GAP_NS = 20_000  # a clock jump above this is an absence (a clock read is ~25 ns)


@njit(nogil=True, cache=True)
def _computer(duration_ns: int) -> int:
    start = A.now_ns()
    n = 0
    while A.now_ns() - start < duration_ns:
        n += 1
    return n


@njit(nogil=True, cache=True)
def _yielder(duration_ns: int, seed: int, out: np.ndarray) -> int:
    """Compute, then spin-wait with yields; each absence during a wait: (its start, its length, the
    running time since the previous absence ended) into ``out``."""
    np.random.seed(seed)
    start = A.now_ns()
    last, back, n = start, start, 0
    while last - start < duration_ns and n < out.shape[0]:
        work = int(np.random.random() * 3_480_000) + 20_000
        t0 = A.now_ns()
        last = t0
        while last - t0 < work:
            now = A.now_ns()
            if now - last > GAP_NS:  # preempted while computing: not a yield
                back = now
            last = now
        t0, spins = last, 0
        while last - t0 < 30_000:
            spins += 1
            spin_pause(spins)
            now = A.now_ns()
            if now - last > GAP_NS:
                out[n, 0], out[n, 1], out[n, 2] = last, now - last, last - back
                n += 1
                back = now  # the wait's 30 µs are wall time: back on the CPU, it computes again
            last = now
    return n


def measure(seconds: float) -> np.ndarray:
    cpu = sorted(os.sched_getaffinity(0))[0]
    out = np.zeros((100_000, 3), dtype=np.int64)
    _computer(1000)
    _yielder(1000, 1, out[:1])
    got: dict[str, int] = {}

    def pinned(name: str, fn, *args) -> None:  # noqa: ANN001
        os.sched_setaffinity(0, {cpu})
        got[name] = fn(*args)

    threads = [threading.Thread(target=pinned, args=("c", _computer, int(seconds * 1e9))),
               threading.Thread(target=pinned, args=("y", _yielder, int(seconds * 1e9), 1, out))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out[:got["y"]] / 1e3  # µs


def tick(ends_us: np.ndarray) -> tuple[float, float, float]:
    """(period, phase, concentration) of the scheduler tick: the longest period in 0.9–10 ms whose phase
    the ends share nearly as well as the best one does (a tick's divisors fit as well as the tick)."""
    periods = np.arange(900.0, 10_000.0, 0.5)
    z = np.array([np.exp(2j * np.pi * ends_us / period).mean() for period in periods])
    i = int(np.nonzero(np.abs(z) >= 0.95 * np.abs(z).max())[0][-1])
    fine = np.arange(periods[i] - 1.0, periods[i] + 1.0, 0.005)  # the coarse grid drifts over many ticks
    zf = np.array([np.exp(2j * np.pi * ends_us / period).mean() for period in fine])
    j = int(np.argmax(np.abs(zf)))
    return float(fine[j]), float(np.angle(zf[j]) / (2 * np.pi) * fine[j] % fine[j]), float(abs(zf[j]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=4.0)
    a = p.parse_args()
    y = measure(a.seconds)
    if len(y) < 20:
        raise SystemExit(f"only {len(y)} absences: is another thread able to run on CPU 0?")
    start, length, ran = y[:, 0], y[:, 1], y[:, 2]
    period, phase, conc = tick(start + length)
    off = (start + length - phase) % period
    off = np.where(off > period / 2, off - period, off)
    print(f"{len(y)} yields that lost the CPU; returns fit a tick of {period:.1f} µs (concentration {conc:.3f}), "
          f"ends within p5–p95 {np.percentile(off, 5):+.0f}…{np.percentile(off, 95):+.0f} µs of it")
    to_tick = (phase - start) % period
    for lo, hi in ((0, 500), (500, 1500), (1500, 2500), (2500, period)):
        m = (to_tick >= lo) & (to_tick < hi)
        if m.sum():
            print(f"  yield {lo:>4.0f}–{hi:<4.0f} µs before a tick: {m.sum():4d}, absence median "
                  f"{np.median(length[m]):6.0f} µs, ticks waited past the next: {np.median((length[m] - to_tick[m]) / period):+.2f}")
    for lo, hi in ((0, 1000), (1000, 3000), (3000, 1e9)):
        m = (ran >= lo) & (ran < hi)
        if m.sum():
            print(f"  the yielder had run {lo:>4.0f}–{min(hi, 99999):<5.0f} µs: {m.sum():4d}, ticks waited past the next: "
                  f"{np.median((length[m] - to_tick[m]) / period):+.2f}")


if __name__ == "__main__":
    main()
