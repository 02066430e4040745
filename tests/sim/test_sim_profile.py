"""The simulator takes its gradient times from the calibrated profile, under the key calibration writes.

A profile is written in docs/profile.md's format (`[gradient."<workload_key>"] samples_s`),
loaded as preset ``this`` the way `simasgd calibrate` output is, and the simulator's gradient
distribution for the scenario's workload must be exactly the measured samples.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simasgd.machines import machine
from simasgd.machines.profile import workload_key
from simasgd.sim.profile_tables import profile_gradient
from simasgd.spec.scenario import WorkloadConfig

LAYERS = [64, 256, 256, 10]


def _profile(tmp_path: Path, tables: dict[str, list[float]],
             concurrent: dict[str, dict[str, list[float] | float | int]] | None = None) -> Path:
    lines = ["[machine]", 'sockets = 1', "cores_per_socket = 2", "threads_per_core = 1",
             "local_latency_ns = 90.0", "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0",
             "link_bandwidth_gbs = 10.0", "gflops_per_core = 1.0", "quantum_s = 0.004",
             "context_switch_s = 2e-6", ""]
    for key, samples in tables.items():
        batch = int(key.split("-b")[-1].split("-")[0])
        lines += [f'[gradient."{key}"]', f"samples_s = {samples!r}", f"mean_s = {float(np.mean(samples))!r}",
                  f"batch_size = {batch}", 'dtype = "float64"', ""]
        conc = (concurrent or {}).get(key, {})
        if conc:
            lines += [f'[gradient."{key}".concurrent]'] + [f"{k} = {v!r}" for k, v in conc.items()] + [""]
    path = tmp_path / "this.toml"
    path.write_text("\n".join(lines))
    return path


def _wl(batch: int) -> WorkloadConfig:
    return WorkloadConfig(model="mlp", layers=LAYERS, dataset="digits", batch_size=batch)


def test_gradient_mean_is_the_profiles_measured_mean(tmp_path: Path) -> None:
    b16 = [1.0e-3, 1.2e-3, 0.9e-3, 1.1e-3]
    b64 = [3.0e-3, 3.5e-3, 3.2e-3]
    other = [9.0e-3]  # another workload at the same batch: must not be picked
    path = _profile(tmp_path, {workload_key(_wl(16)): b16, workload_key(_wl(64)): b64,
                               "mlp-64-32-10-digits-b16-float64": other})
    m = machine.load_profile(path)
    for batch, samples in ((16, b16), (64, b64)):
        d = profile_gradient(m.profile, _wl(batch))
        assert d is not None, f"no profile gradient for {workload_key(_wl(batch))}"
        x = d.sample(np.random.default_rng(0), 20000)
        assert set(np.round(x, 12)) <= set(np.round(samples, 12))
        assert np.mean(x) == pytest.approx(np.mean(samples), rel=0.02)
        assert d.mean == pytest.approx(m.profile.workload_tables()[workload_key(_wl(batch))].mean_s, rel=1e-12)


def test_nearest_batch_scaled_and_unknown_workload_falls_back(tmp_path: Path) -> None:
    path = _profile(tmp_path, {workload_key(_wl(16)): [1.0e-3, 2.0e-3]})
    m = machine.load_profile(path)
    d = profile_gradient(m.profile, _wl(32))
    assert d is not None and d.mean == pytest.approx(2 * 1.5e-3)
    assert profile_gradient(m.profile, WorkloadConfig(model="mlp", layers=[64, 32, 10], batch_size=16)) is None


def test_platform_uses_profile_gradient(tmp_path: Path) -> None:
    """End to end: a scenario on preset ``this`` draws its gradient times from the profile."""
    import simpy

    from simasgd.sim.costs import Platform
    from simasgd.spec import loader

    samples = [2.0e-3, 2.5e-3, 3.0e-3]
    path = _profile(tmp_path, {workload_key(_wl(16)): samples})
    sc = loader.from_dict({"name": "p", "workers": {"count": 1}, "machine": {"preset": "this"},
                           "workload": {"model": "mlp", "layers": LAYERS, "dataset": "digits", "batch_size": 16},
                           "algorithm": {"name": "sequential"}})
    p = Platform(simpy.Environment(), sc, machine.load_profile(path), run=0, dim=100)
    x = [p._grad[0]() for _ in range(3000)]
    assert np.mean(x) == pytest.approx(np.mean(samples), rel=0.03)


def _platform(path: Path, workers: int, placement: str | list[int] = "os", **sim):
    import simpy

    from simasgd.sim.costs import Platform
    from simasgd.spec import loader

    sc = loader.from_dict({"name": "p", "workers": {"count": workers, "placement": placement},
                           "machine": {"preset": "this"},
                           "workload": {"model": "mlp", "layers": LAYERS, "dataset": "digits", "batch_size": 16},
                           "algorithm": {"name": "hogwild"}, "sim": sim})
    return Platform(simpy.Environment(), sc, machine.load_profile(path), run=0, dim=100)


def test_concurrent_samples_when_workers_compute_at_once(tmp_path: Path) -> None:
    """calibrate's k-thread samples (`concurrent.k2`) for 2 workers on the 2-CPU profile (and on time-shared
    CPUs); 1 thread's for 1."""
    one = [1.0e-3, 1.1e-3, 1.2e-3]
    two = [1.5e-3, 1.6e-3, 4.0e-3]  # slower and with a tail: two gradients interfere
    path = _profile(tmp_path, {workload_key(_wl(16)): one}, {workload_key(_wl(16)): {"k2": two}})
    m = machine.load_profile(path)
    assert profile_gradient(m.profile, _wl(16)).mean == pytest.approx(np.mean(one))
    assert profile_gradient(m.profile, _wl(16), concurrent=2).mean == pytest.approx(np.mean(two))
    assert profile_gradient(m.profile, _wl(16), concurrent=3).mean == pytest.approx(np.mean(two))  # largest k ≤ 3
    assert profile_gradient(m.profile, _wl(32), concurrent=2).mean == pytest.approx(2 * np.mean(two))
    for workers, placement, samples, sim in (
            (1, "os", one, {}), (2, "os", two, {}),
            (4, "os", two, {}),  # 2 CPUs time-shared: 2 at once
            (2, [0, 0], one, {})):  # both on one CPU: one computes at a time
        p = _platform(path, workers, placement, **sim)
        for w in range(workers):
            x = [p._grad[w]() for _ in range(3000)]
            assert np.mean(x) == pytest.approx(np.mean(samples), rel=0.05), (workers, placement, w)


