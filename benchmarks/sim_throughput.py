"""Simulator speed: timing-only mutex model against a bare SimPy loop, 1e6 updates, numerics overhead.

Run: ``.venv/bin/python benchmarks/sim_throughput.py [--quick]``; results go in
``benchmarks/README_sim.md``. Ratios are measured in one run, in one process,
so they do not depend on how fast the host is.

- *mutex vs bare*: the ``sim`` backend's timing-only ``mutex`` model (Ek Alg. 2:
  lock, read, unlock, gradient, lock, update, unlock) against a bare SimPy loop
  with the same events (same lock, same timeouts, durations from a
  pre-drawn list, no records). Target ratio >= 0.5.
- *1e6 updates at 32 workers*: wall seconds of the timing-only mutex model. Target < 60 s.
- *numerics overhead*: the ``sim`` numerics run against the bare work of the
  same updates (minibatch, gradient kernel, SGD step, the same loss
  evaluations) in a plain loop. Target <= 15 %.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Generator

import numpy as np
import simpy

from simasgd import loader, seeds
from simasgd.sim import backend

TIMING = {"gradient": {"dist": "exponential", "mean_s": 1e-3},
          "read": {"dist": "deterministic", "mean_s": 2e-6}, "update": {"dist": "deterministic", "mean_s": 3e-6}}


def scenario(workers: int, updates: int, numerics: bool = False, **extra: Any) -> Any:
    d = {"name": "bench", "seed": 1, "machine": {"preset": "xeon-e5-2687w-v2"}, "workers": {"count": workers},
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
    env.run(until=state["done"])
    return updates / (time.perf_counter() - t0)


def sim_rate(workers: int, updates: int) -> float:
    sc = scenario(workers, updates)
    t0 = time.perf_counter()
    r = backend.run_once(sc, 0)
    assert r.runs[0].updates == updates
    return updates / (time.perf_counter() - t0)


def numerics_overhead(updates: int) -> tuple[float, float]:
    """Wall seconds of a numerics run (Ek's MLP) and of the bare work of the same updates."""
    from simasgd.workloads import build_workload
    workload = {"model": "mlp", "layers": [784, 128, 128, 128, 10], "dataset": "synthetic", "batch_size": 64}
    sc = scenario(8, updates, numerics=True, workload=workload, optimizer={"lr": 0.005},
                  stop={"max_updates": updates, "max_time_s": 1e9, "eval_every_updates": updates,
                        "epsilon": 1e-9})
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    theta = wl.init_theta(seeds.rng(1, 0, seeds.Role.INIT))
    g, rng = np.zeros_like(theta), seeds.rng(1, 0, seeds.Role.BATCH, 0)
    wl.kernel(theta, wl.X, wl.y, wl.sample_batch(rng, 64), g, wl.shape)  # compile outside the clock
    backend.run_once(scenario(2, 8, numerics=True, workload=workload), 0)  # warm the sim path too
    t0 = time.perf_counter()
    backend.run_once(sc, 0)
    t_sim = time.perf_counter() - t0
    local = np.empty_like(theta)
    t0 = time.perf_counter()
    wl.eval_loss(theta)
    for _ in range(updates):
        np.copyto(local, theta)  # the read the workers do
        wl.kernel(local, wl.X, wl.y, wl.sample_batch(rng, 64), g, wl.shape)
        theta -= 0.005 * g
    wl.eval_loss(theta)
    return t_sim, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs (no 1e6)")
    args = ap.parse_args()
    n = 50_000 if args.quick else 200_000
    rows = []
    for workers in (8, 32):
        # Alternate and keep the best of three: the host is shared, a slow moment should not decide.
        bare = max(bare_loop(workers, n) for _ in range(1))
        sim = sim_rate(workers, n)
        for _ in range(2):
            bare, sim = max(bare, bare_loop(workers, n)), max(sim, sim_rate(workers, n))
        rows.append((f"mutex timing-only, {workers} workers: sim / bare SimPy updates/s",
                     f"{sim:,.0f} / {bare:,.0f} = {sim / bare:.2f}", ">= 0.5"))
    if not args.quick:
        t0 = time.perf_counter()
        sim_rate(32, 1_000_000)
        rows.append(("1e6 updates, mutex timing-only, 32 workers (wall s)", f"{time.perf_counter() - t0:.1f}", "< 60"))
    runs = [numerics_overhead(200 if args.quick else 500) for _ in range(1 if args.quick else 3)]
    t_sim, t_bare = min(r[0] for r in runs), min(r[1] for r in runs)
    rows.append(("numerics overhead over bare gradient work (Ek MLP, B=64, 8 workers)",
                 f"{t_sim:.2f} s / {t_bare:.2f} s = {100 * (t_sim / t_bare - 1):+.1f} %", "<= 15 %"))
    print("| measure | result | target |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
