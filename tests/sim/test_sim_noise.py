"""Host noise (simasgd/sim/noise.py): long pauses as a compound Poisson process over compute time.

Oracle: over busy time b, pauses arrive at rate r with mean length m, so the time added has mean
r·b·m and variance r·b·E[L²]; tolerances come from that variance (not from a seeded run).
"""

from __future__ import annotations

import numpy as np
import pytest

from simasgd.sim.noise import HostNoise

PAUSES = [2e-6, 3e-6, 1.5e-5, 1.5e-5, 2e-5, 2e-4, 1e-3, 4e-3]  # a sorted, evenly subsampled grid


def _profile(k: int = 2) -> dict:
    return {"noise": {f"k{j}": {"threads": j, "rate_per_s": 400.0 * j, "pauses_s": PAUSES} for j in range(1, k + 1)}}


def test_only_pauses_longer_than_the_samples_spread_at_their_share_of_the_rate() -> None:
    n = HostNoise.from_profile(_profile(), busy_threads=2, longer_than_s=1e-4)
    assert n is not None
    np.testing.assert_array_equal(n.pauses_s, [2e-4, 1e-3, 4e-3])
    assert n.rate_per_s == pytest.approx(800.0 * 3 / len(PAUSES))
    # the largest measured k not above the busy threads: 4 busy threads on a 2-CPU profile use k2
    assert HostNoise.from_profile(_profile(), 4, 1e-4).rate_per_s == pytest.approx(800.0 * 3 / 8)
    assert HostNoise.from_profile(_profile(), 1, 1e-4).rate_per_s == pytest.approx(400.0 * 3 / 8)


def test_absent_or_nothing_long_enough() -> None:
    assert HostNoise.from_profile({}, 2, 1e-4) is None
    assert HostNoise.from_profile(None, 2, 1e-4) is None
    assert HostNoise.from_profile(_profile(), 2, 1.0) is None


def test_added_time_matches_the_compound_poisson_mean() -> None:
    n = HostNoise.from_profile(_profile(), 2, 1e-4)
    busy = np.full(200_000, 2e-4)
    added = n.add(np.random.default_rng(1), busy) - busy
    m1, m2 = float(n.pauses_s.mean()), float((n.pauses_s ** 2).mean())
    expected = n.rate_per_s * busy[0] * m1
    se = np.sqrt(n.rate_per_s * busy[0] * m2 / len(busy))
    assert abs(added.mean() - expected) < 4 * se
    assert (added >= 0).all()
    assert set(np.round(np.unique(added[added > 0]), 12)) >= {2e-4, 1e-3, 4e-3}  # single pauses, as calibrated


def test_platform_adds_noise_to_profile_gradients_only_when_switched_on(tmp_path, monkeypatch) -> None:
    import simpy

    from simasgd import loader, machine
    from simasgd.profile import workload_key
    from simasgd.sim.costs import Platform

    samples = [1.0e-3, 1.0e-3, 1.02e-3, 1.05e-3]
    workload = {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16}
    sc0 = loader.from_dict({"workload": workload})
    path = tmp_path / "this.toml"
    path.write_text("\n".join([
        "[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1", "local_latency_ns = 90.0",
        "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0", "link_bandwidth_gbs = 10.0",
        "gflops_per_core = 1.0", "quantum_s = 0.004", "context_switch_s = 2e-6", "",
        f'[gradient."{workload_key(sc0.workload)}"]', f"samples_s = {samples!r}", "batch_size = 16", "",
        "[noise.k1]", "threads = 1", "rate_per_s = 50.0", "pauses_s = [1e-6, 0.002, 0.004, 0.006]", ""]))
    means = {}
    for on in (True, False):
        sc = loader.from_dict({"name": "n", "workers": {"count": 1}, "machine": {"preset": "this"},
                               "workload": workload, "algorithm": {"name": "sequential"}, "sim": {"host_noise": on}})
        p = Platform(simpy.Environment(), sc, machine.load_profile(path), run=0, dim=100)
        means[on] = np.mean([p._grad[0]() for _ in range(40_000)])
    assert means[False] == pytest.approx(np.mean(samples), rel=0.01)
    # long pauses (> p99 − median of the samples, here 0.002/0.004/0.006) at 50 × 3/4 per second of compute
    expected = np.mean(samples) * (1 + 50 * 3 / 4 * 0.004)
    assert means[True] == pytest.approx(expected, rel=0.02)


def test_the_grid_keeps_the_longest_verbatim_and_the_rest_by_rank() -> None:
    from simasgd.sim.noise import quantile_grid, rank_weights

    s = np.sort(np.concatenate([np.full(5000, 1.5e-5), [4e-3, 2.9e-2]]))
    g, top = quantile_grid(s, 500)
    assert len(g) == 500 and top == 250 and g[0] == s[0]
    np.testing.assert_array_equal(g[-top:], s[-top:])  # the longest 250 as recorded
    g10, top10 = quantile_grid(s[:10], 500)
    np.testing.assert_array_equal(g10, s[:10])
    assert top10 == 10 and np.allclose(rank_weights(10, 10, top10), 0.1)
    # weighted by rank, the share above any threshold is the full sample's, to one rank of the body
    x = np.sort(np.random.default_rng(0).exponential(size=100_000))
    gx, tx = quantile_grid(x, 500)
    w = rank_weights(len(gx), len(x), tx)
    assert w.sum() == pytest.approx(1.0)
    for thr in (0.5, 2.0, 8.0):
        assert w[gx > thr].sum() == pytest.approx((x > thr).mean(), abs=1 / (500 - 250))
    assert np.average(gx, weights=w) == pytest.approx(x.mean(), rel=0.01)


def test_a_calibrated_grid_is_drawn_as_the_recorded_pauses() -> None:
    # 1,333 recorded pauses: 1,330 of 20 µs and three long ones (1, 5 and 25 ms), kept as calibrate keeps
    # them (500 values and the count); the long pauses come at their recorded share of the rate, with
    # their recorded mean. Drawn uniformly, an even rank grid of all 1,333 had made the 25 ms pause stand
    # for 2.7 recorded ones: 1.7x the recorded mean pause.
    from simasgd.sim.noise import quantile_grid, rank_weights, recorded

    pauses = np.sort(np.concatenate([np.full(1330, 2e-5), [1e-3, 5e-3, 2.5e-2]]))
    grid, top = quantile_grid(pauses, 500)
    assert np.average(grid, weights=rank_weights(500, len(pauses), top)) == pytest.approx(pauses.mean())
    even = pauses[np.linspace(0, len(pauses) - 1, 500).round().astype(int)]
    assert even.mean() > 1.5 * pauses.mean()  # the uniform draw of an even grid this replaces
    table = {"threads": 2, "rate_per_s": 600.0, "pauses_s": list(grid), "count": len(pauses), "top": top}
    noise = HostNoise.from_profile({"noise": {"k2": table}}, 2, longer_than_s=1e-4)
    assert noise is not None
    assert noise.rate_per_s == pytest.approx(600.0 * 3 / 1333)
    assert noise.mean_s == pytest.approx(3.1e-2 / 3)
    # older profiles: no top (an even rank grid of all, its ends for about half as many), no count
    # (rate × spin time × threads)
    w = rank_weights(500, 1333)
    assert w.sum() == pytest.approx(1.0) and w[-1] < w[1]
    assert recorded({"threads": 2, "rate_per_s": 600.0, "duration_s": 2.0, "pauses_s": [1.0]}) == 2400
    assert recorded({"pauses_s": [1.0, 2.0]}) == 2
