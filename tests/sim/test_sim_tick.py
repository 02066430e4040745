"""The timer tick (simasgd/sim/tick.py).

Oracles, closed forms:
- a sample of calls of median m, a share hit·m/P of them slowed by a stall s, splits back into the body
  and s exactly;
- a gradient of length g < P starting uniformly at random contains a tick instant with probability g/P,
  so with hit rate 1 the share of stalled gradients is g/P (tolerance from its binomial standard error),
  and every stalled gradient, of every worker, runs over an instant φ + kP with one φ for the run;
- a stall lengthens the work it falls into, so a call that would have ended just before the next
  instant takes that tick too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from two_core_profile import two_core_lines

from simasgd.machines import machine
from simasgd.machines.profile import workload_key
from simasgd.machines.profile_model import Profile
from simasgd.sim.tick import Tick, split, tick_params
from simasgd.spec import loader

P = 4e-3  # the timer's period
G = 200e-6  # the body of the calibrated gradient samples: 199-201 µs
STALL = 30e-6
CAP = 85e-6  # the longest stall a tick can cause: 5 pauses of 17 µs (tick.MAX_STALL_PAUSES)


def test_split_gives_back_the_body_and_the_stall() -> None:
    rng = np.random.default_rng(0)
    body = rng.uniform(G - 1e-6, G + 1e-6, 950)
    slow = rng.uniform(G - 1e-6, G + 1e-6, 50) + STALL  # 50 of 1000 = G / P
    base, stalls = split(np.concatenate([body, slow]), P, 1.0, CAP)
    assert len(base) == 950 and base.max() <= G + 1e-6
    np.testing.assert_allclose(stalls, STALL, atol=2.1e-6)
    assert split(body[:8], P, 1.0, CAP) is None  # 0.4 of a call expected: none to split off
    # calls the host held for milliseconds are no tick's: they stay in the body, drawn as before
    held = np.full(20, 4e-3)
    base, stalls = split(np.concatenate([body, slow, held]), P, 1.0, CAP)
    assert (base == 4e-3).sum() == 20 and len(stalls) == 51 and stalls.max() < CAP
    # no tick in the samples: the body's slowest are split off, their stall the body's own spread
    _, stalls = split(np.concatenate([body[:60], held]), P, 1.0, CAP)
    assert len(stalls) == 4 and stalls.max() <= 2e-6  # 80 calls × 200 µs / 4 ms


def test_a_tick_stalls_the_work_that_runs_over_it() -> None:
    t = Tick(P, 1.0, np.array([STALL]), np.random.default_rng(1))
    phi = t.phase_s
    assert 0 <= phi < P
    assert t.stall(phi - 100e-6, 95e-6) == 0.0  # ends before the instant
    assert t.stall(phi - 100e-6, 150e-6) == STALL  # runs over it
    assert t.stall(phi + 1e-6, 100e-6) == 0.0  # begins after it
    assert t.stall(phi + 2 * P - 1e-6, 10e-6) == STALL  # every period
    # a call that would end 11 µs before the next instant is lengthened into it by the first stall
    assert t.stall(phi - 1e-6, P - 10e-6) == pytest.approx(2 * STALL)


def test_each_tick_is_one_draw_for_every_worker_it_falls_on() -> None:
    t = Tick(P, 0.5, np.array([10e-6, 20e-6, 30e-6]), np.random.default_rng(2))
    starts = t.phase_s + P * np.arange(2000) - 50e-6
    first = np.array([t.stall(s, 100e-6) for s in starts])
    second = np.array([t.stall(s + 20e-6, 100e-6) for s in starts])  # another worker, 20 µs behind
    np.testing.assert_array_equal(first, second)
    hit = (first > 0).mean()
    assert abs(hit - 0.5) < 4 * np.sqrt(0.25 / len(first))
    assert set(np.unique(first)) <= {0.0, 10e-6, 20e-6, 30e-6}


def test_tick_params_need_a_timer_found() -> None:
    def profile(tick: dict[str, float]) -> Profile:
        return Profile.from_doc({"tick": tick}, "test")

    assert tick_params(profile({"period_s": P, "hit_rate": 1.0, "pause_s": 1.7e-5})) == pytest.approx((P, 1.0, CAP))
    assert tick_params(profile({"period_s": 1 / 300, "hit_rate": 0.3})) is None  # no pause_s: no timer
    assert tick_params(Profile.from_doc({}, "test")) is None and tick_params(None) is None
    # a "pause" a whole time slice long, one a period (a loaded host's calibration): no tick
    assert tick_params(profile({"period_s": 4e-3, "hit_rate": 0.5, "pause_s": 4.06e-3})) is None
    assert tick_params(profile({"period_s": 4e-3, "hit_rate": 0.5, "pause_s": 0.8e-3})) is None  # 5 of them fill it


def _profile(tmp_path: Path, tables: dict[str, str], tick: bool = True) -> Path:
    lines = two_core_lines([40.0, 30.0, 15.0])
    if tick:
        lines += ["[tick]", f"period_s = {P!r}", "hit_rate = 1.0", "pause_s = 1.6e-05", ""]
    for key, body in tables.items():
        lines += [f'[gradient."{key}"]', body, ""]
    path = tmp_path / "this.toml"
    path.write_text("\n".join(lines))
    return path


def _scenario(algorithm: dict, workers: int, max_updates: int, timing: dict | None = None):
    return loader.from_dict({
        "name": "t", "seed": 3, "workers": {"count": workers, "placement": "uma"}, "machine": {"preset": "this"},
        "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8, "features": 2000},
        **({"timing": timing} if timing else {}),
        "algorithm": algorithm, "stop": {"max_updates": max_updates, "max_time_s": 100},
        # the profile has no loss snapshot's nor bookkeeping's time: the executor's traits price neither
        "sim": {"numerics": False}})


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sc, tables: dict[str, str], tick: bool = True):
    from simasgd.sim import backend

    monkeypatch.setenv(machine.PROFILE_ENV, str(_profile(tmp_path, tables, tick)))
    return backend.run_once(sc, 0).updates


def _gradient_table(sc, samples: np.ndarray) -> dict[str, str]:
    return {workload_key(sc.workload): f"batch_size = {sc.workload.batch_size}\n"
                                       f"samples_s = {[float(x) for x in samples]}"}


@pytest.mark.parametrize("switch", [True, False])
@pytest.mark.slow
def test_stalled_gradients_run_over_one_instant_of_the_run_on_every_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: bool) -> None:
    """HOGWILD!, 2 workers. Calibrated samples: a body of 199-201 µs and a share G/P of them 30 µs slower.
    With the tick, the stalled gradients (more than 15 µs over the body) are G/P of all, and every one
    of them, of either worker, covers the phase φ of the run's timer, which no other gradient covers.
    Without (``timer_tick = false``) the slow samples are drawn at any moment."""
    rng = np.random.default_rng(4)
    samples = np.sort(np.concatenate([rng.uniform(G - 1e-6, G + 1e-6, 380), rng.uniform(G - 1e-6, G + 1e-6, 20) + STALL]))
    sc = _scenario({"name": "hogwild"}, 2, 8000)
    sc = sc.model_copy(update={"sim": sc.sim.model_copy(update={"timer_tick": switch})})
    u = _run(tmp_path, monkeypatch, sc, _gradient_table(sc, samples))
    start, end = u["t_grad_start"].to_numpy(), u["t_grad_end"].to_numpy()
    slow = end - start > G + 1e-6 + STALL / 2
    share, n = slow.mean(), len(u)
    assert abs(share - G / P) < 4 * np.sqrt(G / P * (1 - G / P) / n)  # slow as often either way
    # the instants φ + kP in [start, end): every stalled gradient holds one, no other gradient does
    grid = np.linspace(0, P, 4001)[:-1]
    lo, hi = start % P, end % P
    covers = ((grid[None, :] >= lo[:, None]) & (grid[None, :] < hi[:, None])) | \
        ((hi < lo)[:, None] & ((grid[None, :] >= lo[:, None]) | (grid[None, :] < hi[:, None])))
    common = covers[slow].all(axis=0)
    assert common.any() == switch
    if switch:
        assert set(u.loc[slow, "worker"]) == {0, 1}
        # phases rotated so that the common ones sit at 0 (no wrap: a gradient is far shorter than P)
        c = grid[common].mean()
        s_rot, e_rot = (start - c + P / 2) % P - P / 2, (end - c + P / 2) % P - P / 2
        left, right = s_rot[slow].max(), e_rot[slow].min()  # φ is in [left, right)
        assert left < right
        assert _uncovered(left, right, s_rot[~slow], e_rot[~slow])


def _uncovered(left: float, right: float, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Some point of [left, right) lies in none of the intervals [starts, ends)."""
    at = left
    for s, e in sorted(zip(starts, ends, strict=False)):
        if e <= at or s >= right:
            continue
        if s > at:
            return True
        at = max(at, e)
        if at >= right:
            return False
    return at < right



