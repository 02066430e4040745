"""The note a simulated run gets where it goes past the machines the shared-memory model was measured on."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.evaluation.validated import VALIDATED_BUSY_CORES, busy_cores, note

REPO = Path(__file__).resolve().parents[1]
QUICK = str(REPO / "scenarios" / "quickstart.toml")
runner = CliRunner()


@pytest.mark.parametrize(("workers", "cores", "busy"), [(8, 40, 8), (64, 40, 40), (4, 2, 2), (1, 16, 1)])
def test_busy_cores_are_the_workers_up_to_the_cores(workers: int, cores: int, busy: int) -> None:
    assert busy_cores(workers, cores) == busy


def test_a_note_only_past_the_measured_cores_and_never_over_a_network() -> None:
    assert note(VALIDATED_BUSY_CORES, 40, "mutex", False) is None
    assert note(64, VALIDATED_BUSY_CORES, "mutex", False) is None  # time-shared on the measured count of cores
    line = note(VALIDATED_BUSY_CORES + 1, 40, "hogwild", False)
    assert line is not None and line.startswith(f"note: {VALIDATED_BUSY_CORES + 1} workers of hogwild")
    assert "benchmarks/fidelity.md" in line
    assert note(64, 1024, "param_server", True) is None


def _run(tmp_path: Path, *sets: str) -> str:
    args = ["run", QUICK, "-b", "sim", "-n", "1", "-s", "stop.max_updates=100", "-s", "stop.epsilon=0"]
    res = runner.invoke(app, [*args, *(x for s in sets for x in ("-s", s)), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    return res.output


def test_run_notes_eight_workers_on_a_forty_core_preset_not_two(tmp_path: Path) -> None:
    xeon = 'machine.preset="xeon-e5-2698-v4"'
    assert "note: 8 workers of mutex computing at once" in _run(tmp_path / "8", xeon, "workers.count=8")
    assert "computing at once" not in _run(tmp_path / "2", xeon, "workers.count=2")
    # the default machine has 2 cores: 4 workers share them, within what was measured
    assert "computing at once" not in _run(tmp_path / "d", "workers.count=4")
