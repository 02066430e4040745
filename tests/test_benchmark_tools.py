"""The benchmark tools that benchmarks/*.md's methods use, each run at a tiny setting:
``fidelity_ablation.py`` (the simulator re-run with one mechanism off, against stored measured runs) and
``cuda_streams.py`` (the simulator's prediction per stream count; its ``cells.json`` a versioned record)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simasgd import backends
from simasgd.profile import workload_key

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_the_ablation_re_simulates_each_cell_against_its_stored_measured_runs(
        tmp_path: Path, tiny: Callable[..., Any], two_cpu_profile: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ablation = _load("fidelity_ablation")
    sc = tiny("mlp", machine={"preset": "this"}, stop={"max_updates": 40, "eval_every_updates": 10})
    profile = two_cpu_profile(tmp_path / "this.toml", workload_key(sc.workload), sc.workload.batch_size,
                              [20e-6, 22e-6, 25e-6, 21e-6] * 5, {"k2": [24e-6, 26e-6, 23e-6] * 5})
    monkeypatch.setenv("SIMASGD_PROFILE", str(profile))
    # The "measured" side is the simulator itself, stored as a sweep cell's cpu folder: the ablation's
    # "all mechanisms" row re-runs the same simulation with the same seed, so it must meet τ̄ and updates/s.
    backends.run(sc, "sim", out=tmp_path / "sweep" / "cell-a" / "cpu")
    out = tmp_path / "ablation.md"
    assert ablation.main([str(tmp_path / "sweep"), "--profile", str(profile), "--out", str(out),
                          "--variants", "all mechanisms", "no host noise"]) == 0
    text = out.read_text()
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith(("| all mechanisms", "| no host noise"))]
    assert [r[0] for r in rows[:2]] == ["| all mechanisms", "| no host noise"]
    assert rows[0][1] in ("0/1", "1/1") and rows[0][2] == "1" and rows[0][4] == "1"  # same runs: τ̄, upd/s met
    assert "| all mechanisms | cell-a |" in text and "| no host noise | cell-a |" in text  # the per-cell table


@pytest.mark.slow
def test_cuda_streams_predicts_per_stream_count_and_records_its_cells(tmp_path: Path) -> None:
    out = tmp_path / "streams"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda_streams.py"), "--backends", "sim",
                          "--algorithms", "sync,hogwild", "--streams", "1,2", "--repeats", "1",
                          "-s", "sim.numerics=false", "-s", "stop.max_time_s=0.01", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    record = _load("record")
    doc = record.read(out / "cells.json", "cuda_streams", 1)
    cells = doc["cells"]["sim"]
    assert set(cells) == {"sync-1", "sync-2", "hogwild-1", "hogwild-2"} and doc["backends"] == ["sim"]
    # one stream has no one to be stale against; two HOGWILD! streams overlap, sync's two wait for each other
    assert cells["sync-1"]["mean staleness"] == 0 and cells["hogwild-1"]["mean staleness"] == 0
    assert cells["sync-2"]["mean staleness"] == 0 and 0 < cells["hogwild-2"]["mean staleness"] <= 1
    assert cells["sync-2"]["gradients/s"] == pytest.approx(2 * cells["sync-2"]["updates/s"])
    assert "| hogwild | 2 |" in (out / "sim.md").read_text()
    assert json.loads((out / "cells.json").read_text())["schema"] == "cuda_streams"
