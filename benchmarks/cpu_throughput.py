"""Updates/s of the CPU executor: scaling vs ideal, vs the C++ reference, vs a PyTorch Hogwild baseline.

Run: ``.venv/bin/python benchmarks/cpu_throughput.py [--seconds 2] [--rounds 3]``: writes
``benchmarks/results/cpu_throughput_<machine kind>.json`` (``record.py``; ``--out`` to write elsewhere) and
prints the tables of benchmarks/README_cpu.md; ``--table FILE`` prints them from a saved record.

Workload: MLP 784-128-128-128-10 on synthetic MNIST-shaped data, float64 and
float32 (PyTorch is compared with the float32 rows), batch 16 and 64. Each configuration runs for a fixed
wall time with the loss monitor sampling only at the start and the end, so the figure is the
executor's own rate. Ratios are computed within this one run.

The goals (``GOAL_*`` below; ``verdicts`` prints one row per goal): one thread against
sequential SGD, two threads against ideal, against a PyTorch baseline in the style of pytorch/examples
mnist_hogwild (``model.share_memory()``, one process per worker, ``torch.set_num_threads(1)``), the
GEMM peak measured in the same run, and no bimodal rounds (benchmarks/README_cpu.md).

Where the host puts the two CPUs of a small VM can change during a run (executors/c2c.py: one CCX, two
CCXs, one core's two hardware threads), and every line of the shared model that moves between the workers follows
it. So each 2-thread run sits between two core-to-core probes and is measured again (``--retries``)
while they are not in the placement measured at the start (``home``); the attempts set aside are kept
(``moved``), and the placement table compares them with the same configuration at home.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # record.py, also when this file is imported by path
import record

SCHEMA, SCHEMA_VERSION = "cpu_throughput", 1

LAYERS = [784, 128, 128, 128, 10]
# dcs-chalmers/shared-memory-sgd, MLP 784-128-128-128-10 on MNIST, recorded per-update times (ms):
# B=64: ≈7.2 ms sequential, ≈4.0 ms at 2 threads; B=16: ≈1.5 ms at 2 threads (mutex, HOGWILD!, Leashed alike).
REFERENCE_MS = {(64, 1): 7.2, (64, 2): 4.0, (16, 2): 1.5}
ALGORITHMS = ("hogwild", "leashed", "mutex", "rwlock")
# The goals: one thread against sequential SGD; two threads against ideal (by batch);
# against the PyTorch mnist_hogwild-style baseline (float32); rounds of one configuration that
# disagree by more than this factor are called bimodal.
GOAL_ONE_THREAD, GOAL_TWO = 0.95, {64: 0.90, 16: 0.85}
GOAL_TORCH, BIMODAL, GOAL_PEAK = 2.0, 1.5, 0.6
YARDSTICK = 1.1  # the sequential rows' rounds: a wider spread is flagged beside the verdicts (not a goal)
TURNS = 0.75  # a round's gradient concurrency below this share of the configuration's best: taking turns
RETRIES = 3  # a 2-thread run out of the home placement is measured again up to this many times
SETTLE_S = 10.0  # before each try, wait up to this long for the CPUs to come home


def scenario(alg: str, threads: int, batch: int, seconds: float, dtype: str = "float64") -> Any:
    from simasgd.spec import loader

    return loader.from_dict({
        "name": f"bench-{alg}-{threads}-b{batch}", "seed": 1,
        "workers": {"count": threads, "placement": "uma" if threads > 1 else "os"},
        "workload": {"model": "mlp", "layers": LAYERS, "dataset": "synthetic", "batch_size": batch,
                     "dtype": dtype},
        "algorithm": {"name": alg}, "optimizer": {"lr": 0.01},
        "stop": {"max_time_s": seconds, "max_updates": 10**8, "epsilon": 1e-9},
        "cpu": {"monitor": "after"},  # no loss evaluation competes with the workers
    })


def ours(alg: str, threads: int, batch: int, seconds: float, dtype: str) -> dict[str, float]:
    """``updates_per_s``; the workers inside a gradient (``concurrency``) and inside an update at once on
    average; the share of the time two were inside an update at once
    (``simasgd.evaluation.phases.gradient_concurrency``, ``update_concurrency``, ``both_updating``); the median
    read, gradient and update phase of a cycle (``read_us``, ``gradient_us``, ``update_us``); the slowest
    over the fastest span's median cycle (``regime``, ``simasgd.evaluation.stability.regime_ratios``)."""
    from executors.cpu.runner import run_workload
    from simasgd.evaluation import phases
    from simasgd.evaluation.stability import regime_ratios
    from simasgd.numerics.workloads import build_workload

    sc = scenario(alg, threads, batch, seconds, dtype)
    wl = build_workload(sc.workload, sc.seed, None)
    res = run_workload(sc, 0, wl)
    r = res.runs[0]
    out = {"updates_per_s": r.updates / r.time_s}
    cycles = phases.cycle_table(res.updates)
    for name in ("read", "gradient", "update"):
        out[f"{name}_us"] = float(cycles[name].median() * 1e6) if len(cycles) else float("nan")
    # a move of the CPUs and back between the probes shows only in the run's own cycles
    out["regime"] = regime_ratios(res.updates).get(0, float("nan"))
    for key, extra in (("concurrency", "gradient_concurrency"), ("update_concurrency", "update_concurrency"),
                       ("both_updating", "both_updating")):
        out[key] = float(r.extra.get(extra, float("nan")))
    return out


