"""Scenarios for the torch tests: workloads named from ``torch_factories`` in this folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simasgd.spec import loader
from simasgd.spec.scenario import Scenario

HERE = Path(__file__).resolve().parent


def torch_scenario(workload: dict[str, Any] | None = None, **top: Any) -> Scenario:
    """A small torch-workload scenario (2 workers, hogwild, 120 updates) with ``workload`` keys and top-level
    tables overridden; relative module names resolve against this folder, as against a scenario file's."""
    data: dict[str, Any] = {
        "name": "torch-test", "seed": 3,
        "workers": {"count": 2, "placement": "os"},
        "workload": {"model": "torch", "module": "torch_factories:tiny", "dataset": "digits", "batch_size": 8,
                     "dtype": "float32", **(workload or {})},
        "algorithm": {"name": "hogwild"},
        "optimizer": {"lr": 0.05},
        "stop": {"max_updates": 120, "max_time_s": 30.0, "eval_every_updates": 20},
        "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3}},
        "cpu": {"pin": False, "join_timeout_s": 20.0},
    }
    if "data" in data["workload"]:
        data["workload"].pop("dataset")
    for k, v in top.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    return loader.from_dict(data, base_dir=HERE)


@pytest.fixture(scope="session", name="torch_scenario")
def torch_scenario_fixture() -> Callable[..., Scenario]:
    """``torch_scenario(workload=None, **tables)``: a small ``model = "torch"`` scenario."""
    return torch_scenario
