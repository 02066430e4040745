"""Spinners of a held mutex rotating in closed form (``simasgd.sim.cpu.Rotation``) leave the rows events would.

A pool whose runnable threads all spin on a held mutex hands its CPU from spinner to spinner every context
switch; the simulator takes those turns by arithmetic, not events, until something can see them. Each case
runs a seeded scenario with that fast path and without it (``cpu.FAST_ROTATION``). Turn by turn
(``cpu.WHOLE_ROUNDS`` off) the rows must be the same — the same updates, staleness and versions, times equal
to 1e-9 — with far fewer SimPy events, and with constant step times (a preset's) turns on the instants of
other pools' turns rank as events rank them. Whole rounds at once leave each spinner the CPU time its turns
would, to rounding; where rounding then orders tied spinners another way, the statistics agree.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import simpy

from simasgd.sim import backend, cpu, primitives
from simasgd.sim.primitives import Mutex
from simasgd.spec import loader

LONG_HOLDS = ('timing.gradient={dist="gamma", mean_s=5e-4, shape=10}',
              'timing.update={dist="gamma", mean_s=4e-4, shape=10}',
              'timing.read={dist="gamma", mean_s=5e-6, shape=10}')  # hundreds of turns a hold: whole rounds
SHORT_HOLDS = ('timing.gradient={dist="gamma", mean_s=5e-5, shape=10}',
               'timing.update={dist="gamma", mean_s=3e-5, shape=10}',
               'timing.read={dist="gamma", mean_s=5e-6, shape=10}')  # a few turns a hold
BASE: dict[str, Any] = {
    "name": "rotation", "seed": 7, "machine": {"preset": "laptop-2core"}, "workers": {"placement": "os"},
    "workload": {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16},
    "algorithm": {"name": "mutex"}, "sim": {"numerics": False}, "stop": {"max_time_s": 1e9},
}
EXACT = ["worker", "version", "read_version", "staleness", "applied"]


def simulate(monkeypatch: pytest.MonkeyPatch, fast: bool, overrides: tuple[str, ...],
             seed: int = 0) -> tuple[pd.DataFrame, int, dict[str, int]]:
    """The rows, the SimPy events processed and the fast path's work (turns jumped in whole rounds, calls that
    took turns by arithmetic)."""
    counts = {"events": 0, "jumped": 0, "turns": 0}
    step, jump, turns = simpy.Environment.step, cpu.Cores._jump, cpu.Cores._turns

    def counted_step(env: simpy.Environment) -> None:
        counts["events"] += 1
        step(env)

    def counted_jump(cores: cpu.Cores, rq: cpu.RunQueue, rot: cpu.Rotation, rounds: int) -> None:
        counts["jumped"] += rounds * len(rot.members)
        jump(cores, rq, rot, rounds)

    def counted_turns(cores: cpu.Cores, rq: cpu.RunQueue, rot: cpu.Rotation, until: float, limit: int) -> None:
        before = rot.at
        turns(cores, rq, rot, until, limit)
        counts["turns"] += rot.at != before  # calls that took a turn by arithmetic

    with monkeypatch.context() as m:
        m.setattr(cpu, "FAST_ROTATION", fast)
        m.setattr(simpy.Environment, "step", counted_step)
        m.setattr(cpu.Cores, "_jump", counted_jump)
        m.setattr(cpu.Cores, "_turns", counted_turns)
        sc = loader.from_dict(loader.apply_overrides(BASE, overrides))
        rows = backend.run_once(sc, seed).updates
    return rows, counts["events"], counts


def assert_same_rows(events: pd.DataFrame, fast: pd.DataFrame) -> None:
    assert list(events.columns) == list(fast.columns) and len(events) == len(fast)
    for c in events.columns:
        a, b = events[c].to_numpy(), fast[c].to_numpy()
        if c in EXACT or a.dtype.kind not in "fc":
            assert np.array_equal(a, b), c
        else:
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=0, equal_nan=True, err_msg=c)


CASES = [  # algorithm, workers, updates, overrides, and at most this share of the event path's events
    ("mutex", 12, 600, LONG_HOLDS, 0.75),
    ("mutex", 24, 400, LONG_HOLDS, 0.75),
    ("mutex", 40, 800, SHORT_HOLDS, 0.75),
    ("ssp", 24, 600, (*LONG_HOLDS, "algorithm.bound=2"), 0.75),  # sleepers woken by the clock join rotating pools
    ("ssp", 40, 600, (*SHORT_HOLDS, "algorithm.bound=2"), 0.75),
    ("rwlock", 24, 400, LONG_HOLDS, 0.5),  # reader priority: the writers spin, rotating
    ("rwlock", 40, 800, SHORT_HOLDS, 0.9),
    # writer priority: readers spin behind waiting writers too, and a CPU of readers and writers does not
    # rotate (None: the rows alone, whether or not a pool of writers alone comes to rotate)
    ("rwlock", 24, 400, (*LONG_HOLDS, 'algorithm.priority="writer"'), None),
]


@pytest.mark.parametrize(("algorithm", "workers", "updates", "extra", "share"), CASES)
def test_rotation_leaves_the_rows_events_leave(monkeypatch: pytest.MonkeyPatch, algorithm: str, workers: int,
                                              updates: int, extra: tuple[str, ...], share: float | None) -> None:
    ov = (f"algorithm.name={algorithm}", f"workers.count={workers}", f"stop.max_updates={updates}",
          'machine.preset="laptop-2core"', *extra)
    monkeypatch.setattr(cpu, "WHOLE_ROUNDS", False)  # whole rounds round ties their own way: the last tests
    events, n_events, _ = simulate(monkeypatch, False, ov)
    fast, n_fast, work = simulate(monkeypatch, True, ov)
    assert_same_rows(events, fast)
    if share is not None:
        assert n_fast < share * n_events, (n_fast, n_events)  # the spinners' turns were taken without events
        assert work["turns"] > 0  # some were, in every such case


DYADIC = ("machine.context_switch_s=3.814697265625e-06", "machine.quantum_s=0.00390625",  # 2^-18 s, 2^-8 s
          'timing.gradient={dist="deterministic", mean_s=0.0009765625}',  # 2^-10 s
          'timing.update={dist="deterministic", mean_s=0.000244140625}',  # 2^-12 s
          'timing.read={dist="deterministic", mean_s=6.103515625e-05}')  # 2^-14 s


@pytest.mark.parametrize("workers", [6, 8])
def test_a_turn_between_a_release_and_its_queue_being_served_takes_the_lock_as_events_do(
        monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """A read-write lock's release serves its queue when the release is processed, later in the instant: a
    rotating writer's turn ranked in between asks for the lock first, as its event would. Step times in powers
    of two add up without rounding, so turns fall on the instants of releases; the rows must be those of
    events, and such turns must have happened."""
    due, stopped = cpu.Cores._turns_due, []

    def counted(cores: cpu.Cores, lock: primitives.RWLock) -> None:
        pools = cores.rotating.get(lock) or {}
        before = len(pools)
        due(cores, lock)
        stopped.append(before - len(pools))

    monkeypatch.setattr(cpu.Cores, "_turns_due", counted)
    monkeypatch.setattr(cpu, "WHOLE_ROUNDS", False)
    ov = ("algorithm.name=rwlock", f"workers.count={workers}", "stop.max_updates=400", *DYADIC)
    events, _, _ = simulate(monkeypatch, False, ov)
    fast, _, _ = simulate(monkeypatch, True, ov)
    assert_same_rows(events, fast)
    assert sum(stopped) > 0, stopped


@pytest.mark.parametrize("fast", [False, True])
def test_the_environment_counts_every_event_it_steps_through(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    """``Environment.scheduled`` (benchmarks/sim_scale.py's events an attempt): the events a run stepped through
    and those left in its queue, grants on a rank already taken included; a rotation's turns are none."""
    made: list[primitives.Environment] = []

    class Seen(primitives.Environment):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(backend, "Environment", Seen)
    ov = ("workers.count=24", "stop.max_updates=400", *SHORT_HOLDS)
    _, n_events, _ = simulate(monkeypatch, fast, ov)
    (env,) = made
    assert env.reranked > 0  # turns that ended as they began kept their rank
    assert env.scheduled() == n_events + len(env._queue)
    assert env.scheduled() == n_events + len(env._queue)  # asking takes nothing away


def test_a_mutex_says_when_a_release_leaves_it_free() -> None:
    env = simpy.Environment()
    lock = Mutex(env)
    freed: list[float] = []
    tell: Callable[[Mutex], None] = lambda m: freed.append(m.env.now)
    lock.on_free = tell
    first = lock.request()
    second = lock.request()  # queued behind the holder
    lock.release(first)  # handed to the waiter: not free
    assert freed == [] and lock.holder is second
    lock.release(second)
    assert freed == [0.0] and lock.free


@pytest.mark.parametrize(("algorithm", "workers", "updates"), [("mutex", 256, 800), ("ssp", 256, 600),
                                                              ("rwlock", 256, 800)])
@pytest.mark.slow
def test_turns_on_the_instants_of_other_pools_rank_as_events_rank_them(
        monkeypatch: pytest.MonkeyPatch, algorithm: str, workers: int, updates: int) -> None:
    """A preset's step times are constants, so the turns of many pools fall on the same instants, where SimPy
    runs events by rank: rotating pools take those turns by arithmetic and must rank them as events would.
    Whole rounds at once are off here (they differ from turns by rounding: the tests below)."""
    bound = ("algorithm.bound=2",) if algorithm == "ssp" else ()
    ov = (f"algorithm.name={algorithm}", *bound, f"workers.count={workers}", 'machine.preset="xeon-e5-2698-v4"',
          f"stop.max_updates={updates}")
    monkeypatch.setattr(cpu, "WHOLE_ROUNDS", False)
    events, n_events, _ = simulate(monkeypatch, False, ov)
    fast, n_fast, _ = simulate(monkeypatch, True, ov)
    assert_same_rows(events, fast)
    assert n_fast < 0.5 * n_events, (n_fast, n_events)


def summary(rows: pd.DataFrame) -> tuple[float, float]:
    """Mean staleness and updates per simulated second of one run's applied updates."""
    applied = rows[rows.applied]
    return float(applied.staleness.mean()), len(applied) / float(rows.t_write.max())


TIES = [  # overrides, and the share of the event path's events that whole rounds must take away
    (("algorithm.name=mutex", "workers.count=24", "stop.max_updates=1500", *LONG_HOLDS), 0.25),
    (("algorithm.name=ssp", "algorithm.bound=2", "workers.count=96", 'machine.preset="xeon-e5-2687w-v2"',
      "stop.max_updates=1000"), 0.5),
    (("algorithm.name=mutex", "workers.count=96", 'machine.preset="xeon-e5-2687w-v2"', "stop.max_updates=1000"),
     0.5),
]


@pytest.mark.parametrize(("ov", "share"), TIES, ids=["mutex-random", "ssp-preset", "mutex-preset"])
@pytest.mark.slow
def test_whole_rounds_at_once_have_the_statistics_of_events(monkeypatch: pytest.MonkeyPatch,
                                                             ov: tuple[str, ...], share: float) -> None:
    """Whole rounds at once multiply what turns add up, so CPU times can differ in their last bits, and
    spinners tie (a preset's constant step times; a forfeited slice is a constant too): those turn in the
    order the rounding gives them from the jump on, and seeded rows differ from there. Over seeds, the mean
    staleness and the update rate must agree with the event path's within the sampling error (Welch's
    two-sample difference, 4 standard errors), with far fewer events."""
    seeds = range(6)
    fast = [simulate(monkeypatch, True, ov, s) for s in seeds]
    events = [simulate(monkeypatch, False, ov, s) for s in seeds]
    n_fast, n_events = sum(n for _, n, _ in fast), sum(n for _, n, _ in events)
    assert sum(work["jumped"] for _, _, work in fast) > share * n_events  # many turns went by in whole rounds
    assert n_fast < share * n_events, (n_fast, n_events)
    on = np.array([summary(rows) for rows, _, _ in fast])
    off = np.array([summary(rows) for rows, _, _ in events])
    for i, name in enumerate(("mean staleness", "updates/s")):
        se = math.sqrt(on[:, i].var(ddof=1) / len(on) + off[:, i].var(ddof=1) / len(off))
        diff = on[:, i].mean() - off[:, i].mean()
        assert abs(diff) <= 4 * se, (name, on[:, i], off[:, i])


def _state(cores: cpu.Cores, rq: cpu.RunQueue, rot: cpu.Rotation) -> dict[str, Any]:
    """What a rotating pool's turns change: its spinners, its run queue, its sums and the rotation's clock."""
    order = next(rq.pool.order)
    rq.pool.order = itertools.count(order)  # looked at, not taken
    return {"threads": {id(t): (t.cpu_time, t.since, t.queued, t.req, t.left) for t in rot.members},
            "keys": {id(g): (g.key, g.at) for _, g in rq.pool.heap}, "heap": list(rq.pool.heap), "order": order,
            "sums": (rq.members, rq.running, rq.cpu_sum, rq.since_sum, rq.changes),
            "cur": (rot.cur.key, rot.cur.at) if rot.cur is not None else None,
            "rot": (rot.cur, rot.at, set(rot.seen), rot.first, rot.forfeits, dict(rot.step), rot.periodic)}


def _restore(rq: cpu.RunQueue, rot: cpu.Rotation, st: dict[str, Any]) -> None:
    for t in rot.members:
        t.cpu_time, t.since, t.queued, t.req, t.left = st["threads"][id(t)]
    for _, g in st["heap"]:
        g.key, g.at = st["keys"][id(g)]
    cur = st["rot"][0]
    cur.key, cur.at = st["cur"]
    rq.pool.heap = list(st["heap"])
    rq.pool.order = itertools.count(st["order"])
    rq.members, rq.running, rq.cpu_sum, rq.since_sum, rq.changes = st["sums"]
    rot.cur, rot.at, seen, rot.first, rot.forfeits, step, rot.periodic = st["rot"]
    rot.seen, rot.step = set(seen), dict(step)


@pytest.mark.parametrize("ov", [TIES[0][0], TIES[2][0]], ids=["mutex-random", "mutex-preset"])
def test_a_jump_leaves_each_spinner_what_its_turns_leave_it(monkeypatch: pytest.MonkeyPatch,
                                                            ov: tuple[str, ...]) -> None:
    """At every jump of a run, the same rounds are also taken turn by turn from the same state: each spinner
    must have the CPU time they leave it, to rounding, the pool's next turn must fall at the same time, the
    run queue's sums and its order counter must agree, and the spinners must queue in an order of their CPU
    times (ties may go either way)."""
    jump, checked = cpu.Cores._jump, []

    def checked_jump(cores: cpu.Cores, rq: cpu.RunQueue, rot: cpu.Rotation, rounds: int) -> None:
        st = _state(cores, rq, rot)
        turns = rounds * len(rot.members)
        cores._turns(rq, rot, math.inf, turns)  # periodic already: no early stop
        by_turns = _state(cores, rq, rot)
        _restore(rq, rot, st)
        jump(cores, rq, rot, rounds)
        by_jump = _state(cores, rq, rot)
        tol = 1e-12 * (1 + rounds)
        for t in rot.members:
            c1, c2 = by_turns["threads"][id(t)][0], by_jump["threads"][id(t)][0]  # CPU times
            assert c2 == pytest.approx(c1, rel=tol, abs=0), (rounds, t.cpu_time)
        assert by_jump["rot"][1] == pytest.approx(by_turns["rot"][1], rel=tol, abs=0)  # the next turn's time
        assert by_jump["cur"][1] == pytest.approx(by_turns["cur"][1], rel=tol, abs=0)  # the current one's start
        assert by_jump["order"] == by_turns["order"]
        assert by_jump["sums"][:2] == by_turns["sums"][:2]
        assert by_jump["sums"][2] == pytest.approx(by_turns["sums"][2], rel=tol, abs=0)
        keys = sorted(k for k, _ in rq.pool.heap)
        assert [k[0] for k in keys] == sorted(t.cpu_time for t in rot.members if t.queued)
        checked.append(rounds)

    monkeypatch.setattr(cpu.Cores, "_jump", checked_jump)
    sc = loader.from_dict(loader.apply_overrides(BASE, ov))
    backend.run_once(sc, 0)
    assert len(checked) > 10 and max(checked) > 1, checked


@pytest.mark.parametrize(("algorithm", "margin"), [("mutex", 1 / 256), ("mutex", 1e-13), ("mutex", 1 / 4),
                                                   ("rwlock", 1 / 256)])
def test_a_free_lock_goes_to_the_pool_a_look_at_every_pool_finds(monkeypatch: pytest.MonkeyPatch, algorithm: str,
                                                                 margin: float) -> None:
    """The pools a free lock looks at (``cpu.Phases``, by their turns' phase) hold the one whose turn comes
    first, as a look at every rotating pool finds it: 240 threads on 80 CPUs, a lock hand-off after another.
    A margin of 1e-13 switches takes every phase again at each look; one of a quarter looks at most pools."""
    lock_free, turns_due, init = cpu.Cores._lock_free, cpu.Cores._turns_due, cpu.Phases.__init__
    looks: list[int] = []

    def narrow(phases: cpu.Phases, switch: float) -> None:
        init(phases, switch)
        phases.margin = switch * margin

    def every_pool(cores: cpu.Cores, lock: cpu.Spun) -> list[tuple[float, int, int, cpu.RunQueue]]:
        phases = cores.rotating.get(lock)
        turns = []
        for rq, seq in (phases.seq.items() if phases is not None else ()):
            assert rq.rotation is not None
            turns.append((cores._next_turn(rq.rotation), rq.rotation.eid, seq, rq))
        return sorted(turns, key=lambda t: t[:3])

    def checked_free(cores: cpu.Cores, lock: cpu.Spun) -> None:
        turns = every_pool(cores, lock)
        lock_free(cores, lock)
        if turns:
            looks.append(len(turns))
            assert turns[0][3].rotation is None  # the first turn's pool went back to events
            assert all(t[3].rotation is not None for t in turns[1:])  # and no other

    def checked_due(cores: cpu.Cores, lock: primitives.RWLock) -> None:
        turns = every_pool(cores, lock)
        turns_due(cores, lock)
        for t, _eid, _seq, rq in turns:
            assert (rq.rotation is None) == (t == cores.env.now)

    monkeypatch.setattr(cpu.Phases, "__init__", narrow)
    monkeypatch.setattr(cpu.Cores, "_lock_free", checked_free)
    monkeypatch.setattr(cpu.Cores, "_turns_due", checked_due)
    ov = (f"algorithm.name={algorithm}", "workers.count=240", 'machine.preset="xeon-e5-2698-v4"',
          "stop.max_updates=300")
    simulate(monkeypatch, True, ov)
    assert len(looks) > 50 and max(looks) > 20, looks  # many hand-offs, among many rotating pools