def home_placement(probes: int = 5, gap_s: float = 0.5) -> float | None:
    """The hand-off latency (ns) of where the host keeps the two CPUs: the median of ``probes`` probes
    ``gap_s`` apart, so a passing move does not become the placement every 2-thread run is held to."""
    import statistics

    from executors import c2c

    ns = []
    for k in range(probes):
        time.sleep(gap_s if k else 0.0)
        ns.append(c2c.latency_ns())
    known = [x for x in ns if x is not None]
    return statistics.median(known) if known else None


def placed(fn: Any, home: float | None, retries: int, moved: list[dict[str, Any]],
           settle_s: float = SETTLE_S) -> dict[str, Any]:
    """``fn()`` (a dict of figures) between two core-to-core probes, each try started once the CPUs are
    home (waiting up to ``settle_s``), measured again up to ``retries`` times while the probes are not both
    in the ``home`` placement or the run's cycle changed regime partway (``regime`` past
    ``simasgd.evaluation.stability.SHIFT``: the host moved the CPUs away and back between the probes); the attempts
    set aside go to ``moved``."""
    from executors import c2c
    from simasgd.evaluation.stability import SHIFT

    def steady(table: dict[str, Any]) -> bool:
        return not table.get("regime", 1.0) > SHIFT  # NaN (too short to tell) passes

    return c2c.measured(fn, tries=retries + 1, like=home, moved=moved, settle_s=settle_s, accept=steady)


