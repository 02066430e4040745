"""Simulator speed: timing-only mutex model against a bare SimPy loop, 1e6 updates, numerics overhead.

Run: ``.venv/bin/python benchmarks/sim_throughput.py [--quick]``; results go in
``benchmarks/README_sim.md`` (one results section per machine kind, replaced on a rerun).
Ratios are measured in one run, in one process, so they do not depend on how fast the host is; the event-loop
ratio comes from ``--pairs`` pairs of runs taken in turn (its median, and its range: wider than ``UNSTABLE`` of
the median and it is flagged unstable).

- *mutex vs bare*: the ``sim`` backend's timing-only ``mutex`` model (Ek Alg. 2:
  lock, read, unlock, gradient, lock, update, unlock) against a bare SimPy loop
  with the same steps (a SimPy lock, the same timeouts, durations from a
  pre-drawn list, no records). Target ratio >= 1.0: a free lock is taken and given back without an
  event of its own, so the model runs fewer events than the bare loop it is held against.
- *1e6 updates at 32 workers*: wall seconds of the timing-only mutex model. Target < 30 s.
- *numerics overhead*: the wall time of a numerics run's event loop against
  the bare math inside it (copy, minibatch, gradient kernel, SGD step, loss
  evaluation), both timed in the same run. Target <= 15 %.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from simasgd.sim import backend, collector
from simasgd.spec import loader

UNSTABLE = 0.2  # a ratio whose pairs spread by more than this share of their median: the host moved (pyperf's warning)
TIMING = {"gradient": {"dist": "exponential", "mean_s": 1e-3},
          "read": {"dist": "deterministic", "mean_s": 2e-6}, "update": {"dist": "deterministic", "mean_s": 3e-6}}


def scenario(workers: int, updates: int, numerics: bool = False, **extra: Any) -> Any:
    # Zero latencies: no lock hand-off or CAS events; the model takes the same steps as the bare loop.
    machine = {"preset": "xeon-e5-2687w-v2", "local_latency_ns": 0, "remote_latency_ns": 0}
    d = {"name": "bench", "seed": 1, "machine": machine, "workers": {"count": workers},
         "algorithm": {"name": "mutex"}, "timing": TIMING, "sim": {"numerics": numerics},
         "stop": {"max_updates": updates, "max_time_s": 1e9}} | extra
    return loader.from_dict(d)


def bare_worker(env: simpy.Environment, lock: simpy.Resource, grad: list[float], state: dict[str, Any],
                read_s: float, update_s: float) -> Generator[simpy.Event, object, None]:
    i = 0
    while True:
        req = lock.request()
        yield req
        yield env.timeout(read_s)
        lock.release(req)
        yield env.timeout(grad[i])
        i += 1
        req = lock.request()
        yield req
        yield env.timeout(update_s)
        lock.release(req)
        state["n"] += 1
        if state["n"] == state["target"]:
            state["done"].succeed()


def bare_loop(workers: int, updates: int) -> float:
    """Updates per wall second of the same events with nothing else."""
    env = simpy.Environment()
    lock = simpy.Resource(env, 1)
    state = {"n": 0, "target": updates, "done": env.event()}
    rng = np.random.default_rng(0)
    per = 2 * (updates // workers) + 1000  # room for the fastest worker
    grads = [rng.exponential(1e-3, per).tolist() for _ in range(workers)]
    t0 = time.perf_counter()
    for w in range(workers):
        env.process(bare_worker(env, lock, grads[w], state, 2e-6, 3e-6))
    with collector.quiet():  # the collector as the simulator's runs have it: the ratio is the events' work
        env.run(until=state["done"])
    return updates / (time.perf_counter() - t0)


def paired(workers: int, updates: int, pairs: int) -> tuple[float, float, list[float]]:
    """The sim's and the bare loop's best rates, and the ratio of each pair (one of each, taken in turn, the
    order alternated): the host's speed moves by tens of per cent within minutes, so a ratio comes from two
    runs seconds apart, and its spread says how much the host moved meanwhile."""
    sims, bares = [], []
    for i in range(pairs):
        if i % 2:
            sims.append(sim_rate(workers, updates))
            bares.append(bare_loop(workers, updates))
        else:
            bares.append(bare_loop(workers, updates))
            sims.append(sim_rate(workers, updates))
    return max(sims), max(bares), [s / b for s, b in zip(sims, bares, strict=True)]


def sim_rate(workers: int, updates: int) -> float:
    sc = scenario(workers, updates)
    t0 = time.perf_counter()
    r = backend.run_once(sc, 0)
    assert r.runs[0].updates == updates
    return updates / (time.perf_counter() - t0)


def numerics_overhead(updates: int) -> tuple[float, float]:
    """Wall seconds of a numerics run's event loop, and of the math inside it (Ek's MLP, 8 workers).

    The math — copy, minibatch, gradient kernel, SGD step, loss evaluation — is
    timed where the simulator calls it, in the same run, so a busy host slows
    both alike; the rest of the loop is the simulator's overhead.
    """
    from simasgd.sim import engine, numerics

    workload = {"model": "mlp", "layers": [784, 128, 128, 128, 10], "dataset": "synthetic", "batch_size": 64}
    sc = scenario(8, updates, numerics=True, workload=workload, optimizer={"lr": 0.005},
                  stop={"max_updates": updates, "max_time_s": 1e9, "eval_every_updates": updates,
                        "epsilon": 1e-9})
    backend.run_once(scenario(2, 8, numerics=True, workload=workload), 0)  # compile outside the clock
    clock = {"math": 0.0, "loop": 0.0}

    inside = [False]

    def timed(fn: Any, key: str) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            inside[0] |= key == "loop"
            try:
                return fn(*a, **k)
            finally:
                if inside[0]:  # only the math inside the event loop (not θ0's evaluation before it)
                    clock[key] += time.perf_counter() - t0
                inside[0] &= key != "loop"
        return wrapper

    saved = {name: getattr(numerics.Model, name) for name in ("snapshot", "gradient", "step", "shared_loss")}
    go = engine.SimRun.go
    try:
        for name, fn in saved.items():
            setattr(numerics.Model, name, timed(fn, "math"))
        engine.SimRun.go = timed(go, "loop")
        backend.run_once(sc, 0)
    finally:
        for name, fn in saved.items():
            setattr(numerics.Model, name, fn)
        engine.SimRun.go = go
    return clock["loop"], clock["math"]


def main() -> None:
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the kernels' np.dot would otherwise spin threads against the simulator's own.
    threadpool_limits(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs (no 1e6)")
    ap.add_argument("--only", choices=["events", "numerics"], help="run one part")
    ap.add_argument("--pairs", type=int, default=5, help="bare and sim runs taken in turn, a ratio each")
    args = ap.parse_args()
    n = 50_000 if args.quick else 200_000
    rows = []
    if args.only != "numerics":
        for workers in (8, 32):
            sim, bare, ratios = paired(workers, n, args.pairs)
            lo, hi, mid = min(ratios), max(ratios), statistics.median(ratios)
            flag = " ⚠ unstable" if (hi - lo) / mid > UNSTABLE else ""
            rows.append((f"mutex timing-only, {workers} workers: sim / bare SimPy updates/s",
                         f"{sim:,.0f} / {bare:,.0f}; {mid:.2f} ({lo:.2f}–{hi:.2f}, {len(ratios)} pairs){flag}",
                         ">= 1.0"))
        if not args.quick:
            t0 = time.perf_counter()
            sim_rate(32, 1_000_000)
            rows.append(("1e6 updates, mutex timing-only, 32 workers (wall s)",
                         f"{time.perf_counter() - t0:.1f}", "< 30"))
    if args.only != "events":
        n_num = 300 if args.quick else 2000
        t_sim, t_bare = numerics_overhead(n_num)
        rows.append(((f"numerics overhead over the bare math (Ek MLP, B=64, 8 workers, {n_num} updates): "
                      "loop / math"), f"{t_sim:.2f} s / {t_bare:.2f} s = {100 * (t_sim / t_bare - 1):+.1f} %",
                     "<= 15 %"))
    print("| measure | result | target |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
