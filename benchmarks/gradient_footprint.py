"""A gradient's time against the model-sized vectors its worker's cycle touches, one thread.

Run: ``.venv/bin/python benchmarks/gradient_footprint.py [--profile PROFILE.toml]``; it prints the table that
goes in ``benchmarks/fidelity.md`` and writes ``results/gradient_footprint_<machine>.json``.

Calibration times the workloads' gradient (``kernels.loss_and_grad``) back to back on two model-sized vectors:
the θ it reads and the gradient it writes (``executors/calibration/gradient.py``). A Leashed-SGD worker beside
others touches four in a cycle (``executors/cpu/lockfree.py``): the latest vector its gradient reads, the
gradient, the fresh vector it builds θ_latest − η·g into (``update_rule.step_into``), and the latest one it
builds from. Here one pinned thread runs each cycle on its own, so no other core's lines enter:

- ``calibration``: the gradient of one vector into a second, back to back (what the profile holds);
- ``over θ``: the gradient written over the vector it reads (the MLP's in-place form, as HOGWILD!'s and the
  lock workers' gradients over their copy): one vector;
- ``k vectors``: the gradient of the current vector into a separate gradient, then the step built into the next
  of k vectors, which the next gradient reads (k = 2: a cycle of three model-sized vectors; 4: Leashed's
  four and one more).

Each case's gradients are timed (the first ``WARMUP`` dropped), the cases in turn, ``--repeats`` rounds; the
figure is each case's median over its rounds' medians and its excess over ``calibration``. With ``--profile``
(a calibrated profile's ``[copy_by_size]``) the simulator's excess for a four-vector cycle is printed beside:
the gradient's two model-sized streams at the copy rate of that footprint against that of two vectors
(``CacheModel.gradient_extra_s``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record

from executors import atomics as A
from simasgd.numerics.update_rule import step_into
from simasgd.numerics.workloads import build_workload
from simasgd.numerics.workloads.kernels import grad_over_theta, loss_and_grad
from simasgd.spec import loader

SCHEMA, VERSION = "gradient_footprint", 1
WARMUP = 200  # gradients of a case's round not timed: its vectors brought into the caches
CASES: tuple[tuple[str, int, bool], ...] = (  # name, vectors the gradients read in turn, gradient separate
    ("calibration", 1, True), ("over θ", 1, False), ("2 vectors", 2, True), ("3 vectors", 3, True),
    ("4 vectors", 4, True))


@njit(nogil=True, cache=True)
def cycles(pool: np.ndarray, g: np.ndarray, X: np.ndarray, y: np.ndarray, shape: np.ndarray, n_rows: int,
           batch: int, separate: bool, out_ns: np.ndarray, seed: int) -> None:
    """Gradients of ``pool[0], pool[1], …`` in turn (into ``g``, or over the vector where not ``separate``),
    each followed, with two vectors or more, by the step built into the next one; their times into ``out_ns``."""
    np.random.seed(seed)
    idx = np.empty(batch, dtype=np.int64)
    none = np.zeros(0, dtype=pool.dtype)
    k = pool.shape[0]
    cur = 0
    for i in range(out_ns.shape[0]):
        for j in range(batch):
            idx[j] = np.random.randint(0, n_rows)
        t0 = A.now_ns()
        if separate:
            loss_and_grad(pool[cur], X, y, idx, g, shape)
        else:
            loss_and_grad(pool[cur], X, y, idx, pool[cur], shape)
        out_ns[i] = A.now_ns() - t0
        if k > 1:
            nxt = (cur + 1) % k
            step_into(pool[nxt], none, pool[cur], none, g, 1e-9, 0.0, 0, False)
            cur = nxt


def workload(layers: list[int], batch: int) -> Any:
    sc = loader.from_dict({"name": "footprint", "workload": {"model": "mlp", "layers": layers, "dataset": "digits",
                                                              "batch_size": batch}})
    return build_workload(sc.workload, 11)


def measure(layers: list[int], batch: int, calls: int, repeats: int) -> dict[str, Any]:
    """Each case's gradient medians (µs) by round, the cases in turn within a round."""
    wl = workload(layers, batch)
    n_rows = int(wl.n_train)
    rng = np.random.default_rng(0)
    pools = {k: rng.standard_normal((k, wl.dim)) * 0.01 for k in {v for _, v, _ in CASES}}
    g = np.zeros(wl.dim)
    idx = np.zeros(batch, dtype=np.int64)
    if not grad_over_theta(wl.X, idx, wl.shape):
        raise SystemExit(f"gradient_footprint: {layers} at B = {batch} cannot write its gradient over θ")
    rounds: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
    for r in range(repeats):
        for name, k, separate in CASES:
            out = np.zeros(WARMUP + calls, dtype=np.int64)
            cycles(pools[k], g, wl.X, wl.y, wl.shape, n_rows, batch, separate, out, r)
            rounds[name].append(float(np.median(out[WARMUP:])) * 1e-3)
    return {"model_bytes": int(wl.dim) * 8, "rounds": rounds}


def predicted_us(profile: Path, model_bytes: int) -> float | None:
    """The simulator's excess for a four-vector cycle on ``profile``'s ``[copy_by_size]``; None without it."""
    from simasgd.machines import machine
    from simasgd.sim.caches import CacheModel

    cm = CacheModel.from_profile(machine.load_profile(profile).profile)
    if cm is None:
        return None
    return cm.gradient_extra_s(model_bytes, 4) * 1e6


def table(doc: dict[str, Any]) -> str:
    med = {name: statistics.median(v) for name, v in doc["rounds"].items()}
    base = med["calibration"]
    lines = ["| case | gradient, median µs (rounds) | over the calibration's |", "|---|---|---|"]
    for name, _, _ in CASES:
        spread = ", ".join(f"{x:.1f}" for x in doc["rounds"][name])
        lines.append(f"| {name} | {med[name]:.1f} ({spread}) | {med[name] - base:+.1f} |")
    if doc.get("predicted_us") is not None:
        lines.append(f"\nThe simulator's excess for a four-vector cycle on that profile: {doc['predicted_us']:+.1f} µs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[64, 256, 256, 10])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--calls", type=int, default=2000, help="gradients timed a case a round")
    ap.add_argument("--repeats", type=int, default=3, help="rounds over every case")
    ap.add_argument("--cpu", type=int, default=None, help="the CPU to pin this thread to (default: the last)")
    ap.add_argument("--profile", type=Path, default=None, help="a calibrated profile: the simulator's excess")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    allowed = os.sched_getaffinity(0)
    cpu = a.cpu if a.cpu is not None else max(allowed)
    os.sched_setaffinity(0, {cpu})
    try:
        doc = measure(a.layers, a.batch, a.calls, a.repeats)
    finally:
        os.sched_setaffinity(0, allowed)  # a caller's thread (the tests') gets its CPUs back
    doc |= {"layers": a.layers, "batch": a.batch, "calls": a.calls, "cpu": cpu,
            "predicted_us": None if a.profile is None else predicted_us(a.profile, doc["model_bytes"])}
    path = record.write(a.out or record.current_path(SCHEMA), SCHEMA, VERSION, doc)
    print(table(doc))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
