"""The simulator against the closed forms of docs/theory.md.

Warm-up is discarded; tolerances come from the sample (batch means for
correlated series, chi-square on a thinned series), never from a pinned run.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from simasgd.machines import machine
from simasgd.sim import backend
from simasgd.spec import loader

THEORY = Path(__file__).resolve().parents[2] / "scenarios" / "theory"
Z = 4.0  # half-width of the acceptance band in standard errors


@functools.cache
def simulate(name: str, *overrides: str) -> pd.DataFrame:
    """The rows of one seeded run (kept: the tests read them, never change them)."""
    sc = loader.load(THEORY / f"{name}.toml", overrides)
    return backend.run_once(sc, 0).updates


def after_warmup(u: pd.DataFrame, fraction: float = 0.05) -> pd.DataFrame:
    u = u[u.applied].sort_values("version", kind="stable")
    return u[u.version > fraction * u.version.max()]


def batch_mean_se(x: np.ndarray, batches: int = 25) -> tuple[float, float]:
    """Mean and its standard error from batch means (valid for a correlated stationary series)."""
    parts = np.array_split(np.asarray(x, dtype=float), batches)
    means = np.array([p.mean() for p in parts])
    return float(np.mean(x)), float(means.std(ddof=1) / math.sqrt(batches))


def harmonic(n: int) -> float:
    return sum(1.0 / i for i in range(1, n + 1))


def geometric_fit(tau: np.ndarray, m: int) -> float:
    """Chi-square p-value of ``tau`` against Geometric(1/M) on {0, 1, ...} (tail bin merged)."""
    p = 1.0 / m
    n = len(tau)
    kmax = int(np.floor(math.log(5.0 / (n * p)) / math.log(1 - p)))  # last bin with expected count >= 5
    probs = [p * (1 - p) ** k for k in range(kmax + 1)]
    probs.append(1.0 - sum(probs))
    observed = [np.sum(tau == k) for k in range(kmax + 1)] + [np.sum(tau > kmax)]
    return float(stats.chisquare(observed, np.array(probs) * n).pvalue)


@pytest.mark.parametrize("algorithm,extra", [
    ("hogwild", ()),
    ("mutex", ()),
    ("rwlock", ()),
    ("leashed", ()),  # the scenario's zero latencies make its CAS free too
])
@pytest.mark.slow
def test_exponential_compute_gives_geometric_staleness(algorithm: str, extra: tuple[str, ...]) -> None:
    m = 8
    u = after_warmup(simulate("geometric", f"algorithm.name={algorithm}", "stop.max_updates=120000", *extra))
    tau = u.staleness.to_numpy()
    p0, se0 = batch_mean_se(tau == 0)
    assert abs(p0 - 1 / m) < Z * se0 + 1e-3, (p0, se0)
    dev2 = (tau - tau.mean()) ** 2
    var, se_var = batch_mean_se(dev2)
    assert abs(var - m * (m - 1)) < Z * se_var, (var, se_var)
    # Consecutive updates share in-flight windows; every 10th is close enough to independent.
    assert geometric_fit(tau[::10], m) > 1e-3


@pytest.mark.slow
def test_per_worker_staleness_is_n_minus_ni_over_ni() -> None:
    # Two slow workers make the N_i differ; E[τ_i] = (N − N_i)/N_i holds for any compute times.
    u = after_warmup(simulate("geometric", "workers.stragglers.count=2", "workers.stragglers.slowdown=3"))
    n = len(u)
    for w, g in u.groupby("worker"):
        expected = (n - len(g)) / len(g)
        mean, se = batch_mean_se(g.staleness.to_numpy(), 10)
        assert abs(mean - expected) < Z * se + 0.01 * expected, (w, mean, expected, se)
    slow = u[u.worker < 2].staleness.mean()
    fast = u[u.worker >= 2].staleness.mean()
    assert slow > 2 * fast  # a 3x slower worker sees about 3x the updates in its window


def test_deterministic_equal_times_give_m_minus_one() -> None:
    m = 6
    u = after_warmup(simulate("deterministic"))
    assert (u.staleness == m - 1).all(), u.staleness.value_counts().to_dict()
    span = u.t_write.max() - u.t_write.min()
    assert (len(u) - 1) / span == pytest.approx(m / 1e-3, rel=1e-3)  # throughput M / E[X]


def repairman(m: int, lam: float, mu: float) -> tuple[float, float]:
    """Throughput and mean queueing wait of the M/M/1//M queue (docs/theory.md)."""
    rho = lam / mu
    terms = [math.factorial(m) / math.factorial(m - n) * rho**n for n in range(m + 1)]
    p0 = 1.0 / sum(terms)
    x = mu * (1 - p0)
    return x, m / x - 1 / lam - 1 / mu


@pytest.mark.slow
def test_mutex_matches_machine_repairman_queue() -> None:
    m, lam, mu = 6, 1e3, 5e3
    u = after_warmup(simulate("repairman"))
    x_theory, w_theory = repairman(m, lam, mu)
    gaps = np.diff(u.t_write.to_numpy())
    mean_gap, se_gap = batch_mean_se(gaps)
    assert abs(mean_gap - 1 / x_theory) < Z * se_gap, (1 / mean_gap, x_theory)
    wait, se_wait = batch_mean_se(u.lock_wait_s.to_numpy())
    assert abs(wait - w_theory) < Z * se_wait, (wait, w_theory, se_wait)
    assert wait > 0.1 * w_theory  # the lock is genuinely contended in this configuration


