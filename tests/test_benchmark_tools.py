"""The benchmark tools that benchmarks/*.md's methods use, each run at a tiny setting:
``fidelity_ablation.py`` (the corpus re-simulated with one mechanism turned, against its measured runs),
``profile_keys.py`` (the keys and mechanisms the simulator reads on the corpus), ``cuda_streams.py`` (the simulator's prediction per stream count; its ``cells.json`` a versioned record), ``sim_scale.py`` (the simulator's cost an attempt as workers grow, its cells repeated) ``sim_events.py``
(where a run's events go: the sharing servers' timers by what each finds) and ``gradient_footprint.py`` (a
gradient's time against the vectors its cycle touches)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
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


def test_sim_scale_repeats_each_cell_and_takes_the_ratio_within_a_repeat(
        monkeypatch: pytest.MonkeyPatch, benchmark_script: Callable[[str], Any]) -> None:
    """Each cell is timed ``repeats`` times at the size its first pass found, the worker counts in turn
    backwards and forwards; a cell's figure is its samples' median, the ratio the median of the ratios of the
    same repeat, and a cell whose samples spread past ``UNSTABLE`` of their median is flagged."""
    scale = benchmark_script("sim_scale")
    # wall seconds of a run: a fixed start-up and 1 ms an attempt at 16 workers, 3 ms at 64, the host getting
    # slower from one call to the next (a drift both cells of a ratio must share); an attempt retries its CAS
    # once at 16 workers and five times at 64 (two passes and six)
    calls: list[tuple[int, int]] = []

    def timed(algorithm: str, workers: int, machine: str, network: str | None,
              updates: int) -> tuple[float, int, int, int]:
        calls.append((workers, updates))
        drift = 1 + 0.01 * len(calls)
        per = {16: 1e-3, 64: 3e-3}[workers] * drift
        return 0.5 + updates * per, updates, 2 * updates, {16: 2, 64: 6}[workers] * updates

    monkeypatch.setattr(scale, "timed", timed)
    group = [scale.cell("mutex", n, "m", None, budget=0.05) for n in (16, 64)]
    sized = [(r["workers"], r["updates"]) for r in group]
    first = len(calls)
    scale.repeat(group, 3)
    longs = [c for c in calls[first:] if c[1] != scale.PILOT]
    assert longs == [sized[1], sized[0], sized[0], sized[1]]  # backwards, then forwards, at the first sizes
    for row in group:
        assert len(row["samples"]) == 3
        assert row["ms_per_1000"] == sorted(s["ms_per_1000"] for s in row["samples"])[1]
        assert row["events_per_attempt"] == pytest.approx(2.0)
        passes = {16: 2, 64: 6}[row["workers"]]
        assert row["passes_per_attempt"] == pytest.approx(passes)
        assert row["ms_per_1000_passes"] == pytest.approx(row["ms_per_1000"] / passes, rel=0.05)
    each = scale.ratios(*group)
    assert len(each) == 3 and all(2.5 < r < 3.5 for r in each)
    # the table shows the median ratio and its range
    shown = scale.table(group, [16, 64])
    assert f"| {sorted(each)[1]:.1f}× ({min(each):.1f}–{max(each):.1f}) |" in shown
    assert "| 2.0 → 6.0 |" in shown  # the passes an attempt; a pass costs about 0.5 ms at both sizes
    assert group[1]["ms_per_1000_passes"] == pytest.approx(group[0]["ms_per_1000_passes"], rel=0.1)
    assert not any(r["unstable"] for r in group)
    group[0]["samples"][0]["ms_per_1000"] *= 2  # one timing twice the others: past UNSTABLE
    scale.summarize(group[0])
    assert group[0]["unstable"] and group[0]["spread"] > scale.UNSTABLE


def test_sim_events_tells_each_sharing_timer_by_what_it_found(benchmark_script: Callable[[str], Any]) -> None:
    """One link of 1 byte/s shared equally (closed-form departures), three constructed cases: a timer that
    fires before its job is through, one a sooner departure replaced, one that ends a part of a transfer."""
    import simpy

    from simasgd.sim.memory import Transfer
    from simasgd.sim.sharing import Bandwidth

    events = benchmark_script("sim_events")

    def run(jobs: list[tuple[float, list[tuple[float, float]]]]) -> tuple[dict[str, int], list[float]]:
        """``jobs``: (submitted at, [(bytes, delay) per part]); the counts and each transfer's end (the link
        made while the tally is installed, so that its speed is counted)."""
        ends: list[float] = []

        def job(at: float, parts: list[tuple[float, float]]) -> Any:
            yield env.timeout(at)
            yield Transfer(env, [(link, b, d) for b, d in parts])
            ends.append(env.now)

        tally = events.Tally()
        with tally.installed():
            env = simpy.Environment()
            link = Bandwidth(env, 1.0, 1.0)
            for at, parts in jobs:
                env.process(job(at, parts))
            env.run()
        steps.append(tally.steps)
        return dict(tally.counts), ends

    steps: list[int] = []
    # 2 bytes at t = 0, due at 2; 10 bytes from t = 1 halve its rate: 1 byte left at 1/2 → done at 3 (the
    # timer set for 2 fires early), and the 10 bytes end at 3 + (10 − 1) = 12. The link's speed is looked
    # up each time its sharers change, 4 times (two arrivals, two departures), and never to walk a calendar
    # (no job was submitted ahead)
    counts, ends = run([(0, [(2, 0)]), (1, [(10, 0)])])
    assert counts == {"early": 1, "served": 2} and ends == pytest.approx([3, 12]) and steps == [4]
    # 10 bytes at t = 0, due at 10; half a byte from t = 1 ends at 2, replacing that timer (stale at 10):
    # 10 − 1 − 0.5 = 8.5 bytes left alone → done at 10.5
    counts, ends = run([(0, [(10, 0)]), (1, [(0.5, 0)])])
    assert counts == {"served": 2, "stale": 1} and ends == pytest.approx([2, 10.5])
    # one transfer of two parts (1 and 3 bytes) from t = 0: the first part, submitted alone, sets a timer for
    # 1, which the second part's share delays (early); it leaves at 2 and nobody resumes there; the second
    # has 2 bytes left alone → done at 4
    counts, ends = run([(0, [(1, 0), (3, 0)])])
    assert counts == {"early": 1, "parts": 1, "served": 1} and ends == pytest.approx([4])
    # the servers are as they were once the block ends
    from simasgd.sim import sharing

    assert sharing.SharedServer._complete.__name__ == "_complete"
    assert sharing.SharedServer.__init__.__name__ == "__init__"


def test_sim_events_counts_the_rotations_turns_and_splits_wall_time_by_work(
        benchmark_script: Callable[[str], Any]) -> None:
    """Turns are counted only where spinners rotate (threads outnumber the CPUs), the work an attempt is events +
    server steps + turns, and ``--scale`` divides a cell's wall time an attempt by it."""
    from simasgd.sim import cpu

    events = benchmark_script("sim_events")
    with events.TALLY.installed():
        alone, crowded = (events.cell("mutex", n, "xeon-e5-2698-v4", 60) for n in (16, 256))
    assert alone["turns"] == 0 < crowded["turns"]  # 16 threads on 80 CPUs never rotate; 256 do
    for row in (alone, crowded):
        assert row["work"] == pytest.approx(row["total"] + row["steps"] + row["turns"])
    assert cpu._check_round.__name__ == "_check_round" and cpu.Cores._jump.__name__ == "_jump"  # given back
    scale = {"rows": [{"algorithm": "mutex", "workers": 16, "network": None, "ms_per_1000": 10 * alone["work"]},
                      {"algorithm": "mutex", "workers": 256, "network": None, "ms_per_1000": 30 * crowded["work"]}]}
    text = events.per_work([alone, crowded], scale)
    ratio = 3 * crowded["work"] / alone["work"]
    assert f"| mutex | {ratio:.1f}× | {crowded['work'] / alone['work']:.1f}× | 3.00× |" in text
    assert "| mutex | 16 | " in text and "| 10,000 |" in text  # 10 µs a unit of work, in ns


