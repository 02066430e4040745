"""The parameter server on real threads (executors/cpu/param_server.py): ε, shards, 1-bit; and sync's 1-bit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from executors.cpu import backend as cpu
from executors.cpu.runner import run_workload
from simasgd.numerics import compression
from simasgd.numerics.workloads.constant import STEP, ConstWorkload
from simasgd.spec import loader

pytestmark = pytest.mark.hardware


def scenario(alg: dict, workers: int = 2, momentum: float = 0.0, **stop: Any) -> Any:
    return loader.from_dict({
        "seed": 3, "workers": {"count": workers},
        "workload": {"model": "least_squares", "dataset": "synthetic", "features": 32, "samples": 2000,
                     "batch_size": 16},
        "algorithm": alg, "optimizer": {"lr": 0.01, "momentum": momentum},
        "stop": {"epsilon": 0.05, "max_updates": 20000, "max_time_s": 20.0, **stop},
        "cpu": {"pin": False, "join_timeout_s": 10.0}})


CASES = {
    "async_sgd": ({"name": "param_server"}, 0.0),
    "async_msgd": ({"name": "param_server"}, 0.5),
    "downpour_onebit": ({"name": "param_server", "shards": 4, "onebit": True}, 0.0),
    "sync_onebit": ({"name": "sync", "onebit": True}, 0.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reaches_epsilon_on_least_squares(case: str) -> None:
    alg, mom = CASES[case]
    run = cpu.run_once(scenario(alg, 2, mom), 0).runs[0]
    assert run.updates_to_eps is not None and not run.crashed, run
    d = 33
    g = compression.message_bytes(d) if alg.get("onebit") else d * 8
    expected = d * 8 + g if alg["name"] == "param_server" else round(2 * 2 * (2 - 1) / 2 * g)
    assert run.extra["bytes_per_row"] == expected


@pytest.mark.slow  # compiles the loop for the constant kernel: ~10 s where no earlier process cached it
@pytest.mark.parametrize("shards,onebit", [(4, False), (3, True)])
def test_every_push_lands_once_in_every_shard(shards: int, onebit: bool, scenario: Callable[..., Any],
                                              jitter_kernel: Any) -> None:
    # Shards are locked and updated independently; every push still reaches every shard once (and Q(G) = G).
    sc = scenario({"name": "param_server", "shards": shards, "onebit": onebit}, workers=3, max_updates=1500)
    state: dict = {}
    result = run_workload(sc, 0, ConstWorkload(dim=67, kernel=jitter_kernel), state=state)
    n = result.runs[0].updates
    assert n >= 1500
    np.testing.assert_array_equal(state["theta"], np.full(67, 1.0 - n * STEP))
