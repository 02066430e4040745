"""The GPU script's rehearsal: ``benchmarks/gpu_check.py --tiny`` runs every section under numba's CUDA
simulator, so that its first run on a GPU (``benchmarks/gpu_check.sh``) needs no fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SECTIONS = ("gradients", "constant", "hogwild_mlp", "streams", "hogwild_cnn", "algorithms_mlp", "lopez_table",
            "to_eps")


@pytest.mark.slow
def test_every_section_of_the_gpu_script_runs_at_tiny_shapes(tmp_path: Path,
                                                            benchmark_script: Callable[[str], Any]) -> None:
    rc = benchmark_script("gpu_check").main(["--tiny", "--out", str(tmp_path), "--deadline", "600",
                                             "--sections", ",".join(SECTIONS)])
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert doc["skipped"] == [], doc["skipped"]
    assert rc == 0, [c for c in doc["checks"] if not c.get("ok")]
    checks = {c["check"] for c in doc["checks"] if c["ok"]}
    assert len(checks) == 7, checks  # two gradients, five algorithms' θ on the constant workload
    errors = [c for c in doc["cells"] if "error" in c]
    assert errors == []
    sections = {c["section"] for c in doc["cells"]}
    assert {"hogwild-mlp", "streams-mlp", "hogwild-cnn", "streams-cnn", "algorithms-mlp", "lopez-table",
            "to-eps"} <= sections
    assert all(c["updates"] > 0 for c in doc["cells"])
    assert doc["schema"] == "gpu_check" and doc["tiny"] is True
