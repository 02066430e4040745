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

    _placement_note({"latency_ns": 33.0, "samples_ns": [33.0, 34.0, 33.0, 32.0]})
    quiet = capsys.readouterr()
    assert "33 ns" in quiet.out and "moved" not in quiet.err
    _placement_note({"latency_ns": 33.0, "samples_ns": [33.0, 170.0, 33.0, 32.0]})
    assert "moved this machine's CPUs during calibration (hand-offs 32-170 ns)" in capsys.readouterr().err
