"""Analysis of RunResults built from known distributions (no backend needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simasgd.evaluation import analysis

# RunResults from staleness samples: the fixtures `make_result` and `geometric` (tests/conftest.py)


def test_histogram_counts_every_applied_update_once_pooled_and_per_worker(make_result, geometric):
    rng = np.random.default_rng(1)
    r = make_result([geometric(rng, 4, 2000), geometric(rng, 4, 1000)])
    h = analysis.histogram(r, by_worker=True)
    pooled = h[h["worker"] == analysis.ALL]
    assert pooled["count"].sum() == 3000
    assert pooled["fraction"].sum() == pytest.approx(1.0)
    per_worker = h[h["worker"] != analysis.ALL]
    assert sorted(per_worker["worker"].unique()) == [0, 1, 2, 3]
    assert per_worker["count"].sum() == 3000
    assert per_worker[per_worker["worker"] == 0]["count"].sum() == 500 + 250
    assert pooled.set_index("staleness")["count"].get(0) == np.sum(analysis.staleness(r) == 0)


def test_dropped_attempts_are_not_in_the_staleness_distribution(make_result):
    r = make_result([np.array([0, 1, 2, 3])])
    r.updates.loc[r.updates["staleness"] == 3, "applied"] = False
    assert sorted(analysis.staleness(r).tolist()) == [0, 1, 2]
    assert analysis.run_table(r)["dropped_fraction"].iloc[0] == pytest.approx(0.25)


def test_quantiles_match_numpy_inverted_cdf_and_the_geometric_mean(make_result, geometric):
    rng = np.random.default_rng(2)
    m, n = 8, 40_000
    tau = geometric(rng, m, n)
    r = make_result([tau])
    q = analysis.quantiles(r).iloc[0]
    for p in analysis.QUANTILES:
        assert q[f"p{p * 100:g}"] == np.quantile(tau, p, method="inverted_cdf")
    # Mean of the geometric law is M − 1; allow 4 standard errors (sd = sqrt(M(M−1))).
    assert abs(q["mean"] - (m - 1)) < 4 * math.sqrt(m * (m - 1) / n)


@pytest.mark.parametrize("shift", [0, 1, 3])
def test_ks_and_wasserstein_from_counts_equal_scipy(shift, geometric):
    rng = np.random.default_rng(3 + shift)
    a = geometric(rng, 4, 3000)
    b = geometric(rng, 5, 2000) + shift
    ca, cb = analysis.counts(a), analysis.counts(b)
    assert analysis.ks_from_counts(ca, cb) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)
    assert analysis.wasserstein_from_counts(ca, cb) == pytest.approx(stats.wasserstein_distance(a, b), rel=1e-9)


def test_identical_samples_have_zero_distance(geometric):
    a = geometric(np.random.default_rng(4), 4, 1000)
    assert analysis.ks_from_counts(analysis.counts(a), analysis.counts(a)) == 0.0
    assert analysis.wasserstein_from_counts(analysis.counts(a), analysis.counts(a)) == 0.0


def test_run_table_and_efficiency_interval_covers_the_known_rate(make_result, geometric):
    rng = np.random.default_rng(5)
    rates = list(rng.normal(1000.0, 50.0, size=12))
    r = make_result([geometric(rng, 4, 500) for _ in rates], rates=rates,
                    updates_to_eps=[300] * 6 + [None] * 6)
    t = analysis.run_table(r)
    assert t["updates_per_s"].tolist() == pytest.approx(rates)
    assert t["reached"].sum() == 6
    e = analysis.efficiency(r).set_index("metric")
    m, lo, hi = e.loc["updates_per_s", ["mean", "ci_low", "ci_high"]]
    assert lo < np.mean(rates) < hi and lo < m < hi
    # the interval is the t-interval of the sample: half-width t_{0.975, n-1} s / sqrt(n)
    half = stats.t.ppf(0.975, 11) * np.std(rates, ddof=1) / math.sqrt(12)
    assert hi - lo == pytest.approx(2 * half)
    assert e.loc["updates_to_eps", "runs"] == 6
    assert analysis.outcomes(r) == {"runs": 12, "reached": 6, "crashed": 0, "not_reached": 6}


def test_mean_ci_needs_two_values():
    m, lo, hi = analysis.mean_ci([3.0])
    assert m == 3.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(x) for x in analysis.mean_ci([]))


def test_negative_staleness_is_rejected():
    with pytest.raises(ValueError, match=">= 0"):
        analysis.counts(np.array([0, -1]))


def test_unknown_retries_are_left_out_of_the_mean(make_result):
    r = make_result([np.array([0, 0, 1, 1])])
    r.updates["retries"] = [0, 2, -1, -1]
    assert analysis.run_table(r)["mean_retries"].iloc[0] == pytest.approx(1.0)
