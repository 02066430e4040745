"""Lopez in the simulator counts updates and staleness as the cpu executor does (MODEL.md, Lopez).

An update is a master step that includes at least one new contribution; with a calibrated
``[cas] latency_s`` a worker's accumulation costs d atomic adds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import simpy

from simasgd import loader, machine
from simasgd.sim import backend
from simasgd.sim.costs import Platform

FREE = {"gradient": {"dist": "exponential", "mean_s": 1e-3},
        "read": {"dist": "deterministic", "mean_s": 1e-5}, "update": {"dist": "deterministic", "mean_s": 1e-5}}


def _run(workers: int) -> "object":
    sc = loader.from_dict({"name": "lopez", "seed": 3, "workers": {"count": workers},
                           "algorithm": {"name": "lopez"}, "timing": FREE, "sim": {"numerics": False},
                           "stop": {"max_updates": 3000, "max_time_s": 1e9}})
    return backend.run_once(sc, 0)


def test_every_master_step_includes_a_new_contribution() -> None:
    for workers in (2, 4):
        r = _run(workers)
        u = r.updates
        applied = u[u.applied]
        steps = int(u.version.max())
        # every version 1..steps is a step that included >= 1 contribution: no idle re-applications
        assert set(applied.version) >= set(range(1, steps))
        assert len(applied) >= steps - 1
        # one worker: it reads w while the step with its previous gradient is in flight, so τ ≤ 1
        if workers == 2:
            assert applied.staleness.max() <= 1
        assert (applied.staleness >= 0).all()


def test_atomic_adds_cost_d_cas_latencies(tmp_path: Path) -> None:
    lines = ["[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1",
             "local_latency_ns = 100.0", "remote_latency_ns = 100.0", "mem_bandwidth_gbs = 10.0",
             "link_bandwidth_gbs = 10.0", "gflops_per_core = 1.0", "quantum_s = 0.004",
             "context_switch_s = 2e-6", "", "[cas]", "latency_s = 5e-9", ""]
    path = tmp_path / "this.toml"
    path.write_text("\n".join(lines))
    sc = loader.from_dict({"name": "p", "workers": {"count": 2}, "algorithm": {"name": "lopez"},
                           "timing": {"gradient": {"dist": "deterministic", "mean_s": 1e-3}}})
    env = simpy.Environment()
    p = Platform(env, sc, machine.load_profile(path), run=0, dim=100_000)
    env.process((lambda: (yield p.atomic_adds(1)))())
    env.run()
    assert np.isclose(env.now, 100_000 * 5e-9)
