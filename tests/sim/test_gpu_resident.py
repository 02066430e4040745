"""The simulator's model of the gpu backend (simasgd/sim/gpu_resident.py) against closed forms.

Every gradient is deterministic here (``sim.gradient_cv = 0``), so a block's phases are known from the
profile's ``[gpu.block]`` rates: read = 2|θ| / copy rate, gradient = flops / block rate, update =
3|θ| / step rate (no momentum). The oracles are the cycle T = read + gradient + update and what
sharing an SM, the host's lock or the device lock does to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simasgd.evaluation import fidelity
from simasgd.machines.profile import workload_key
from simasgd.numerics.workloads import build_workload
from simasgd.runs import backends
from simasgd.sim import gpu_resident
from simasgd.spec import loader

WORKLOAD = {"model": "mlp", "layers": [16, 8, 4], "features": 16, "classes": 4, "samples": 64, "eval_rows": 16,
            "batch_size": 4, "dataset": "synthetic", "dtype": "float32"}
SMS = 4
BLOCK = {"threads": 128, "copy_bytes_per_s": 1e8, "step_bytes_per_s": 2e8, "gradient_flops_per_s": 1e9}


def _profile(tmp_path: Path, host_launch_s: float = 0.0, launch_latency_s: float = 0.0,
             sm_share: float = 0.25, extra: str = "") -> Path:
    """A GPU of SMS SMs whose SM runs 1 / ``sm_share`` blocks at full speed; memory (100 GB/s) never the bottleneck."""
    clock, lanes = 1.0, 64
    efficiency = BLOCK["gradient_flops_per_s"] / sm_share / (clock * 1e9 * lanes * 2)
    text = f"""[profile]
format = "simasgd-profile"
format_version = 1

[gpu]
sms = {SMS}
clock_ghz = {clock}
threads_per_sm = 1024
fp32_lanes_per_sm = {lanes}
launch_latency_s = {launch_latency_s!r}
mem_bandwidth_gbs = 100.0
atomics_per_s = 1e12
efficiency = {efficiency!r}

