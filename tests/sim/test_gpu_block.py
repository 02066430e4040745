"""``[gpu.block]`` (executors/calibration/gpu_block.py): a resident block's rates, measured and read back."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from executors.calibration import gpu_block
from simasgd.sim import gpu_resident


def test_rates_invert_the_phases_the_model_prices() -> None:
    # What the model charges a lone block for each phase is what the measured phases were.
    theta, flops = 4096.0, 1e6
    r = gpu_block.rates(theta, flops, read_s=2e-4, gradient_s=1e-3, update_s=3e-4, momentum=0.9)
    assert 2 * theta / r["copy_bytes_per_s"] == pytest.approx(2e-4)
    assert flops / r["gradient_flops_per_s"] == pytest.approx(1e-3)
    assert gpu_block.step_vectors(0.9) * theta / r["step_bytes_per_s"] == pytest.approx(3e-4)
    assert gpu_block.step_vectors(0.0) == 3


def test_phase_medians_discard_the_warm_up() -> None:
    n = 100
    t0 = np.arange(n) * 10.0
    slow = np.where(np.arange(n) < 5, 5.0, 1.0)  # the first 5% compile and warm up
    u = pd.DataFrame({"t_start": t0, "t_grad_start": t0 + slow, "t_grad_end": t0 + slow + 2.0,
                      "t_write": t0 + slow + 2.5})
    assert gpu_block.phase_medians(u) == {"read": 1.0, "gradient": 2.0, "update": 0.5, "gradient_cv": 0.0}


@pytest.mark.slow
def test_measure_under_the_cuda_simulator_gives_a_table_the_model_reads() -> None:
    # Under numba's simulator the times mean nothing; the table must still be whole and read back.
    tiny = {"model": "mlp", "layers": [6, 5, 3], "features": 6, "classes": 3, "samples": 64, "eval_rows": 16,
            "batch_size": 4, "dataset": "synthetic", "dtype": "float32"}
    t: dict[str, Any] = gpu_block.measure([tiny], seconds=60, threads=32, updates=12)
    costs = gpu_resident.BlockCosts.from_table(t)
    assert costs.threads == 32 and len(costs.gradient_flops_per_s) == 1
    assert costs.copy_bytes_per_s > 0 and costs.step_bytes_per_s > 0 and costs.host_launch_s > 0
    assert costs.gradient_cv is not None and costs.gradient_cv >= 0
