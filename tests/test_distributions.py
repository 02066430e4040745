"""Distributions: the closed-form mean and variance agree with samples (CI from the sample)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simasgd.spec.scenario import DistSpec

SPECS = [
    {"dist": "deterministic", "mean_s": 2e-3},
    {"dist": "exponential", "mean_s": 1e-3},
    {"dist": "shifted_exponential", "shift_s": 4e-4, "mean_s": 1e-3},
    {"dist": "lognormal", "mean_s": 1e-3, "sigma": 0.6},
    {"dist": "gamma", "mean_s": 1e-3, "shape": 3.0},
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s["dist"])
def test_mean_and_variance_match_samples(spec: dict) -> None:
    d = DistSpec(**spec).build()
    x = d.sample(np.random.default_rng(1), 200_000)
    assert np.all(x >= 0)
    se = math.sqrt(d.variance / len(x))
    assert abs(x.mean() - d.mean) <= 5 * se + 1e-15
    assert d.mean == pytest.approx(spec["mean_s"])  # mean_s is the mean of the whole distribution
    if d.variance > 0:
        # Variance of the sample variance needs the 4th moment; a 3% band is > 5 SE for these at n=2e5.
        assert x.var() == pytest.approx(d.variance, rel=0.03)
    assert isinstance(d.sample(np.random.default_rng(2)), float)


def test_empirical_and_scaled(tmp_path) -> None:
    p = tmp_path / "s.txt"
    p.write_text("0.001\n0.002\n0.003\n")
    d = DistSpec(dist="empirical", path="s.txt").build(tmp_path)
    assert d.mean == pytest.approx(0.002) and set(d.sample(np.random.default_rng(0), 50)) <= {0.001, 0.002, 0.003}
    s = d.scaled(4.0)
    assert s.mean == pytest.approx(0.008) and s.variance == pytest.approx(16 * d.variance)


def test_shift_beyond_mean_is_rejected() -> None:
    with pytest.raises(ValueError, match="shift_s must be <= mean_s"):
        DistSpec(dist="shifted_exponential", shift_s=2.0, mean_s=1.0)
