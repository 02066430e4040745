"""Reads and updates at the calibrated bandwidth of the model's buffer size (simasgd/sim/caches.py).

The expected times are the closed forms of the model (2·S / gbs(S), 3·S / update_gbs(S), log-log
interpolation between measured sizes), checked on the table, on the platform and on a whole
simulated run through the recorded phase boundaries.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from simasgd import loader, machine
from simasgd.sim.caches import CacheModel

SIZES = [65536, 262144, 1048576, 4194304]
GBS = [100.0, 80.0, 60.0, 20.0]
UPD = [300.0, 200.0, 150.0, 50.0]


COH_SIZES = [65536, 1048576, 4194304]
COH_READ = [50.0, 40.0, 15.0]
COH_WRITE = [120.0, 90.0, 40.0]


def _profile(tmp_path: Path, llc: int = 32 << 20, table: bool = True, coherence: bool = False) -> Path:
    lines = ["[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1",
             "local_latency_ns = 90.0", "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0",
             "link_bandwidth_gbs = 10.0", "gflops_per_core = 1.0", "quantum_s = 0.004",
             "context_switch_s = 2e-6", "", "[cache]", "line_bytes = 64", "levels = [1, 2, 3]",
             f"sizes_bytes = [49152, 1048576, {llc}]", "shared_by = [1, 1, 2]", ""]
    if table:
        lines += ["[copy_by_size]", f"sizes_bytes = {SIZES}", f"gbs = {GBS}", f"update_gbs = {UPD}", ""]
    if coherence:
        lines += ["[coherence]", f"sizes_bytes = {COH_SIZES}", f"read_gbs = {COH_READ}", f"write_gbs = {COH_WRITE}", ""]
    path = tmp_path / "this.toml"
    path.write_text("\n".join(lines))
    return path


def test_rates_at_measured_sizes_and_between_them(tmp_path: Path) -> None:
    m = CacheModel.from_profile(machine.load_profile(_profile(tmp_path)).profile)
    assert m is not None
    for s, g, u in zip(SIZES, GBS, UPD):
        assert m.read_s(s) == pytest.approx(2 * s / (g * 1e9), rel=1e-12)
        assert m.update_s(s) == pytest.approx(3 * s / (u * 1e9), rel=1e-12)
    # halfway in log size between 256 KiB and 1 MiB: the geometric mean of the two rates
    mid = math.sqrt(SIZES[1] * SIZES[2])
    assert m.read_s(mid) == pytest.approx(2 * mid / (math.sqrt(GBS[1] * GBS[2]) * 1e9), rel=1e-9)
    # clamped outside the table
    assert m.read_s(1024) == pytest.approx(2 * 1024 / (GBS[0] * 1e9), rel=1e-12)
    assert m.read_s(1 << 30) == pytest.approx(2 * (1 << 30) / (GBS[-1] * 1e9), rel=1e-12)


def test_llc_footprint_rule(tmp_path: Path) -> None:
    m = CacheModel.from_profile(machine.load_profile(_profile(tmp_path, llc=8 << 20)).profile)
    assert m.in_cache(1 << 20, 7)          # 8 × 1 MiB = the LLC
    assert not m.in_cache(1 << 20, 8)      # 9 MiB: spills to DRAM


def test_no_table_no_model(tmp_path: Path) -> None:
    assert CacheModel.from_profile(machine.load_profile(_profile(tmp_path, table=False)).profile) is None
    assert CacheModel.from_profile(None) is None


def _scenario(workers: int, cache_model: bool = True):  # noqa: ANN202
    return loader.from_dict({
        "name": "c", "seed": 3, "workers": {"count": workers, "placement": "uma"}, "machine": {"preset": "this"},
        "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8},
        "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-4}},
        "algorithm": {"name": "mutex"}, "stop": {"max_updates": 3000, "max_time_s": 10},
        "sim": {"numerics": False, "cache_model": cache_model}})


@pytest.mark.parametrize("workers", [1, 2])
def test_simulated_phases_follow_the_cache_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 workers: int) -> None:
    """A whole run: the recorded read and update phases are the model's closed forms (plus lock waits)."""
    from simasgd.sim import backend
    from simasgd.workloads import build_workload

    path = _profile(tmp_path)
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    sc = _scenario(workers)
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    s = wl.dim * np.dtype(wl.dtype).itemsize
    model = CacheModel.from_profile(machine.load_profile(path).profile)
    u = backend.run_once(sc, 0).updates
    read = (u["t_grad_start"] - u["t_start"]).to_numpy()
    update = (u["t_write"] - u["t_grad_end"]).to_numpy()
    if workers == 1:  # nothing ever waits: every read and update takes exactly the model's time
        np.testing.assert_allclose(read, model.read_s(s), rtol=1e-9)
        np.testing.assert_allclose(update, model.update_s(s), rtol=1e-9)
    else:  # lock waits only add: the least a read or update takes is the model's time
        assert read.min() == pytest.approx(model.read_s(s), rel=1e-9)
        assert update.min() == pytest.approx(model.update_s(s), rel=1e-9)
    # and the switch turns it off: the older single-bandwidth model gives other times
    off = backend.run_once(_scenario(workers, cache_model=False), 0).updates
    assert not np.allclose((off["t_grad_start"] - off["t_start"]).min(), model.read_s(s), rtol=1e-6)


