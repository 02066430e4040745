"""Ablation of the simulator's mechanisms on the fidelity corpus: what each one earns, machine by machine.

Every `[sim]` mechanism switch (each field of ``SimConfig`` that is not part of what a scenario runs,
``simasgd.corpus.score.SCENARIO_SIM_KEYS``) is turned to its other value(s) in turn, and every cell of every
corpus machine re-simulated (``simasgd.corpus.score``): the measured runs are not re-run, so what a
mechanism moves is the simulator's change alone.

The score's own noise: the baseline is scored at ``--base-seeds`` timing seeds (``[sim] timing_seed``: the
machine's timing redrawn, the data, θ₀ and minibatches kept), every variant at the first ``--seeds`` of them
(paired: common random numbers). A cell's verdict (met or not) that differs between two consecutive seeds of
one configuration is a flip; from the flips among all such comparisons, the share q of cells whose verdict
a redraw flips has a 95% upper bound q⁺ (Clopper–Pearson). The counts of two independent draws then differ
with variance at most cells·q⁺, and a variant's mean count over k seeds differs from the baseline's beyond
noise where |Δ| > 2·√(cells·q⁺/k) (conservative: the pairing makes the real spread smaller). A mechanism
earns its place if turning it off lowers the count beyond that noise on at least one machine and raises it
beyond the noise on none.

``--timing-only`` simulates without numerics (``[sim] numerics = false``, ten times faster): the cells are
judged on the three timing goals (mean staleness, KS, updates/s); every mechanism acts on timing only.

    .venv/bin/python benchmarks/fidelity_ablation.py [--corpus corpus] [--variants coherence timer_tick]
        [--seeds 2] [--timing-only]

Prints one row per variant (per machine: cells met, met / ceiling, Δ against the baseline) and writes the
record ``benchmarks/results/fidelity_ablation_<machine kind>.json`` (``record.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # record.py
import record

from simasgd.corpus import score, store
from simasgd.spec.scenario import SimConfig

ROOT = Path(__file__).resolve().parents[1]
NAME, VERSION = "fidelity_ablation", 3


def mechanisms() -> dict[str, list[Any]]:
    """Each mechanism switch and the values other than its default (a bool: the other one)."""
    out: dict[str, list[Any]] = {}
    for name, f in SimConfig.model_fields.items():
        if name in score.SCENARIO_SIM_KEYS:
            continue
        default = f.default
        if isinstance(default, bool):
            out[name] = [not default]
        elif typing.get_origin(f.annotation) is typing.Literal:
            out[name] = [v for v in typing.get_args(f.annotation) if v != default]
    return out


def variants(names: list[str] | None) -> dict[str, dict[str, Any]]:
    rows = {f"{k}={v}": {k: v} for k, vs in mechanisms().items() for v in vs}
    if names:
        unknown = [n for n in names if not any(r.split("=")[0] == n or r == n for r in rows)]
        if unknown:
            raise SystemExit(f"unknown mechanism(s) {unknown}; the mechanisms: {', '.join(mechanisms())}")
        rows = {r: o for n in names for r, o in rows.items() if r.split("=")[0] == n or r == n}  # in the order asked
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=ROOT / "corpus")
    p.add_argument("--machine", nargs="*", default=None)
    p.add_argument("--variants", nargs="*", default=None, help="mechanisms to turn (default: every one)")
    p.add_argument("--seeds", type=int, default=2, help="timing seeds of every configuration (the noise)")
    p.add_argument("--base-seeds", type=int, default=None, help="timing seeds of the baseline (default --seeds)")
    p.add_argument("--timing-only", action="store_true", help="no numerics: judged on the timing goals")
    p.add_argument("--cells", default=None, help="only the cells whose name matches this regular expression")
    p.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--record", type=Path, default=None,
                   help="the record's path (default benchmarks/results/fidelity_ablation_<machine kind>.json)")
    args = p.parse_args(argv)
    entries = [store.load(x) for x in store.machines(args.corpus)
               if args.machine is None or x.name.removesuffix(store.SUFFIX) in args.machine]
    doc: dict[str, Any] = {"corpus": str(args.corpus), "cells": args.cells, "seeds": args.seeds,
                           "timing_only": args.timing_only, "machines": {}}
    fixed = {"numerics": False} if args.timing_only else {}
    for e in entries:
        if args.cells:
            e = dataclasses.replace(e, cells=[c for c in e.cells if re.search(args.cells, c.name)])
        doc["machines"][e.name] = ablate(e, fixed, variants(args.variants), args.seeds, args.jobs,
                                         max(args.seeds, args.base_seeds or args.seeds))
    path = record.write(args.record or ROOT / "benchmarks" / "results" / f"{NAME}_{record.machine_kind()}.json",
                        NAME, VERSION, doc)
    print(f"wrote {path}")
    return 0


def ablate(e: store.Entry, fixed: dict[str, Any], rows: dict[str, dict[str, Any]], seeds: int,
           jobs: int, base_seeds: int) -> dict[str, Any]:
    """The baseline at timing seeds 0 … ``base_seeds``−1 and every variant of ``rows`` at 0 … ``seeds``−1."""
    def scored(over: dict[str, Any], k: int) -> list[score.MachineScore]:
        return [score.score(e, fixed | over, jobs, seed_offset=i, placements=False) for i in range(k)]  # no bands

    base = scored({}, base_seeds)
    counts = [b.met for b in base]
    print(f"{e.name}: baseline {counts} of {len(e.cells)} cells, ceiling {base[0].ceiling:.1f}", flush=True)
    out: dict[str, Any] = {}
    flips, compared = _flips(base)
    for label, over in rows.items():
        s = scored(over, seeds)
        met = [x.met for x in s]
        f, n = _flips(s)
        flips, compared = flips + f, compared + n
        delta = (sum(met) - sum(counts[:seeds])) / seeds
        out[label] = {"met": met, "delta": delta, "ratio": sum(x.ratio for x in s) / seeds,
                      "goals": s[0].goal_counts(), "flipped": _flipped(base[0], s[0]),
                      "verdicts": [[c.met for c in x.cells] for x in s]}
        print(f"  {label}: {met} (mean Δ {delta:+.1f}; {_flipped(base[0], s[0])})", flush=True)
    q = _upper(flips, compared)
    bound = 2 * math.sqrt(len(e.cells) * q / seeds) if compared else math.nan
    for row in out.values():
        row["beyond_noise"] = bool(math.isfinite(bound) and abs(row["delta"]) > bound)
    print(f"  noise: {flips} flips in {compared} redraws of a cell (q ≤ {q:.3f}); |Δ| beyond {bound:.2f}",
          flush=True)
    return {"baseline": counts, "flips": flips, "redraws": compared, "q_upper": q, "bound": bound,
            "ceiling": base[0].ceiling, "cells": len(e.cells), "variants": out,
            "baseline_goals": base[0].goal_counts(), "baseline_verdicts": [[c.met for c in b.cells] for b in base]}


def _flips(scores: list[score.MachineScore]) -> tuple[int, int]:
    """Cells whose verdict differs between consecutive seeds, and the comparisons made."""
    pairs = list(itertools.pairwise(scores))
    flips = sum(a.met != b.met for x, y in pairs for a, b in zip(x.cells, y.cells, strict=True))
    return flips, sum(len(x.cells) for x, _ in pairs)


def _upper(k: int, n: int) -> float:
    """The 95% upper bound of a proportion seen k times in n (Clopper–Pearson, one-sided 97.5%)."""
    if n == 0:
        return math.nan
    if k >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(0.975, k + 1, n - k))


def _flipped(a: score.MachineScore, b: score.MachineScore) -> dict[str, list[str]]:
    """Cells whose verdict the variant changed: gained and lost."""
    before = {c.cell: c.met for c in a.cells}
    return {"gained": [c.cell for c in b.cells if c.met and not before.get(c.cell)],
            "lost": [c.cell for c in b.cells if not c.met and before.get(c.cell)]}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
