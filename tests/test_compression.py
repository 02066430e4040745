"""1-bit quantisation with error feedback (simasgd/numerics/compression.py): Seide et al.'s properties."""

from __future__ import annotations

import numpy as np
import pytest

from simasgd.numerics import compression
from simasgd.numerics.compression import BUCKET, message_bytes, quantize, residual_bound


def test_quantised_values_are_the_bucket_means_of_each_sign() -> None:
    rng = np.random.default_rng(1)
    g = rng.normal(size=2 * BUCKET + 17)
    e = np.zeros_like(g)
    q = np.empty_like(g)
    quantize(g, e, q)
    for lo in range(0, len(g), BUCKET):
        v, qb = g[lo:lo + BUCKET], q[lo:lo + BUCKET]
        assert np.allclose(qb[v >= 0], v[v >= 0].mean())
        assert np.allclose(qb[v < 0], v[v < 0].mean())
        assert len(np.unique(qb)) <= 2                       # one bit per element
    np.testing.assert_allclose(e, g - q)                     # the error is kept, not lost


def test_error_feedback_delivers_every_gradient_and_keeps_the_error_bounded() -> None:
    rng = np.random.default_rng(2)
    d, steps = 3 * BUCKET, 2000
    e, q = np.zeros(d), np.empty(d)
    sent, total = np.zeros(d), np.zeros(d)
    norms, worst = [], 0.0
    for _ in range(steps):
        g = rng.normal(size=d) + 0.3           # biased, so a sign quantiser without feedback would drift
        worst = max(worst, float(np.linalg.norm(g)))
        quantize(g, e, q)
        sent += q
        total += g
        norms.append(np.linalg.norm(e))
    # Σq = Σg − e: everything sent eventually (telescoping), to rounding
    np.testing.assert_allclose(sent + e, total, atol=1e-9 * steps)
    # bounded by the contraction bound, and not growing: the last quarter no larger than the bound
    assert max(norms) <= residual_bound(worst)
    late, early = np.mean(norms[-steps // 4:]), np.mean(norms[steps // 4: steps // 2])
    assert late < 1.5 * early                  # no growth with the number of messages


def test_contraction_per_bucket() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        v = rng.standard_t(2, size=BUCKET)
        e, q = np.zeros(BUCKET), np.empty(BUCKET)
        quantize(v, e, q)
        assert np.sum(e ** 2) <= (1 - 1 / BUCKET) * np.sum(v ** 2) + 1e-12


def test_out_may_be_the_gradient_buffer() -> None:
    g = np.array([1.0, -2.0, 3.0, -4.0])
    e = np.zeros(4)
    quantize(g, e, g)
    np.testing.assert_allclose(g, [2.0, -3.0, 2.0, -3.0])
    np.testing.assert_allclose(e, [-1.0, 1.0, 1.0, -1.0])


@pytest.mark.parametrize("dim,expected", [(8, 1 + 8), (BUCKET, BUCKET // 8 + 8), (BUCKET + 1, BUCKET // 8 + 1 + 16)])
def test_message_bytes(dim: int, expected: int) -> None:
    assert message_bytes(dim) == expected
    assert message_bytes(10**6) < 10**6 * 8 / 30   # ~1/32 of float32, ~1/64 of float64


def test_source_hash_is_stable() -> None:
    assert len(compression.SOURCE_HASH) == 16
