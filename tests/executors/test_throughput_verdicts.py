"""benchmarks/cpu_throughput.py's verdict rows: each goal reports its worst configuration, honestly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(scope="module")
def bench(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("cpu_throughput")


def _row(alg: str, threads: int, batch: int, dtype: str, rounds: list[float], caps: list[float],
         serial: float) -> dict[str, Any]:
    rate = sorted(rounds)[len(rounds) // 2]
    return {"algorithm": alg, "threads": threads, "batch": batch, "dtype": dtype, "updates_per_s": rate,
            "rounds": rounds, "of_capacity_rounds": [r / c for r, c in zip(rounds, caps, strict=False)],
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
    peak = next(x for x in bench.verdicts(rows) if "GEMM peak" in x["goal"])
    assert peak["worst"] == pytest.approx(serial) and peak["met"] is True


def test_rounds_where_two_workers_took_turns_are_named(bench: Any) -> None:
    row = _row("mutex", 2, 16, "float64", [5600, 2900, 5500], [2.0, 2.0, 2.0], 3000.0)
    row["concurrency_rounds"] = [1.62, 0.81, 1.55]
    assert bench.taking_turns([row]) == ["mutex B=16 float64 round 2 (0.81 of 1.62)"]
    turns = next(x for x in bench.verdicts([row]) if "took turns" in x["goal"])
    assert turns["met"] is False and turns["worst"] == 1.0
    row["concurrency_rounds"] = [1.62, 1.30, 1.55]  # 80% of the best: within the bound
    assert bench.taking_turns([row]) == []


def test_a_run_out_of_the_home_placement_is_measured_again_and_kept_aside(bench: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from executors import c2c

    # probes: each try waits for home (one probe), then one probe before and one after it. The host has
    # the CPUs in two CCXs (160 ns) through the first mutex run, then back home (33 ns)
    far = {"n": 0}

    def probe() -> float:
        far["n"] += 1
        return 160.0 if far["n"] in (5, 6) else 33.0  # capacity's wait and probes first (1-3), mutex's wait (4)

    calls: list[tuple[str, int]] = []

    def ours(alg: str, threads: int, batch: int, seconds: float, dtype: str) -> dict[str, float]:
        calls.append((alg, threads))
        slow = threads == 2 and far["n"] == 5  # the far try runs at half the rate with half the overlap
        return {"updates_per_s": 1000.0 * threads * (0.5 if slow else 0.9), "concurrency": 0.8 if slow else 1.6,
                "update_concurrency": 0.0, "both_updating": 0.0, "update_us": 480.0 if slow else 30.0}

    monkeypatch.setattr(c2c, "latency_ns", probe)
    monkeypatch.setattr(bench, "ours", ours)
    monkeypatch.setattr(bench, "capacity", lambda threads, *a: 1000.0 * threads)
    monkeypatch.setattr(bench, "ALGORITHMS", ("mutex",))
    rows = [r for r in bench.one_round(1.0, False, home=33.0, retries=2)
            if r["batch"] == 16 and r["dtype"] == "float64"]
    two = next(r for r in rows if r["threads"] == 2)
    assert calls[:4] == [("sequential", 1), ("mutex", 1), ("mutex", 2), ("mutex", 2)]  # measured again once
    assert two["updates_per_s"] == pytest.approx(1800.0) and two["c2c_ns"] == [33.0, 33.0]
    assert len(two["moved"]) == 1 and two["moved"][0]["c2c_ns"] == [160.0, 160.0]
    assert two["moved"][0]["updates_per_s"] == pytest.approx(1000.0)
    med = bench.median_rows([rows, rows], home=33.0)
    pl = bench.placement_rows(med)
    assert [p["round"] for p in pl] == [1, 2] and pl[0]["of_home"] == pytest.approx(1000 / 1800)
    assert pl[0]["concurrency"] == pytest.approx(0.8) and pl[0]["home_concurrency"] == pytest.approx(1.6)
    assert pl[0]["update_us"] == pytest.approx(480.0) and pl[0]["home_update_us"] == pytest.approx(30.0)
    assert "| 160, 160 | 0.56 | 0.80 | 1.60 | 480 | 30 | — |" in bench.placement_markdown(med, 33.0)


def test_medians_and_bimodality_use_the_rounds_in_the_home_placement(bench: Any) -> None:
    def rnd(rate: float, conc: float, ns: list[float]) -> list[dict[str, Any]]:
        return [{"batch": 16, "dtype": "float64", "algorithm": "hogwild", "threads": 2, "updates_per_s": rate,
                 "ideal": 6000.0, "capacity": 5800.0, "concurrency": conc, "c2c_ns": ns, "moved": []}]

    # round 2 stayed in two CCXs through its retries: 0.45 of the others and "taking turns"
    rounds = [rnd(5600, 1.6, [33, 34]), rnd(2500, 0.8, [160, 158]), rnd(5400, 1.55, [32, 33])]
    row = bench.median_rows(rounds, home=33.0)[0]
    assert row["home_rounds"] == [True, False, True]
    assert row["updates_per_s"] == pytest.approx(5500.0)  # the median of the two rounds at home
    assert row["rounds"] == [5600, 2500, 5400]  # every round kept
    row["of_ideal"], row["vs_torch"] = row["updates_per_s"] / 6000.0, None
    assert bench.taking_turns([row]) == []
    v = bench.verdicts([row])
    bimodal = next(x for x in v if x["goal"].startswith("no bimodal runs (rounds' updates/s"))
    assert bimodal["worst"] == pytest.approx(5600 / 5400) and bimodal["met"] is True
    away = next(x for x in v if "home placement" in x["goal"])
    assert away["met"] is None and "1 configurations kept a round out of it" in away["where"]
    # without a home placement every round counts, and the far one shows as bimodal
    row = bench.median_rows(rounds, home=None)[0]
    assert row["home_rounds"] == [True, True, True] and row["updates_per_s"] == pytest.approx(5400.0)


def test_a_run_whose_cycle_shifted_between_home_probes_is_measured_again(bench: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from executors import c2c

    monkeypatch.setattr(c2c, "latency_ns", lambda: 33.0)  # every probe home: the move was between them
    tries = iter([{"updates_per_s": 2100.0, "regime": 2.3}, {"updates_per_s": 5600.0, "regime": 1.05}])
    moved: list[dict[str, Any]] = []
    r = bench.placed(lambda: next(tries), 33.0, 2, moved, settle_s=0.0)
    assert r["updates_per_s"] == 5600.0 and [m["regime"] for m in moved] == [2.3]
    # too short a run to tell (NaN) is not a reason to measure again
    short = bench.placed(lambda: {"updates_per_s": 1.0, "regime": float("nan")}, 33.0, 2, [], 0.0)
    assert short["updates_per_s"] == 1.0


def test_a_sequential_row_whose_rounds_moved_is_flagged_beside_the_verdicts(bench: Any) -> None:
    # every ratio of its batch and dtype divides by it (as in a run whose B = 16 float64 rounds were 2781, 2716, 3328)
    def seq(batch: int, rounds: list[float]) -> dict[str, Any]:
        return {"algorithm": "sequential", "threads": 1, "batch": batch, "dtype": "float64",
                "updates_per_s": sorted(rounds)[1], "rounds": rounds, "of_ideal": 1.0, "vs_torch": None}

    rows = [seq(16, [2781.0, 2716.0, 3328.0]), seq(64, [991.0, 1000.0, 985.0])]
    flag = next(x for x in bench.verdicts(rows) if x["goal"].startswith("sequential rows' rounds"))
    assert flag["worst"] == pytest.approx(3328 / 2716) and flag["met"] is None
    assert flag["where"] == "B=16 float64 ⚠ its ratios moved with it"
    rows[0]["rounds"] = [3300.0, 3328.0, 3290.0]
    flag = next(x for x in bench.verdicts(rows) if x["goal"].startswith("sequential rows' rounds"))
    assert flag["worst"] == pytest.approx(1000 / 985) and flag["where"] == "B=64 float64"  # the wider of the two
