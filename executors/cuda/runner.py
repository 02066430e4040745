"""One run on the GPU: device state, one stream and host thread per worker, the monitor, the results.

The main thread puts the data and θ₀ on the device, starts the workers (their loops from
``IMPLEMENTATIONS``: :mod:`.lockfree`, :mod:`.synchronous`, :mod:`.lopez`) and watches: every
``stop.eval_updates()`` versions (the
device's version counter, read on its own stream) it copies θ back and
evaluates the loss on the host with the workload's CPU kernel; it sets the
stop flag at ε, on a crash, or at the time budget. Results are the shared
format (``results.updates_frame``), so ``compare`` works unchanged.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from executors.cuda import IMPLEMENTATIONS, NAME, device, lopez
from executors.cuda.lockfree import Tickets
from executors.cuda.model import gradient_class
from executors.cuda.records import Clock, Records
from executors.cuda.synchronous import SyncRound
from simasgd.runs.convergence import Monitor
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult, updates_frame
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario

POLL_S = 2e-3  # the monitor's sleep between looks at the version counter
REHEARSAL_UPDATES = 3  # updates a stream in the rehearsal before a scenario's first run (_rehearse)
REHEARSAL_MASTER = 50  # a Lopez master's steps per gradient, about (tests/conformance: UPDATES_BY_APPLIES)
REHEARSAL_S = 120.0    # the rehearsal's time budget: compiling every kernel takes seconds on a GPU
_REHEARSED: set[str] = set()  # scenarios (less their stop, seed and name) this process has rehearsed
REHEARSE_ON_SIMULATOR = False  # numba's CUDA simulator compiles nothing: no rehearsal there (tests set it)


class ExecutorError(RuntimeError):
    """A stream's host thread raised or did not stop."""


@dataclass
class Pool:
    """Leashed-SGD's device pool (``executors/cuda/kernels.py``)."""

    vectors: Any
    velocities: Any
    ctrl: Any
    rc: Any
    stale: Any
    ver: Any
    slots: Any
    status: Any


def pool_size(workers: int) -> int:
    """Each stream holds one private vector and two references, one is the latest, one for the monitor."""
    return 2 * workers + 2


def _pool(cuda: Any, theta0: np.ndarray, n: int, momentum: bool) -> Pool:
    size = pool_size(n)
    vec = np.zeros((size, theta0.shape[0]), dtype=theta0.dtype)
    vec[0] = theta0
    stale = np.ones(size, np.int64)
    stale[0] = 0
    return Pool(cuda.to_device(vec), cuda.to_device(np.zeros((size, theta0.shape[0]) if momentum else (size, 1),
                                                             dtype=theta0.dtype)),
                cuda.to_device(np.zeros(1, np.int64)), cuda.to_device(np.zeros(size, np.int64)),
                cuda.to_device(stale), cuda.to_device(np.zeros(size, np.int64)),
                cuda.to_device(np.full((n + 1, 3), -1, np.int64)), cuda.to_device(np.zeros(n + 1, np.int64)))


