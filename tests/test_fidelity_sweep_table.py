"""benchmarks/fidelity_sweep.py writes its table into the history file without losing the history."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TITLE = "# Fidelity: the simulator (calibrated `this` profile) against real threads on this machine"


@pytest.fixture(scope="module")
def sweep() -> Any:
    spec = importlib.util.spec_from_file_location("fidelity_sweep", ROOT / "benchmarks" / "fidelity_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _table(rows: str) -> str:
    return f"{TITLE}\n\nMeasured now.\n\n| a |\n|---|\n{rows}\n"


def test_a_new_file_gets_the_table(sweep: Any, tmp_path: Path) -> None:
    path = tmp_path / "fidelity.md"
    sweep.save_table(path, _table("| 1 |"), "2026-01-01 00:00")
    assert path.read_text() == _table("| 1 |")


def test_the_history_is_kept_and_the_run_rewritten_in_place(sweep: Any, tmp_path: Path) -> None:
    path = tmp_path / "fidelity.md"
    history = f"{TITLE}\n\nNewest first.\n\n## older run\n\nits notes\n\n## oldest run\n\nmore\n"
    path.write_text(history)
    sweep.save_table(path, _table("| 1 |"), "2026-01-01 00:00")  # after the first cell
    sweep.save_table(path, _table("| 1 |\n| 2 |"), "2026-01-01 00:00")  # after the second
    text = path.read_text()
    assert text.startswith(f"{TITLE}\n\nNewest first.\n\n<!-- fidelity_sweep 2026-01-01 00:00 -->\n## 2026-01-01 00:00")
    assert text.count("| 1 |") == 1 and "| 2 |" in text  # replaced, not appended twice
    assert text.endswith("## older run\n\nits notes\n\n## oldest run\n\nmore\n")
    assert text.index("| 2 |") < text.index("## older run")
    sweep.save_table(path, _table("| 3 |"), "2026-01-02 00:00")  # the next sweep: newest first again
    text = path.read_text()
    assert text.index("2026-01-02") < text.index("2026-01-01") < text.index("## older run")
