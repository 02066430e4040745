"""The serial backend: plain sequential minibatch SGD with momentum — the reference.

Its step is :func:`simasgd.numerics.update_rule.step` (staleness always 0), the same
function every other backend applies.

Every other backend is compared with this one. It ignores the algorithm and
the worker count (one worker, staleness 0) and times only the training
steps: loss evaluations for the curve are taken off the clock.
"""

from __future__ import annotations

import time

import numpy as np

from simasgd.numerics import update_rule
from simasgd.runs.convergence import Monitor, accuracy_of
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult, updates_frame
from simasgd.spec import algorithms, seeds
from simasgd.spec.scenario import Scenario

NAME = "serial"
MEASURES_HOST = False  # its times are not the point: it is the numerical reference
NEEDS_PROFILE = False
# Serial runs any scenario as sequential SGD: it is the yardstick, not an implementation of the algorithm.
ALGORITHMS = frozenset(algorithms.names())
RUNS_AS = "sequential"  # the definition its runs follow, whatever the scenario names (tests/conformance)


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    from simasgd.numerics.workloads import build_workload

    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    wl.warmup()  # compile (or load from numba's cache) before the clock starts
    opt, stop = scenario.optimizer, scenario.stop
    theta = np.ascontiguousarray(wl.init_theta(seeds.rng(scenario.seed, run, seeds.Role.INIT)))
    batch_rng = seeds.rng(scenario.seed, run, seeds.Role.BATCH, 0)
    grad = np.zeros_like(theta)
    velocity = np.zeros_like(theta)
    update_rule.step(theta, velocity, grad, opt.lr, opt.momentum, 0, opt.staleness_aware)  # compile; g = 0: a no-op
    monitor = Monitor(stop, run, accuracy_of=accuracy_of(wl))
    monitor.observe(0.0, 0, wl.eval_loss(theta), theta)
    every = stop.eval_updates()
    t_read = np.empty(stop.max_updates)
    t_write = np.empty(stop.max_updates)
    elapsed, u = 0.0, 0
    while not monitor.done and not monitor.out_of_budget(elapsed, u):
        start = time.perf_counter()
        idx = wl.sample_batch(batch_rng, scenario.workload.batch_size)
        wl.kernel(theta, wl.X, wl.y, idx, grad, wl.shape)
        update_rule.step(theta, velocity, grad, opt.lr, opt.momentum, 0, opt.staleness_aware)
        t_read[u] = elapsed
        elapsed += time.perf_counter() - start
        t_write[u] = elapsed
        u += 1
        if u % every == 0 or u == stop.max_updates:
            monitor.observe(elapsed, u, wl.eval_loss(theta), theta)
            if advance is not None:
                advance(every)
    if monitor.updates[-1] != u:
        monitor.observe(elapsed, u, wl.eval_loss(theta), theta)
    versions = np.arange(1, u + 1)
    updates = updates_frame(run, 0, versions, versions - 1, t_read[:u], t_write[:u])
    note = (f"serial runs sequential SGD: algorithm {scenario.algorithm.name!r} and "
            f"workers.count = {scenario.workers.count} are not used")
    return RunResult(scenario=scenario.to_dict(), backend=NAME,
                     runs=[monitor.summary(u, elapsed, np.zeros(u))],
                     updates=updates, curve=monitor.curve(), metadata={"note": note})
