"""PyTorch's own HOGWILD! on one GPU, at simasgd's shapes: the anchor for "≥ 10× PyTorch's GPU updates/s".

PyTorch's example ``pytorch/examples/mnist_hogwild`` in its GPU form: the model built once, its
parameters shared with N worker processes (``torch.multiprocessing``, start method ``spawn``;
``model.share_memory()`` on the CPU, CUDA IPC on a GPU, the model passed to each child as a process
argument), each worker looping { a batch of B rows drawn uniformly with replacement from the data on the
device; forward; cross-entropy; backward; ``torch.optim.SGD.step()`` on the shared parameters } with no
lock. ``--mode threads`` is the other thing a PyTorch user would write: N Python threads in one process on
one model, each on its own CUDA stream (``torch.cuda.stream``).

The model mirrors simasgd's ``mlp`` workload (``simasgd/numerics/workloads/mlp.py``): ``nn.Linear`` layers with ReLU
between them, softmax cross-entropy, He-normal weights feeding a ReLU and Glorot-normal for the output
layer, zero biases, float32. The data are synthetic Gaussian class mixtures of simasgd's shape (features =
the first layer, classes = the last, ``--samples`` rows), generated on the device from a seeded
``torch.Generator``: no downloads.

Timing: every worker runs ``--warmup`` steps off the clock, synchronizes and reports ready; the clock starts
when the parent sets the start event; each worker stops at start + ``--seconds``, synchronizes its device
work (``torch.cuda.synchronize()``; a thread: its stream) and records its stop time. updates/s = the
workers' updates together / (the last worker's stop − start)::

    python benchmarks/torch_gpu_anchor.py --device cuda --workers 1,2,4,8 --batch 16 \\
        --layers 784,128,128,128,10 --seconds 5 --out DIR            # DIR/torch_anchor.json + a table

Each row also records ``param_change``, ‖θ_final − θ_initial‖₂ of the shared model, which shows the
workers' updates reached the parameters the parent holds.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import itertools
import math
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

SCHEMA, SCHEMA_VERSION = "torch_anchor", 1
SEPARATION = 6.0  # simasgd.numerics.workloads.data: class means this many noise std apart (in expectation)
POLL_S = 0.02


# --- model and data --------------------------------------------------------------------------------

def build_model(layers: list[int], seed: int, device: torch.device) -> nn.Sequential:
    """simasgd's mlp: Linear layers, ReLU between them (logits out), He/Glorot-normal weights, zero biases."""
    g = torch.Generator().manual_seed(seed)
    mods: list[nn.Module] = []
    pairs = list(itertools.pairwise(layers))
    for i, (a, b) in enumerate(pairs):
        lin = nn.Linear(a, b)
        std = math.sqrt(2.0 / a) if i < len(pairs) - 1 else math.sqrt(2.0 / (a + b))
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=g) * std)
            lin.bias.zero_()
        mods += [lin, nn.ReLU()]
    return nn.Sequential(*mods[:-1]).to(device=device, dtype=torch.float32)


def make_data(layers: list[int], samples: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian class mixtures (unit noise), as simasgd's synthetic datasets, drawn on ``device``."""
    features, classes = layers[0], layers[-1]
    g = torch.Generator(device=device).manual_seed(seed)
    means = torch.randn(classes, features, generator=g, device=device) * (SEPARATION / math.sqrt(2 * features))
    y = torch.randint(0, classes, (samples,), generator=g, device=device)
    X = means[y] + torch.randn(samples, features, generator=g, device=device)
    return X.contiguous(), y


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step(model: nn.Module, opt: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor, batch: int,
         gen: torch.Generator) -> None:
    """One HOGWILD! update: a batch drawn with replacement on the device, forward, backward, SGD step."""
    idx = torch.randint(0, X.shape[0], (batch,), generator=gen, device=X.device)
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(X[idx]), y[idx]).backward()
    opt.step()


# --- processes (mnist_hogwild) ---------------------------------------------------------------------

def _proc_worker(rank: int, shared: list[Any], cfg: dict[str, Any], ready: Any, counts: Any, stops: Any, t0: Any,
                 start: Any, abort: Any, errors: Any) -> None:
    """``shared`` is [model, X, y], emptied here: the Process object keeps its args to the end, and a CUDA tensor
    received by IPC must be released before the child exits, or the parent warns that its producer ended
    first (torch's Note [Sharing CUDA tensors])."""
    model, X, y = shared
    shared.clear()
    failed = None
    try:
        _proc_loop(rank, model, X, y, cfg, ready, counts, stops, t0, start, abort)
    except BaseException as e:
        failed = f"worker {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}"[-4000:]
    del model, X, y  # the traceback, which held them too, went with the except block
    gc.collect()
    if failed is not None:
        errors.put(failed)
        sys.exit(1)