def test_single_thread_samples_without_concurrent_ones(tmp_path: Path) -> None:
    one = [1.0e-3, 1.1e-3, 1.2e-3]
    path = _profile(tmp_path, {workload_key(_wl(16)): one})
    p = _platform(path, 2)
    assert np.mean([p._grad[1]() for _ in range(3000)]) == pytest.approx(np.mean(one), rel=0.05)


def test_a_rare_interruption_kept_in_the_stored_calls_is_drawn_at_its_share_of_all_the_calls(tmp_path: Path) -> None:
    """calibrate keeps 200 of the calls it times. Two of the kept calls are 4 ms (the host ran another thread on
    the CPU), the other 198 near 200 µs; the mean over all the measured calls says such a call is 1 in 1,000 of
    them, not 1 in 100. The draws keep the 198 calls' spread and give the 4-ms calls the share that brings the
    mean to the whole's: 2 / (198·m + 2) with m = round(1 / w), w the weight that equation gives (closed form);
    their mean comes to the whole's within that rounding. Where the kept calls' mean is not above the whole's,
    or no call is that slow, the draws are the kept calls."""
    from simasgd.sim.profile_tables import INTERRUPTED_SPREADS, representative

    rng = np.random.default_rng(5)
    body = rng.normal(200e-6, 10e-6, 198)
    kept = np.concatenate([body[:100], [4e-3], body[100:], [4e-3]])
    median, p90 = float(np.median(body)), float(np.quantile(body, 0.9))
    share = 1e-3  # of all the calls
    whole = (1 - share) * body.mean() + share * 4e-3
    out = representative(kept, whole, median, p90)
    w = (whole * 198 - body.sum()) / (8e-3 - 2 * whole)
    m = round(1 / w)
    assert len(out) == 198 * m + 2 and np.sum(out > 1e-3) == 2
    assert np.mean(out > 1e-3) == pytest.approx(share, rel=0.1)
    assert out.mean() == pytest.approx(whole, rel=1e-3)
    assert np.array_equal(np.sort(out[out < 1e-3]), np.sort(np.repeat(body, m)))
    # the kept calls' mean at or below the whole's: as kept; no call beyond the spreads: as kept
    assert np.array_equal(representative(kept, kept.mean() * 1.01, median, p90), kept)
    calm = body.copy()
    calm[0] = median + 0.9 * INTERRUPTED_SPREADS * (p90 - median)
    assert np.array_equal(representative(calm, body.mean() * 0.5, median, p90), calm)


def test_the_profile_gradient_takes_the_whole_measurements_share_of_interruptions(tmp_path: Path) -> None:
    """A concurrent table whose kept calls hold 1 interruption in 100 while its recorded mean over all the calls
    holds about 1 in 1,000: the simulator's gradient for two workers has the whole's mean, the single-thread
    table (no such call) its kept calls' mean."""
    one = [1.0e-3, 1.1e-3, 1.2e-3, 1.05e-3]
    body = [float(x) for x in np.linspace(1.4e-3, 1.6e-3, 99)]
    two = [*body, 40e-3]
    whole = 0.999 * float(np.mean(body)) + 0.001 * 40e-3
    conc = {"k2": two, "k2_mean_s": whole, "k2_median_s": float(np.median(body)),
            "k2_p90_s": float(np.quantile(body, 0.9)), "k2_n": 20000}
    path = _profile(tmp_path, {workload_key(_wl(16)): one}, {workload_key(_wl(16)): conc})
    m = machine.load_profile(path)
    assert profile_gradient(m.profile, _wl(16), concurrent=2).mean == pytest.approx(whole, rel=2e-3)
    assert np.mean(two) > 1.2 * whole  # what the kept calls alone would give
    assert profile_gradient(m.profile, _wl(16)).mean == pytest.approx(np.mean(one))
