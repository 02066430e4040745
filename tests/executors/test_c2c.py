"""The core-to-core hand-off probe (executors/c2c.py) and the tables measured between two probes."""

from __future__ import annotations

import os

import pytest

from executors import c2c

CPUS = sorted(os.sched_getaffinity(0))


@pytest.mark.hardware
def test_a_hand_off_between_two_cpus_takes_nanoseconds() -> None:
    if len(CPUS) < 2:
        pytest.skip("needs two usable CPUs")
    ns = c2c.latency_ns(rounds=500)
    assert ns is not None and 1 < ns < 1e6  # a line between two cores, or a time slice on a loaded host


def test_one_usable_cpu_has_no_hand_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(c2c.os, "sched_getaffinity", lambda pid: {CPUS[0]})
    assert c2c.latency_ns() is None


def test_same_mode_is_within_a_factor_of_two() -> None:
    assert c2c.same_mode(45, 80) and c2c.same_mode(80, 45)
    assert not c2c.same_mode(45, 170) and not c2c.same_mode(170, 45)
    assert c2c.same_mode(None, 170) and c2c.same_mode(45, None)


def test_a_table_is_measured_again_while_the_cpus_move(monkeypatch: pytest.MonkeyPatch) -> None:
    # probes: 45 → 170 (moved during the first try), 170 → 170 (not the wanted placement), 44 → 46 (kept)
    probes = iter([45.0, 170.0, 170.0, 170.0, 44.0, 46.0])
    monkeypatch.setattr(c2c, "latency_ns", lambda: next(probes))
    calls = []
    table = c2c.measured(lambda x: calls.append(x) or {"v": len(calls)}, 7, like=45.0)
    assert calls == [7, 7, 7] and table == {"v": 3, "c2c_ns": [44.0, 46.0]}
    # out of tries: the last measurement, its probes recorded for what they were
    probes = iter([45.0, 170.0] * 3)
    assert c2c.measured(lambda: {}, tries=3)["c2c_ns"] == [45.0, 170.0]


def test_calibrate_warns_when_the_cpus_moved_during_it(capsys: pytest.CaptureFixture[str]) -> None:
    from simasgd.commands.calibrate import _placement_note

    _placement_note({"c2c": {"latency_ns": 33.0, "samples_ns": [33.0, 34.0, 33.0, 32.0]}})
    quiet = capsys.readouterr()
    assert "33 ns" in quiet.out and "moved" not in quiet.err and "elsewhere" not in quiet.err
    _placement_note({"c2c": {"latency_ns": 33.0, "samples_ns": [33.0, 170.0, 33.0, 32.0]}})
    assert "moved this machine's CPUs during calibration (hand-offs 32-170 ns)" in capsys.readouterr().err


def test_a_table_is_measured_row_by_row_each_row_in_the_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 rows; the host moves the CPUs away and back within the second row (34 → 170), then during its
    # retry it is still away (170 → 170); the third try is back near (33 → 35)
    probes = iter([33.0, 34.0, 34.0, 170.0, 170.0, 170.0, 33.0, 35.0, 32.0, 33.0])
    monkeypatch.setattr(c2c, "latency_ns", lambda: next(probes))
    calls: list[tuple[list[int], float]] = []

    def table(sizes: list[int], seconds: float) -> dict:
        calls.append((sizes, seconds))
        return {"sizes_bytes": sizes, "gbs": [float(len(calls))], "rounds": 10 * len(calls), "cpus": [0, 1]}

    out = c2c.measured_rows(table, [64, 128, 256], 3.0)
    assert [c[0] for c in calls] == [[64], [128], [128], [128], [256]]
    assert all(c[1] == pytest.approx(1.0) for c in calls)  # the table's time split between its rows
    assert out["sizes_bytes"] == [64, 128, 256] and out["gbs"] == [1.0, 4.0, 5.0]  # the kept tries
    assert out["c2c_ns"] == [33.0, 34.0, 33.0, 35.0, 32.0, 33.0] and out["rounds"] == 10 and out["cpus"] == [0, 1]


def test_rows_follow_the_placement_they_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # like = 170 (a table measured far): a near row is measured again until it is far too
    probes = iter([33.0, 34.0, 165.0, 172.0])
    monkeypatch.setattr(c2c, "latency_ns", lambda: next(probes))
    out = c2c.measured_rows(lambda sizes, s: {"sizes_bytes": sizes, "v": [1.0]}, [64], 1.0, like=170.0)
    assert out["c2c_ns"] == [165.0, 172.0]
    # one usable CPU: the table's reason, not a row
    monkeypatch.setattr(c2c, "latency_ns", lambda: None)
    assert c2c.measured_rows(lambda sizes, s: {"reason": "one CPU"}, [64, 128], 1.0) == {"reason": "one CPU"}