def _state(sc: Scenario, run: int, wl: Any, cuda: Any) -> Any:
    n, dt = sc.workers.count, np.dtype(wl.dtype)
    theta0 = np.ascontiguousarray(wl.init_theta(seeds.rng(sc.seed, run, seeds.Role.INIT)), dtype=dt)
    dim = int(theta0.shape[0])
    r = SimpleNamespace(sc=sc, wl=wl, n=n, dim=dim, cuda=cuda, stop=threading.Event())
    r.streams = [cuda.stream() for _ in range(n)]
    r.master_stream, r.monitor_stream = cuda.stream(), cuda.stream()
    r.theta, r.vel = cuda.to_device(theta0), cuda.to_device(np.zeros(dim if sc.optimizer.momentum > 0 else 1, dt))
    r.ctr, r.scratch = cuda.to_device(np.zeros(1, np.int64)), cuda.to_device(np.zeros(1, np.int64))
    X = wl.X if isinstance(wl.X, np.ndarray) else np.zeros((1, 1), dt)
    X_dev, y_dev = cuda.to_device(np.ascontiguousarray(X)), cuda.to_device(np.ascontiguousarray(wl.y))
    batch, cls = sc.workload.batch_size, gradient_class(wl)
    r.grads = [cls(cuda, wl, X_dev, y_dev, s, batch) for s in r.streams]
    r.local = [cuda.device_array(dim, dtype=dt, stream=s) for s in r.streams]
    r.g = [cuda.device_array(dim, dtype=dt, stream=s) for s in r.streams]
    r.clock = Clock(cuda, device.simulator())
    r.records = [Records(cuda, s, r.clock, w) for w, s in enumerate(r.streams)]
    rngs = [seeds.rng(sc.seed, run, seeds.Role.BATCH, w) for w in range(n)]
    r.batch = lambda w: wl.sample_batch(rngs[w], batch)
    name = sc.algorithm.name
    r.tickets = Tickets(sc.stop.max_updates)
    if name == "sync":
        r.gsum = cuda.to_device(np.zeros(dim, dt))
        r.round = SyncRound(r)
    if name == "lopez":
        lopez.state(r, cuda, dt)
    if name == "leashed":
        r.pool = _pool(cuda, theta0, n, sc.optimizer.momentum > 0)
        p = sc.algorithm.param("persistence")
        r.persistence = -1 if p is None or math.isinf(float(p)) else int(p)
    for s in (*r.streams, r.master_stream):
        s.synchronize()
    return r


def _snapshot(r: Any) -> tuple[int, np.ndarray]:
    """(version, θ) as the monitor sees them now (θ may be mid-update: as a reader would)."""
    from executors.cuda import kernels as K
    from executors.cuda.model import launch, launch1

    s = r.monitor_stream
    v = int(r.ctr.copy_to_host(stream=s)[0])
    if r.sc.algorithm.name != "leashed":
        theta = r.theta.copy_to_host(stream=s)
    else:
        p, k = r.pool, r.n
        launch1(K.acquire, s, p.ctrl, p.rc, p.ver, p.slots, k, 2, r.records[0].recr, -1)
        tmp = r.cuda.device_array(r.dim, dtype=r.theta.dtype, stream=s)
        launch(K.copy_slot, r.dim, s, tmp, p.vectors, p.slots, k, 2)
        launch1(K.release, s, p.rc, p.slots, k, 2)
        v = int(p.ver.copy_to_host(stream=s)[int(p.slots.copy_to_host(stream=s)[k, 2])])
        theta = tmp.copy_to_host(stream=s)
    s.synchronize()
    return v, theta


def run_workload(sc: Scenario, run: int, wl: Any, advance: Advance | None = None) -> RunResult:
    """One run, after a rehearsal of the same scenario the first time this process runs it (:func:`_rehearse`)."""
    cuda = device.require()
    _rehearse(sc, run, wl, cuda)
    return _run(sc, run, wl, cuda, advance)


