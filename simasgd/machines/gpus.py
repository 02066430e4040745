"""The GPU machine kind's presets: a GPU's published or calibrated figures (``v100``, ``h100``, ``this-gpu``).

The description only, as :mod:`simasgd.machines.machine` is the CPU's: :mod:`simasgd.sim.gpu` simulates a ``Gpu``
(streams sharing its SMs, memory and atomic units); ``simasgd calibrate --gpu``
(``executors/calibration/gpu.py``) measures ``this-gpu`` into the profile's ``[gpu]`` table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from simasgd.machines.profile_model import Profile
from simasgd.machines.provenance import Cited


@dataclass(frozen=True)
class Gpu:
    name: str
    sms: int                      # streaming multiprocessors
    clock_ghz: float              # boost clock
    fp32_lanes_per_sm: int        # FP32 FMA units per SM (2 flops each per cycle)
    mem_bandwidth_gbs: float      # device memory
    launch_latency_s: float       # a kernel launch, host to running (per kernel, on its stream)
    atomics_per_s: float          # device-wide throughput of global atomic adds
    threads_per_sm: int = 2048    # resident threads an SM holds
    efficiency: float = 0.3       # sustained fraction of peak flops of these small numba kernels
    host_sync_s: float = 10e-6    # stream synchronise + host barrier hand-off
    kernels_per_gradient: int = 12  # launches in one minibatch gradient (forward, loss, backward)
    profile: Profile | None = None  # the calibrated profile of ``this-gpu``

    @property
    def flops_per_s(self) -> float:
        return self.sms * self.clock_ghz * 1e9 * self.fp32_lanes_per_sm * 2 * self.efficiency

    @property
    def resident_threads(self) -> int:
        return self.sms * self.threads_per_sm


PRESETS: dict[str, Gpu] = {g.name: g for g in (
    # NVIDIA Tesla V100 SXM2 (Lopez et al. 2020's DGX-1, §IV): 80 SMs, 1530 MHz boost, 64 FP32 cores
    # per SM (15.7 TFLOPS FP32), 900 GB/s HBM2 — NVIDIA Tesla V100 GPU Architecture whitepaper
    # (2017), Table 1. Launch latency ~5 µs: typical measured CUDA launch overhead (not a spec).
    # Atomic throughput: no public figure; one global atomic add per SM per clock is assumed
    # (80 × 1.53e9 / s); `calibrate --gpu` measures it.
    Gpu("v100", sms=80, clock_ghz=1.53, fp32_lanes_per_sm=64, mem_bandwidth_gbs=900.0,
        launch_latency_s=5e-6, atomics_per_s=80 * 1.53e9),
    # NVIDIA H100 SXM5: 132 SMs, 1980 MHz boost, 128 FP32 cores per SM (67 TFLOPS FP32), 3.35 TB/s
    # HBM3 — NVIDIA H100 Tensor Core GPU datasheet and the Hopper architecture whitepaper (2022).
    # Launch latency and atomics as for the V100 (assumed, measured by `calibrate --gpu`).
    Gpu("h100", sms=132, clock_ghz=1.98, fp32_lanes_per_sm=128, mem_bandwidth_gbs=3350.0,
        launch_latency_s=4e-6, atomics_per_s=132 * 1.98e9),
)}
PROFILE_PRESET = "this-gpu"  # the calibrated profile's [gpu] table
_ASSUMED = ("no public figure: one global atomic add per SM per clock is assumed (SMs × boost clock a second); "
            "`simasgd calibrate --gpu` measures it")
_MODEL = {"threads_per_sm": "2048 resident threads an SM (CUDA compute capability 7.0 and 9.0 limits)",
          "efficiency host_sync_s kernels_per_gradient":
              "the model's defaults, not the GPU's: sustained share of peak flops of these small numba kernels "
              "(0.3), a stream synchronise + host barrier hand-off (10 µs), launches in one minibatch gradient (12) "
              "— estimates that `simasgd calibrate --gpu` replaces"}
SOURCES: dict[str, Cited] = {
    "v100": Cited("NVIDIA Tesla V100 SXM2 (Lopez et al. 2020's DGX-1, §IV).", {
        "sms clock_ghz fp32_lanes_per_sm mem_bandwidth_gbs":
            "80 SMs, 1530 MHz boost, 64 FP32 cores per SM (15.7 TFLOPS FP32), 900 GB/s HBM2 — NVIDIA Tesla V100 GPU "
            "Architecture whitepaper (2017), Table 1",
        "launch_latency_s": "~5 µs: typical measured CUDA launch overhead (not a specification)",
        "atomics_per_s": _ASSUMED, **_MODEL}),
    "h100": Cited("NVIDIA H100 SXM5 (one GPU of a DGX H100).", {
        "sms clock_ghz fp32_lanes_per_sm mem_bandwidth_gbs":
            "132 SMs, 1980 MHz boost, 128 FP32 cores per SM (67 TFLOPS FP32), 3.35 TB/s HBM3 — NVIDIA H100 Tensor "
            "Core GPU datasheet and the Hopper architecture whitepaper (2022)",
        "launch_latency_s": "~4 µs: typical measured CUDA launch overhead (not a specification)",
        "atomics_per_s": _ASSUMED, **_MODEL},
        notes="One GPU. The simulator models no multi-GPU machine: workers are streams sharing this GPU's SMs."),
}


def names() -> list[str]:
    return [*PRESETS, PROFILE_PRESET]


def from_profile(profile: Profile, path: Path) -> Gpu:
    """The ``[gpu]`` table of a calibrated profile (``executors/calibration/gpu.py`` writes it)."""
    if profile.gpu is None:
        raise ValueError(f"{path}: no [gpu] table; run `simasgd calibrate --gpu` on a machine with a GPU")
    keys = {f.name for f in fields(Gpu)} - {"name", "profile"}
    table = profile.gpu.model_dump(exclude_none=True)
    given = {k: table[k] for k in keys if k in table}
    missing = {"sms", "clock_ghz", "fp32_lanes_per_sm", "mem_bandwidth_gbs", "launch_latency_s",
               "atomics_per_s"} - set(given)
    if missing:
        raise ValueError(f"{path}: [gpu] lacks {sorted(missing)}")
    return Gpu(name=PROFILE_PRESET, profile=profile, **given)
