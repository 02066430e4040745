"""scenarios/scale_study/study.py: the one command of docs/study-scale.md, on its tiny grid (--quick): the figures and
the table are written, the table says what the cached repeats say, and a second run resumes from the cache."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "scenarios" / "scale_study" / "study.py"
FIGURES = ("staleness.png", "throughput.png", "time_to_eps.png", "staleness_distribution.png")


def _run(out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(STUDY), "--quick", "--out", str(out), "--jobs", "2"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def _number(text: str) -> float | None:
    text = text.strip()
    return None if text == "—" else float(text.replace(",", ""))


def _table(page: Path) -> list[dict[str, str]]:
    lines = [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def _close(shown: float | None, value: float | None) -> bool:
    """``shown`` is ``value`` to the table's three significant digits."""
    if shown is None or value is None:
        return shown is None and value is None
    return math.isclose(shown, value, rel_tol=6e-3, abs_tol=1e-12)


@pytest.mark.slow
def test_the_quick_study_writes_figures_and_a_table_its_runs_agree_with(tmp_path: Path) -> None:
    out = tmp_path / "study"
    proc = _run(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in FIGURES:
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, name
    assert (out / "results.csv").exists()

    runs: dict[tuple[str, int], list[dict]] = {}
    for f in sorted((out / "cache").glob("*.json")):
        d = json.loads(f.read_text(encoding="utf-8"))
        runs.setdefault((d["algorithm"], d["workers"]), []).append(d)
    rows = _table(out / "results.md")
    assert len(rows) == len(runs) == 4  # HOGWILD! and param_server at 8 and 32 workers, one repeat each
    names = {"HOGWILD!": "hogwild", "param_server": "param_server"}
    for row in rows:
        cell = runs[(names[row["algorithm"]], int(row["workers"]))]
        for d in cell:
            assert d["updates"] > 0 and d["time_s"] > 0
            assert math.isclose(d["updates_per_s"], d["updates"] / d["time_s"], rel_tol=1e-9)
            assert d["updates"] <= d["max_updates"]
            assert sum(d["staleness_counts"].values()) == d["updates"]
            mean = sum(int(k) * v for k, v in d["staleness_counts"].items()) / d["updates"]
            assert math.isclose(mean, d["mean_staleness"], rel_tol=1e-9)
        assert _close(_number(row["updates/s"]), sum(d["updates"] / d["time_s"] for d in cell) / len(cell))
        assert _close(_number(row["τ̄"]), sum(d["mean_staleness"] for d in cell) / len(cell))
        assert int(row["workers that updated"]) == min(d["workers_updated"] for d in cell) <= int(row["workers"])
        reached = [d for d in cell if d["updates_to_eps"] is not None]
        assert (row["outcome"] == "reached") == (len(reached) == len(cell))
        if reached:
            assert _close(_number(row["updates to ε"]), reached[0]["updates_to_eps"])
            assert _close(_number(row["time to ε (ms)"]), reached[0]["time_to_eps"] * 1e3)
            assert reached[0]["time_to_eps"] <= reached[0]["time_s"] + 1e-12
        else:
            assert _number(row["time to ε (ms)"]) is None
            assert re.search(r"crashed|not reached within \d+ updates", row["outcome"])

    again = _run(out)  # every repeat is in the cache: nothing runs again
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 repeats cached, 0 to run" in again.stdout
    assert _table(out / "results.md") == rows