[gpu.block]
threads = 128
copy_bytes_per_s = {BLOCK["copy_bytes_per_s"]!r}
step_bytes_per_s = {BLOCK["step_bytes_per_s"]!r}
host_launch_s = {host_launch_s!r}
atomic_latency_s = 0.0
{extra}
[gpu.block.gradient_flops_per_s]
{workload_key(_scenario(1).workload)} = {BLOCK["gradient_flops_per_s"]!r}
"""
    path = tmp_path / "gpu.toml"
    path.write_text(text)
    return path


def _scenario(n: int, algorithm: str = "hogwild", mode: str = "resident", seconds: float = 0.2,
              **sim: Any) -> Any:
    return loader.from_dict({"seed": 3, "machine": {"preset": "this-gpu"}, "workers": {"count": n},
                             "workload": WORKLOAD, "algorithm": {"name": algorithm}, "gpu": {"mode": mode},
                             "sim": {"numerics": False, "gradient_cv": 0.0, **sim},
                             "stop": {"max_time_s": seconds, "max_updates": 10_000_000}})


def _phases() -> tuple[float, float, float]:
    sc = _scenario(1)
    wl = build_workload(sc.workload, sc.seed, None)
    theta = wl.dim * np.dtype(wl.dtype).itemsize
    return (2 * theta / BLOCK["copy_bytes_per_s"], wl.flops_per_sample * 4 / BLOCK["gradient_flops_per_s"],
            3 * theta / BLOCK["step_bytes_per_s"])


def _steady(r: Any, warm: float) -> tuple[float, np.ndarray]:
    """Updates/s and staleness of the updates written after ``warm`` seconds."""
    u = r.updates[r.updates["applied"] & (r.updates["t_write"] > warm)]
    span = r.runs[0].time_s - warm
    return len(u) / span, u["staleness"].to_numpy()


@pytest.fixture()
def gpu_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(**kw: Any) -> Path:
        path = _profile(tmp_path, **kw)
        monkeypatch.setenv("SIMASGD_PROFILE", str(path))
        return path
    return make


@pytest.mark.parametrize("n", [1, 3, SMS])
def test_resident_hogwild_round_robin_makes_n_over_t_and_n_minus_one(gpu_profile: Any, n: int) -> None:
    # One block per SM, nothing shared: each worker's cycle is T; started T/n apart they update in turn,
    # so every update after the first cycle has had the n − 1 others' updates since its read.
    gpu_profile()
    t = sum(_phases())
    r = backends.load("sim").run_once(_scenario(n, startup_stagger_s=t / n, seconds=200 * t), 0)
    rate, tau = _steady(r, 2 * t)
    # ± one update per worker at the window's edges
    assert rate == pytest.approx(n / t, rel=n / (rate * (r.runs[0].time_s - 2 * t)))
    assert np.all(tau == n - 1)


def test_a_measured_gradient_cv_replaces_the_scenarios(gpu_profile: Any) -> None:
    # The block's own spread, measured on the GPU (0 here), not [sim] gradient_cv's: round-robin stays exact.
    gpu_profile(extra="gradient_cv = 0.0")
    t, n = sum(_phases()), 3
    r = backends.load("sim").run_once(_scenario(n, startup_stagger_s=t / n, seconds=100 * t, gradient_cv=0.5), 0)
    _, tau = _steady(r, 2 * t)
    assert np.all(tau == n - 1)


def test_blocks_beyond_the_sms_share_them(gpu_profile: Any) -> None:
    # 2·SMS workers, two blocks per SM, each SM sustaining one block's rate: the gradients take twice as long.
    gpu_profile(sm_share=1.0)
    read, grad, update = _phases()
    n = 2 * SMS
    t = read + 2 * grad + update
    r = backends.load("sim").run_once(_scenario(n, seconds=200 * t), 0)
    rate, _ = _steady(r, 2 * t)
    assert rate == pytest.approx(n / t, rel=0.01)


def test_an_sm_runs_blocks_side_by_side_up_to_its_sustained_rate(gpu_profile: Any) -> None:
    # The same 2·SMS workers on SMs that sustain four blocks' rates: no slowdown.
    gpu_profile(sm_share=0.25)
    n = 2 * SMS
    t = sum(_phases())
    r = backends.load("sim").run_once(_scenario(n, seconds=200 * t), 0)
    rate, _ = _steady(r, 2 * t)
    assert rate == pytest.approx(n / t, rel=0.01)


def test_an_sm_sustains_at_least_a_lone_blocks_measured_rate(gpu_profile: Any) -> None:
    # `efficiency` giving an SM half a block's rate (the H200 profile's short FMA kernel against the tuned
    # gradient): one worker still runs at its measured phases, two on one SM share one block's rate.
    gpu_profile(sm_share=2.0)
    read, grad, update = _phases()
    r = backends.load("sim").run_once(_scenario(1, seconds=200 * (read + grad + update)), 0)
    assert _steady(r, 0.0)[0] == pytest.approx(1 / (read + grad + update), rel=0.01)
    n, t = 2 * SMS, read + 2 * grad + update
    r = backends.load("sim").run_once(_scenario(n, seconds=200 * t), 0)
    assert _steady(r, 2 * t)[0] == pytest.approx(n / t, rel=0.01)


@pytest.mark.parametrize("n", [1, 2, 8])
def test_streams_are_bounded_by_the_host_lock(gpu_profile: Any, n: int) -> None:
    # Each attempt: the launch call h under the host threads' one lock, the rest of the launch latency,
    # then the block's cycle k. Updates/s = min(1/h, n/(latency + k)) once the lock serialises the launches.
    read, grad, update = _phases()
    k = read + grad + update
    h, latency = k / 3, k / 3 + 1e-6
    gpu_profile(host_launch_s=h, launch_latency_s=latency)
    r = backends.load("sim").run_once(_scenario(n, mode="streams", seconds=300 * k), 0)
    rate, _ = _steady(r, 5 * k)
    assert rate == pytest.approx(min(1 / h, n / (latency + k)), rel=0.01)


def test_every_streams_attempt_launches_also_where_it_does_not_step(gpu_profile: Any) -> None:
    # sync in streams mode: each round both workers launch (one after the other on the host lock), compute,
    # and the last steps the round: a round = 2h + (latency − h) + gradient + the split step, for each round.
    _, grad, update = _phases()
    h, latency = grad / 4, grad / 2
    gpu_profile(host_launch_s=h, launch_latency_s=latency)
    round_s = 2 * h + (latency - h) + grad + update / 3 * (2 + 2) / 2
    r = backends.load("sim").run_once(_scenario(2, algorithm="sync", mode="streams", seconds=300 * round_s), 0)
    assert r.runs[0].updates / r.runs[0].time_s == pytest.approx(1 / round_s, rel=0.01)


def test_mutex_serialises_its_critical_sections(gpu_profile: Any) -> None:
    # The device spin lock around the copy and around the step: with many workers the lock is never free,
    # and updates/s is one copy and one step at a time.
    read, grad, update = _phases()
    gpu_profile()
    n = SMS
    assert n * (read + update) > read + grad + update  # the lock is the bottleneck
    r = backends.load("sim").run_once(_scenario(n, algorithm="mutex", seconds=300 * (read + grad + update)), 0)
    rate, _ = _steady(r, 10 * (read + grad + update))
    assert rate == pytest.approx(1 / (read + update), rel=0.02)


def test_sync_rounds_compute_at_theta_and_split_the_step(gpu_profile: Any) -> None:
    # A round: every block's gradient at θ itself (no copy), then each steps 1/n of θ with the n gradients:
    # (n + 2)/n vectors a block, at the step's rate. Versions/s = 1 / (gradient + that).
    gpu_profile()
    _, grad, update = _phases()
    for n in (2, 8):
        round_s = grad + update / 3 * (n + 2) / n
        r = backends.load("sim").run_once(_scenario(n, algorithm="sync", seconds=300 * round_s), 0)
        assert r.runs[0].updates / r.runs[0].time_s == pytest.approx(1 / round_s, rel=0.01)


def test_the_model_refuses_what_the_gpu_cannot_hold(gpu_profile: Any, tmp_path: Path) -> None:
    gpu_profile()
    with pytest.raises(ValueError, match="resident blocks"):
        backends.load("sim").run_once(_scenario(SMS * 8 + 1), 0)
    sc = loader.from_dict({**_scenario(1).to_dict(), "gpu": {"threads_per_worker": 256}})
    with pytest.raises(ValueError, match="blocks of 128 threads"):
        backends.load("sim").run_once(sc, 0)
    with pytest.raises(ValueError, match="lacks"):
        gpu_resident.BlockCosts.from_table({"threads": 128})


def test_histogram_metrics() -> None:
    same = fidelity.histogram_metrics(np.array([1, 2, 1]), np.array([2, 4, 2]))
    assert same["ks"] == 0 and same["mean_staleness_rel_err"] == 0
    shifted = fidelity.histogram_metrics(np.array([0, 1]), np.array([1]))  # all at τ = 1 against all at 0
    assert shifted["ks"] == 1 and np.isnan(shifted["mean_staleness_rel_err"])
