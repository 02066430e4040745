"""Backend ``sim``: one simulated repeat of a scenario, as a :class:`~simasgd.runs.results.RunResult`.

Times (``t_read``, ``t_write``, ``time_s``) are simulated seconds. ``t_read``
is the instant the worker's ``read_version`` was taken. Timing-only runs
(``[sim] numerics = false``) have an empty curve, no loss, and
``not_reached = false`` (they say nothing about convergence).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import simpy

from simasgd.machines import profile
from simasgd.machines.gpus import Gpu
from simasgd.machines.machine import Machine, check_nodes, is_gpu, preset_of, resolve, simulated
from simasgd.machines.profile_model import Reads, recording
from simasgd.numerics.blas import single_threaded
from simasgd.runs.convergence import Monitor, accuracy_of
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult, updates_frame
from simasgd.sim import gpu, gpu_resident, network
from simasgd.sim.algorithms import IMPLEMENTATIONS
from simasgd.sim.costs import Platform
from simasgd.sim.engine import SimRun
from simasgd.sim.gpu import GpuPlatform
from simasgd.sim.model_record import ModelRecord
from simasgd.sim.numerics import Model
from simasgd.sim.primitives import Environment
from simasgd.sim.profile_tables import profile_gradient
from simasgd.spec import algorithms
from simasgd.spec.scenario import Scenario

NAME = "sim"
ALGORITHMS = frozenset(IMPLEMENTATIONS)
MEASURES_HOST = False  # simulated time: nothing of this host is measured


def needs_profile(scenario: Scenario) -> bool:
    """The scenario's machine is the calibrated profile (``machine.preset = "this"``, or ``"this-gpu"``, or no
    ``[machine]`` on a machine that has a profile: :func:`simasgd.machines.machine.preset_of`)."""
    return preset_of(scenario.machine) in ("this", gpu.PROFILE_PRESET)


def simulated_machine(scenario: Scenario, cpu: Machine | None = None) -> dict[str, Any]:
    """The machine a run of ``scenario`` simulates, as its result records it (``metadata["machine"]``); with the
    machine its CPUs simulated, their number (``cpus``: the hardware threads; where the scenario's threads
    outnumber them, the OS time-shares them)."""
    record = simulated(scenario.machine)
    if cpu is not None and not cpu.nodes:
        record["cpus"] = cpu.hw_threads
    return record


def simulated_traits(scenario: Scenario) -> dict[str, Any] | None:
    """Whose executor traits a run of ``scenario`` simulates (``[sim] traits``), as its result records them in
    ``metadata["model"]["traits"]``; None on a GPU machine, whose model is its own."""
    if is_gpu(scenario.machine):
        return None
    from simasgd.sim.executor import executor_traits

    return executor_traits(scenario).record(scenario.sim.traits)


def _needs_workload(sc: Scenario, machine: Any) -> bool:
    t = sc.timing
    derived_gradient = t.gradient is None and profile_gradient(machine.profile, sc.workload) is None
    # a network's messages are sized by the model (simasgd/sim/network.py)
    return sc.sim.numerics or derived_gradient or t.read is None or t.update is None or sc.network is not None


def _gpu_platform(env: simpy.Environment, sc: Scenario, device: Gpu, run: int, wl: Any) -> GpuPlatform:
    """The ``gpu`` backend's resident blocks or streams (``[gpu] mode``, :mod:`simasgd.sim.gpu_resident`)
    where the profile has measured a block's rates (``[gpu.block]``); else kernels launched per stream."""
    if wl is None:
        raise ValueError("a GPU machine needs the workload (its dimension and flops)")
    costs = gpu_resident.block_costs(device)
    if costs is not None:
        return gpu_resident.platform(env, sc, device, costs, run, wl, profile.workload_key(sc.workload))
    return GpuPlatform(env, sc, device, run, int(wl.dim), int(np.dtype(wl.dtype).itemsize),
                       float(wl.flops_per_sample), np.asarray(wl.shape))


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    algorithms.require(NAME, scenario.algorithm.name, ALGORITHMS)
    from simasgd.machines import capacity

    # More simulated workers than memory holds fails deep in a list or numpy (or never ends): refused up front.
    capacity.check_workers(NAME, scenario.workers.count, capacity.simulated_worker_bytes(),
                           "its random streams and its SimPy process, at the least", task=None)
    preset = scenario.machine.preset
    device = gpu.resolve(preset) if preset is not None and is_gpu(scenario.machine) else None
    cpu = None if device is not None else resolve(scenario.machine)
    if cpu is not None:  # a cluster's nodes share no memory: only messages between them
        check_nodes(cpu, scenario.algorithm.name, scenario.network)
    record = ModelRecord.before(scenario, cpu)  # what acts, before any of it is read
    machine = device if device is not None else cpu
    with recording() as reads:  # the profile's figures read from here on
        return _run(scenario, run, advance, device, cpu, machine, record, reads)


