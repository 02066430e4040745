"""``simasgd calibrate --gpu``: measure the GPU's [gpu] table for the simulator (``machine.preset = "this-gpu"``).

What it measures (``simasgd/sim/gpu.py`` reads the same keys):

- ``sms``, ``clock_ghz``, ``threads_per_sm``: device attributes; ``fp32_lanes_per_sm`` from the
  compute capability (NVIDIA CUDA C Programming Guide, "Arithmetic Instructions" throughput table);
- ``launch_latency_s``: the mean time of an empty kernel, launched back to back and synchronised;
- ``mem_bandwidth_gbs``: a device-to-device copy kernel over ``COPY_BYTES``;
- ``atomics_per_s``: ``cuda.atomic.add`` from every thread onto a few hundred addresses;
- ``efficiency``: flops/s of a fused multiply-add kernel that fills the GPU, over the peak;
- ``[gpu.concurrent]``: that kernel's mean time with s = 1, 2, 4, … streams running it at once
  (``streams``; ``all_done_s``: until all s are done; ``kernel_threads``, ``kernel_flops``): the curve
  the model's SM sharing is held to (``simasgd.sim.gpu.predicted_kernel_s``);
- ``[gpu.block]`` (on a GPU only): one resident worker's rates alone, ``executors/calibration/gpu_block.py``.

On a GPU, times are CUDA events; under numba's CUDA simulator (tests) they are host times of
simulated kernels and attributes are placeholders: the table is well formed, ``simulator = true``
says its numbers mean nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from executors.cuda import device

FP32_LANES = {(6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 9): 128, (9, 0): 128}
COPY_BYTES = 256 << 20
FMA_ITERS = 256  # fused multiply-adds per thread of the compute kernel (2 flops each)


def _timer(cuda: Any, sim: bool) -> Callable[[Callable[[], None], Any], float]:
    """Seconds one call of ``fn`` (kernels on ``stream``) takes, synchronised."""
    def timed(fn: Callable[[], None], stream: Any) -> float:
        if sim:
            t = time.perf_counter()
            fn()
            stream.synchronize()
            return time.perf_counter() - t
        a, b = cuda.event(), cuda.event()
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        return a.elapsed_time(b) / 1e3
    return timed


def _attribute(d: Any, *names: str) -> int:
    """A device attribute by the first of its spellings this numba has: the driver's enum says
    ``MAX_THREADS_PER_MULTIPROCESSOR`` (numba-cuda >= 0.2x, on cuda-python); numba's older ctypes
    enums said ``MAX_THREADS_PER_MULTI_PROCESSOR``."""
    for n in names[:-1]:
        try:
            return int(getattr(d, n))
        except AttributeError:
            pass
    return int(getattr(d, names[-1]))


def _attributes(cuda: Any, sim: bool) -> dict[str, Any]:
    if sim:
        return {"device": "numba CUDA simulator", "sms": 2, "clock_ghz": 1.0, "threads_per_sm": 64,
                "fp32_lanes_per_sm": 64, "compute_capability": [0, 0]}
    d = cuda.get_current_device()
    cc = tuple(d.compute_capability)
    return {"device": d.name.decode() if isinstance(d.name, bytes) else str(d.name),
            "sms": int(d.MULTIPROCESSOR_COUNT), "clock_ghz": int(d.CLOCK_RATE) / 1e6,
            "threads_per_sm": _attribute(d, "MAX_THREADS_PER_MULTIPROCESSOR", "MAX_THREADS_PER_MULTI_PROCESSOR"),
            "fp32_lanes_per_sm": FP32_LANES.get(cc, 64), "compute_capability": list(cc)}


def calibrate(quick: bool = False, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The ``[gpu]`` table (module docstring)."""
    cuda = device.require()
    sim = device.simulator()
    from executors.calibration import gpu_block
    from executors.calibration import gpu_kernels as ck

    k = {"empty": ck.empty, "copy": ck.copy, "atomics": ck.atomics, "fma": ck.fma}
    timed = _timer(cuda, sim)
    s0 = cuda.stream()
    attrs = _attributes(cuda, sim)
    reps = 3 if (quick or sim) else 50
    tpb = 32 if sim else 256

    log("kernel launch latency")
    k["empty"][1, 1, s0]()
    launch = float(np.median([timed(lambda: k["empty"][1, 1, s0](), s0) for _ in range(reps)]))

    log("device memory bandwidth")
    n = 4096 if sim else COPY_BYTES // 4
    src, dst = cuda.to_device(np.ones(n, np.float32)), cuda.device_array(n, np.float32)
    grid = (n + tpb - 1) // tpb
    k["copy"][grid, tpb, s0](dst, src)
    copy_s = float(np.median([timed(lambda: k["copy"][grid, tpb, s0](dst, src), s0) for _ in range(reps)]))

    log("atomic throughput")
    cells = cuda.to_device(np.zeros(512, np.float32))
    per, ablocks = (2, 2) if sim else (64, attrs["sms"] * 8)
    k["atomics"][ablocks, tpb, s0](cells, per)
    atom_s = float(np.median([timed(lambda: k["atomics"][ablocks, tpb, s0](cells, per), s0) for _ in range(reps)]))

    log("kernel time against concurrent streams")
    threads = attrs["sms"] * attrs["threads_per_sm"]  # one wave that fills the GPU
    iters = 2 if sim else FMA_ITERS
    fgrid = (threads + tpb - 1) // tpb
    streams_n = [1, 2] if sim else [1, 2, 4, 8, 16, 32]
    outs = [cuda.device_array(threads, np.float32) for _ in range(max(streams_n))]
    streams = [cuda.stream() for _ in range(max(streams_n))]
    k["fma"][fgrid, tpb, s0](outs[0], iters)
    kernel_s = []
    for s in streams_n:
        def go(s: int = s) -> None:
            for j in range(s):
                k["fma"][fgrid, tpb, streams[j]](outs[j], iters)
            for j in range(s):
                streams[j].synchronize()
        kernel_s.append(float(np.median([timed(go, s0) for _ in range(reps)])))
    flops = 2.0 * iters * threads
    peak = attrs["sms"] * attrs["clock_ghz"] * 1e9 * attrs["fp32_lanes_per_sm"] * 2
    alone = max(kernel_s[0] - launch, 1e-12)
    return {
        "device": attrs["device"], "simulator": sim, "compute_capability": attrs["compute_capability"],
        "sms": attrs["sms"], "clock_ghz": attrs["clock_ghz"], "threads_per_sm": attrs["threads_per_sm"],
        "fp32_lanes_per_sm": attrs["fp32_lanes_per_sm"],
        "launch_latency_s": launch, "mem_bandwidth_gbs": 2 * n * 4 / max(copy_s, 1e-12) / 1e9,
        "atomics_per_s": ablocks * tpb * per / max(atom_s, 1e-12),
        "efficiency": min(1.0, flops / alone / peak),
        "concurrent": {"streams": streams_n, "all_done_s": kernel_s, "kernel_threads": threads,
                       "kernel_flops": flops},
        # one resident worker per study workload (executors/calibration/gpu_block.py); under the simulator a
        # resident run takes a minute and times nothing, so the table is left out there
        **({} if sim else {"block": gpu_block.measure(seconds=0.5 if quick else 1.0, log=log)}),
    }
