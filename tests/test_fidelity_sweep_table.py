"""benchmarks/fidelity_sweep.py writes its table as its machine kind's results section of the file,
replacing that section on a rerun and keeping the method and the other machines' sections."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def sweep(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("fidelity_sweep")


def _table(sweep: Any, rows: str, machine: str = "AMD") -> str:
    return f"{sweep.TITLE}\n\n## Results — 2-CPU {machine}, 2026-01-01\n\nMeasured now.\n\n| a |\n|---|\n{rows}\n"


def test_a_new_file_gets_the_title_and_the_section(sweep: Any, tmp_path: Path) -> None:
    path = tmp_path / "fidelity.md"
    sweep.save_table(path, _table(sweep, "| 1 |"), "amd_epyc")
    text = path.read_text()
    assert text.startswith(f"{sweep.TITLE}\n\n<!-- fidelity_sweep amd_epyc -->\n## Results — 2-CPU AMD, 2026-01-01")
    assert text.endswith("| 1 |\n<!-- /fidelity_sweep amd_epyc -->\n")


def test_a_rerun_replaces_its_machine_kinds_section_and_keeps_the_rest(sweep: Any, tmp_path: Path) -> None:
    path = tmp_path / "fidelity.md"
    path.write_text(f"{sweep.TITLE}\n\n## Method\n\nhow it is measured\n")
    sweep.save_table(path, _table(sweep, "| 1 |"), "amd_epyc")  # after the first cell
    sweep.save_table(path, _table(sweep, "| 1 |\n| 2 |"), "amd_epyc")  # after the second
    sweep.save_table(path, _table(sweep, "| x |", "Intel"), "intel_xeon")  # another machine kind
    text = path.read_text()
    assert text.count("| 1 |") == 1 and "| 2 |" in text  # replaced, not appended twice
    assert text.index("how it is measured") < text.index("| 2 |") < text.index("| x |")  # method first
    sweep.save_table(path, _table(sweep, "| 3 |"), "amd_epyc")  # the next sweep on the same kind
    text = path.read_text()
    assert "| 1 |" not in text and "| 2 |" not in text and text.index("| 3 |") < text.index("| x |")
    assert text.startswith(f"{sweep.TITLE}\n\n## Method\n\nhow it is measured\n") and text.count(sweep.TITLE) == 1
    sweep.save_table(path, _table(sweep, "| 4 |"), "amd_epyc some cells")  # a partial sweep: beside it
    assert "| 3 |" in path.read_text() and "| 4 |" in path.read_text()


def test_a_sweep_of_some_cells_does_not_take_the_whole_sweeps_section(sweep: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep.record, "machine_kind", lambda model=None: "amd_epyc")
    whole = argparse.Namespace(partial=False)
    some = argparse.Namespace(partial=True)
    assert sweep.section_key(whole) == "amd_epyc" and sweep.section_key(some) == "amd_epyc some cells"
    assert sweep.heading(False).startswith("## Results — ") and sweep.heading(True).endswith("(some cells)")


def test_interleave_takes_run_r_of_every_cell_before_run_r_plus_1_and_merges_what_a_serial_run_gives(
        sweep: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--interleave`` (measure_in_turn), on the simulator as a stand-in for the measured backend: the host is
    probed before every run and a run waits while the probe finds it drifted (up to ``--attempts`` probes); the
    cell keeps the probe its first run went on; the runs go round the group's cells; each cell's merged runs
    equal, seed for seed, a serial run of its repeats."""
    from simasgd.evaluation import drift
    from simasgd.runs import backends
    from simasgd.runs.results import RunResult

    args = argparse.Namespace(repeats=3, max_updates=60, max_time_s=5.0, lr=0.005, epsilon=0.05, timing_only=True,
                              algorithms=["mutex", "hogwild"], threads=[2], batches=[16], out=tmp_path,
                              attempts=3, drift_wait_s=7.0)
    (group,) = sweep.groups(args)
    assert [label for label, *_ in group] == ["mutex", "hogwild"]
    names = [sc.name for _label, sc, _t, _b in group]
    # the host, probe by probe: hogwild's first run finds it drifted once; mutex's third, three times (it runs
    # after the third probe, as the host is)
    host = iter([1.0, 1.3, 1.02, 1.0, 1.0, 0.8, 0.7, 1.5, 1.0])
    probed: list[tuple[str, float]] = []

    def measure(sc: Any, _path: Any, _probe: Any = None) -> drift.Drift:
        ratio = next(host)
        probed.append((sc.name, ratio))
        return drift.Drift(workload="w", gradient_s=ratio * 1e-4, calibrated_gradient_s=1e-4, c2c_ns=None,
                           calibrated_c2c_ns=None, calibrated_at=None, measured_at="now")

    waits: list[float] = []
    monkeypatch.setattr(sweep.fidelity, "sim_scenario", lambda sc, _backends: sc)  # no profile to calibrate
    monkeypatch.setattr(drift, "measure", measure)
    monkeypatch.setattr(sweep.time, "sleep", waits.append)
    impl = backends.load("sim")
    order: list[tuple[str, int]] = []
    real = impl.run_once
    monkeypatch.setattr(impl, "run_once", lambda sc, r, adv: order.append((sc.name, r)) or real(sc, r, adv))

    measured, tries = sweep.measure_in_turn(group, args, backend="sim")

    assert order == [(n, r) for r in range(3) for n in names]
    mutex, hogwild = names
    assert [n for n, _ in probed] == [mutex, hogwild, hogwild, mutex, hogwild, mutex, mutex, mutex, hogwild]
    assert waits == [7.0] * 3  # one for hogwild's first run, two for mutex's third (its last probe runs)
    assert tries == {mutex: 3, hogwild: 2}
    assert measured[mutex][1].ratio == 1.0 and measured[hogwild][1].ratio == 1.02  # the probe the first run went on
    monkeypatch.undo()
    for _label, sc, _t, _b in group:
        merged, serial = measured[sc.name][0], backends.run(sc, "sim", jobs=1)
        assert [r.run for r in merged.runs] == [0, 1, 2]
        assert merged.updates.equals(serial.updates)
        assert RunResult.load(tmp_path / sc.name / "sim").updates.equals(serial.updates)  # kept as it went