@pytest.mark.slow
def test_two_acquisitions_wait_more_than_one() -> None:
    # Ek's Alg. 2 (read under the lock too) queues twice a cycle: more waiting, less throughput.
    one = after_warmup(simulate("repairman", "stop.max_updates=30000"))
    two = after_warmup(simulate("repairman", "stop.max_updates=30000", "sim.read_lock=true",
                                "timing.read.dist=\"exponential\"", "timing.read.mean_s=2e-4"))
    assert two.lock_wait_s.mean() > one.lock_wait_s.mean()
    rate = lambda u: len(u) / (u.t_write.max() - u.t_write.min())
    assert rate(two) < rate(one)


def step_times(u: pd.DataFrame) -> np.ndarray:
    """Durations between consecutive model versions (one row per gradient: first row of each version)."""
    t = u.groupby("version").t_write.first().sort_index().to_numpy()
    return np.diff(t)


@pytest.mark.parametrize("scenario,extra,expected", [
    ("sync", (), harmonic(6) * 1e-3),
    ("sync", ('timing.gradient.dist="shifted_exponential"', "timing.gradient.shift_s=5e-4",
              "timing.gradient.mean_s=1.5e-3"), 5e-4 + harmonic(6) * 1e-3),
    ("k_sync", (), (harmonic(6) - harmonic(3)) * 1e-3),
    ("k_sync", ("algorithm.k=1",), (harmonic(6) - harmonic(5)) * 1e-3),
    ("k_sync", ('timing.gradient.dist="shifted_exponential"', "timing.gradient.shift_s=5e-4",
                "timing.gradient.mean_s=1.5e-3"), 5e-4 + (harmonic(6) - harmonic(3)) * 1e-3),
    ("k_async", (), (harmonic(6) - harmonic(3)) * 1e-3),
    ("k_async", ("algorithm.k=1",), 1e-3 / 6),
])
@pytest.mark.slow
def test_synchronous_step_times(scenario: str, extra: tuple[str, ...], expected: float) -> None:
    u = after_warmup(simulate(scenario, *extra))
    mean, se = batch_mean_se(step_times(u))
    assert abs(mean - expected) < Z * se, (mean, expected, se)


@pytest.mark.slow
def test_sync_and_k_sync_gradients_are_fresh_and_k_async_ones_stale() -> None:
    # the scenarios' own runs, which test_synchronous_step_times simulated already (simulate keeps them)
    assert (after_warmup(simulate("sync")).staleness == 0).all()
    ks = after_warmup(simulate("k_sync"))
    assert (ks.staleness == 0).all()
    assert (ks.groupby("version").size() == 3).all()  # exactly k gradients per step
    ka = after_warmup(simulate("k_async"))
    assert (ka.groupby("version").size() == 3).all()
    assert ka.staleness.mean() > 0.5  # the n − k others keep computing on an old model


def per_thread_rate(u: pd.DataFrame) -> pd.Series:
    span = u.t_write.max() - u.t_write.min()
    return u.groupby("worker").size() / span


@pytest.mark.slow
def test_oversubscribed_threads_share_cores() -> None:
    # k threads on c CPUs progress at c/k of a core each (each CPU has its own run queue, the threads spread
    # evenly)
    over = per_thread_rate(after_warmup(simulate("oversubscription"), 0.1))
    fair = per_thread_rate(after_warmup(simulate("oversubscription", "workers.count=2"), 0.1))
    laptop = machine.PRESETS["laptop-2core"]  # the scenario's machine
    q, cs = laptop.quantum_s, laptop.context_switch_s
    assert len(over) == 4 and len(fair) == 2
    assert np.allclose(fair, 1e3, rtol=5e-3)  # one thread per core: full speed
    assert np.allclose(over, 0.5e3 * q / (q + cs), rtol=0.02)  # c/k of a core, less switching


@pytest.mark.parametrize("dist", [
    'timing.gradient={dist="gamma", mean_s=1e-3, shape=4.0}',
    'timing.gradient={dist="lognormal", mean_s=1e-3, sigma=0.8}',
    'timing.gradient={dist="shifted_exponential", mean_s=1e-3, shift_s=6e-4}',
])
def test_any_compute_distribution_gives_mean_m_minus_one_and_throughput_m_over_ex(dist: str) -> None:
    m = 8
    u = after_warmup(simulate("geometric", dist, "stop.max_updates=40000"))
    tau = u.staleness.to_numpy()
    # Exact up to the edges of the window: every update lands in one window of every other worker.
    assert tau.mean() == pytest.approx(m - 1, abs=0.02)
    gap, se = batch_mean_se(np.diff(u.t_write.to_numpy()))
    assert abs(gap - 1e-3 / m) < Z * se, (gap, se)  # renewal reward: throughput M / E[X]