def _proc_loop(rank: int, model: nn.Module, X: torch.Tensor, y: torch.Tensor, cfg: dict[str, Any],
               ready: Any, counts: Any, stops: Any, t0: Any, start: Any, abort: Any) -> None:
    torch.set_num_threads(1)
    device = X.device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    gen = torch.Generator(device=device).manual_seed(cfg["seed"] * 1000 + rank + 1)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    for _ in range(cfg["warmup"]):
        step(model, opt, X, y, cfg["batch"], gen)
    sync(device)
    ready[rank] = 1
    while not start.wait(POLL_S * 10):
        if abort.is_set():
            return
    deadline = t0.value + cfg["seconds"]
    n = 0
    while time.monotonic() < deadline:
        if rank == cfg["fail_worker"]:
            raise RuntimeError("injected failure (--fail-worker)")
        step(model, opt, X, y, cfg["batch"], gen)
        n += 1
        counts[rank] = n
    sync(device)
    stops[rank] = time.monotonic()


class WorkerError(RuntimeError):
    pass


def _stop_all(procs: list[Any], timeout: float = 10.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join(timeout)


def _drain(errors: Any) -> list[str]:
    out = []
    while not errors.empty():
        out.append(errors.get())
    return out


def run_processes(n: int, model: nn.Module, X: torch.Tensor, y: torch.Tensor, cfg: dict[str, Any]
                  ) -> tuple[list[int], float]:
    ctx = mp.get_context("spawn")
    ready, counts, stops = ctx.RawArray("b", n), ctx.RawArray("q", n), ctx.RawArray("d", n)
    t0, start, abort, errors = ctx.RawValue("d", 0.0), ctx.Event(), ctx.Event(), ctx.SimpleQueue()
    procs = [ctx.Process(target=_proc_worker, daemon=True,
                         args=(r, [model, X, y], cfg, ready, counts, stops, t0, start, abort, errors))
             for r in range(n)]
    try:
        for p in procs:
            p.start()
        until = time.monotonic() + cfg["setup_timeout"]
        while not all(ready):  # every worker imported torch, opened the shared tensors and warmed up
            dead = [p for p in procs if p.exitcode is not None]
            if dead or time.monotonic() > until:
                abort.set()
                msgs = _drain(errors)
                raise WorkerError("\n".join(msgs) if msgs else
                                  f"worker exited with code {dead[0].exitcode} before the start" if dead else
                                  f"workers not ready after {cfg['setup_timeout']} s")
            time.sleep(POLL_S)
        t0.value = time.monotonic()
        start.set()
        time.sleep(cfg["seconds"])
        for p in procs:
            p.join(max(1.0, t0.value + cfg["seconds"] + cfg["stop_timeout"] - time.monotonic()))
        msgs = _drain(errors)
        hung = [i for i, p in enumerate(procs) if p.is_alive()]
        bad = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode not in (0, None)]
        if msgs or hung or bad:
            raise WorkerError("\n".join(msgs) or (f"workers {hung} did not stop within {cfg['stop_timeout']} s "
                                                  f"of the end" if hung else f"workers exited with {bad}"))
        return list(counts), max(stops) - t0.value
    finally:
        abort.set()
        _stop_all(procs)


# --- threads (one process, one model, a CUDA stream each) ------------------------------------------

def _thread_view(model: nn.Module) -> nn.Module:
    """A module whose parameters are the shared model's storage under leaf tensors of its own, so each thread
    has its own ``.grad`` (one module's ``.grad`` would sum every thread's backward) and its own version
    counters (another thread's in-place step does not fail this thread's backward)."""
    view = copy.deepcopy(model)
    for v, p in zip(view.parameters(), model.parameters(), strict=False):
        v.data = p.data
    return view


