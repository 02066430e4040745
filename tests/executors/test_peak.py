"""The arithmetic-peak micro-benchmarks (executors/calibration/peak.py): they compute what they time, and rate it right."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from executors.calibration import peak


def test_gemm_loop_is_the_matrix_product() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    c = np.empty((64, 64))
    assert peak._gemm_loop(a, b, c, 2) > 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_best_rate_is_flops_over_the_fastest_batch() -> None:
    # a fake timer (ns per call): the warm-up, 1 rep too short to time (5 ms), 4 reps long enough
    # (30 ms), then repeated 4-rep batches, one of them the fastest (20 ms)
    times = itertools.chain([1.0, 5e6, 30e6, 40e6, 20e6], itertools.repeat(40e6))
    calls: list[int] = []

    def run(reps: int) -> float:
        calls.append(reps)
        return next(times)

    assert peak._best_rate(run, 1e9, 0.02) == pytest.approx(4 * 1e9 / 20e6)
    assert calls[:3] == [1, 1, 4] and set(calls[3:]) == {4}