def capacity(threads: int, batch: int, seconds: float, dtype: str) -> float:
    """Gradients/s of ``threads`` independent gradient loops (no shared model) — what the machine gives
    right now. On a shared machine other load takes cores; ``of_capacity`` compares with this."""
    import threading

    import numpy as np

    from executors.calibration.gradient import time_gradient
    from simasgd.numerics.workloads import build_workload

    sc = scenario("sequential", 1, batch, seconds, dtype)
    wl = build_workload(sc.workload, sc.seed, None)
    theta = wl.init_theta(np.random.default_rng(0))
    from executors.cpu.runner import single_threaded_blas

    # The probe too: unlimited, it ran B = 64 float32 through numpy's OpenBLAS on two threads at 28 ms a
    # gradient (0.46 ms on one), so the timed loops were sized to 71 gradients, 0.03 s of thread start-up
    with single_threaded_blas():  # as in the runs: idle BLAS threads would spin and steal a core
        probe = np.zeros(20, dtype=np.int64)
        for _ in range(2):
            time_gradient(theta, wl.X, wl.y, wl.shape, wl.n_train, batch, probe, 0)
        n = int(seconds / (np.median(probe) * 1e-9))
        outs = [np.zeros(n, dtype=np.int64) for _ in range(threads)]
        ts = [threading.Thread(target=time_gradient, args=(theta.copy(), wl.X, wl.y, wl.shape, wl.n_train,
                                                            batch, o, k))
              for k, o in enumerate(outs)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return threads * n / (time.monotonic() - t0)


# --- PyTorch baseline (mnist_hogwild style) --------------------------------------------------------

def _torch_worker(model: Any, batch: int, seconds: float, start: Any, counter: Any, seed: int) -> None:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    X = torch.randn(10000, LAYERS[0])
    y = torch.randint(0, LAYERS[-1], (10000,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start.wait()
    n, until = 0, time.monotonic() + seconds
    while time.monotonic() < until:
        idx = torch.randint(0, X.shape[0], (batch,))
        opt.zero_grad()
        loss = F.cross_entropy(model(X[idx]), y[idx])
        loss.backward()
        opt.step()
        n += 1
    with counter.get_lock():
        counter.value += n


def torch_rate(threads: int, batch: int, seconds: float) -> float:
    """Measured in a child process: importing torch here slowed our later 2-thread HOGWILD! runs in the
    same process ~6× (observed, not diagnosed), so this process never imports it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, __file__, "--torch-rate", str(threads), str(batch), str(seconds)],
                         capture_output=True, text=True, timeout=600, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _torch_rate_here(threads: int, batch: int, seconds: float) -> float:
    import torch.multiprocessing as mp
    from torch import nn

    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(LAYERS):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    model.share_memory()
    ctx = mp.get_context("spawn")
    start, counter = ctx.Event(), ctx.Value("l", 0)
    procs = [ctx.Process(target=_torch_worker, args=(model, batch, seconds, start, counter, r)) for r in range(threads)]
    for p in procs:
        p.start()
    time.sleep(3.0)  # let every process import torch and build its data before the clock starts
    start.set()
    for p in procs:
        p.join()
    return counter.value / seconds


def one_round(seconds: float, with_torch: bool, home: float | None = None,
              retries: int = RETRIES, settle_s: float = SETTLE_S) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for batch in (16, 64):
        for dtype in ("float64", "float32"):
            seq = ours("sequential", 1, batch, seconds, dtype)
            serial = seq["updates_per_s"]
            rows.append({"batch": batch, "dtype": dtype, "algorithm": "sequential", "threads": 1,
                         "updates_per_s": serial, "ideal": serial, "capacity": serial,
                         "concurrency": seq["concurrency"]})
            # one core's two hardware threads share its FMA units: the yardstick sees the placement too
            two = placed(lambda b=batch, d=dtype: {"rate": capacity(2, b, seconds, d)}, home, retries, [], settle_s)
            cap = two["rate"] / capacity(1, batch, seconds, dtype)
            for alg in ALGORITHMS:
                for threads in (1, 2):
                    moved: list[dict[str, Any]] = []
                    if threads == 1:
                        r = ours(alg, threads, batch, seconds, dtype)
                    else:
                        r = placed(functools.partial(ours, alg, threads, batch, seconds, dtype), home, retries,
                                   moved, settle_s)
                    rows.append({"batch": batch, "dtype": dtype, "algorithm": alg, "threads": threads, **r,
                                 "moved": moved, "capacity_c2c_ns": two.get("c2c_ns") if threads == 2 else None,
                                 "ideal": threads * serial, "capacity": (cap if threads == 2 else 1.0) * serial})
        if with_torch:
            serial32 = next(r["updates_per_s"] for r in rows if r["batch"] == batch and r["dtype"] == "float32")
            for threads in (1, 2):
                moved = []  # its two processes share the model too: held to the same placement
                r = {"updates_per_s": torch_rate(threads, batch, seconds)} if threads == 1 else placed(
                    lambda b=batch: {"updates_per_s": torch_rate(2, b, seconds)}, home, retries, moved, settle_s)
                rows.append({"batch": batch, "dtype": "float32", "algorithm": "torch-hogwild", "threads": threads,
                             **r, "moved": moved, "ideal": threads * serial32, "capacity": None})
    return rows


def median_rows(rounds: list[list[dict[str, Any]]], home: float | None = None) -> list[dict[str, Any]]:
    """Per configuration, the median of each figure over the rounds (load on a shared machine drifts) that
    ran in the ``home`` placement of the CPUs (all rounds when none did). ``rounds`` and the other
    per-round lists keep every round; ``home_rounds`` says which ones the medians used."""
    import statistics

    from executors.c2c import in_placement

    out = []
    for i, first in enumerate(rounds[0]):
        row = dict(first)
        home_ = [in_placement(r[i].get("c2c_ns"), home) for r in rounds]
        used = [r for r, h in zip(rounds, home_, strict=False) if h] or rounds
        for key in ("updates_per_s", "ideal", "capacity"):
            vals = [r[i][key] for r in used if r[i][key] is not None]
            row[key] = statistics.median(vals) if vals else None
        row.pop("c2c_ns", None)
        row["home_rounds"] = home_
        row["c2c_rounds"] = [r[i].get("c2c_ns") for r in rounds]
        row["moved"] = [{**m, "round": k + 1} for k, r in enumerate(rounds) for m in r[i].get("moved") or []]
        row["rounds"] = [r[i]["updates_per_s"] for r in rounds]
        row["concurrency_rounds"] = [r[i].get("concurrency") for r in rounds]
        row["update_us_rounds"] = [r[i].get("update_us") for r in rounds]
        row["update_concurrency_rounds"] = [r[i].get("update_concurrency") for r in rounds]
        row["both_updating_rounds"] = [r[i].get("both_updating") for r in rounds]
        # the same round's yardstick: its rate over what two independent loops got then (host noise out)
        row["of_capacity_rounds"] = [r[i]["updates_per_s"] / r[i]["capacity"] if r[i]["capacity"] else None
                                     for r in rounds]
        out.append(row)
    return out


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per goal: the worst measured value, the goal, met or not, where it is worst."""
    ours_ = [r for r in rows if r["algorithm"] in ALGORITHMS]
    out = []

    def goal(name: str, part: list[dict[str, Any]], key: str, target: float) -> None:
        vals = [(r[key], r) for r in part if r.get(key) is not None]
        if not vals:
            out.append({"goal": name, "worst": None, "target": target, "met": None, "where": "not measured"})
            return
        v, r = min(vals, key=lambda x: x[0])
        out.append({"goal": name, "worst": v, "target": target, "met": v >= target,
                    "where": f"{r['algorithm']} B={r['batch']} {r['dtype']} {r['threads']}t"})

    goal("1 thread ≥ 95% of sequential", [r for r in ours_ if r["threads"] == 1], "of_ideal", GOAL_ONE_THREAD)
    for b, t in GOAL_TWO.items():
        goal(f"2 threads ≥ {t:.0%} of ideal, B = {b}", [r for r in ours_ if r["threads"] == 2 and r["batch"] == b],
             "of_ideal", t)
    goal("≥ 2× PyTorch (float32)", [r for r in ours_ if r["dtype"] == "float32"], "vs_torch", GOAL_TORCH)
    for key, what in (("rounds", "updates/s"), ("of_capacity_rounds", "of capacity")):
        spread = [(max(v) / min(v), r) for r in ours_ if len(v := _at_home(r, key)) > 1 and min(v) > 0]
        worst = max(spread, key=lambda x: x[0]) if spread else None
        out.append({"goal": f"no bimodal runs (rounds' {what} within {BIMODAL}×)", "worst": worst[0] if worst else None,
                    "target": BIMODAL, "met": None if worst is None else worst[0] <= BIMODAL,
                    "where": "one round" if worst is None else
                    f"{worst[1]['algorithm']} B={worst[1]['batch']} {worst[1]['dtype']} {worst[1]['threads']}t"})
    turns = taking_turns(ours_)
    out.append({"goal": f"rounds where 2 workers took turns (gradients at once < {TURNS:.0%} of the best round)",
                "worst": float(len(turns)), "target": 0.0, "met": not turns,
                "where": "; ".join(turns[:4]) + (" …" if len(turns) > 4 else "") if turns else "none"})
    moved = [(m, r) for r in ours_ for m in r.get("moved") or []]
    away = [r for r in ours_ if not all(r.get("home_rounds") or [True])]
    out.append({"goal": "2-thread runs the host moved out of the home placement (measured again; not a goal)",
                "worst": float(len(moved)), "target": 0.0, "met": None,
                "where": (f"{len(away)} configurations kept a round out of it" if away else "every round at home")})
    # every ratio of a batch and dtype divides by its sequential row: a round that ran slow moves them all
    steady = [(max(v) / min(v), r) for r in rows if r["algorithm"] == "sequential" and len(v := r.get("rounds") or [])
              > 1 and min(v) > 0]
    worst = max(steady, key=lambda x: x[0]) if steady else None
    out.append({"goal": f"sequential rows' rounds within {YARDSTICK}× (the yardstick of every ratio; not a goal)",
                "worst": worst[0] if worst else None, "target": YARDSTICK, "met": None,
                "where": "one round" if worst is None else f"B={worst[1]['batch']} {worst[1]['dtype']}"
                + (" ⚠ its ratios moved with it" if worst[0] > YARDSTICK else "")})
    seq = [r for r in rows if r["algorithm"] == "sequential" and r["batch"] == 64 and r["dtype"] == "float32"
           and r.get("of_peak") is not None]
    goal(f"sequential B = 64 float32 ≥ {GOAL_PEAK:.0%} of the GEMM peak", seq, "of_peak", GOAL_PEAK)
    return out


def _home_flags(row: dict[str, Any], key: str) -> list[bool]:
    """Per round of the row's ``key``: whether it ran in the home placement (all, with no placement record)."""
    return row.get("home_rounds") or [True] * len(row.get(key, []))


def _at_home(row: dict[str, Any], key: str) -> list[float]:
    """The row's per-round ``key`` values from the rounds run in the home placement, Nones and NaNs left out."""
    return [x for x, h in zip(row.get(key, []), _home_flags(row, key), strict=False)
            if h and x is not None and not math.isnan(x) and x]


def taking_turns(rows: list[dict[str, Any]]) -> list[str]:
    """2-thread rounds in the home placement whose workers computed gradients at once for less than
    ``TURNS`` of the best such round of the same configuration: the two CPUs did not run them in parallel."""
    out = []
    for r in rows:
        conc = _at_home(r, "concurrency_rounds")
        if r["threads"] == 2 and len(conc) > 1:
            home = _home_flags(r, "concurrency_rounds")
            out += [f"{r['algorithm']} B={r['batch']} {r['dtype']} round {k + 1} ({c:.2f} of {max(conc):.2f})"
                    for k, (c, h) in enumerate(zip(r["concurrency_rounds"], home, strict=False))
                    if h and c is not None and c < TURNS * max(conc)]
    return out


def placement_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each 2-thread attempt measured out of the home placement beside its configuration at home: its
    probes, its updates/s and gradient concurrency over the configuration's home median."""
    def median(v: list[float]) -> float | None:
        return sorted(v)[len(v) // 2] if v else None

    out = []
    for r in rows:
        conc, upd = _at_home(r, "concurrency_rounds"), _at_home(r, "update_us_rounds")
        for m in r.get("moved") or []:
            out.append({"config": f"{r['algorithm']} B={r['batch']} {r['dtype']}", "round": m.get("round"),
                        "c2c_ns": m["c2c_ns"], "of_home": m["updates_per_s"] / r["updates_per_s"],
                        "concurrency": m.get("concurrency"), "home_concurrency": median(conc),
                        "update_us": m.get("update_us"), "home_update_us": median(upd),
                        "regime": m.get("regime")})
    return out


def placement_markdown(rows: list[dict[str, Any]], home: float | None) -> str:
    moved = placement_rows(rows)
    if not moved:
        return f"Every 2-thread run in the home placement (hand-off {home or float('nan'):.0f} ns)."

    def f(v: Any) -> str:
        return "—" if v is None or math.isnan(v) else f"{v:.2f}"

    def f0(v: Any) -> str:
        return "—" if v is None or math.isnan(v) else f"{v:.0f}"

    lines = [(f"Home placement: hand-off {home or float('nan'):.0f} ns. Runs measured elsewhere, or whose median "
              "cycle shifted partway (the slowest over the fastest span, simasgd.evaluation.stability), "
              "set aside:"), "",
             ("| configuration | round | hand-off before, after (ns) | updates/s of home | gradients at once | at home "
              "| update phase µs | at home | cycle shift |"), "|---|---|---|---|---|---|---|---|---|"]
    for m in moved:
        ns = ", ".join("—" if x is None else f"{x:.0f}" for x in m["c2c_ns"])
        lines.append(f"| {m['config']} | {m['round']} | {ns} | {f(m['of_home'])} | {f(m['concurrency'])} | "
                     f"{f(m['home_concurrency'])} | {f0(m.get('update_us'))} | {f0(m.get('home_update_us'))} | "
                     f"{f(m.get('regime'))} |")
    return "\n".join(lines)


@functools.cache  # building the workload loads its data: once per batch size
def flops_per_update(batch: int) -> float:
    """The MLP gradient's flops for one minibatch (the workload's own count: forward + backward)."""
    from simasgd.numerics.workloads import build_workload

    sc = scenario("sequential", 1, batch, 1.0)
    return build_workload(sc.workload, sc.seed, None).flops_per_sample * batch


def roofline(rows: list[dict[str, Any]], peak: dict[str, Any]) -> None:
    """Sequential rows get ``gflops`` (whole SGD steps: gradient and update) and ``of_peak`` (÷ GEMM peak)."""
    for r in rows:
        if r["algorithm"] == "sequential":
            r["gflops"] = r["updates_per_s"] * flops_per_update(r["batch"]) / 1e9
            r["of_peak"] = r["gflops"] / peak[f"gemm_gflops_{r['dtype']}"]


def roofline_markdown(rows: list[dict[str, Any]], peak: dict[str, Any]) -> str:
    lines = ["| B | dtype | sequential GFLOP/s | GEMM peak GFLOP/s | of GEMM peak |", "|---|---|---|---|---|"]
    for r in rows:
        if r.get("gflops") is not None:
            gemm = peak[f"gemm_gflops_{r['dtype']}"]
            lines.append(f"| {r['batch']} | {r['dtype']} | {r['gflops']:.1f} | {gemm:.1f} | {r['of_peak']:.2f} |")
    return "\n".join(lines)


def verdict_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| goal | worst measured | target | met | where |", "|---|---|---|---|---|"]
    for v in rows:
        w = "—" if v["worst"] is None else f"{v['worst']:.2f}"
        met = "—" if v["met"] is None else ("yes" if v["met"] else "**no**")
        lines.append(f"| {v['goal']} | {w} | {v['target']} | {met} | {v['where']} |")
    return "\n".join(lines)


def markdown(doc: dict[str, Any]) -> str:
    """The results table of README_cpu.md from a saved JSON."""
    def f(v: Any, p: int = 2) -> str:
        return "—" if v is None else f"{v:.{p}f}"

    head = ("| B | dtype | algorithm | threads | updates/s | ms/update | of ideal | of capacity | "
            "× C++ ref (recorded) | × PyTorch |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in doc["rows"]:
        lines.append(f"| {r['batch']} | {r['dtype']} | {r['algorithm']} | {r['threads']} | {r['updates_per_s']:.0f} | "
                     f"{1000 / r['updates_per_s']:.2f} | {f(r['of_ideal'])} | {f(r['of_capacity'])} | "
                     f"{f(r['vs_reference'])} | {f(r['vs_torch'])} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3, help="Rounds over all configurations; medians reported.")
    ap.add_argument("--out", type=Path, help="The record to write (default: this machine kind's current one).")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--retries", type=int, default=RETRIES,
                    help="Measure a 2-thread run again up to this many times while out of the home placement.")
    ap.add_argument("--settle", type=float, default=SETTLE_S,
                    help="Before each 2-thread try, wait up to this many seconds for the CPUs to come home.")
    ap.add_argument("--table", type=Path, help="Only print the markdown table of a saved JSON.")
    ap.add_argument("--torch-rate", nargs=3, help=argparse.SUPPRESS)  # THREADS BATCH SECONDS, child mode
    args = ap.parse_args()
    if args.torch_rate:
        print(_torch_rate_here(int(args.torch_rate[0]), int(args.torch_rate[1]), float(args.torch_rate[2])))
        return
    if args.table:
        doc = record.read(args.table, SCHEMA, SCHEMA_VERSION)
        print(markdown(doc))
        if "peak" in doc["meta"]:
            print()
            print(roofline_markdown(doc["rows"], doc["meta"]["peak"]))
        if "verdicts" in doc:
            print()
            print(verdict_markdown(doc["verdicts"]))
        if "c2c_home_ns" in doc["meta"]:
            print()
            print(placement_markdown(doc["rows"], doc["meta"]["c2c_home_ns"]))
        return
    from executors.calibration.peak import peak_table
    from simasgd.runs import metadata

    load_before = os.getloadavg()
    commit, versions = record.commit(), metadata.versions()  # what ran: taken before it runs

    peak = peak_table()  # the roofline, measured in this run (executors/calibration/peak.py)
    print("peak", json.dumps({k: round(v, 1) for k, v in peak.items()}))
    home = home_placement()
    print(f"home placement: hand-off {home} ns")
    rows = median_rows([one_round(args.seconds, not args.no_torch, home, args.retries, args.settle)
                        for _ in range(args.rounds)], home)
    roofline(rows, peak)
    for r in rows:
        r["of_ideal"] = r["updates_per_s"] / r["ideal"]
        r["of_capacity"] = r["updates_per_s"] / r["capacity"] if r.get("capacity") else None
        ref = REFERENCE_MS.get((r["batch"], r["threads"]))
        r["vs_reference"] = r["updates_per_s"] * ref / 1000 if ref else None
        # PyTorch trains in float32: compare like with like.
        t = next((x for x in rows if x["algorithm"] == "torch-hogwild" and x["batch"] == r["batch"]
                  and x["threads"] == r["threads"] and r["dtype"] == "float32"), None)
        r["vs_torch"] = r["updates_per_s"] / t["updates_per_s"] if t else None
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k != "rounds"}))
    meta = {"versions": versions, "peak": peak, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
            "seconds": args.seconds, "rounds": args.rounds, "c2c_home_ns": home, "retries": args.retries,
            "settle_s": args.settle}
    doc = {"meta": meta, "rows": rows, "verdicts": verdicts(rows)}
    host = record.machine()
    out = record.write(args.out or record.current_path(SCHEMA), SCHEMA, SCHEMA_VERSION, doc, commit_=commit,
                       machine_=host)
    print(f"{out}: {host['cpu_model']} {host['flags']}, load {load_before[0]:.2f} → {meta['loadavg_after'][0]:.2f}")
    print(markdown(doc))
    print()
    print(roofline_markdown(rows, peak))
    print()
    print(verdict_markdown(doc["verdicts"]))
    print()
    print(placement_markdown(rows, home))


if __name__ == "__main__":
    main()