def _run(scenario: Scenario, run: int, advance: Advance | None, device: Gpu | None, cpu: Machine | None,
         machine: Any, record: ModelRecord, reads: Reads) -> RunResult:
    wl = None
    if device is not None or _needs_workload(scenario, machine):
        from simasgd.numerics.workloads import build_workload
        wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    env = Environment()
    platform: Platform | GpuPlatform
    if device is not None:
        platform = _gpu_platform(env, scenario, device, run, wl)
    else:
        assert cpu is not None  # resolved above wherever the machine is no GPU
        platform = Platform(env, scenario, cpu, run, dim=None if wl is None else int(wl.dim),
                            itemsize=8 if wl is None else int(np.dtype(wl.dtype).itemsize),
                            flops_per_sample=None if wl is None else float(wl.flops_per_sample))
    with single_threaded() if scenario.sim.numerics else contextlib.nullcontext():
        model = Model(scenario, run, wl) if scenario.sim.numerics else None
        monitor = Monitor(scenario.stop, run, accuracy_of=None if model is None else accuracy_of(wl))
        if model is not None:
            monitor.observe(0.0, 0, model.loss(), model.result())
        sim = SimRun(env, scenario, run, platform, model, monitor, advance)
        IMPLEMENTATIONS[scenario.algorithm.name](sim)
        sim.go()
        return _result(scenario, run, sim, monitor, record.after(scenario, machine, reads), cpu)


def _result(sc: Scenario, run: int, sim: SimRun, monitor: Monitor, model: dict[str, Any],
            cpu: Machine | None = None) -> RunResult:
    elapsed, updates = float(sim.env.now), sim.version
    if sim.model is not None and monitor.updates[-1] != updates and not monitor.done:
        monitor.observe(elapsed, updates, sim.model.loss(), sim.model.result())
    cols = sim.rec.arrays()
    # Lopez contributions unread at the stop, or read by a master step the stop cut short, are in no version.
    keep = (cols["version"] > 0) & ((cols["version"] <= updates) | ~cols["applied"])
    if not keep.all():
        cols = sim.rec.arrays(keep)
    frame = updates_frame(run, cols["worker"], cols["version"], cols["read_version"], cols["t_read"],
                          cols["t_write"], cols["lock_wait_s"], cols["retries"], cols["applied"], cols["t_start"],
                          cols["t_grad_start"], cols["t_grad_end"], cols["distance"])
    applied = frame["applied"].to_numpy()
    staleness = frame["staleness"].to_numpy()[applied]
    summary = monitor.summary(updates, elapsed, staleness, attempts=len(frame),
                              numerics=sim.model is not None,
                              dropped=int((~applied).sum()),
                              mean_lock_wait_s=float(frame["lock_wait_s"].mean()) if len(frame) else 0.0,
                              **network.traffic(sc, sim.platform.dim,
                                                sim.platform.model_bytes // max(1, sim.platform.dim),
                                                len(frame)))
    if sim.model is None:
        summary.not_reached = False
        summary.initial_loss = summary.final_loss = math.nan
    return RunResult(scenario=sc.to_dict(), backend=NAME, runs=[summary], updates=frame,
                     curve=monitor.curve(), metadata={"machine": simulated_machine(sc, cpu), "model": model})