def test_the_attempts_set_aside_are_kept_with_their_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    # 33 → 160 (moved during it), 160 → 160 (not home), 33 → 34 (kept)
    probes = iter([33.0, 160.0, 160.0, 160.0, 33.0, 34.0])
    monkeypatch.setattr(c2c, "latency_ns", lambda: next(probes))
    moved: list[dict] = []
    n = iter(range(1, 10))
    table = c2c.measured(lambda: {"v": next(n)}, like=33.0, moved=moved)
    assert table == {"v": 3, "c2c_ns": [33.0, 34.0]}
    assert moved == [{"v": 1, "c2c_ns": [33.0, 160.0]}, {"v": 2, "c2c_ns": [160.0, 160.0]}]


def test_in_placement_needs_both_probes_home_and_agreeing() -> None:
    assert c2c.in_placement([33.0, 35.0], 33.0) and c2c.in_placement(None, 33.0) and c2c.in_placement([160, 160], None)
    assert not c2c.in_placement([33.0, 160.0], 33.0) and not c2c.in_placement([160.0, 158.0], 33.0)
    assert not c2c.in_placement([33.0, 160.0], None)  # moved during it


def test_a_try_waits_for_the_placement_to_come_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # waiting: 160, 158, then 34 (home); the try's probes 33 → 35
    probes = iter([160.0, 158.0, 34.0, 33.0, 35.0])
    slept: list[float] = []
    monkeypatch.setattr(c2c, "latency_ns", lambda: next(probes))
    monkeypatch.setattr(c2c.time, "sleep", slept.append)
    table = c2c.measured(lambda: {"v": 1}, like=33.0, settle_s=60.0)
    assert table == {"v": 1, "c2c_ns": [33.0, 35.0]} and slept == [0.25, 0.25]


def test_waiting_for_a_placement_gives_up_at_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 0.5, 1.2, 2.5])  # the deadline (1.0 s) passes at the third probe
    monkeypatch.setattr(c2c, "latency_ns", lambda: 160.0)
    monkeypatch.setattr(c2c.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(c2c.time, "sleep", lambda s: None)
    assert c2c.wait_for(33.0, 1.0) == 160.0
    assert c2c.wait_for(None, 1.0) == 160.0  # nothing to wait for: the first probe


def test_a_table_the_caller_refuses_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(c2c, "latency_ns", lambda: 33.0)  # the probes see nothing
    n = iter(range(1, 10))
    moved: list[dict] = []
    table = c2c.measured(lambda: {"v": next(n)}, like=33.0, moved=moved, accept=lambda t: t["v"] >= 2)
    assert table == {"v": 2, "c2c_ns": [33.0, 33.0]} and moved == [{"v": 1, "c2c_ns": [33.0, 33.0]}]


def test_the_lock_hand_off_is_timed_between_the_probes_two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from executors.calibration import locks

    pinned: list[object] = []

    def threads(target: object, args: list[tuple], cpus: object = None) -> list[int]:
        pinned.append(cpus)
        return [400 * 80] * len(args)  # 80 ns a hand-off

    monkeypatch.setattr(locks, "run_threads", threads)
    monkeypatch.setattr(locks.os, "sched_getaffinity", lambda pid: {5, 3, 9})
    table = locks.lock_figures(1000)
    assert pinned == [[3, 5], [3, 5]]  # the trial and the timed run, on the first two usable CPUs
    assert table["handoff_s"] == pytest.approx(400 * 80e-9 / 2000)
    monkeypatch.setattr(locks.os, "sched_getaffinity", lambda pid: {3})
    locks.lock_figures(1000)
    assert pinned[-1] is None  # one CPU: nothing to pin the two threads to


def test_a_lock_hand_off_at_a_context_switch_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from executors.calibration import calibrate

    monkeypatch.setattr(c2c, "latency_ns", lambda: 88.0)  # the probes: the CPUs never move
    handoffs = iter([1.0e-6, 9.0e-8])  # a try at a context switch's cost, then a line's move
    monkeypatch.setattr(calibrate, "lock_figures", lambda rounds: {"handoff_s": next(handoffs), "rounds": rounds})
    assert calibrate.lock_table({"handoff_s": 1.1e-6}, 500, like=88.0)["handoff_s"] == 9.0e-8
    # in the probe's mode: kept as measured, nothing measured again
    assert calibrate.lock_table({"handoff_s": 7e-8}, 500, like=88.0) == {"handoff_s": 7e-8}
    # out of tries: the one closest to the probe's, not the last
    handoffs = iter([1.2e-6, 0.5e-6, 2.0e-6])
    assert calibrate.lock_table({"handoff_s": 1.1e-6}, 500, like=88.0)["handoff_s"] == 0.5e-6
