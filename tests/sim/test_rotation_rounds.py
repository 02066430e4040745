"""A rotating pool's rounds found clean by arithmetic, and part of a round taken at once
(``simasgd.sim.cpu.Cores._clean_round``, ``Cores._part``).

A rotation whose next round is clean (every spinner forfeits one slice, none is placed behind the mean, the
first back on the CPU after the last) is periodic from that turn on: the simulator decides it from the
spinners' CPU times instead of taking the round turn by turn. Every time it does, in runs where spinners tie
(a preset's constant step times) and where they do not, the same round is also taken turn by turn from the
same state, and ``_check_round`` must find it clean after exactly that round. Where a periodic rotation is
brought up to a moment less than a round ahead, the turns before it go at once (``_part``); each time, the same
turns are also taken one by one from the same state and must leave each spinner its CPU time, to rounding,
the clock, the run queue's sums and its order counter.
"""

from __future__ import annotations

import math

import pytest
from test_sim_rotation import BASE, TIES, _restore, _state

from simasgd.sim import backend, cpu
from simasgd.spec import loader

RUNS = [TIES[0][0], TIES[2][0]]  # random step times on two CPUs; a preset's constant ones on 32


def _run(ov: tuple[str, ...]) -> None:
    backend.run_once(loader.from_dict(loader.apply_overrides(BASE, ov)), 0)


@pytest.mark.parametrize("ov", RUNS, ids=["mutex-random", "mutex-preset"])
def test_a_round_found_clean_by_arithmetic_is_clean_turn_by_turn(monkeypatch: pytest.MonkeyPatch,
                                                                 ov: tuple[str, ...]) -> None:
    clean_round, found = cpu.Cores._clean_round, {True: 0, False: 0}

    def checked(cores: cpu.Cores, rq: cpu.RunQueue, rot: cpu.Rotation) -> bool:
        clean = clean_round(cores, rq, rot)
        found[clean] += 1
        if clean:
            st = _state(cores, rq, rot)
            m, start = len(rot.members), rot.at
            rot.seen.clear()
            cores._turns(rq, rot, math.inf, m)  # stops as soon as the round turns out periodic
            assert rot.periodic, "the round was not clean turn by turn"
            assert round((rot.at - start) / cores.switch) == m  # found so after exactly one round
            _restore(rq, rot, st)
            rot.seen.clear()
        return clean

    monkeypatch.setattr(cpu.Cores, "_clean_round", checked)
    _run(ov)
    assert found[True] > 10, found  # it decided many rounds, not only the easy ones


@pytest.mark.parametrize("ov", RUNS, ids=["mutex-random", "mutex-preset"])
def test_part_of_a_round_at_once_leaves_each_spinner_what_its_turns_leave_it(monkeypatch: pytest.MonkeyPatch,
                                                                             ov: tuple[str, ...]) -> None:
    part, checked = cpu.Cores._part, []

    def checked_part(cores: cpu.Cores, rq: cpu.RunQueue, rot: cpu.Rotation, turns: int) -> None:
        st = _state(cores, rq, rot)
        cores._turns(rq, rot, math.inf, turns)
        by_turns = _state(cores, rq, rot)
        _restore(rq, rot, st)
        part(cores, rq, rot, turns)
        by_part = _state(cores, rq, rot)
        tol = 1e-12
        for t in rot.members:
            c1, c2 = by_turns["threads"][id(t)][0], by_part["threads"][id(t)][0]  # CPU times
            assert c2 == pytest.approx(c1, rel=tol, abs=0), (turns, t.cpu_time)
            assert by_part["threads"][id(t)][2] == by_turns["threads"][id(t)][2]  # queued, or on the CPU
        assert by_part["rot"][0] is by_turns["rot"][0]  # the same spinner's grant on the CPU
        assert by_part["rot"][1] == pytest.approx(by_turns["rot"][1], rel=tol, abs=0)  # the next turn's time
        assert by_part["cur"][1] == pytest.approx(by_turns["cur"][1], rel=tol, abs=0)  # the current one's start
        assert by_part["order"] == by_turns["order"]
        assert by_part["sums"][:2] == by_turns["sums"][:2]
        for i in (2, 3):  # the CPU times before the current turn, the current turn's start
            assert by_part["sums"][i] == pytest.approx(by_turns["sums"][i], rel=tol, abs=0)
        assert [g.th for _k, g in sorted(rq.pool.heap)] == [g.th for _k, g in sorted(by_turns["heap"])]
        checked.append(turns)

    monkeypatch.setattr(cpu.Cores, "_part", checked_part)
    _run(ov)
    assert len(checked) > 10 and max(checked) > 1, checked
