"""Runs start only once this process's other threads are idle (executors/settle.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numba import njit

from executors import atomics as A
from executors import settle
from executors.cpu.runner import run_workload
from simasgd.numerics.workloads.constant import ConstWorkload


@njit(nogil=True, cache=True)
def _spin(duration_ns: int) -> None:
    start = A.now_ns()
    while A.now_ns() - start < duration_ns:
        A.cpu_relax()


def _spinner(seconds: float) -> threading.Thread:
    """A thread of this process spinning without the GIL (as a BLAS pool thread does) for ``seconds``."""
    _spin(1000)  # compiled before the clock starts
    t = threading.Thread(target=_spin, args=(int(seconds * 1e9),), daemon=True)
    t.start()
    time.sleep(0.01)
    return t


def _task(root: Path, tid: int, line: str) -> None:
    (root / str(tid)).mkdir()
    (root / str(tid) / "stat").write_text(line)


def test_state_reads_a_comm_holding_spaces_and_parentheses() -> None:
    assert settle._state("123 (py (x) y) R 1 2 3") == ("py (x) y", "R")
    assert settle._state("9 (python) S 1") == ("python", "S")


def test_runnable_lists_other_running_threads_only(tmp_path: Path) -> None:
    _task(tmp_path, 10, "10 (python) S 1")
    _task(tmp_path, 11, "11 (blas (x)) R 1")
    _task(tmp_path, 12, "12 (python) R 1")  # the caller
    (tmp_path / "13").mkdir()               # ended while we looked: no stat
    (tmp_path / "self").mkdir()
    assert settle.runnable(tmp_path, me=12) == ["11 (blas (x))"]
    assert settle.runnable(tmp_path / "gone", me=12) == []


@pytest.mark.hardware
def test_settle_waits_for_a_spinning_thread_then_returns() -> None:
    t = _spinner(0.3)
    s = settle.settle(timeout_s=5.0)
    assert 0.2 <= s.waited_s < 5.0 and not s.timed_out
    t.join()


@pytest.mark.hardware
def test_settle_names_the_thread_still_running_at_the_timeout() -> None:
    t = _spinner(1.0)
    s = settle.settle(timeout_s=0.05)
    assert s.timed_out and any(b.startswith(f"{t.native_id} ") for b in s.busy)
    t.join()


class _BlasWatch(ConstWorkload):
    """Records how many threads each loaded BLAS would use whenever a loss is evaluated."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def eval_loss(self, theta: np.ndarray) -> float:
        from threadpoolctl import threadpool_info

        self.seen += [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
        return super().eval_loss(theta)


@pytest.mark.hardware
def test_a_run_waits_for_spinning_threads_and_evaluates_with_one_blas_thread(
        scenario: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = settle.settle, []

    def timed(**kw: Any) -> settle.Settled:  # the runner's call, with a timeout the spinner fits in
        t = time.monotonic()
        s = real(timeout_s=10.0)
        calls.append((t, time.monotonic(), s))
        return s

    monkeypatch.setattr(settle, "settle", timed)
    wl = _BlasWatch()
    t = _spinner(3.0)
    result = run_workload(scenario({"name": "hogwild"}, workers=2, max_updates=200, max_time_s=20), 0, wl)
    t.join()
    ((called, done, s),) = calls
    assert done >= called + 0.2 and not s.timed_out  # it waited for the spinner to stop ...
    assert result.runs[0].extra["settle_s"] == round(s.waited_s, 4)  # ... and says so
    assert wl.seen and set(wl.seen) == {1}  # θ0's loss, the snapshots' and the final one: one BLAS thread
