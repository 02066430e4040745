"""The front page's figure: the simulator's predicted staleness distribution over the one measured on a
real machine, for one cell of the fidelity corpus.

The measured side is the corpus entry's runs (real threads, `corpus/<machine>.json.gz`); the predicted side
is the same cell simulated now on that machine's calibrated profile (`[machine] preset = "<machine>"`, read
as `simasgd corpus score` reads it), judged over the versions both made — so the figure shows what today's
model predicts, and its title the cell's mean-staleness error and KS distance.

    .venv/bin/python scripts/front_figure.py                     # writes docs/img/front_staleness.png
    .venv/bin/python scripts/front_figure.py --machine amd_epyc_2vcpu --cell fid-hogwild-n4-b16 --out x.png
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "amd_epyc_zen3_firecracker_2vcpu"  # the entry the model was never tuned on
CELL = "fid-mutex-n4-b16"                     # four threads on two CPUs: queueing and time-sharing both show
OUT = ROOT / "docs" / "img" / "front_staleness.png"


@dataclass(frozen=True)
class Distributions:
    """Both sides' staleness distributions over the versions both made (shares of the applied updates)."""

    cell: str
    machine: str
    cpu: str
    measured: np.ndarray   # share of updates with staleness τ = 0, 1, ...
    predicted: np.ndarray
    measured_runs: int
    predicted_runs: int
    mean_staleness_rel_err: float
    ks: float

    @property
    def mean_measured(self) -> float:
        return float(np.arange(len(self.measured)) @ self.measured)

    @property
    def mean_predicted(self) -> float:
        return float(np.arange(len(self.predicted)) @ self.predicted)


def shares(hist: np.ndarray, width: int) -> np.ndarray:
    """Per-run histograms (runs × τ), pooled and padded to ``width``, as shares summing to 1."""
    pooled = np.asarray(hist, dtype=float).reshape(-1, hist.shape[-1]).sum(axis=0)
    pooled = np.pad(pooled, (0, max(0, width - len(pooled))))
    return pooled / pooled.sum()


def distributions(machine: str, cell_name: str) -> Distributions:
    from simasgd.corpus import score, store
    from simasgd.evaluation import analysis, fidelity
    from simasgd.runs import backends

    path = ROOT / "corpus" / f"{machine}.json.gz"
    entry = store.load(path)
    cells = {c.name: c for c in entry.cells}
    if cell_name not in cells:
        raise SystemExit(f"{path}: no cell {cell_name!r}; cells: {', '.join(sorted(cells))}")
    cell = cells[cell_name]
    sc = score.scenario_of(cell, {})
    sc = sc.model_copy(update={"machine": sc.machine.model_copy(update={"preset": machine})})
    with tempfile.TemporaryDirectory() as tmp:
        sim = backends.run(sc, "sim", repeats=len(cell.runs), out=Path(tmp) / "sim")
    judged = score.judge(cell, sim)
    cut = score.common_cut(cell, sim)
    if cut is not None:
        sim = analysis.up_to_version(sim, cut)
    hs, _ = fidelity.run_stats(sim)
    hm, _ = cell.stats(cut)
    width = max(hs.shape[-1], hm.shape[-1])
    return Distributions(cell_name, machine, str(entry.machine.get("cpu_model", "")), shares(hm, width),
                         shares(hs, width), len(cell.runs), len(sim.runs),
                         float(judged.values["mean_staleness_rel_err"]), float(judged.values["ks"]))


def draw(d: Distributions, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tau = np.arange(len(d.measured))
    # a log scale: the bulk near τ̄ and the tail (workers preempted between read and write) both show;
    # the x axis ends where the last 0.01% of either side's updates begin
    last = int(max(np.searchsorted(np.cumsum(d.measured), 0.9999), np.searchsorted(np.cumsum(d.predicted), 0.9999)))
    show = slice(0, max(last, 1) + 2)
    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=110)
    ax.bar(tau[show], d.measured[show], width=0.85, color="#9ecae1", edgecolor="#3182bd",
           label=f"measured: real threads, {d.measured_runs} runs (τ̄ = {d.mean_measured:.2f})")
    ax.step(tau[show], np.where(d.predicted[show] > 0, d.predicted[show], np.nan), where="mid", color="#d62728",
            linewidth=1.6, label=f"predicted: simulator on the calibrated profile, {d.predicted_runs} runs "
                                 f"(τ̄ = {d.mean_predicted:.2f})")
    ax.set_yscale("log")
    ax.set_xlabel("staleness τ (updates by other workers between a worker's read and its write)")
    ax.set_ylabel("share of updates (log scale)")
    err = f"{d.mean_staleness_rel_err:+.1%}" if math.isfinite(d.mean_staleness_rel_err) else "n/a"
    ax.set_title(f"{d.cell} on corpus machine {d.machine}\nmean staleness error {err}, KS {d.ks:.3f}",
                 fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--machine", default=MACHINE, help=f"corpus entry (default {MACHINE})")
    p.add_argument("--cell", default=CELL, help=f"its cell (default {CELL})")
    p.add_argument("--out", type=Path, default=OUT, help="PNG to write (default docs/img/front_staleness.png)")
    a = p.parse_args(argv)
    d = distributions(a.machine, a.cell)
    draw(d, a.out)
    print(f"{a.out}: {d.cell} on {d.machine} ({d.cpu}): τ̄ measured {d.mean_measured:.3f}, predicted "
          f"{d.mean_predicted:.3f} ({d.mean_staleness_rel_err:+.1%}), KS {d.ks:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
