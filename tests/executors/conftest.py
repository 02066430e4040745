"""Fixtures of the executor tests: the constant-gradient workload and a scenario for it.

The workload lives in the package (:mod:`simasgd.numerics.workloads.constant`): θ0 = 1
and lr·g = 2⁻¹⁶ are exact in float64, so after N applied updates a lossless
algorithm leaves every θ_i = 1 − N·2⁻¹⁶ exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from simasgd.numerics.workloads.constant import LR, ConstWorkload
from simasgd.spec import loader


def const_scenario(algorithm: dict[str, Any], workers: int = 2, max_updates: int = 2000, max_time_s: float = 20.0,
                   placement: Any = "os", **more: Any) -> Any:
    data = {"name": "const", "seed": 7, "workers": {"count": workers, "placement": placement},
            "workload": {"model": "least_squares", "batch_size": 1},
            "algorithm": algorithm, "optimizer": {"lr": LR},
            "stop": {"max_updates": max_updates, "max_time_s": max_time_s, "epsilon": 0.001},
            "cpu": {"join_timeout_s": 10.0}}
    for k, v in more.items():
        data[k] = {**data.get(k, {}), **v}
    return loader.from_dict(data)


@pytest.fixture(scope="session")
def scenario() -> Callable[..., Any]:
    """``scenario(algorithm, workers=2, max_updates=2000, max_time_s=20, placement="os", **tables)``."""
    return const_scenario


@pytest.fixture(scope="session")
def const_workload() -> ConstWorkload:
    return ConstWorkload()