def test_on_a_time_shared_cpu_a_tick_stalls_only_the_thread_on_it() -> None:
    """Two threads pinned to one CPU, 1-ms quanta, no switch cost, 2.5 ms of work each from t = 0: A runs
    [0, 1), B [1, 2), A [2, 3), B [3, 4), A [4, 4.5), B [4.5, 5). A tick at 2.2 ms falls in A's turn: the
    CPU loses one stall S, which A's turn takes (it holds the CPU through it), so A ends at 4.5 + S and B
    at 5 + S — not 5 + 2S, as a stall added to every gradient whose span (as if it ran alone: [0, 2.5))
    covers the instant would give. B, waiting for the CPU when the instant passes, loses nothing to it."""
    import dataclasses

    import simpy

    from simasgd.machines.machine import PRESETS
    from simasgd.sim.cpu import Cores

    m = dataclasses.replace(PRESETS["laptop-2core"], quantum_s=1e-3, context_switch_s=0.0)
    for tick_on in (False, True):
        env = simpy.Environment()
        cores = Cores(env, m, [0, 0])
        t = Tick(P, 1.0, np.array([STALL]), np.random.default_rng(0))
        t.phase_s = 2.2e-3
        ends: dict[int, float] = {}

        def thread(w: int, t: Tick | None = t if tick_on else None, env: simpy.Environment = env,
                   cores: Cores = cores, ends: dict[int, float] = ends):
            yield cores.work(w, 2.5e-3, tick=t)
            ends[w] = env.now
            cores.block(w)  # done: its CPU goes to the other

        env.process(thread(0))
        env.process(thread(1))
        env.run()
        s = STALL if tick_on else 0.0
        assert ends[0] == pytest.approx(4.5e-3 + s, abs=1e-12)
        assert ends[1] == pytest.approx(5e-3 + s, abs=1e-12)