def run_threads(n: int, model: nn.Module, X: torch.Tensor, y: torch.Tensor, cfg: dict[str, Any]
                ) -> tuple[list[int], float]:
    device = X.device
    ready = [threading.Event() for _ in range(n)]
    counts, stops = [0] * n, [0.0] * n
    errors: list[str] = []
    start, abort = threading.Event(), threading.Event()
    t0 = [0.0]

    def worker(rank: int) -> None:
        try:
            view = _thread_view(model)
            gen = torch.Generator(device=device).manual_seed(cfg["seed"] * 1000 + rank + 1)
            opt = torch.optim.SGD(view.parameters(), lr=cfg["lr"])
            stream = torch.cuda.Stream(device) if device.type == "cuda" else None
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for _ in range(cfg["warmup"]):
                    step(view, opt, X, y, cfg["batch"], gen)
                if stream is not None:
                    stream.synchronize()
                ready[rank].set()
                while not start.wait(POLL_S * 10):
                    if abort.is_set():
                        return
                deadline = t0[0] + cfg["seconds"]
                k = 0
                while time.monotonic() < deadline:
                    if rank == cfg["fail_worker"]:
                        raise RuntimeError("injected failure (--fail-worker)")
                    step(view, opt, X, y, cfg["batch"], gen)
                    k += 1
                    counts[rank] = k
                if stream is not None:
                    stream.synchronize()
                stops[rank] = time.monotonic()
        except BaseException as e:
            errors.append(f"thread {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}"[-4000:])

    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in range(n)]
    try:
        for t in threads:
            t.start()
        until = time.monotonic() + cfg["setup_timeout"]
        while not all(e.is_set() for e in ready):
            if errors or not all(t.is_alive() or r.is_set() for t, r in zip(threads, ready, strict=False)) \
                    or time.monotonic() > until:
                abort.set()
                raise WorkerError("\n".join(errors) or f"threads not ready after {cfg['setup_timeout']} s")
            time.sleep(POLL_S)
        t0[0] = time.monotonic()
        start.set()
        time.sleep(cfg["seconds"])
        for t in threads:
            t.join(max(1.0, t0[0] + cfg["seconds"] + cfg["stop_timeout"] - time.monotonic()))
        hung = [i for i, t in enumerate(threads) if t.is_alive()]
        if errors or hung:
            raise WorkerError("\n".join(errors) or f"threads {hung} did not stop within {cfg['stop_timeout']} s "
                                                   f"of the end")
        return counts, max(stops) - t0[0]
    finally:
        abort.set()  # hung threads are daemons: they do not keep the process alive


# --- main ------------------------------------------------------------------------------------------

def table(doc: dict[str, Any]) -> str:
    lines = [f"### PyTorch HOGWILD! ({doc['mode']}) on {doc['device']}, torch {doc['torch']}, "
             f"mlp {'-'.join(map(str, doc['layers']))}, batch {doc['batch']}", "",
             "| workers | updates/s | updates per worker | seconds | ‖Δθ‖ |", "|---:|---:|---|---:|---:|"]
    for r in doc["rows"]:
        lines.append(f"| {r['workers']} | {r['updates_per_s']:.0f} | {', '.join(map(str, r['per_worker']))} | "
                     f"{r['seconds']:.3f} | {r['param_change']:.3g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="cuda, cuda:N or cpu (default: cuda when available)")
    ap.add_argument("--mode", choices=("processes", "threads"), default="processes")
    ap.add_argument("--workers", default="1,2,4,8", help="comma-separated worker counts, one row each")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--layers", default="784,128,128,128,10")
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=int, default=20, help="steps per worker before the clock starts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--setup-timeout", type=float, default=300.0,
                    help="seconds for every worker to start, import torch and warm up")
    ap.add_argument("--stop-timeout", type=float, default=60.0,
                    help="seconds after the end of the run for every worker to stop")
    ap.add_argument("--out", type=Path, help="folder for torch_anchor.json")
    ap.add_argument("--fail-worker", type=int, default=-1, help=argparse.SUPPRESS)  # tests: this rank raises
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("torch_gpu_anchor: --device cuda but torch sees no GPU (torch.cuda.is_available() is False)",
                  file=sys.stderr)
            return 2
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    layers = [int(v) for v in args.layers.split(",")]
    workers = [int(v) for v in args.workers.split(",")]
    if len(layers) < 2 or min(layers) < 1 or min(workers) < 1 or args.batch < 1 or args.samples < 1:
        ap.error("--layers needs two or more positive widths; --workers, --batch, --samples positive")
    cfg = {"layers": layers, "batch": args.batch, "lr": args.lr, "seconds": args.seconds, "warmup": args.warmup,
           "seed": args.seed, "fail_worker": args.fail_worker, "setup_timeout": args.setup_timeout,
           "stop_timeout": args.stop_timeout}

    X, y = make_data(layers, args.samples, args.seed, device)
    rows = []
    for n in workers:
        model = build_model(layers, args.seed, device)  # the same θ₀ for every row
        if device.type == "cpu":
            model.share_memory()
        theta0 = flat(model)
        sync(device)  # the children's contexts must see finished data and parameters
        try:
            counts, seconds = (run_processes if args.mode == "processes" else run_threads)(n, model, X, y, cfg)
        except WorkerError as e:
            print(f"torch_gpu_anchor: {args.mode}, {n} workers failed:\n{e}", file=sys.stderr)
            return 1
        sync(device)
        change = float(torch.linalg.vector_norm(flat(model) - theta0))
        rows.append({"workers": n, "updates_per_s": round(sum(counts) / seconds, 3), "per_worker": counts,
                     "seconds": round(seconds, 6), "param_change": change})
        del model

    doc = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "mode": args.mode, "batch": args.batch, "layers": layers,
           "samples": args.samples, "lr": args.lr, "warmup": args.warmup, "seed": args.seed, "rows": rows}
    print(table(doc))
    if args.out is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import record  # beside this file

        record.write(args.out / "torch_anchor.json", SCHEMA, SCHEMA_VERSION, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
