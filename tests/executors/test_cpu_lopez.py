"""The cpu executor's Lopez (Alg. 2/3 as written; simasgd/spec/algorithms.py ``lopez``) on real threads.

The master steps without waiting for gradients; each gradient is a row whose version is the first
step that began reading g after it; the named departures (``subtract``, ``model_read``) reach the
loop as configuration bits. θ against the definition on a known gradient is ``tests/conformance``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from executors.cpu import lopez, wiring
from executors.cpu.runner import run_workload
from executors.cpu.shared import C_LOPEZ, N_CFG_F, N_CFG_I
from simasgd.numerics.workloads.constant import ConstWorkload
from simasgd.spec import loader


def test_the_options_reach_the_loop_as_bits() -> None:
    for sub, read, bits in (("before_gradient", "torn", 0), ("with_add", "torn", lopez.WITH_ADD),
                            ("before_gradient", "consistent", lopez.CONSISTENT),
                            ("with_add", "consistent", lopez.WITH_ADD | lopez.CONSISTENT)):
        sc = loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "lopez", "subtract": sub,
                                                                    "model_read": read}})
        cfg_i, cfg_f = np.zeros(N_CFG_I, np.int64), np.zeros(N_CFG_F)
        wiring.configure(sc.algorithm, cfg_i, cfg_f)
        assert cfg_i[C_LOPEZ] == bits


@pytest.mark.hardware
@pytest.mark.parametrize("params", [{}, {"subtract": "with_add", "model_read": "consistent"}],
                         ids=["paper", "with_add-consistent"])
def test_the_master_does_not_wait_and_rows_follow_the_contract(scenario: Callable[..., Any],
                                                                 params: dict[str, str]) -> None:
    sc = scenario({"name": "lopez", **params}, workers=3, max_updates=60_000, max_time_s=30.0)
    result = run_workload(sc, 0, ConstWorkload(dim=4096))
    run, u = result.runs[0], result.updates
    applied = u[u.applied]
    assert run.updates == 60_000
    # Alg. 2: no step waits for a gradient, so steps outnumber the gradients they read.
    assert applied.version.nunique() < run.updates and len(u) < run.updates
    assert set(u.worker) <= {1, 2} and len(applied) > 0
    assert (applied.version.between(1, run.updates)).all() and (applied.staleness >= 0).all()
    assert (u.version >= u.read_version + 1).all()  # a gradient lands after the copy it was computed on
    for _, rows in u.groupby("worker"):  # a worker's rows in order: versions never go back
        assert (np.diff(rows.sort_values("t_read").version.to_numpy()) >= 0).all()
    # Phases as the simulator records them: the subtraction pass (4096 locked adds, microseconds) is the
    # read side's, so the gradient starts after it; with_add has no pass there.
    gap = (u.t_grad_start - u.t_read).to_numpy()
    if params.get("subtract") == "with_add":
        assert np.median(gap) < 1e-6
    else:
        assert (gap > 0).all() and np.median(gap) > 1e-6
