"""``benchmarks/contention.py --beside``: the steps on θ taken in turn while the other threads compute gradients.

The table's shape and fields at k = 1, 2 on a tiny MLP (one compile, shared by the module), a k above the CPUs
refused by name before anything compiles, and the record's schema: version 3 refused by a version-2 reader, and
a machine whose contention record has no ``beside`` table due for that section alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.calibration import contention

CPUS = sorted(os.sched_getaffinity(0))
TINY = ["--threads", "1", "2", "--passes", "4", "--dim", "512", "--beside", "--beside-passes", "6",
        "--layers", "64", "8", "10", "--held", "--held-s", "0.2", "--sharers", "--sharers-rounds", "4"]
BESIDE_KEYS = ("update_s", "update_p90_s", "hold_s", "hold_p90_s", "gradient_s", "gradient_p90_s", "steps",
               "gradients", "seconds", "compile_s")


@pytest.fixture(scope="module")
def tiny_record(tmp_path_factory: pytest.TempPathFactory, benchmark_script: Callable[[str], Any]) -> dict[str, Any]:
    """``contention.py --beside`` at k = 1, 2 on a 64-8-10 MLP, 6 steps of each kind: its record."""
    if len(CPUS) < 2:
        pytest.skip("k = 2 needs two CPUs")
    out = tmp_path_factory.mktemp("contention") / "contention.json"
    script = benchmark_script("contention")
    assert script.main([*TINY, "--out", str(out)]) == 0
    return dict(benchmark_script("record").read(out, "contention", script.SCHEMA_VERSION))


@pytest.mark.slow
def test_beside_table_a_row_per_k_each_step_and_the_gradient(tiny_record: dict[str, Any]) -> None:
    assert tiny_record["schema_version"] == 3 and tiny_record["threads"] == [1, 2]
    b = tiny_record["beside"]
    assert b["threads"] == [1, 2] and b["layers"] == [64, 8, 10] and b["batch"] == 16 and b["passes"] == 6
    assert b["dim"] == 64 * 8 + 8 + 8 * 10 + 10 and b["bytes"] == 8 * b["dim"]
    for key in BESIDE_KEYS:
        assert len(b[key]) == 2, key
    for name in ("update", "hold", "gradient"):
        assert all(0 < m <= p for m, p in zip(b[f"{name}_s"], b[f"{name}_p90_s"], strict=True)), name
    assert b["steps"] == [6, 6]  # whole rotations: k = 2 takes 3 turns a thread of each step
    assert all(g >= 2 * 6 + contention.WARM_ROTATIONS for g in b["gradients"])  # one at least before each turn
    assert all(s > 0 for s in b["seconds"])
    json.dumps(tiny_record)  # plain JSON


@pytest.mark.slow
def test_held_table_coherence_rows_at_the_model_size(tiny_record: dict[str, Any]) -> None:
    """``--held``: [coherence]'s rows at θ's size, between two CPUs, each a positive rate (the mirrored update's too)."""
    h = tiny_record["held"]
    assert h["sizes_bytes"] == [8 * 512] and h["cpus"][0] != h["cpus"][1] and h["rounds"] >= 5
    for key in ("read_gbs", "update_gbs", "fresh_gbs", "held_read_gbs", "held_update_gbs", "held_mirrored_gbs"):
        assert len(h[key]) == 1 and 0 < h[key][0] < 10_000, (key, h[key])


@pytest.mark.slow
def test_sharers_table_times_each_k_s_steps_on_lines_other_caches_hold(tiny_record: dict[str, Any]) -> None:
    """``--sharers``: per k of the run's threads (that fit the CPUs), the update and the mirrored update of θ's
    lines right after k − 1 other threads copied them, each positive; the readers took every round (a round
    they missed would hang the timed thread, which waits for all their copies)."""
    t = tiny_record["sharers"]
    assert t["bytes"] == 8 * 512 and t["rounds"] == 4 and t["threads"] == [k for k in (1, 2) if k <= len(CPUS)]
    for key in ("update_s", "mirrored_s"):
        assert len(t[key]) == len(t["threads"]) and all(0 < v < 0.1 for v in t[key]), (key, t[key])


@pytest.mark.slow
def test_beside_steps_are_whole_rotations_and_the_loop_compiles_once(tiny_record: dict[str, Any]) -> None:
    wl, theta0 = contention.mlp_workload((64, 8, 10))
    row = contention.measure_beside(2, CPUS, wl, theta0, 16, 3)
    assert row["steps"] == 4  # 3 asked: 2 turns a thread
    assert len(contention.beside_loop.signatures) == 1  # the compile before the threads is theirs


def test_more_threads_than_cpus_are_refused_by_name() -> None:
    k = len(CPUS) + 1
    with pytest.raises(ValueError, match=rf"contention: {k} threads need {k} CPUs.*may use {len(CPUS)}"):
        contention.beside(4, [1, k])  # before the workload is built or anything compiles
    with pytest.raises(ValueError, match=rf"{k} threads need"):
        contention.measure_beside(k, CPUS, None, np.zeros(4), 16, 4)
    with pytest.raises(ValueError, match=rf"{k} threads need"):
        contention.measure("update", k, CPUS, 64, 3)


def test_a_version_3_record_is_refused_by_a_version_2_reader(tmp_path: Path,
                                                             benchmark_script: Callable[[str], Any]) -> None:
    record, dc = benchmark_script("record"), benchmark_script("device_check")
    assert benchmark_script("contention").SCHEMA_VERSION == dc.CONTENTION_SCHEMA_VERSION == 3
    path = record.write(tmp_path / "contention.json", "contention", 3, {"threads": [1], "beside": {}})
    with pytest.raises(record.RecordError, match="schema version 3 is newer than this reader's 2"):
        record.read(path, "contention", 2)
    assert "beside" in record.read(path, "contention", 3)


def test_a_record_without_the_beside_table_makes_that_section_due(
        tmp_path: Path, benchmark_script: Callable[[str], Any], capsys: pytest.CaptureFixture[str]) -> None:
    record, dc = benchmark_script("record"), benchmark_script("device_check")
    results, corpus = tmp_path / "results", tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "intel_xeon_16cpu.json.gz").write_bytes(b"")
    results.mkdir()  # the dist cells with the wake in their run are in (tests/test_device_check.py makes them due)
    (results / "dist_fidelity_intel_xeon_16cpu_x.md").write_text(
        "[network]: latency 27 us, handling 76.6 us, wake 70.7 us past 131.9 us idle over 3 gaps, sim model 4810\n")
    path = results / "contention_intel_xeon_16cpu.json"
    cli = ["pending", "--results", str(results), "--corpus", str(corpus), "--gpu", "none",
           "--machine", "intel_xeon_16cpu"]

    def due() -> tuple[str, str]:
        assert dc.main(cli) == 0
        out, err = capsys.readouterr()
        return out.strip(), err

    # the entry is in, its records absent: those sections alone (the idle-gap loop's record too)
    assert due()[0] == "cores:contention,idle_gap"
    record.write(results / "idle_gap_intel_xeon_16cpu.json", "idle_gap", 1, {"rows": []})
    assert due()[0] == "cores:contention"
    record.write(path, "contention", 2, {"threads": [1, 2]})  # the record before --beside
    part, why = due()
    assert part == "cores:contention" and "has no beside table" in why
    record.write(path, "contention", 4, {"threads": [1, 2], "beside": {}})  # a newer writer's
    part, why = due()
    assert part == "cores:contention" and "newer than this reader's 3" in why
    record.write(path, "contention", 3, {"threads": [1, 2], "beside": {"threads": [1, 2]}})  # before --cycle
    part, why = due()
    assert part == "cores:contention" and "has no cycle table" in why
    record.write(path, "contention", 3, {"threads": [1, 2], "beside": {"threads": [1, 2]}, "cycle": {}})
    part, why = due()
    assert part == "cores:contention" and "has no timeshare table" in why  # before --timeshare
    record.write(path, "contention", 3, {"threads": [1, 2], "beside": {"threads": [1, 2]}, "cycle": {},
                                         "timeshare": []})
    part, why = due()
    assert part == "cores:contention" and "has no held table" in why  # before --held
    record.write(path, "contention", 3, {"threads": [1, 2], "beside": {"threads": [1, 2]}, "cycle": {},
                                         "timeshare": [], "held": {}})
    part, why = due()
    assert part == "cores:contention" and "has no sharers table" in why  # before --sharers
    record.write(path, "contention", 3, {"threads": [1, 2], "beside": {"threads": [1, 2]}, "cycle": {},
                                         "timeshare": [], "held": {}, "sharers": {}})
    assert due()[0] == "none"
    (corpus / "intel_xeon_16cpu.json.gz").unlink()
    assert due()[0] == "cores"  # no entry: the whole part
