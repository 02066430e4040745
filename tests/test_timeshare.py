"""``benchmarks/contention.py --timeshare``: gradients with k threads sharing one CPU.

The table's columns from constructed passes (closed forms for the ratios and the CPU time a preemption adds),
the refusals by name, and the measurement at k = 1, 2 on a tiny MLP (one compile for the module): both threads
on the one CPU, so their CPU time together fills the window and no more.
"""

from __future__ import annotations

from typing import Any

import pytest

from executors.calibration import timeshare


def _row(cpu_us: float, preempted: float) -> dict[str, Any]:
    return {"cpu_per_gradient_s": cpu_us * 1e-6, "preemptions_per_gradient": preempted, "gradients": 100,
            "busy": 1.0}


def test_columns_from_constructed_passes() -> None:
    # three passes; k = 4 costs 10%, 20% and 0% more than k = 1 of the same pass
    passes = [{1: _row(100, 0.0), 4: _row(110, 0.5)},
              {1: _row(200, 0.0), 4: _row(240, 0.4)},
              {1: _row(100, 0.0), 4: _row(100, 0.2)}]
    t = timeshare.summarize([1, 4], passes)
    assert t["ratio"] == [1.0, pytest.approx(1.1)]
    assert t["ratio_min"][1] == pytest.approx(1.0) and t["ratio_max"][1] == pytest.approx(1.2)
    assert t["cpu_per_gradient_s"] == [pytest.approx(100e-6), pytest.approx(110e-6)]  # medians over the passes
    assert t["preemptions_per_gradient"] == [0.0, pytest.approx(0.4)]
    # (c_k − c_1) / preemptions: 10 µs / 0.5, 40 µs / 0.4, 0 µs / 0.2 → median 20 µs; none at k = 1, the reference
    assert t["per_preemption_s"] == [None, pytest.approx(20e-6)]
    assert [set(s) for s in t["samples"]] == [{"1", "4"}] * 3


@pytest.mark.parametrize(("kwargs", "word"), [({"threads": [0, 2]}, "threads"), ({"repeats": 0}, "repeats"),
                                              ({"window_s": 0.0}, "window")])
def test_refused_by_name(kwargs: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        timeshare.timeshare(**kwargs)


@pytest.mark.slow
def test_two_threads_share_the_one_cpu() -> None:
    t = timeshare.timeshare(threads=[2], window_s=0.15, repeats=2, layers=[64, 8, 10], batch=16)
    assert t["threads"] == [1, 2] and t["repeats"] == 2 and len(t["samples"]) == 2
    for s in t["samples"]:
        for k in ("1", "2"):
            assert s[k]["gradients"] > 0 and s[k]["cpu_per_gradient_s"] > 0
            # the CPU time of the threads over the window's wall time: pinned to one CPU, at most that CPU's
            # (two CPUs would give about 2); a little over 1 is the threads' start and the last gradient's end.
            # Well under 1 where another test process shares that CPU (the CI runs two on its two CPUs)
            assert 0.1 < s[k]["busy"] < 1.3, s
    assert t["ratio"][0] == 1.0 and t["ratio"][1] > 0


@pytest.mark.slow
def test_a_thread_that_cannot_take_its_cpu_fails_the_measurement_by_name() -> None:
    with pytest.raises(RuntimeError, match="a thread of k = 1 failed: OSError"):
        timeshare.timeshare(threads=[2], window_s=0.05, repeats=1, layers=[64, 8, 10], cpu=100_000)
