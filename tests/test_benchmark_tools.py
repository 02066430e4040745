"""The benchmark tools that benchmarks/*.md's methods use, each run at a tiny setting:
``fidelity_ablation.py`` (the corpus re-simulated with one mechanism turned, against its measured runs),
``profile_keys.py`` (the keys and mechanisms the simulator reads on the corpus) and ``cuda_streams.py`` (the simulator's prediction per stream count; its ``cells.json`` a versioned record)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simasgd.machines.profile import workload_key
from simasgd.runs import backends

ROOT = Path(__file__).resolve().parent.parent



@pytest.mark.slow
def test_the_ablation_re_simulates_each_corpus_cell_with_each_mechanism_turned(
        tmp_path: Path, tiny: Callable[..., Any], two_cpu_profile: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch, benchmark_script: Callable[[str], Any]) -> None:
    import dataclasses

    from simasgd.corpus import store
    from simasgd.machines import profile as prof

    ablation = benchmark_script("fidelity_ablation")
    assert "coherence" in ablation.mechanisms() and "numerics" not in ablation.mechanisms()
    sc = tiny("mlp", machine={"preset": "this"}, stop={"max_updates": 40, "eval_every_updates": 10})
    profile = two_cpu_profile(tmp_path / "this.toml", workload_key(sc.workload), sc.workload.batch_size,
                              [20e-6, 22e-6, 25e-6, 21e-6] * 5, {"k2": [24e-6, 26e-6, 23e-6] * 5})
    monkeypatch.setenv("SIMASGD_PROFILE", str(profile))
    # The "measured" side is the simulator itself: the baseline at the cell's own seed re-runs the same
    # simulation, so it meets the cell; another seed is the score's noise.
    measured = dataclasses.replace(backends.run(sc, "sim"), backend="cpu")
    measured.save(tmp_path / "sweep" / "cell-a" / "cpu")
    entry = store.entry_from([tmp_path / "sweep" / "cell-a" / "cpu"], prof.read(profile), "tiny")
    store.save(entry, tmp_path / "corpus")
    out = tmp_path / "ablation.json"
    assert ablation.main(["--corpus", str(tmp_path / "corpus"), "--variants", "timer_tick", "--seeds", "2", "--base-seeds", "2",
                          "--jobs", "1", "--record", str(out)]) == 0
    doc = json.loads(out.read_text())["machines"]["tiny"]
    assert doc["baseline"][0] == 1 and len(doc["baseline"]) == 2 and doc["cells"] == 1
    row = doc["variants"]["timer_tick=False"]
    assert list(doc["variants"]) == ["timer_tick=False"] and len(row["met"]) == 2 and set(row["met"]) <= {0, 1}
    assert row["delta"] == (sum(row["met"]) - sum(doc["baseline"])) / 2
    assert row["beyond_noise"] == (abs(row["delta"]) > doc["bound"]) and 0 < doc["q_upper"] < 1


@pytest.mark.slow
def test_profile_keys_counts_what_the_corpus_cells_read(tmp_path: Path, tiny: Callable[..., Any],
                                                        two_cpu_profile: Callable[..., Path],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        benchmark_script: Callable[[str], Any]) -> None:
    from simasgd.corpus import store
    from simasgd.machines import profile as prof

    keys = benchmark_script("profile_keys")
    sc = tiny("mlp", machine={"preset": "this"}, workers={"count": 2}, stop={"max_updates": 40})
    path = two_cpu_profile(tmp_path / "this.toml", workload_key(sc.workload), sc.workload.batch_size,
                           [20e-6, 22e-6, 25e-6, 21e-6] * 5, {"k2": [24e-6, 26e-6, 23e-6] * 5})
    monkeypatch.setenv("SIMASGD_PROFILE", str(path))
    measured = backends.run(sc, "sim")
    measured.save(tmp_path / "sweep" / "cell-a" / "cpu")
    doc = prof.read(path).to_doc()
    entry = store.entry_from([tmp_path / "sweep" / "cell-a" / "cpu"], doc, "tiny")
    model = keys.model_of(entry, updates=50)
    # the gradient's samples are read (k2: two workers at once), every [machine] key, nothing the profile lacks
    assert "gradient.<workload>.concurrent.k<k>" in model["keys"]
    assert model["machine_keys"] == sorted(f"machine.{k}" for k in doc["machine"])
    assert {k.split(".")[0] for k in model["keys"]} <= set(doc)
    assert "cache_model" not in model["mechanisms"]  # this profile has no [copy_by_size]


@pytest.mark.slow
def test_cuda_streams_predicts_per_stream_count_and_records_its_cells(
        tmp_path: Path, benchmark_script: Callable[[str], Any]) -> None:
    out = tmp_path / "streams"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda_streams.py"), "--backends", "sim",
                          "--algorithms", "sync,hogwild", "--streams", "1,2", "--repeats", "1",
                          "-s", "sim.numerics=false", "-s", "stop.max_time_s=0.01", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    record = benchmark_script("record")
    doc = record.read(out / "cells.json", "cuda_streams", 1)
    cells = doc["cells"]["sim"]
    assert set(cells) == {"sync-1", "sync-2", "hogwild-1", "hogwild-2"} and doc["backends"] == ["sim"]
    # one stream has no one to be stale against; two HOGWILD! streams overlap, sync's two wait for each other
    assert cells["sync-1"]["mean staleness"] == 0 and cells["hogwild-1"]["mean staleness"] == 0
    assert cells["sync-2"]["mean staleness"] == 0 and 0 < cells["hogwild-2"]["mean staleness"] <= 1
    assert cells["sync-2"]["gradients/s"] == pytest.approx(2 * cells["sync-2"]["updates/s"])
    assert "| hogwild | 2 |" in (out / "sim.md").read_text()
    assert json.loads((out / "cells.json").read_text())["schema"] == "cuda_streams"
