"""``benchmarks/torch_gpu_anchor.py`` (PyTorch's HOGWILD! anchor) on the CPU, at tiny shapes, in a subprocess.

Each run spawns processes that import torch (seconds apiece on a small machine), hence ``slow``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "torch_gpu_anchor.py"
TINY = ["--device", "cpu", "--workers", "2", "--layers", "20,8,3", "--batch", "4", "--seconds", "0.5",
        "--warmup", "2", "--samples", "500", "--setup-timeout", "120", "--stop-timeout", "30"]


def anchor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *TINY, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_anchor_writes_its_rates_and_moves_the_shared_model(mode: str, tmp_path: Path) -> None:
    out = anchor("--mode", mode, "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "torch_anchor.json").read_text())
    assert doc["schema"] == "torch_anchor" and doc["schema_version"] == 1 and doc["commit"]
    assert doc["device"] == "cpu" and doc["mode"] == mode
    assert doc["batch"] == 4 and doc["layers"] == [20, 8, 3] and doc["torch"] and doc["date"].endswith("Z")
    assert [r["workers"] for r in doc["rows"]] == [2]
    for r in doc["rows"]:
        assert len(r["per_worker"]) == r["workers"] and all(n > 0 for n in r["per_worker"])
        assert r["seconds"] >= 0.5
        assert r["updates_per_s"] > 0
        assert r["updates_per_s"] == pytest.approx(sum(r["per_worker"]) / r["seconds"], rel=1e-4)
        assert r["param_change"] > 0  # the workers' steps reached the parameters the parent holds
    assert "| workers | updates/s |" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_a_failing_worker_fails_the_run_with_its_message(mode: str, tmp_path: Path) -> None:
    out = anchor("--mode", mode, "--workers", "1", "--fail-worker", "0", "--out", str(tmp_path))
    assert out.returncode == 1
    assert "injected failure" in out.stderr and "Traceback" in out.stderr
    assert not (tmp_path / "torch_anchor.json").exists()