def test_coherence_rates_for_lines_another_core_wrote(tmp_path: Path) -> None:
    m = CacheModel.from_profile(machine.load_profile(_profile(tmp_path, coherence=True)).profile)
    assert m.has_coherence
    for s, r, w in zip(COH_SIZES, COH_READ, COH_WRITE):
        assert m.read_s(s, shared=True) == pytest.approx(2 * s / (r * 1e9), rel=1e-12)
        assert m.update_s(s, shared=True) == pytest.approx(3 * s / (w * 1e9), rel=1e-12)
    # without the table, shared reads fall back to the private rates
    (tmp_path / "x").mkdir()
    plain = CacheModel.from_profile(machine.load_profile(_profile(tmp_path / "x")).profile)
    assert not plain.has_coherence and plain.read_s(SIZES[1], shared=True) == plain.read_s(SIZES[1])


@pytest.mark.parametrize("workers,switch", [(1, True), (2, True), (2, False)])
def test_simulated_reads_use_coherence_rates_only_with_other_writers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     workers: int, switch: bool) -> None:
    from simasgd.sim import backend
    from simasgd.workloads import build_workload

    path = _profile(tmp_path, coherence=True)
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    sc = _scenario(workers)
    sc = sc.model_copy(update={"sim": sc.sim.model_copy(update={"coherence": switch})})
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    s = wl.dim * np.dtype(wl.dtype).itemsize
    model = CacheModel.from_profile(machine.load_profile(path).profile)
    u = backend.run_once(sc, 0).updates
    read = (u["t_grad_start"] - u["t_start"]).to_numpy()
    shared = workers > 1 and switch
    assert read.min() == pytest.approx(model.read_s(s, shared), rel=1e-9)
    assert (u["t_write"] - u["t_grad_end"]).min() == pytest.approx(model.update_s(s, shared), rel=1e-9)


def test_a_leashed_pass_writes_a_fresh_vector_at_four_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leashed builds θ_latest − η·g in another buffer, whose lines are read for ownership before they are
    written: 4·S / update_gbs(S), where an in-place update is 3·S / update_gbs(S). One worker, no retries."""
    from simasgd.sim import backend
    from simasgd.workloads import build_workload

    path = _profile(tmp_path)
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    sc = loader.from_dict({**_scenario(1).to_dict(), "algorithm": {"name": "leashed"}}, base_dir=tmp_path)
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    s = wl.dim * np.dtype(wl.dtype).itemsize
    model = CacheModel.from_profile(machine.load_profile(path).profile)
    u = backend.run_once(sc, 0).updates
    cas = 90e-9  # then the pointer's CAS: a line from memory (the profile's local latency, no [cas] table)
    np.testing.assert_allclose((u["t_write"] - u["t_grad_end"]).to_numpy(), model.update_into_s(s) + cas, rtol=1e-9)
    rate = math.exp(np.interp(math.log(s), np.log(SIZES), np.log(UPD))) * 1e9  # the update's rate at S
    assert model.update_into_s(s) == pytest.approx(4 * s / rate, rel=1e-12)
