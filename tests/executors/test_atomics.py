"""The numba atomics: compare-exchange semantics, lossless fetch-add under real threads, the clock."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from numba import njit

from executors import atomics as A


@njit(nogil=True, cache=True)
def _cas_pair(a: np.ndarray) -> tuple[int, int, int]:
    first = A.cas(a, 0, 5, 7)     # matches: swaps
    second = A.cas(a, 0, 5, 9)    # no longer matches: leaves 7
    return first, second, a[0]


@njit(nogil=True, cache=True)
def _cas_float(b: np.ndarray) -> tuple[bool, bool]:
    return A.cas_float(b, 0, 1.0, 2.0), A.cas_float(b, 0, 1.0, 3.0)


@njit(nogil=True, cache=True)
def _hammer_int(a: np.ndarray, n: int) -> None:
    for _ in range(n):
        A.fetch_add(a, 0, 1)


@njit(nogil=True, cache=True)
def _hammer_float(b: np.ndarray, n: int) -> None:
    for _ in range(n):
        A.fetch_add(b, 0, 1.0)


@njit(nogil=True, cache=True)
def _hammer_cas(a: np.ndarray, n: int) -> int:
    # An increment built from CAS: retry until the swap lands; returns the failures seen.
    fails = 0
    for _ in range(n):
        while True:
            old = A.load(a, 0)
            if A.cas(a, 0, old, old + 1) == old:
                break
            fails += 1
    return fails


@njit(nogil=True, cache=True)
def _misc(a: np.ndarray) -> tuple[int, int, int]:
    A.store_release(a, 1, 11)
    seen = A.load_acquire(a, 1)
    old = A.exchange(a, 2, 42)
    A.fence()
    A.compiler_barrier()
    A.cpu_relax()
    return seen, old, A.load_relaxed(a, 2)


@njit(nogil=True, cache=True)
def _clock_pair() -> tuple[int, int]:
    t0 = A.now_ns()
    x = 0.0
    for i in range(100000):
        x += i * 1e-9
    A.compiler_barrier()
    return t0, A.now_ns() + int(x * 0)


def _threads(fn, *args, n: int = 2) -> None:  # type: ignore[no-untyped-def]
    ts = [threading.Thread(target=fn, args=args) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive()


def test_cas_swaps_only_on_match() -> None:
    a = np.array([5, 0], dtype=np.int64)
    assert _cas_pair(a) == (5, 7, 7)
    b = np.array([1.0])
    assert _cas_float(b) == (True, False) and b[0] == 2.0


def test_loads_stores_exchange() -> None:
    a = np.array([0, 0, 3], dtype=np.int64)
    assert _misc(a) == (11, 3, 42)


@pytest.mark.hardware
def test_fetch_add_from_two_threads_loses_nothing() -> None:
    n = 200_000
    a = np.zeros(1, dtype=np.int64)
    _threads(_hammer_int, a, n)
    assert a[0] == 2 * n
    b = np.zeros(1)
    _threads(_hammer_float, b, n)
    assert b[0] == 2.0 * n


@pytest.mark.hardware
def test_cas_increment_from_two_threads_is_exact() -> None:
    n = 100_000
    a = np.zeros(1, dtype=np.int64)
    _threads(_hammer_cas, a, n)
    assert a[0] == 2 * n


def test_clock_is_monotonic_nanoseconds() -> None:
    t0, t1 = _clock_pair()
    assert t1 >= t0
    # Same clock as Python's monotonic_ns: a Python reading brackets a compiled one.
    before = time.monotonic_ns()
    mid = A.clock_ns()
    time.sleep(0.01)
    after = time.monotonic_ns()
    end = A.clock_ns()
    assert before <= mid <= after <= end
    assert 5_000_000 <= end - mid <= 5_000_000_000  # a 10 ms sleep reads as ~1e7 ns: the unit is ns
