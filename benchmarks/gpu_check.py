"""Everything the GPU half needs measured, in one go on a machine with an NVIDIA GPU: ``benchmarks/gpu_check.sh``.

Sections, in priority order, each bounded by what is left of ``--deadline`` (a section that would start
too late is written as skipped, with the reason): correctness of the device gradients and of every
algorithm's θ on the constant workload; resident HOGWILD! on the MLP from 1 worker to the GPU's resident
maximum; streams mode (host cost of an attempt); the CNN; Leashed, Lopez and sync; the Lopez §IV-B
table (CNN, batch 32, 2–32 workers); HOGWILD! to ε, and the same run on the host's CPU cores (backend
``cpu``, one thread a core up to 16: ``to_eps_cpu``). Every cell is written to ``OUT/gpu_check.json`` as
soon as it ends (schema 1, with the device, versions, commit), with its staleness histogram, phase
medians and the gradient phase's spread (``gradient_cv``: sd / mean over the cell's attempts), so that
the simulator can be scored against it afterwards without the GPU. ``sections`` says how each section
ended (``ok``, ``failed: why``, ``skipped: why``; ``running`` if the process was cut inside it).

``--tiny`` runs the same sections at tiny shapes and in float64, for numba's CUDA simulator (the tests rehearse it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import record  # noqa: E402 - beside this file

SCHEMA, SCHEMA_VERSION = "gpu_check", 1


def dtype(tiny: bool) -> str:
    """θ's and X's element type: float32 on the GPU; float64 in the rehearsal, where the host's numba kernels
    (the loss the monitor takes, the gradient check's reference, the cpu backend's HOGWILD! loop) then have the
    types the test suite's float64 workloads compile them for, and load them from numba's cache."""
    return "float64" if tiny else "float32"


def mlp_doc(tiny: bool) -> dict[str, Any]:
    wl = ({"model": "mlp", "layers": [6, 5, 3], "features": 6, "classes": 3, "samples": 64, "eval_rows": 16,
           "batch_size": 4} if tiny else
          {"model": "mlp", "layers": [784, 128, 128, 128, 10], "features": 784, "classes": 10, "samples": 20000,
           "eval_rows": 1000, "batch_size": 16})
    return {"name": "gpu-check-mlp", "seed": 7, "workers": {"count": 1},
            "workload": {**wl, "dataset": "synthetic", "dtype": dtype(tiny)},
            "algorithm": {"name": "hogwild"}, "optimizer": {"lr": 0.01},
            "stop": {"max_updates": 12 if tiny else 3_000_000, "max_time_s": 60 if tiny else 1.5,
                     "eval_every_updates": 4 if tiny else 10_000_000}}


def cnn_doc(tiny: bool) -> dict[str, Any]:
    wl = ({"model": "cnn", "layers": [3, 3, 2, 4], "features": 3 * 6 * 6, "classes": 3, "samples": 40,
           "eval_rows": 16, "batch_size": 4} if tiny else
          {"model": "cnn", "layers": [16, 5, 2, 64], "features": 3072, "classes": 10, "samples": 2000,
           "eval_rows": 200, "batch_size": 32})
    return {"name": "gpu-check-cnn", "seed": 2020, "workers": {"count": 1},
            "workload": {**wl, "dataset": "synthetic", "dtype": dtype(tiny)},
            "algorithm": {"name": "hogwild"}, "optimizer": {"lr": 1e-5, "momentum": 0.99},
            "stop": {"max_updates": 12 if tiny else 3_000_000, "max_time_s": 60 if tiny else 1.5,
                     "eval_every_updates": 4 if tiny else 10_000_000}}


def scenario(doc: dict[str, Any], **over: Any) -> Any:
    from simasgd.spec import loader

    return loader.from_dict({**doc, **over})  # each override replaces its whole table


def summarise(r: Any) -> dict[str, Any]:
    """A cell's figures, its staleness histogram and phase medians (what the simulator is scored on)."""
    s = r.runs[0]
    u = r.updates
    ok = u[u["applied"]]
    tau = ok["staleness"].to_numpy().astype(np.int64)
    cut = max(1, len(u) // 20)  # 5% warm-up discarded for the phases
    w = u.sort_values("t_start").iloc[cut:]
    phases = {"read": w["t_grad_start"] - w["t_start"], "gradient": w["t_grad_end"] - w["t_grad_start"],
              "update": w["t_write"] - w["t_grad_end"]}
    per_worker = ok.groupby("worker")["staleness"].mean()
    grad = phases["gradient"].to_numpy(dtype=float)
    grad_mean = float(grad.mean()) if len(grad) else math.nan
    return {"updates": s.updates, "time_s": s.time_s, "updates_per_s": s.updates_per_s,
            "gradients_per_s": len(ok) / s.time_s if s.time_s > 0 else math.nan, "attempts": len(u),
            "dropped": int((~u["applied"]).sum()), "mean_staleness": float(tau.mean()) if len(tau) else math.nan,
            "p95_staleness": float(np.percentile(tau, 95)) if len(tau) else math.nan,
            "staleness_hist": np.bincount(np.minimum(tau, 4096)).tolist() if len(tau) else [],
            "per_worker_mean_staleness": [float(x) for x in per_worker.to_numpy()],
            "phase_median_s": {k: float(np.median(v)) if len(v) else math.nan for k, v in phases.items()},
            # the gradient's spread attempt to attempt ([gpu.block] gradient_cv; 5% warm-up discarded)
            "gradient_cv": float(grad.std() / grad_mean) if len(grad) > 1 and grad_mean > 0 else math.nan,
            "gradient_quantiles_s": {f"p{q}": float(np.percentile(grad, q)) if len(grad) else math.nan
                                     for q in (5, 50, 95)},
            "initial_loss": s.initial_loss, "final_loss": s.final_loss, "updates_to_eps": s.updates_to_eps,
            "time_to_eps": s.time_to_eps, "meta": {k: r.metadata.get(k) for k in ("launch", "stopped_by", "wall_s")}}


class Check:
    def __init__(self, out: Path, tiny: bool, deadline: float):
        self.out, self.tiny, self.t0, self.deadline = out, tiny, time.perf_counter(), deadline
        self.machine = record.machine()
        self.cut = 0  # cells left out because the deadline was near
        self.doc: dict[str, Any] = {"tiny": tiny, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                                              time.gmtime()),
                                    "env": env(), "checks": [], "cells": [], "skipped": [], "sections": {}}

    def left(self) -> float:
        return self.deadline - (time.perf_counter() - self.t0)

    def save(self) -> None:
        payload = json.loads(json.dumps(self.doc, default=str))  # numpy scalars and paths as JSON
        record.write(self.out / "gpu_check.json", SCHEMA, SCHEMA_VERSION, payload,
                     commit_=self.doc["env"].get("commit") or "unknown", machine_=self.machine)

    def log(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f} s] {msg}", flush=True)

    def section(self, name: str, need_s: float, body: Callable[[], None]) -> None:
        status = self.doc["sections"]
        if self.left() < need_s:
            why = f"{self.left():.0f} s left, needs ~{need_s:.0f}"
            self.doc["skipped"].append({"section": name, "why": why})
            status[name] = {"status": f"skipped: {why}", "seconds": 0.0}
            self.log(f"skip {name}: {self.left():.0f} s left")
            self.save()
            return
        self.log(f"section {name}")
        t, errors, bad, cut = time.perf_counter(), self._errors(), self._bad_checks(), self.cut
        n_cells, n_checks = len(self.doc["cells"]), len(self.doc["checks"])
        status[name] = {"status": "running", "seconds": 0.0}
        self.save()
        try:
            body()
            for row in self.doc["cells"][n_cells:] + self.doc["checks"][n_checks:]:
                row["check_section"] = name  # which section made it: a later run of the section replaces it
            errors, bad = self._errors() - errors, self._bad_checks() - bad
            why = ", ".join(([f"{errors} cells errored"] if errors else []) + ([f"{bad} checks wrong"] if bad else []))
            status[name]["status"] = f"failed: {why}" if why else "ok"
            if self.cut > cut:  # said, not silent: the section ran, not all of it
                self.doc["skipped"].append({"section": name, "why": f"{self.cut - cut} cells left out by the deadline"})
                status[name]["status"] += f": {self.cut - cut} cells left out by the deadline"
        except Exception as e:
            self.doc["skipped"].append({"section": name, "why": f"{type(e).__name__}: {e}",
                                        "trace": traceback.format_exc()[-3000:]})
            status[name]["status"] = f"failed: {type(e).__name__}: {e}"
            self.log(f"FAILED {name}: {type(e).__name__}: {e}")
        status[name]["seconds"] = time.perf_counter() - t
        self.save()

    def _errors(self) -> int:
        return sum("error" in c for c in self.doc["cells"])

    def _bad_checks(self) -> int:
        return sum(not c.get("ok") for c in self.doc["checks"])

    def cell(self, section: str, sc: Any, backend: str = "gpu", **extra: Any) -> dict[str, Any] | None:
        from simasgd.runs import backends

        if self.left() < 5:
            self.cut += 1
            self.log(f"  {section} {sc.algorithm.name} n={sc.workers.count}: left out, {self.left():.0f} s left")
            return None
        t = time.perf_counter()
        try:
            r = backends.load(backend).run_once(sc, 0)
            row = {"section": section, "backend": backend, "algorithm": sc.algorithm.name,
                   "mode": sc.gpu.mode if sc.gpu else "resident", "model": sc.workload.model,
                   "workers": sc.workers.count, "batch": sc.workload.batch_size, **extra, **summarise(r),
                   "cell_wall_s": time.perf_counter() - t}
        except Exception as e:
            row = {"section": section, "backend": backend, "algorithm": sc.algorithm.name, "workers": sc.workers.count,
                   "error": f"{type(e).__name__}: {e}", "cell_wall_s": time.perf_counter() - t}
        self.doc["cells"].append(row)
        self.log(f"  {section} {row['algorithm']} n={row['workers']}: "
                 f"{row.get('updates_per_s', float('nan')):.0f} updates/s, "
                 f"τ̄ {row.get('mean_staleness', float('nan')):.2f}"
                 f"{' ' + row['error'] if 'error' in row else ''} ({row['cell_wall_s']:.1f} s)")
        self.save()
        return row