def test_the_stall_a_cpu_loses_does_not_grow_with_the_threads_sharing_it() -> None:
    """k threads pinned to one CPU, each 40.3 ms of work in 1-ms quanta from t = 0: the CPU works 40.3·k ms
    and loses one stall at each tick instant it passes, whoever is on it, so the last thread ends at the
    first moment T with T − S·(instants in [0, T)) = 40·k ms; a stall a thread had for each instant its
    own span covers would grow with k."""
    import dataclasses

    import simpy

    from simasgd.machines.machine import PRESETS
    from simasgd.sim.cpu import Cores

    m = dataclasses.replace(PRESETS["laptop-2core"], quantum_s=1e-3, context_switch_s=0.0)
    for k in (2, 4, 8):
        env = simpy.Environment()
        cores = Cores(env, m, [0] * k)
        t = Tick(P, 1.0, np.array([STALL]), np.random.default_rng(k))
        ends: list[float] = []

        def thread(w: int, t: Tick = t, env: simpy.Environment = env, cores: Cores = cores,
                   ends: list[float] = ends):
            yield cores.work(w, 40.3e-3, tick=t)
            ends.append(env.now)
            cores.block(w)

        for w in range(k):
            env.process(thread(w))
        env.run()
        work = end = 40.3e-3 * k
        while True:  # the fixed point: the instants before the end each cost one stall
            instants = np.floor((end - t.phase_s) / P) + 1 if end > t.phase_s else 0
            nxt = work + STALL * instants
            if nxt == end:
                break
            end = nxt
        assert max(ends) == pytest.approx(end, abs=1e-12)