def rehearsal(sc: Scenario) -> Scenario:
    """The scenario, briefly: a few updates a stream (a Lopez master steps tens of times a gradient), never
    more than its own budget, the monitor looking twice, no ε."""
    from simasgd.spec import algorithms, loader

    master = algorithms.ALGORITHMS[sc.algorithm.name].applies == "latest_sum"
    n = min(REHEARSAL_UPDATES * (REHEARSAL_MASTER if master else 1) * sc.workers.count, sc.stop.max_updates)
    doc = sc.to_dict()
    doc["stop"] = {**doc["stop"], "epsilon": 0.0, "max_updates": n, "max_time_s": REHEARSAL_S,
                   "eval_every_updates": max(1, n // 2)}
    return loader.from_dict(doc, f"{sc.name} (rehearsal)", Path(sc.base_dir) if sc.base_dir else None)


def rehearsal_key(sc: Scenario) -> str:
    """What a rehearsal covers: the scenario less its stop rule, seed, name and repeats (which compile nothing)."""
    return json.dumps({k: v for k, v in sc.to_dict().items() if k not in ("stop", "seed", "name", "repeats")},
                      sort_keys=True, default=str)


def _rehearse(sc: Scenario, run: int, wl: Any, cuda: Any) -> None:
    """Run ``sc`` once, briefly, off the record, the first time this process runs it. numba compiles a kernel
    at its first launch with each signature of argument types. A compile inside the timed run is counted as
    the algorithm's time: a fraction of a second per kernel, whole seconds for sync's first round.
    Running the scenario itself compiles every kernel its loops, monitor and snapshot
    launch, with the types they launch it with; a list of kernels to warm would be the loops written twice."""
    key = rehearsal_key(sc)
    if key in _REHEARSED or (device.simulator() and not REHEARSE_ON_SIMULATOR):
        return
    _run(rehearsal(sc), run, wl, cuda, None)
    _REHEARSED.add(key)


def _run(sc: Scenario, run: int, wl: Any, cuda: Any, advance: Advance | None) -> RunResult:
    r = _state(sc, run, wl, cuda)
    loop = IMPLEMENTATIONS[sc.algorithm.name].load()
    errors: dict[int, BaseException] = {}

    def body(w: int) -> None:
        try:
            loop(r, w)
        except threading.BrokenBarrierError:
            pass  # another stream failed and broke the round
        except BaseException as e:
            errors[w] = e
            r.stop.set()
            if hasattr(r, "round"):
                r.round.abort()

    mon = Monitor(sc.stop, run)
    mon.observe(0.0, 0, wl.eval_loss(_snapshot(r)[1]))
    every = sc.stop.eval_updates()
    next_eval = every
    threads = [threading.Thread(target=body, args=(w,), name=f"cuda-stream-{w}", daemon=True) for w in range(r.n)]
    with device.sim_turns():
        for t in threads:
            t.start()
        reported = 0
        while any(t.is_alive() for t in threads):
            threads[0].join(POLL_S)
            now = r.clock.now()
            if now >= sc.stop.max_time_s:
                r.stop.set()
            v = int(r.ctr.copy_to_host(stream=r.monitor_stream)[0])
            if v >= next_eval and not r.stop.is_set():
                v, theta = _snapshot(r)
                if mon.observe(now, v, wl.eval_loss(theta)):
                    r.stop.set()
                next_eval = (v // every + 1) * every
                if advance is not None:
                    advance(v - reported)
                    reported = v
        elapsed = r.clock.now()
        for t in threads:
            t.join(sc.cpu.join_timeout_s)
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        raise ExecutorError(f"{', '.join(stuck)} did not stop within cpu.join_timeout_s = {sc.cpu.join_timeout_s} s")
    if errors:
        w, e = next(iter(errors.items()))
        raise ExecutorError(f"cuda stream {w} failed: {type(e).__name__}: {e}") from e
    version, theta = _snapshot(r)
    if mon.updates[-1] != version and not mon.done:
        mon.observe(elapsed, version, wl.eval_loss(theta))
    return _result(sc, run, r, mon, version, elapsed)


def _result(sc: Scenario, run: int, r: Any, mon: Monitor, version: int, elapsed: float) -> RunResult:
    cols = [rec.arrays() for rec in r.records]
    c = {k: np.concatenate([x[k] for x in cols]) for k in cols[0]}
    if sc.algorithm.name == "lopez":  # gradients no step the run made took in (algorithms.py, lopez)
        c["applied"] &= c["version"] <= version
    frame = updates_frame(run, c["worker"], c["version"], c["read_version"], c["t_grad_start"], c["t_write"], 0.0,
                          c["retries"], c["applied"], c["t_start"], c["t_grad_start"], c["t_grad_end"])
    frame = frame.sort_values(["t_write", "worker"], kind="stable").reset_index(drop=True)
    applied = frame["applied"].to_numpy()
    summary = mon.summary(version, elapsed, frame["staleness"].to_numpy()[applied], attempts=len(frame),
                          dropped=int((~applied).sum()), gradient_on_device=bool(r.grads[0].on_device))
    meta = {"device": device.describe(), "gradient_on_device": bool(r.grads[0].on_device)}
    return RunResult(scenario=sc.to_dict(), backend=NAME, runs=[summary], updates=frame, curve=mon.curve(),
                     metadata=meta)
