"""The simulator's GPU (simasgd/sim/gpu.py): SMs shared by concurrent streams, presets, the calibrated table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import simpy

from simasgd.machines import profile
from simasgd.machines.machine import MachineError, is_gpu, resolve
from simasgd.runs import backends
from simasgd.sim import gpu
from simasgd.spec import loader


def _kernels(g: gpu.Gpu, streams: int, flops: float, threads: float) -> list[float]:
    """End times of ``streams`` identical kernels started together on the model's SMs."""
    env = simpy.Environment()
    sc = loader.from_dict({"workers": {"count": streams}, "algorithm": {"name": "hogwild"}})
    p = gpu.GpuPlatform(env, sc, g, 0, dim=10, itemsize=8, flops_per_sample=1.0)
    ends: list[float] = []
    for _ in range(streams):
        p.kernel(flops, 0.0, 0.0, threads).callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    return ends


@pytest.mark.parametrize("streams", [1, 2, 4, 8, 32])
@pytest.mark.parametrize("fill", [0.125, 1.0, 3.0])
def test_concurrent_kernels_share_the_sms_as_the_closed_form(streams: int, fill: float) -> None:
    g = gpu.PRESETS["v100"]
    threads, flops = fill * g.resident_threads, 1e8
    ends = _kernels(g, streams, flops, threads)
    want = gpu.predicted_kernel_s(g, flops, threads, streams)
    assert len(ends) == streams and ends == pytest.approx([want] * streams, rel=1e-9)
    if min(1.0, fill) * streams <= 1:  # kernels that fit beside each other run at their speed alone
        assert want == pytest.approx(gpu.predicted_kernel_s(g, flops, threads, 1))
    else:  # that oversubscribe the SMs: each takes longer in proportion
        assert want > gpu.predicted_kernel_s(g, flops, threads, 1)


def test_presets_follow_the_public_specs() -> None:
    v, h = gpu.PRESETS["v100"], gpu.PRESETS["h100"]
    assert (v.sms, v.clock_ghz, v.mem_bandwidth_gbs) == (80, 1.53, 900.0)
    assert v.sms * v.clock_ghz * 1e9 * v.fp32_lanes_per_sm * 2 == pytest.approx(15.7e12, rel=0.01)
    assert (h.sms, h.mem_bandwidth_gbs) == (132, 3350.0)
    assert h.sms * h.clock_ghz * 1e9 * h.fp32_lanes_per_sm * 2 == pytest.approx(67e12, rel=0.02)


def _on_v100(streams: int, algorithm: str = "sync") -> Any:
    sc = loader.from_dict({"seed": 1, "machine": {"preset": "v100"}, "workers": {"count": streams},
                           "workload": {"model": "cnn", "dataset": "synthetic", "features": 3 * 16 * 16,
                                        "classes": 10, "samples": 64, "batch_size": 32, "layers": [16, 5, 2, 32]},
                           "algorithm": {"name": algorithm}, "sim": {"numerics": False, "gradient_cv": 0.0},
                           "stop": {"max_time_s": 0.01, "max_updates": 100000}})
    return backends.load("sim").run_once(sc, 0)


def _sync_rate(streams: int) -> float:
    return _on_v100(streams).runs[0].updates_per_s


@pytest.mark.parametrize("algorithm", sorted(backends.load("cuda").ALGORITHMS))
def test_every_algorithm_of_the_cuda_backend_runs_on_the_gpu_model(algorithm: str) -> None:
    # benchmarks/cuda_streams.py predicts each of them; a Lopez master once found no lopez_master here.
    r = _on_v100(4, algorithm)
    u = r.updates[r.updates["applied"]]
    assert r.runs[0].updates > 0 and len(u) > 0
    if algorithm == "lopez":  # the master steps back to back, faster than gradients arrive
        assert r.runs[0].updates > len(u)


def test_sync_on_the_gpu_slows_as_streams_fill_the_sms() -> None:
    # Lopez et al. §IV-B: the streams share the GPU; a round waits for every stream's gradient.
    r = [_sync_rate(n) for n in (1, 4, 16)]
    assert r[0] > r[1] > r[2]


def test_gpu_presets_are_a_machine_kind() -> None:
    assert is_gpu(loader.from_dict({"machine": {"preset": "h100"}}).machine)
    assert not is_gpu(loader.from_dict({"machine": {"preset": "laptop-2core"}}).machine)
    with pytest.raises(MachineError, match="is a GPU"):
        resolve(loader.from_dict({"machine": {"preset": "v100"}}).machine)


@pytest.mark.slow
def test_the_calibrator_writes_a_gpu_table_the_simulator_reads(cuda: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from executors.calibration.gpu import calibrate
    from executors.cuda import device

    table = calibrate(quick=True)
    assert table["simulator"] is device.simulator()  # SIMASGD_TEST_GPU=1: measured on the GPU
    if not table["simulator"]:
        assert table["threads_per_sm"] >= 1024 and table["sms"] >= 1 and table["clock_ghz"] > 0.3
    c = table["concurrent"]
    assert len(c["streams"]) == len(c["all_done_s"]) >= 2 and all(t > 0 for t in c["all_done_s"])
    for k in ("launch_latency_s", "mem_bandwidth_gbs", "atomics_per_s", "efficiency"):
        assert table[k] > 0, k
    path = tmp_path / "gpu.toml"
    profile.write({"gpu": table}, path)
    monkeypatch.setenv("SIMASGD_PROFILE", str(path))
    g = gpu.resolve(gpu.PROFILE_PRESET)
    assert g is not None and g.sms == table["sms"] and g.launch_latency_s == pytest.approx(table["launch_latency_s"])
    assert g.profile is not None and g.profile.gpu is not None and g.profile.gpu.concurrent is not None
    assert g.profile.gpu.concurrent.streams == c["streams"]
