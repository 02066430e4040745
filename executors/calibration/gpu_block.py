"""``[gpu.block]``: one resident worker's rates alone on the GPU, for the simulator's model of the ``gpu``
backend (``simasgd/sim/gpu_resident.py``; keys in docs/profile.md).

For each workload one resident HOGWILD! worker (``[gpu] threads_per_worker`` threads) runs alone for a
while; the medians of its phases (the first 5% of attempts discarded) give the block's rates: the read
copies θ into the worker's vector (2|θ| bytes moved), the gradient does the workload's flops, the update
steps θ (|θ| for θ, g and θ' each, and the velocity in and out with momentum). One streams worker's launch
calls give the host's cost of a launch; the spread of the first workload's gradient times, attempt to
attempt (``gradient_cv``), replaces ``[sim] gradient_cv`` on this GPU. ``benchmarks/gpu_model_score.py``
derives the same table from ``benchmarks/gpu_check.py``'s 1-worker cells with :func:`rates`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# The study's workloads (benchmarks/gpu_check.py): the MLP of the resident tables and Lopez §IV-B's CNN.
MLP = {"model": "mlp", "layers": [784, 128, 128, 128, 10], "features": 784, "classes": 10, "samples": 20000,
       "eval_rows": 1000, "batch_size": 16, "dataset": "synthetic", "dtype": "float32"}
CNN = {"model": "cnn", "layers": [16, 5, 2, 64], "features": 3072, "classes": 10, "samples": 2000,
       "eval_rows": 200, "batch_size": 32, "dataset": "synthetic", "dtype": "float32"}
WARMUP = 0.05  # share of the attempts discarded, as gpu_check.py's phase medians


def step_vectors(momentum: float) -> float:
    """Vectors of |θ| an update step moves: θ in, g in, θ out; with momentum the velocity in and out."""
    return 3.0 + (2.0 if momentum > 0 else 0.0)


def rates(theta_bytes: float, gradient_flops: float, read_s: float, gradient_s: float, update_s: float,
          momentum: float) -> dict[str, float]:
    """A block's copy, gradient and step rates from one worker's phase medians."""
    return {"copy_bytes_per_s": 2 * theta_bytes / read_s, "gradient_flops_per_s": gradient_flops / gradient_s,
            "step_bytes_per_s": step_vectors(momentum) * theta_bytes / update_s}


def phase_medians(updates: Any) -> dict[str, float]:
    """Median read, gradient and update seconds of a run's attempts, and the gradient's coefficient of
    variation (``gradient_cv``), the first ``WARMUP`` share discarded."""
    u = updates.sort_values("t_start")
    u = u.iloc[max(1, int(len(u) * WARMUP)):]
    if not len(u):
        raise RuntimeError("too few attempts to time a block's phases: run it longer")
    grad = (u["t_grad_end"] - u["t_grad_start"]).to_numpy(float)
    return {"read": float(np.median(u["t_grad_start"] - u["t_start"])), "gradient": float(np.median(grad)),
            "update": float(np.median(u["t_write"] - u["t_grad_end"])),
            "gradient_cv": float(grad.std(ddof=1) / grad.mean()) if len(grad) > 1 and grad.mean() > 0 else 0.0}


def _scenario(workload: dict[str, Any], mode: str, threads: int, seconds: float, updates: int) -> Any:
    from simasgd.spec import loader

    return loader.from_dict({"name": "calibrate-gpu-block", "seed": 1, "workers": {"count": 1},
                             "workload": workload, "algorithm": {"name": "hogwild"}, "optimizer": {"lr": 1e-4},
                             "gpu": {"mode": mode, "threads_per_worker": threads},
                             "stop": {"max_time_s": seconds, "max_updates": updates, "eval_every_updates": updates}})


def measure(workloads: list[dict[str, Any]] | None = None, seconds: float = 1.0, threads: int = 128,
            updates: int = 10_000_000, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The ``[gpu.block]`` table: each workload's gradient rate (keyed by ``profile.workload_key``), the copy
    and step rates and the host's launch call, from the first workload."""
    from simasgd.machines import profile
    from simasgd.numerics.workloads import build_workload
    from simasgd.runs import backends

    gpu = backends.load("gpu")
    table: dict[str, Any] = {"threads": threads, "gradient_flops_per_s": {}}
    for i, wl_doc in enumerate(workloads or [MLP, CNN]):
        sc = _scenario(wl_doc, "resident", threads, seconds, updates)
        key = profile.workload_key(sc.workload)
        log(f"one resident block: {key}")
        wl = build_workload(sc.workload, sc.seed, None)
        ph = phase_medians(gpu.run_once(sc, 0).updates)
        r = rates(wl.dim * np.dtype(wl.dtype).itemsize, float(wl.flops_per_sample) * sc.workload.batch_size,
                  ph["read"], ph["gradient"], ph["update"], sc.optimizer.momentum)
        table["gradient_flops_per_s"][key] = r["gradient_flops_per_s"]
        if i == 0:
            table["copy_bytes_per_s"], table["step_bytes_per_s"] = r["copy_bytes_per_s"], r["step_bytes_per_s"]
            table["gradient_cv"] = ph["gradient_cv"]
            log(f"one streams worker's launches: {key}")
            res = gpu.run_once(_scenario(wl_doc, "streams", threads, seconds, updates), 0)
            table["host_launch_s"] = float(res.metadata["launch"]["host_launch_us_per_attempt"]) * 1e-6
    return table