def env() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version(), "host": platform.node()}
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                       timeout=10).stdout.strip()
    except Exception:
        out["commit"] = None
    for mod in ("numpy", "numba", "numba_cuda"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    from executors.cuda import device

    out["device"] = device.describe()
    return out


# --------------------------------------------------------------------------- sections

def check_gradients(c: Check) -> None:
    """One sequential update with lr = 1 from θ0: θ1 = θ0 − g; g against the workload's CPU kernel."""
    from executors.gpu import runner
    from simasgd.numerics.workloads import build_workload
    from simasgd.spec import seeds

    captured: dict[str, Any] = {}
    real = runner.final_theta

    def spy(r: Any) -> Any:
        captured["idx"] = r.arrays["idx"].copy_to_host()
        out = real(r)
        captured["theta"] = out[1]
        return out

    runner.final_theta = spy
    try:
        for name, doc in (("mlp", mlp_doc(c.tiny)), ("cnn", cnn_doc(c.tiny))):
            sc = scenario(doc, algorithm={"name": "sequential"}, optimizer={"lr": 1.0},
                          stop={"max_updates": 1, "max_time_s": 120, "eval_every_updates": 1})
            from simasgd.runs import backends

            backends.load("gpu").run_once(sc, 0)
            wl = build_workload(sc.workload, sc.seed, None)
            th0 = np.ascontiguousarray(wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT)), dtype=np.float64)
            g = np.empty_like(th0)
            idx = np.ascontiguousarray(captured["idx"][0], dtype=np.int64)
            wl64 = np.ascontiguousarray(wl.X, dtype=np.float64)
            wl.kernel(th0, wl64, wl.y, idx, g, wl.shape)
            g_dev = th0 - captured["theta"].astype(np.float64)
            err = float(np.max(np.abs(g_dev - g)) / max(1e-30, float(np.max(np.abs(g)))))
            c.doc["checks"].append({"check": f"gradient {name}", "max_rel_error": err, "ok": err < 1e-3})
            c.log(f"  gradient {name}: max |Δg| / max |g| = {err:.2e}")
    finally:
        runner.final_theta = real