@pytest.mark.slow
def test_sim_throughput_pairs_its_runs_and_times_the_numerics_loop(benchmark_script: Callable[[str], Any]) -> None:
    st = benchmark_script("sim_throughput")
    sim, bare, ratios = st.paired(4, 300, 3)
    assert sim > 0 and bare > 0 and len(ratios) == 3 and all(r > 0 for r in ratios)
    loop_s, math_s = st.numerics_overhead(20)  # every method it times still exists on the simulator's model
    assert 0 < math_s <= loop_s


def test_gradient_footprint_times_each_cycle_and_prices_the_four_vector_one(
        tmp_path: Path, benchmark_script: Callable[[str], Any]) -> None:
    """``gradient_footprint.py`` at a tiny setting: every case timed in every round, the record readable under its
    schema, the table's excess each case's median over the calibration's, and the simulator's excess on a
    profile its closed form (the gradient's two streams at the copy rate of 2·S against S: log-log
    interpolation in ``[copy_by_size]``)."""
    import math
    import statistics

    footprint, record = benchmark_script("gradient_footprint"), benchmark_script("record")
    sizes, gbs = [4096, 16384, 65536], [100.0, 50.0, 25.0]
    profile = tmp_path / "p.toml"
    profile.write_text("\n".join([
        "[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1", "local_latency_ns = 90.0",
        "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0", "link_bandwidth_gbs = 10.0",
        "gflops_per_core = 1.0", "quantum_s = 0.004", "context_switch_s = 2e-6", "",
        "[copy_by_size]", f"sizes_bytes = {sizes}", f"gbs = {gbs}", f"update_gbs = {gbs}", ""]))
    out = tmp_path / "gf.json"
    assert footprint.main(["--layers", "64", "8", "10", "--batch", "4", "--calls", "20", "--repeats", "2",
                           "--profile", str(profile), "--out", str(out), "--cpu", "0"]) == 0
    doc = record.read(out, "gradient_footprint", 1)
    assert set(doc["rounds"]) == {name for name, _, _ in footprint.CASES}
    assert all(len(v) == 2 and min(v) > 0 for v in doc["rounds"].values())
    s = doc["model_bytes"]
    assert s == (64 * 8 + 8 + 8 * 10 + 10) * 8
    rate = lambda size: math.exp(float(np.interp(math.log(size), np.log(sizes), np.log(gbs)))) * 1e9
    assert doc["predicted_us"] == pytest.approx((2 * s / rate(2 * s) - 2 * s / rate(s)) * 1e6, rel=1e-9)
    assert doc["predicted_us"] > 0
    base = statistics.median(doc["rounds"]["calibration"])
    four = statistics.median(doc["rounds"]["4 vectors"])
    assert f"| 4 vectors | {four:.1f} (" in footprint.table(doc) and f"| {four - base:+.1f} |" in footprint.table(doc)
