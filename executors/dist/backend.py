"""Backend ``dist``: the distributed algorithms over torch.distributed (gloo), one process per node.

The roles follow each algorithm's definition (:mod:`simasgd.spec.algorithms`): ``sync`` — every rank a
worker, one all-reduce a round (:mod:`.synchronous`); ``param_server`` — ``shards`` server ranks and
the workers, pushes and pulls as point-to-point messages, and ``ssp``, the same server with a clock
gate (:mod:`.param_server`); ``backup`` — a server closing each round at its first N gradients
(:mod:`.bounded`); ``easgd`` / ``eawild`` — the centre on rank 0 and the workers, EA-wild's groups
with collectives of their own (:mod:`.elastic`); ``keuper`` / ``simuparallel`` — every rank a node
with its own state, Keuper's states sent node to node (:mod:`.decentral`). :func:`run_once` forks
the ``workers + servers`` processes itself on loopback (gloo over TCP on 127.0.0.1); across
machines the same roles run in the processes ``torchrun`` starts (:mod:`.launch`). Rank 0 gathers
the rows (versions, times from one clock, bytes of every message) and builds the run's result
(:mod:`.collect`); a rank that fails ends the run with an error naming it, and no result is
returned, so ``backends.run`` writes no folder for that repeat.

The shared-memory algorithms (one θ that several threads read and write: mutex, rwlock, hogwild,
leashed, lopez, sequential) are refused with the backends that run them; so are k_sync and k_async
(not implemented here).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any

from executors.cpu import placement
from executors.dist.ranks import IMPLEMENTATIONS, run_rank
from executors.dist.world import DistError, Layout, free_port, init
from simasgd.runs import metadata
from simasgd.spec import algorithms, seeds
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult
from simasgd.spec.scenario import Scenario

NAME = "dist"
ALGORITHMS = frozenset(IMPLEMENTATIONS)  # one role per algorithm in executors/dist/ranks.py
SHARED_MEMORY = ("sequential", "mutex", "rwlock", "hogwild", "leashed", "lopez")
MEASURES_HOST = True   # real processes on this host (loopback): its timings are this machine's
NEEDS_PROFILE = False  # it measures; it reads no calibrated profile
START_METHOD = "fork"  # the ranks inherit the built workload: nothing is pickled, a rank starts in milliseconds
START_S = 60.0         # beyond the run's own budget: process start, rendezvous, gathering the rows
# No shared-memory executor's traits: its processes exchange messages (no shared θ to read in place, no lock
# to wait on); the simulator's [network] (simasgd/sim/network.py) models them.
TRAITS = None

__all__ = ["ALGORITHMS", "MEASURES_HOST", "NAME", "NEEDS_PROFILE", "TRAITS", "DistError", "run_once", "run_workload"]


def require(name: str) -> None:
    """``algorithms.require``, naming for a shared-memory algorithm the backends that run it."""
    try:
        algorithms.require(NAME, name, ALGORITHMS)
    except algorithms.UnsupportedAlgorithm as e:
        if name not in SHARED_MEMORY:
            raise
        raise algorithms.UnsupportedAlgorithm(
            f"{e} ({name!r} shares one θ in memory among its workers, which a process per node cannot; "
            f"backends that run it: {', '.join(_runners(name))})") from None


def _runners(name: str) -> list[str]:
    from simasgd.runs import backends

    out = []
    for b, present in backends.available().items():
        if b == NAME or not present:
            continue
        try:
            mod = importlib.import_module(backends.BACKENDS[b])
        except ImportError:
            continue
        if name in getattr(mod, "ALGORITHMS", ()) or getattr(mod, "RUNS_AS", None) == name:
            out.append(b)
    return out


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    require(scenario.algorithm.name)
    from simasgd.numerics.workloads import build_workload, check_backend

    check_backend(scenario.workload, NAME)
    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    start = metadata.host_state()
    result = run_workload(scenario, run, wl)
    end = metadata.host_state()
    result.metadata["host"] = {"run": run, "loadavg_start": start["loadavg"], "loadavg_end": end["loadavg"],
                               "affinity_start": start["affinity"], "affinity_end": end["affinity"]}
    return result


def run_workload(sc: Scenario, run: int, wl: Any) -> RunResult:
    """Run ``sc`` once in forked rank processes on loopback with the given workload."""
    import torch.multiprocessing as mp

    from executors.dist import collect

    wl.warmup()  # compiled once here; the ranks inherit it
    theta0 = wl.init_theta(seeds.rng(sc.seed, run, seeds.Role.INIT))
    layout = Layout.of(sc, theta0.shape[0])
    cpus: list[int | None] = [None] * layout.world
    transport: list[int] | None = None
    if sc.cpu.pin:  # rank r on the placement's r-th CPU, the servers first ("os": unpinned)
        cpus, warnings = placement.plan(layout.world, sc.workers.placement)
        for msg in warnings:
            print(f"warning: {msg}", file=sys.stderr)
        transport = transport_cpus(cpus, sorted(os.sched_getaffinity(0)))
    ctx: Any = mp.get_context(START_METHOD)
    results, errors = ctx.SimpleQueue(), ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, name=f"simasgd-dist-rank-{r}", daemon=True,
                         args=(sc, run, wl, r, layout.world, port, results, errors, cpus[r], transport))
             for r in range(layout.world)]
    for p in procs:
        p.start()
    try:
        reports = _await(procs, results, errors, layout, sc.stop.max_time_s + START_S)
    finally:
        _end(procs, sc.cpu.join_timeout_s)
    result = collect.result(sc, run, wl, theta0, reports, NAME, "loopback")
    result.metadata["placement"] = {"cpus": [c if c is not None else -1 for c in cpus],
                                    "transport_cpus": transport if transport is not None else []}
    return result


def transport_cpus(cpus: list[int | None], allowed: list[int]) -> list[int]:
    """Where a pinned run's transport threads run: the allowed CPUs no rank computes on, where there are at least
    two of them; else all the allowed CPUs.

    A rank is pinned by its main thread, the one that computes its gradients and calls send, recv and the
    collectives (``cpu.pin``: a worker on a core of its own). gloo's threads — the device's event loop
    (``gloo_tcp_loop``), the process group's collective threads (``pt_gloo_runloop``), rank 0's store — go
    elsewhere: the event loop handles a socket's events only under its pair's lock and, when it cannot take the
    lock (a send or a collective holding it), it returns to ``epoll_wait``, which reports the same event at
    once. On the lock holder's own CPU that loop keeps the holder off the CPU until the scheduler's slice ends
    (milliseconds: ``[scheduler] quantum_s``), so a run with every thread of a rank on one core measured
    stalls of a slice, not the transport (benchmarks/README_dist.md). Two CPUs at least, so that the event
    loop and a collective thread of one rank need not share one."""
    ranks = {c for c in cpus if c is not None}
    spare = [c for c in allowed if c not in ranks]
    return spare if len(spare) >= 2 else list(allowed)


def _rank_main(sc: Scenario, run: int, wl: Any, rank: int, world: int, port: int, results: Any, errors: Any,
               cpu: int | None = None, transport: list[int] | None = None) -> None:
    try:
        if cpu is not None:  # the threads init starts inherit the transport's CPUs; then this thread its own
            os.sched_setaffinity(0, set(transport) if transport else {cpu})
        init(sc, rank, world, port)
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})  # pid 0: the calling thread only (Linux), the rank's main thread
        out = run_rank(sc, run, wl)
        if out is not None:
            results.put(out)
    except BaseException as e:
        errors.put((rank, f"{type(e).__name__}: {e}"))
        os._exit(1)  # leave at once: a clean exit would wait on peers that may never answer
    os._exit(0)


def _await(procs: list[Any], results: Any, errors: Any, layout: Layout, limit: float) -> list[dict[str, Any]]:
    """Rank 0's gathered reports, or an error naming the first rank that failed, died or hung."""
    deadline = time.monotonic() + limit
    while True:
        if not errors.empty():
            rank, why = errors.get()
            raise DistError(f"dist backend: rank {rank} ({layout.role(rank)}) failed: {why}; the run is abandoned")
        if not results.empty():
            return list(results.get())
        dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if dead:
            time.sleep(0.2)  # its own message may be on its way
            if not errors.empty():
                continue
            r, code = dead[0]
            raise DistError(f"dist backend: rank {r} ({layout.role(r)}) exited with code {code}; the run is abandoned")
        if time.monotonic() > deadline:
            raise DistError(f"dist backend: no result within {limit:g} s (stop.max_time_s + {START_S:g} s); "
                            f"ranks still running: {[r for r, p in enumerate(procs) if p.is_alive()]}")
        time.sleep(0.005)


def _end(procs: list[Any], timeout: float) -> None:
    """Join the ranks; any still alive after ``timeout`` (a failed run's peers, blocked in a receive) is killed."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)


