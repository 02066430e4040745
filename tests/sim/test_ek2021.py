"""Ek 2021's findings on the thesis machine, as properties of the simulator (scenarios/ek2021/README.md).

Each test is a finding of the thesis with its place in the text; the simulator runs the
scenario file it comes from (timing-only, a shorter budget). Comparisons between
configurations are of means over thousands of updates, with the standard error from the
sample where a difference is small.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simasgd.machines.machine import PRESETS, place, resolve
from simasgd.sim import backend, sockets
from simasgd.spec import loader
from simasgd.spec.scenario import WorkloadConfig

EK = Path(__file__).resolve().parents[2] / "scenarios" / "ek2021"
S1 = EK / "s1_uma_numa.toml"
FOUR = ("mutex", "rwlock", "hogwild", "leashed")


def _run(path: Path, *overrides: str, updates: int = 6000):
    sc = loader.load(path, [f"stop.max_updates={updates}", *overrides])
    u = backend.run_once(sc, 0).updates
    return sc, u[(u.version > 0.1 * u.version.max()) & u.applied]


def _rate(u) -> float:
    return (len(u) - 1) / float(u.t_write.max() - u.t_write.min())


@pytest.fixture(scope="module")
def s1() -> dict[tuple[str, str, int], object]:
    return {(a, p, m): _run(S1, f"algorithm.name={a}", f"workers.placement={p}", f"workers.count={m}")[1]
            for a in FOUR for p in ("uma", "numa") for m in (7, 8)}


@pytest.mark.slow
@pytest.mark.parametrize("m", [7, 8])
@pytest.mark.parametrize("algorithm", FOUR)
def test_numa_is_faster_than_uma_at_seven_and_eight_threads(s1, algorithm: str, m: int) -> None:
    # §4.7 S1, Fig. 4.2-4.3: NUMA reaches 2% 60-80% faster than UMA, all of it from computational
    # efficiency (updates per second), for every algorithm.
    assert _rate(s1[(algorithm, "numa", m)]) > 1.1 * _rate(s1[(algorithm, "uma", m)])


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["uma", "numa"])
def test_mutex_and_rwlock_staleness_almost_identical_below_16_threads(s1, placement: str) -> None:
    # §4.7 S3: "The lock-based algorithms have almost identical staleness distribution except for
    # higher parallelism (m = {16, 32})": mean staleness within 10% at 8 threads, B = 64.
    a, b = (s1[(n, placement, 8)].staleness.to_numpy(float) for n in ("mutex", "rwlock"))
    assert abs(a.mean() - b.mean()) < 0.1 * a.mean()


@pytest.mark.slow
def test_hogwild_numa_staleness_splits_by_socket(s1) -> None:
    # §4.7 S1, Fig. 4.4: under NUMA HOGWILD!'s staleness is grouped in two, by socket.
    sc = loader.load(S1, ["algorithm.name=hogwild", "workers.placement=numa", "workers.count=8"])
    m = resolve(sc.machine)
    sock = np.array([m.socket_of(c) for c in place(m, 8, "numa")])
    u = s1[("hogwild", "numa", 8)]
    tau, on1 = u.staleness.to_numpy(float), sock[u.worker.to_numpy()] == 1
    d = tau[on1].mean() - tau[~on1].mean()
    se = np.sqrt(tau[on1].var() / on1.sum() + tau[~on1].var() / (~on1).sum())
    assert d > 3 * se


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", FOUR)
def test_placement_matters_little_at_two_threads(algorithm: str) -> None:
    # §4.7 S2 / Table 4.3: the memory model makes less difference at m = 2 (UMA slightly faster).
    uma = _rate(_run(S1, f"algorithm.name={algorithm}", "workers.placement=uma", "workers.count=2")[1])
    numa = _rate(_run(S1, f"algorithm.name={algorithm}", "workers.placement=numa", "workers.count=2")[1])
    assert uma >= numa and numa > 0.8 * uma


@pytest.mark.slow
@pytest.mark.parametrize("persistence", ["0", "1"])
def test_leashed_staleness_grows_with_batch(persistence: str) -> None:
    # §4.7 S3: "For leashed and HOGWILD!, staleness is increased with increasing batch size."
    path = EK / "s3_leashed.toml"
    means = [_run(path, "workers.count=8", f"workload.batch_size={b}", f"algorithm.persistence={persistence}",
                  updates=3000)[1].staleness.mean() for b in (16, 64, 512)]
    assert means[0] < means[1] < means[2]


def test_footprint_overflows_one_socket_at_seven_threads_not_four() -> None:
    # The mechanism behind the NUMA finding, from the preset's public numbers alone.
    m = PRESETS["xeon-e5-2687w-v2"]
    wl = WorkloadConfig(model="mlp", layers=[784, 128, 128, 128, 10], batch_size=64)
    d = 784 * 128 + 128 + 2 * (128 * 128 + 128) + 128 * 10 + 10
    fp = sockets.footprint(wl, d, 8, m.l2_kb * 1024)
    cap = m.llc_mb * 2**20
    assert 4 * fp.private_bytes + 8 * d < cap < 7 * fp.private_bytes + 8 * d


def test_turbo_and_llc_rules() -> None:
    m = PRESETS["xeon-e5-2687w-v2"]
    assert sockets.turbo_factor(m, 1) == pytest.approx(3.4 / 4.0)
    assert sockets.turbo_factor(m, 8) > sockets.turbo_factor(m, 4)  # fewer busy cores, faster clock
    assert sockets.hit_ratio(10, 20, "lru") == 1.0 and sockets.hit_ratio(30, 20, "lru") == 0.0
    assert sockets.hit_ratio(40, 20, "random") == pytest.approx(0.5)
