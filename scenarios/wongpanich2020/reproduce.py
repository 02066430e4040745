"""Wongpanich et al. (2020) on the simulator: the seven solvers at each model's computation-to-communication ratio.

For each model of the paper's §4.6 (CC ratio C = floating-point operations per sample / parameters)
this sets the per-iteration gradient time of the shared workload (base settings in each solver's
TOML) to what a model with that ratio would take per parameter of ours,

    gradient mean_s = B · C · P / F      (B = 32 samples a worker, P = the MLP's parameters, F = 1e12 flop/s)

so that the ratio of computing to sending the model is the paper model's, then runs every solver on
the simulator and writes ``results.csv`` (one row per solver and model) and the table in README.md.
F is a sustained rate of the order of a Knights Landing node (3 TFLOP/s peak in double precision);
it sets where on the scale of computation against communication the models fall, not their order.

    python scenarios/wongpanich2020/reproduce.py [--repeats N]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from simasgd.runs import backends
from simasgd.spec import loader

HERE = Path(__file__).parent
SOLVERS = ["sync", "eawild", "easgd", "hogwild", "param_server", "async_msgd", "ea_msgd"]
# §4.6 and Table 6; two lower, hypothetical ratios show where communication starts to decide
MODELS = {"low (hypothetical)": 3, "lower (hypothetical)": 30, "cifar10-full": 109, "ResNet-50": 308,
          "DenseNet-40": 555, "GoogLeNet": 736}
FLOPS = 1e12
BATCH = 32


def params(sc: object) -> int:
    from simasgd.numerics.workloads import build_workload

    return int(build_workload(sc.workload, sc.seed).dim)  # type: ignore[attr-defined]


def gradients_per_row(sc: object) -> int:
    """Gradients one row of updates.parquet stands for (an elastic exchange covers `tau` local steps)."""
    a = sc.algorithm  # type: ignore[attr-defined]
    return int(a.param("tau")) * (int(a.param("group_size")) if a.name == "eawild" else 1) \
        if a.name in ("easgd", "eawild") else 1


def run(repeats: int) -> pd.DataFrame:
    sim = backends.load("sim")
    p = params(loader.load(HERE / "sync.toml"))
    rows = []
    for model, c in MODELS.items():
        mean = BATCH * c * p / FLOPS
        for solver in SOLVERS:
            sc = loader.load(HERE / f"{solver}.toml", [f"timing.gradient.mean_s={mean!r}"])
            for r in range(repeats):
                res = sim.run_once(sc, r)
                s = res.runs[0]
                samples = len(res.updates) * gradients_per_row(sc) * BATCH
                rows.append({"model": model, "cc_ratio": c, "solver": solver, "run": r,
                             "gradient_s": mean, "time_to_eps": s.time_to_eps, "updates_to_eps": s.updates_to_eps,
                             "samples_per_s": samples / s.time_s if s.time_s else math.nan,
                             "mean_staleness": s.mean_staleness, "bytes_per_row": s.extra.get("bytes_per_row", 0)})
                print(model, solver, r, s.time_to_eps, flush=True)
    return pd.DataFrame(rows)


def table(df: pd.DataFrame) -> str:
    med = df.groupby(["model", "solver"], sort=False)[["time_to_eps", "samples_per_s"]].median().reset_index()
    lines = ["| model (CC ratio) | simulated ranking, time to ε (ms) | EA-wild ÷ sync: time to ε | "
             "sync ÷ EA-wild: samples/s | paper, Table 7 |", "|---|---|---|---|---|"]
    paper = {"low (hypothetical)": "—", "lower (hypothetical)": "—", "cifar10-full": "Sync 1.44× faster",
             "ResNet-50": "Async 1.41× faster", "DenseNet-40": "Async 1.11× faster", "GoogLeNet": "Sync 1.33× faster"}
    for model, c in MODELS.items():
        m = med[med["model"] == model].sort_values("time_to_eps", na_position="last")
        rank = ", ".join(f"{s} {t * 1e3:.2f}" if np.isfinite(t) else f"{s} —" for s, t in
                         zip(m["solver"], m["time_to_eps"].astype(float), strict=False))
        by = m.set_index("solver")
        ratio = by.loc["eawild", "time_to_eps"] / by.loc["sync", "time_to_eps"]
        thr = by.loc["sync", "samples_per_s"] / by.loc["eawild", "samples_per_s"]
        lines.append(f"| {model} ({c}) | {rank} | {ratio:.2f} | {thr:.2f} | {paper[model]} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    df = run(args.repeats)
    df.to_csv(HERE / "results.csv", index=False)
    print(table(df))


if __name__ == "__main__":
    main()
