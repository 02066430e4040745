"""One rank's part of one run: its role (from the algorithm and the layout), then the reports to rank 0."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from executors.dist import bounded, decentral, elastic, param_server, synchronous
from executors.dist.world import FAIL_ENV, DistError, Layout, Rank
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario

# Algorithm (a registry name) -> the role function every rank of its run calls: the dist backend's one list
# (backend.ALGORITHMS is its keys). ssp is the parameter server with its bound (param_server.py reads it).
IMPLEMENTATIONS: dict[str, Callable[[Rank, np.ndarray], None]] = {
    "sync": synchronous.run_sync, "param_server": param_server.run_param_server,
    "easgd": elastic.run_elastic, "eawild": elastic.run_elastic, "keuper": decentral.run_own,
    "simuparallel": decentral.run_own, "ssp": param_server.run_param_server, "backup": bounded.run_backup}


def run_rank(sc: Scenario, run: int, wl: Any) -> list[dict[str, Any]] | None:
    """This rank's part of one run, after :func:`init`: its role, then every report gathered on rank 0
    (None on the others)."""
    import torch.distributed as dist

    theta0 = wl.init_theta(seeds.rng(sc.seed, run, seeds.Role.INIT))
    layout = Layout.of(sc, theta0.shape[0])
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != layout.world:
        raise DistError(f"the scenario needs {layout.world} processes ({layout.workers} workers + "
                        f"{layout.servers} server/centre ranks); {world} were started")
    me = Rank(sc, run, wl, rank, layout, theta0.dtype)
    dist.barrier()
    me.t0_ns = time.perf_counter_ns()
    if os.environ.get(FAIL_ENV) == str(rank):
        raise RuntimeError(f"{FAIL_ENV}={rank}: this rank fails on purpose (test hook)")
    try:
        IMPLEMENTATIONS[layout.algorithm](me, theta0)
    finally:
        me.unwatch()
    out: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(me.report(), out, dst=0)
    return out
