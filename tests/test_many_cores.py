"""benchmarks/many_cores.py, the prepared many-core run, as its dry run on this machine: 1 and 2 threads."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simasgd.corpus import store
from simasgd.machines import profile

MACHINE = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1, "local_latency_ns": 90.0,
           "remote_latency_ns": 90.0, "mem_bandwidth_gbs": 10.0, "link_bandwidth_gbs": 10.0,
           "gflops_per_core": 5.0, "quantum_s": 0.004, "context_switch_s": 2e-6}


@pytest.mark.slow
def test_dry_run_writes_a_scored_corpus_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              benchmark_script: Callable[[str], Any]) -> None:
    """Every cell the arguments select is measured, kept in the entry and scored; the ceiling is a share of them."""
    prof = profile.write({"machine": MACHINE, "calibration": {"created": "2026-01-02T03:04:05Z", "quick": True}},
                         tmp_path / "this.toml")
    monkeypatch.setenv("SIMASGD_PROFILE", str(prof))
    out = tmp_path / "out"
    assert benchmark_script("many_cores").main([str(out), "--threads", "1", "2", "--algorithms", "mutex",
                                                "--max-updates", "60", "--max-time-s", "2", "--profile", str(prof),
                                                "--machine", "dry_run"]) == 0
    (path,) = store.machines(out / "corpus")
    entry = store.load(path)
    assert sorted(c.name for c in entry.cells) == ["fid-mutex-n1-b16", "fid-mutex-n2-b16"]
    assert all(len(c.runs) == 2 for c in entry.cells) and entry.profile["machine"] == MACHINE
    doc = json.loads((out / "score.json").read_text())
    assert doc["machine"] == "dry_run" and len(doc["per_cell"]) == 2
    assert all(c["error"] is None for c in doc["per_cell"]), doc["per_cell"]
    assert 0.0 <= doc["ceiling"] <= 2.0 and 0 <= doc["met"] <= 2
