"""The machine micro-benchmarks of ``executors/calibration/`` and their profile tables."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from executors.calibration import calibrate as cal
from executors.calibration import coherence, contention, copies, scheduler, topology
from executors.calibration.timing import run_threads
from simasgd.machines import machine

CPUS = sorted(os.sched_getaffinity(0))


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")


@pytest.fixture(scope="module")
def tables() -> dict[str, Any]:
    """The quick machine tables, measured once for the module (compiles every loop)."""
    return cal._machine_tables(True, lambda s: None)


# --- [cache] from a fake sysfs --------------------------------------------------------------------

def test_cache_levels_from_fake_sysfs(tmp_path: Path) -> None:
    rows = {  # index order is not level order; the instruction cache is left out
        "index3": ("3", "Unified", "32768K", "0-3,8-11"),
        "index0": ("1", "Data", "48K", "0"),
        "index1": ("1", "Instruction", "32K", "0"),
        "index2": ("2", "Unified", "1M", "0,8"),
    }
    for idx, (level, kind, size, shared) in rows.items():
        d = f"cpu0/cache/{idx}"
        _write(tmp_path, f"{d}/level", level)
        _write(tmp_path, f"{d}/type", kind)
        _write(tmp_path, f"{d}/size", size)
        _write(tmp_path, f"{d}/shared_cpu_list", shared)
        _write(tmp_path, f"{d}/coherency_line_size", "64")
    c = topology.cache_levels(tmp_path)
    assert c == {"line_bytes": 64, "levels": [1, 2, 3], "sizes_bytes": [48 << 10, 1 << 20, 32 << 20],
                 "shared_by": [1, 2, 8], "source": "sysfs"}


def test_cache_levels_absent(tmp_path: Path) -> None:
    c = topology.cache_levels(tmp_path)
    assert c["source"] == "absent" and c["levels"] == c["sizes_bytes"] == c["shared_by"] == []
    assert "line_bytes" not in c


def test_copy_sizes_double_up_to_four_llc_or_64_mib() -> None:
    big = copies.copy_sizes({"sizes_bytes": [1 << 20, 32 << 20]}, quick=False)
    assert big[0] == 16 << 10 and big[-1] == 128 << 20
    assert all(b == 2 * a for a, b in itertools.pairwise(big))
    small = copies.copy_sizes({"sizes_bytes": [2 << 20]}, quick=False)
    assert small[-1] == 64 << 20  # a small LLC still reaches DRAM
    assert copies.copy_sizes({"sizes_bytes": []}, quick=False)[-1] == 64 << 20
    quick = copies.copy_sizes({"sizes_bytes": [32 << 20]}, quick=True)
    assert 2 <= len(quick) < len(big) and quick[0] == 16 << 10


# --- [scheduler] kernel parameters from fake files ------------------------------------------------

def test_cfs_sysctls_ns_to_seconds(tmp_path: Path) -> None:
    _write(tmp_path, "proc/sys/kernel/sched_latency_ns", "24000000")
    _write(tmp_path, "proc/sys/kernel/sched_min_granularity_ns", "3000000")
    _write(tmp_path, "sys/kernel/debug/sched/wakeup_granularity_ns", "4000000")
    p = scheduler.scheduler_params(tmp_path, release="5.10.0-21-amd64")
    assert p["kernel"] == "cfs" and p["params_source"] == "kernel"
    assert p["latency_s"] == pytest.approx(0.024) and p["min_granularity_s"] == pytest.approx(0.003)
    assert p["wakeup_granularity_s"] == pytest.approx(0.004) and "base_slice_s" not in p


def test_eevdf_base_slice_and_missing_files_omitted(tmp_path: Path) -> None:
    _write(tmp_path, "sys/kernel/debug/sched/base_slice_ns", "3000000")
    _write(tmp_path, "proc/sys/kernel/osrelease", "6.8.0-40-generic")
    p = scheduler.scheduler_params(tmp_path)
    assert p["kernel"] == "eevdf" and p["kernel_release"] == "6.8.0-40-generic"
    assert p["base_slice_s"] == pytest.approx(0.003) and p["params_source"] == "kernel"
    assert not {"latency_s", "min_granularity_s", "wakeup_granularity_s"} & set(p)


@pytest.mark.parametrize("release,kernel", [("6.6.0", "eevdf"), ("6.18.44-fc", "eevdf"), ("6.5.13", "cfs"),
                                            ("4.19.0", "cfs"), ("custom", "unknown")])
def test_kernel_from_version_when_no_file_is_readable(tmp_path: Path, release: str, kernel: str) -> None:
    p = scheduler.scheduler_params(tmp_path, release=release)
    assert p["kernel"] == kernel and p["params_source"] == "measured"
    assert not set(scheduler._PARAMS) & set(p)


def test_files_decide_over_the_version(tmp_path: Path) -> None:
    _write(tmp_path, "sys/kernel/debug/sched/latency_ns", "junk")  # exists (so CFS) but unparsable: omitted
    p = scheduler.scheduler_params(tmp_path, release="custom")
    assert p["kernel"] == "cfs" and "latency_s" not in p and p["params_source"] == "measured"


# --- measurements (quick) -----------------------------------------------------------------------------

@pytest.mark.hardware
def test_copy_by_size_one_positive_value_per_size(tables: dict[str, Any]) -> None:
    t = tables["copy_by_size"]
    assert len(t["sizes_bytes"]) >= 2 and t["sizes_bytes"][0] == 16 << 10
    for key in ("read_gbs", "update_gbs"):
        assert len(t[key]) == len(t["sizes_bytes"]), key
        assert all(math.isfinite(v) and 0 < v < 10_000 for v in t[key]), (key, t[key])


@pytest.mark.hardware
def test_coherence_positive_finite_bandwidths(tables: dict[str, Any]) -> None:
    if len(CPUS) < 2:
        pytest.skip("coherence needs two usable CPUs")
    t = tables["coherence"]
    assert t["sizes_bytes"] and min(t["sizes_bytes"]) >= 64 << 10
    assert set(t["sizes_bytes"]) <= set(tables["copy_by_size"]["sizes_bytes"])
    assert t["rounds"] >= 5 and t["cpus"][0] != t["cpus"][1]
    for key in ("read_gbs", "update_gbs", "fresh_gbs", "held_read_gbs", "held_update_gbs", "held_mirrored_gbs"):
        assert len(t[key]) == len(t["sizes_bytes"]), key
        assert all(math.isfinite(v) and 0 < v < 10_000 for v in t[key]), (key, t[key])


def test_coherence_reason_on_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coherence.os, "sched_getaffinity", lambda pid: {CPUS[0]})
    t = coherence.coherence([64 << 10], 0.1)
    assert set(t) == {"reason"}


# --- [contention] ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cpus", "ks"), [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]), (16, [1, 2, 4, 8, 16])])
def test_contention_thread_counts_double_up_to_the_cpus(cpus: int, ks: list[int]) -> None:
    assert contention.thread_counts(cpus) == ks


def test_contention_refuses_an_unknown_loop_by_name() -> None:
    with pytest.raises(ValueError, match="'copy' is not 'update' or 'locked'"):
        contention.measure("copy", 1, CPUS, 64, 3)


@pytest.mark.hardware
def test_contention_a_row_per_thread_count_and_a_lock_never_busier_than_always(tables: dict[str, Any]) -> None:
    t = tables["contention"]
    assert t["bytes"] == 1 << 20 and t["passes"] == 40
    assert t["threads"] == contention.thread_counts(len(CPUS))
    for key in ("update", "locked_hold"):
        med, p90 = t[f"{key}_s"], t[f"{key}_p90_s"]
        assert len(med) == len(p90) == len(t["threads"]), key
        assert all(math.isfinite(m) and 0 < m <= p for m, p in zip(med, p90, strict=True)), (key, med, p90)
    # the holds over the span they lie in: above 1 two threads would have held the lock at once
    assert all(0 < b <= 1.05 for b in t["locked_busy"]), t["locked_busy"]
    assert all(r > 0 for r in t["locked_per_s"])


# --- the profile file -----------------------------------------------------------------------------

@pytest.mark.hardware
def test_quick_tables_round_trip_through_the_profile(tables: dict[str, Any], tmp_path: Path) -> None:
    m = asdict(machine.PRESETS["laptop-2core"])
    m = {k: v for k, v in m.items() if k not in ("name", "profile")}
    sched = {"quantum_s": 4e-3, "context_switch_s": 3e-6, "runs": 10, "source": "test",
             **tables["scheduler"], "latency_s": None}  # None: left out of the file
    profile = {"machine": m, "scheduler": sched, **{k: v for k, v in tables.items() if k != "scheduler"}}
    path = cal.write_profile(profile, tmp_path / "this.toml")
    assert "nan" not in path.read_text()
    typed = machine.load_profile(path).profile
    assert typed is not None and typed.scheduler is not None and typed.scheduler.latency_s is None
    doc = typed.to_doc()
    assert "latency_s" not in doc["scheduler"]
    assert doc["scheduler"]["kernel"] in ("eevdf", "cfs", "unknown")
    assert doc["scheduler"]["params_source"] in ("kernel", "measured")
    for name in ("cache", "copy_by_size", "coherence", "contention"):
        assert doc[name] == tables[name], name
    assert doc["tick"] == tables["tick"]



@pytest.mark.hardware
def test_spin_yield_period_is_the_lock_loops_own() -> None:
    """``[scheduler] spin_yield_s``: the executor's lock-waiting loop on a taken word runs 64 pauses a
    sched_yield, each pause at least a nanosecond; on a free word it leaves at once."""
    from executors.calibration.scheduler import _spin_period, spin_yield_s
    from executors.cpu.shared import SPINS_BEFORE_YIELD, new_ctrl

    taken, free, ctrl = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64), new_ctrl()
    _spin_period(taken, ctrl, 1)
    ns = _spin_period(taken, ctrl, 1000)
    assert ns > 1000 * SPINS_BEFORE_YIELD * 1.0
    assert _spin_period(free, ctrl, 1000) < ns / 100
    assert 1e-9 * SPINS_BEFORE_YIELD < spin_yield_s(2000) < 1e-3


def test_a_failed_calibration_thread_is_raised_not_left_as_zeros() -> None:
    # A timer that raised on its thread used to leave its output array at zeros, and the calibration went on
    def timer(i: int, out: np.ndarray) -> int:
        if i == 1:
            raise ValueError("timer broke")
        out[0] = 7
        return i

    out = np.zeros(1, dtype=np.int64)
    assert run_threads(timer, [(0, out), (0, out)]) == [0, 0] and out[0] == 7
    with pytest.raises(RuntimeError, match=r"calibration thread 1 \(timer\) failed: ValueError: timer broke"):
        run_threads(timer, [(0, out), (1, out)])


def test_a_hung_calibration_thread_is_named() -> None:
    import threading

    release = threading.Event()
    try:
        with pytest.raises(RuntimeError, match=r"calibration threads \[0\] \(wait\) still running after 0.2 s"):
            run_threads(release.wait, [(30,)], timeout_s=0.2)
    finally:
        release.set()


def test_a_pass_of_atomic_adds_is_timed_per_add_on_own_and_on_held_lines() -> None:
    """``[cas] pass_s`` / ``held_pass_s``: d atomic float adds over a vector, per add, alone and after another
    thread read the vector (the two threads taking turns through an atomic word: a turn lost would hang it)."""
    from executors.calibration.locks import add_pass_figures

    out = add_pass_figures(4096, 3)
    assert out["pass_elements"] == 4096
    assert 0 < out["pass_s"] < 1e-5 and 0 < out["held_pass_s"] < 1e-5