def check_constant(c: Check) -> None:
    """θ after N applied updates of the constant gradient: 1 − N·2⁻¹⁶ exactly (lossless algorithms)."""
    from simasgd.numerics.workloads.constant import LR, STEP, ConstWorkload, first_loss
    from simasgd.runs import backends

    wl = ConstWorkload(dim=16 if c.tiny else 4096, loss_kernel=first_loss)
    n_up = 12 if c.tiny else 100
    for algo, n in (("hogwild", 1), ("mutex", 4), ("leashed", 4), ("sync", 4), ("mutex", 2)):
        mode = "streams" if (algo, n) == ("mutex", 2) else "resident"
        sc = scenario({"name": "const", "seed": 1, "workers": {"count": n}, "workload": {"model": "least_squares",
                       "batch_size": 1}, "algorithm": {"name": algo}, "optimizer": {"lr": LR},
                       "stop": {"max_updates": n_up, "max_time_s": 120, "eval_every_updates": n_up // 4}},
                      gpu={"mode": mode})
        import simasgd.numerics.workloads as W

        real = W.build_workload
        W.build_workload = lambda cfg, seed, base_dir=None: wl
        try:
            r = backends.load("gpu").run_once(sc, 0)
        finally:
            W.build_workload = real
        updates = r.runs[0].updates
        theta = float(r.curve["loss"].iloc[-1])
        ok = updates == n_up and theta == 1.0 - updates * STEP
        c.doc["checks"].append({"check": f"constant {algo} x{n} {mode}", "updates": updates, "theta0": theta,
                                "expected": 1.0 - updates * STEP, "ok": ok})
        c.log(f"  constant {algo} x{n} {mode}: {updates} updates, θ[0] {theta!r} {'ok' if ok else 'WRONG'}")


def resident_max(c: Check, doc: dict[str, Any], algo: str = "hogwild") -> int:
    from executors.gpu import kernels, runner
    from simasgd.numerics.workloads import build_workload

    if c.tiny:
        return 4
    sc = scenario(doc, algorithm={"name": algo})
    wl = build_workload(sc.workload, sc.seed, None)
    k = getattr(kernels.build(kernels.kind_of(wl), "float32", sc.workload.batch_size, 0.0), algo)
    most = runner.resident_max(k, runner.threads_per_worker(sc))
    return int(most or 0)


def ladder(most: int, sms: int, tiny: bool) -> list[int]:
    if tiny:  # the rehearsal: each path once
        return [1, 2]
    xs = [1, 2, 4, 8, 16, 32, 64, sms, 2 * sms, most]
    return sorted({x for x in xs if 1 <= x <= most})


def section_hogwild_mlp(c: Check) -> None:
    doc = mlp_doc(c.tiny)
    c.cell("hogwild-mlp", scenario(doc))  # compiles (the rehearsal) and gives the one-block cycle
    most = resident_max(c, doc)
    sms = int(c.doc["env"]["device"].get("sms", 4))
    c.doc["resident_max_hogwild_mlp"] = most
    for n in ladder(most, sms, c.tiny)[1:]:
        c.cell("hogwild-mlp", scenario(doc, workers={"count": n}), resident_max=most)


def section_streams(c: Check) -> None:
    doc = mlp_doc(c.tiny)
    for algo in ("hogwild", "leashed", "lopez"):
        for n in ([1, 2] if c.tiny else [1, 2, 4, 8, 16, 32]):
            if algo == "lopez" and n < 2:
                continue
            c.cell("streams-mlp",
                   scenario(doc, workers={"count": n}, algorithm={"name": algo}, gpu={"mode": "streams"}))


def section_hogwild_cnn(c: Check) -> None:
    doc = cnn_doc(c.tiny)
    c.cell("hogwild-cnn", scenario(doc))
    most = resident_max(c, doc)
    sms = int(c.doc["env"]["device"].get("sms", 4))
    c.doc["resident_max_hogwild_cnn"] = most
    for n in ladder(most, sms, c.tiny)[1:]:
        c.cell("hogwild-cnn", scenario(doc, workers={"count": n}), resident_max=most)
    for n in ([2] if c.tiny else [1, 8, 32]):
        c.cell("streams-cnn", scenario(doc, workers={"count": n}, gpu={"mode": "streams"}))


def section_algorithms_mlp(c: Check) -> None:
    doc = mlp_doc(c.tiny)
    sms = int(c.doc["env"]["device"].get("sms", 4))
    for algo in ("leashed", "lopez", "sync", "mutex"):
        # a lone worker's cell (Lopez's least is its master and one worker) gives the algorithm's own block
        # rates, the model's calibration by the rule the HOGWILD! cells follow (gpu_model_score.py)
        least = [2] if algo == "lopez" else [1, 2]
        for n in ([2] if c.tiny else [*least, 8, 32, sms]):
            c.cell("algorithms-mlp", scenario(doc, workers={"count": n}, algorithm={"name": algo}))


def section_lopez_table(c: Check) -> None:
    """Lopez et al. 2020 §IV-B: sync and lopez, CNN, batch 32, 2–32 workers, resident and streams."""
    doc = cnn_doc(c.tiny)
    for algo in ("sync", "lopez"):
        for n in ([2] if c.tiny else [2, 4, 8, 16, 32]):
            c.cell("lopez-table", scenario(doc, workers={"count": n}, algorithm={"name": algo}))
            if algo == "lopez":
                c.cell("lopez-table", scenario(doc, workers={"count": n}, algorithm={"name": algo},
                                               gpu={"mode": "streams"}))


def to_eps_scenario(c: Check, n: int) -> Any:
    """HOGWILD! on the MLP to ε = half the initial loss, ``n`` workers: one scenario for the GPU and the CPU."""
    return scenario(mlp_doc(c.tiny), workers={"count": n}, optimizer={"lr": 0.05},
                    stop={"epsilon": 0.5, "max_time_s": 60 if c.tiny else 4.0,
                          "max_updates": 5000 if c.tiny else 3_000_000,
                          "eval_every_updates": 20 if c.tiny else 500})


def section_to_eps(c: Check) -> None:
    """Ma, Rusu & Torres's question on the MLP: HOGWILD! to ε (half the initial loss) by worker count."""
    sms = int(c.doc["env"]["device"].get("sms", 4))
    for n in ([1, 2] if c.tiny else [1, 8, 32, sms, 4 * sms]):
        most = c.doc.get("resident_max_hogwild_mlp") or n
        if n > most:
            continue
        c.cell("to-eps", to_eps_scenario(c, n))


CPU_THREADS = 16  # the GPU machine's host: HOGWILD! on its cores against the resident workers


def section_to_eps_cpu(c: Check) -> None:
    """The same scenario as ``to_eps`` (model, batch, lr, ε, stop) on the host's CPU cores: backend ``cpu``,
    HOGWILD!, one thread a core up to 16 (2 with ``--tiny``)."""
    n = 2 if c.tiny else min(CPU_THREADS, len(os.sched_getaffinity(0)))
    c.cell("to-eps-cpu", to_eps_scenario(c, n), backend="cpu", mode="threads", cpus=len(os.sched_getaffinity(0)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (numba's CUDA simulator)")
    ap.add_argument("--deadline", type=float, default=360.0, help="seconds for all sections")
    ap.add_argument("--sections", default="gradients,constant,hogwild_mlp,streams,hogwild_cnn,algorithms_mlp,"
                                          "lopez_table,to_eps,to_eps_cpu")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    c = Check(a.out, a.tiny, a.deadline)
    c.save()
    need = {"gradients": 40, "constant": 30, "hogwild_mlp": 40, "streams": 30, "hogwild_cnn": 40,
            "algorithms_mlp": 60, "lopez_table": 40, "to_eps": 25, "to_eps_cpu": 60}  # cpu: its loops compile first
    bodies = {"gradients": check_gradients, "constant": check_constant, "hogwild_mlp": section_hogwild_mlp,
              "streams": section_streams, "hogwild_cnn": section_hogwild_cnn,
              "algorithms_mlp": section_algorithms_mlp, "lopez_table": section_lopez_table,
              "to_eps": section_to_eps, "to_eps_cpu": section_to_eps_cpu}
    for name in a.sections.split(","):
        c.section(name, 0 if a.tiny else need[name], lambda name=name: bodies[name](c))
    c.doc["ended"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    c.save()
    bad = [x for x in c.doc["checks"] if not x.get("ok")]
    c.log(f"done: {len(c.doc['cells'])} cells, {len(c.doc['checks'])} checks ({len(bad)} failed), "
          f"{len(c.doc['skipped'])} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
