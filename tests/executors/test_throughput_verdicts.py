"""benchmarks/cpu_throughput.py's verdict rows: each goal reports its worst configuration, honestly."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("cpu_throughput", ROOT / "benchmarks" / "cpu_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(alg: str, threads: int, batch: int, dtype: str, rounds: list[float], caps: list[float],
         serial: float) -> dict[str, Any]:
    rate = sorted(rounds)[len(rounds) // 2]
    return {"algorithm": alg, "threads": threads, "batch": batch, "dtype": dtype, "updates_per_s": rate,
            "rounds": rounds, "of_capacity_rounds": [r / c for r, c in zip(rounds, caps)],
            "of_ideal": rate / (threads * serial), "vs_torch": None}


def test_verdicts_name_the_worst_configuration_and_separate_host_noise(bench: Any) -> None:
    serial = 1000.0
    rows = [
        {"algorithm": "sequential", "threads": 1, "batch": 64, "dtype": "float32", "updates_per_s": serial,
         "rounds": [serial] * 3, "of_ideal": 1.0, "vs_torch": None},
        _row("mutex", 1, 64, "float32", [980, 990, 985], [serial] * 3, serial),
        _row("hogwild", 1, 16, "float32", [900, 910, 905], [serial] * 3, serial),
        # rounds 2x apart, but so was the machine (the capacity of two loops halved too): host, not executor
        _row("mutex", 2, 64, "float32", [1900, 950, 1880], [2000, 1000, 2000], serial),
    ]
    bench.roofline(rows, {"gemm_gflops_float32": bench.flops_per_update(64) / 1e9})  # the peak: 1 update/s
    v = {x["goal"].split(" (")[0]: x for x in bench.verdicts(rows)}
    one = v["1 thread ≥ 95% of sequential"]
    assert one["worst"] == pytest.approx(0.905) and one["met"] is False and "hogwild B=16" in one["where"]
    bimodal = [x for x in bench.verdicts(rows) if x["goal"].startswith("no bimodal")]
    by_rate, by_capacity = bimodal
    assert by_rate["worst"] == pytest.approx(2.0) and by_rate["met"] is False
    assert by_capacity["worst"] == pytest.approx(910 / 900) and by_capacity["met"] is True  # the 1-thread rows
    peak = [x for x in bench.verdicts(rows) if "GEMM peak" in x["goal"]][0]
    assert peak["worst"] == pytest.approx(serial) and peak["met"] is True


def test_rounds_where_two_workers_took_turns_are_named(bench: Any) -> None:
    row = _row("mutex", 2, 16, "float64", [5600, 2900, 5500], [2.0, 2.0, 2.0], 3000.0)
    row["concurrency_rounds"] = [1.62, 0.81, 1.55]
    assert bench.taking_turns([row]) == ["mutex B=16 float64 round 2 (0.81 of 1.62)"]
    turns = [x for x in bench.verdicts([row]) if "took turns" in x["goal"]][0]
    assert turns["met"] is False and turns["worst"] == 1.0
    row["concurrency_rounds"] = [1.62, 1.30, 1.55]  # 80% of the best: within the bound
    assert bench.taking_turns([row]) == []
