"""`simasgd calibrate --quick` writes a profile `machine.preset = "this"` loads; `simasgd run --backend cpu` works."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from simasgd.machines import machine
from simasgd.spec import loader

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "simasgd.cli"]


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
@pytest.mark.hardware
def test_calibrate_quick_writes_a_loadable_profile(tmp_path: Path) -> None:
    out = tmp_path / "profiles" / "this.toml"
    p = _cli("calibrate", "--quick", "--out", str(out))
    assert p.returncode == 0, p.stderr
    doc = tomllib.loads(out.read_text())
    m = machine.load_profile(out)
    assert m.name == "this" and m.sockets >= 1 and m.cores >= 1
    for key in ("local_latency_ns", "mem_bandwidth_gbs", "gflops_per_core", "quantum_s", "context_switch_s"):
        v = getattr(m, key)
        assert math.isfinite(v) and v > 0, key
    # a lock waiter's pauses between two sched_yield calls: far below a time slice
    assert 0 < doc["scheduler"]["spin_yield_s"] < m.quantum_s / 100
    (grad,) = doc["gradient"].values()
    assert grad["batch_size"] == 16 and 0 < grad["p10_s"] <= grad["median_s"] <= grad["p90_s"]
    assert len(grad["samples_s"]) > 10 and min(grad["samples_s"]) > 0
    # the loss snapshot timed inside a one-thread worker's cycle: a copy of the model into a ring slot in no
    # cache, at least a memory latency and below a gradient of this model; no other step of the cycle is kept
    assert len(grad["cycle_snapshot_s"]) >= 2
    assert m.local_latency_ns * 1e-9 < grad["cycle_snapshot_median_s"] < grad["median_s"]
    assert not {f"cycle_{step}_{what}" for step in ("read", "update", "fresh") for what in ("s", "median_s")} & set(grad)
    import os

    if len(os.sched_getaffinity(0)) > 1:  # the same gradient with 2 independent threads at once
        conc = grad["concurrent"]
        assert len(conc["k2"]) > 10 and min(conc["k2"]) > 0 and conc["k2_n"] >= 2 * 20
        assert conc["k2_median_s"] > 0.5 * grad["median_s"]
        assert not any(k.startswith("cycle_") for k in conc)  # gradients are timed back to back only
        # the tables that move lines between CPUs, measured in one placement of them (executors/c2c.py)
        assert doc["c2c"]["latency_ns"] > 0  # two probes a row:
        assert len(doc["coherence"]["c2c_ns"]) == 2 * len(doc["coherence"]["sizes_bytes"])
        assert len(doc["c2c"]["samples_ns"]) == 2 * len(doc["coherence"]["sizes_bytes"])
        assert f"core-to-core hand-off {doc['c2c']['latency_ns']:.0f} ns" in p.stdout
    assert len(doc["copy"]["gbs"]) == len(doc["copy"]["threads"]) >= 1
    assert doc["locks"]["handoff_s"] > 0 and doc["cas"]["latency_s"] > 0
    # a pass of atomic adds over a 1 MiB vector (Lopez's accumulation), per add, on own and on held lines
    assert doc["cas"]["pass_elements"] == 131072 and 0 < doc["cas"]["pass_s"] < 1e-6
    assert 0 < doc["cas"]["held_pass_s"] < 1e-6
    books = doc["executor"]  # the executor's record and checks between a bump and the next read of the version
    assert 0 < books["p10_s"] <= books["bookkeeping_s"] <= books["p90_s"] < 1e-5 and books["rounds"] == 8
    peak = doc["peak"]  # the roofline of issue 14: a GEMM through the kernels' BLAS
    for dt in ("float32", "float64"):
        assert 0 < peak[f"gemm_gflops_{dt}"] < 1e5
    # The simulator's preset "this" resolves to it.
    sc = loader.from_dict({"machine": {"preset": "this"}})
    import os

    before = os.environ.get(machine.PROFILE_ENV)  # tests/conftest.py sets one: put it back, not away
    os.environ[machine.PROFILE_ENV] = str(out)
    try:
        assert machine.resolve(sc.machine).gflops_per_core == m.gflops_per_core
    finally:
        if before is None:
            del os.environ[machine.PROFILE_ENV]
        else:
            os.environ[machine.PROFILE_ENV] = before


@pytest.mark.slow
def test_calibrate_bad_scenario_is_one_line_exit_2(tmp_path: Path) -> None:
    p = _cli("calibrate", "--quick", "--scenario", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "p.toml"))
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_quickstart_runs_on_cpu_and_show_reads_it(tmp_path: Path) -> None:
    out = tmp_path / "qs"
    p = _cli("run", "scenarios/quickstart.toml", "--backend", "cpu", "--out", str(out), "-n", "1")
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert doc["backend"] == "cpu" and doc["runs"][0]["updates"] > 0
    shown = _cli("show", str(out))
    assert shown.returncode == 0 and "cpu" in shown.stdout and "mutex" in shown.stdout


def test_concurrent_samples_keep_whole_calls() -> None:
    """Two threads' times (call j of each, interleaved): the kept samples come from both threads in
    their pairs."""
    from executors.calibration.timing import add_concurrent

    rng = np.random.default_rng(7)
    n = 4000
    shared = rng.normal(0, 0.06, n)
    t0 = 1e5 * np.exp(shared + rng.normal(0, 0.08, n))
    t1 = 2e5 * np.exp(shared + rng.normal(0, 0.08, n))  # thread 1 twice as slow: its samples are told apart
    conc: dict = {}
    add_concurrent(conc, "k2", np.stack([t0, t1], axis=1).reshape(-1), 2)
    assert "k2_pair_corr" not in conc  # pairs by call index are not simultaneous: no longer written
    kept = np.asarray(conc["k2"])
    assert len(kept) == 200 and np.all(kept[0::2] < 1.5e-4) and np.all(kept[1::2] > 1.5e-4)
    assert conc["k2_n"] == 2 * n
