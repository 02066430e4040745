"""Ablation of the simulator's mechanisms against one set of measured runs.

For every cell of a `fidelity_sweep.py` output folder, re-run the simulator with each
mechanism switched off in turn (`[sim]` switches, same profile, same seeds) and compare
with the cell's measured (`cpu`) runs, which are not re-run: what each mechanism moves
is then the simulator's change alone, not the machine's run-to-run noise.

    .venv/bin/python benchmarks/fidelity_ablation.py results/fidelity --profile results/fidelity/this.toml

Prints one table: per variant, the cells meeting all four goals and each goal's count,
and writes it (with per-cell verdicts) to --out as Markdown.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from simasgd import backends, fidelity, loader
from simasgd.results import RunResult
from simasgd.scenario import SimConfig

VARIANTS: dict[str, dict[str, object]] = {
    "all mechanisms": {},
    "no cache model": {"cache_model": False},
    "no in-cycle gradient": {"gradient_in_cycle": False},
    "no host noise": {"host_noise": False},
    "sleeping lock waiters": {"lock_waiters": "sleep"},
    "yield only to a holder (no EEVDF)": {"sched_yield": "holder"},
    "no coherence": {"coherence": False},
    "coherence on every step (no last writer)": {"coherence_recency": False},
    "steps timed warm (not in the cycle)": {"steps_in_cycle": False},
    "no racing writers": {"racing_writes": False},
    "no executor bookkeeping between cycles": {"bookkeeping": False},
    "no timer tick (gradient samples drawn as they are)": {"timer_tick": False},
    "no held lines (a shared line's write at the private rate)": {"held_lines": False},
    "no loss snapshots": {"loss_snapshots": False},
    "every read copies θ (no read elision)": {"read_elision": False},
    "a spinner yields at once (no pauses before sched_yield)": {"spin_before_yield": False},
    "one run queue for all CPUs (\"os\" threads)": {"run_queues": "shared"},
    "none of the sixteen": {"cache_model": False, "gradient_in_cycle": False, "host_noise": False,
                            "lock_waiters": "sleep", "coherence": False, "sched_yield": "holder",
                            "coherence_recency": False, "steps_in_cycle": False, "racing_writes": False,
                            "loss_snapshots": False, "held_lines": False, "spin_before_yield": False,
                            "run_queues": "shared", "bookkeeping": False, "timer_tick": False,
                            "read_elision": False},
}
MECHANISMS = sorted({k for v in VARIANTS.values() for k in v})
GOALS = ("mean_staleness_rel_err", "ks", "updates_per_s_rel_err", "updates_to_eps_rel_err")


def cells(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "cpu" / "summary.json").exists())


def verdicts(cell: Path, overrides: dict[str, object]) -> dict[str, bool | None]:
    cpu = RunResult.load(cell / "cpu")
    # the measured run's scenario as stored, less the keys the format has since removed
    sc = loader.from_dict(loader.without_removed(cpu.scenario), base_dir=Path(__file__).resolve().parents[1])
    # every mechanism at today's default (the measured run stored the defaults of its day), then the variant's
    defaults = SimConfig()
    today = {k: getattr(defaults, k) for k in MECHANISMS}
    sc = sc.model_copy(update={"machine": sc.machine.model_copy(update={"preset": "this"}),
                               "sim": sc.sim.model_copy(update={**today, **overrides})})
    with tempfile.TemporaryDirectory() as tmp:
        sim = backends.run(sc, "sim", out=Path(tmp) / "sim")
    fid = fidelity.compare(sim, cpu, resamples=200, check=False)  # the [sim] switch is the point
    return {k: fid.verdicts.get(k) for k in GOALS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=Path, help="a fidelity_sweep.py --out folder")
    p.add_argument("--profile", type=Path, required=True)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), help="which rows to run (default: all)")
    args = p.parse_args(argv)
    os.environ["SIMASGD_PROFILE"] = str(args.profile.resolve())
    from threadpoolctl import threadpool_limits

    # One BLAS thread: an idle OpenBLAS pool spins against the numerics' kernels (two such processes on a
    # 2-CPU machine made a B = 16 loss_and_grad take 37 ms instead of 0.15).
    threadpool_limits(1)
    found = cells(args.root)
    rows, per_cell = [], []
    for name, overrides in ((n, VARIANTS[n]) for n in args.variants):
        counts = dict.fromkeys(GOALS, 0)
        all_met = 0
        for cell in found:
            v = verdicts(cell, overrides)
            per_cell.append((name, cell.name, v))
            all_met += all(v.get(k) is True for k in GOALS)
            for k in GOALS:
                counts[k] += v.get(k) is True
        rows.append([name, f"{all_met}/{len(found)}"] + [str(counts[k]) for k in GOALS])
        print(" | ".join(rows[-1]), flush=True)
    head = ["variant", "all four goals", "τ̄ within 5%", "KS ≤ 0.1", "upd/s within 10%", "upd→ε within 15%"]
    text = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + \
        "\n".join("| " + " | ".join(r) + " |" for r in rows) + "\n"
    if args.out:
        args.out.write_text(text + "\n<details><summary>per cell</summary>\n\n| variant | cell | " +
                            " | ".join(GOALS) + " |\n|" + "---|" * (2 + len(GOALS)) + "\n" +
                            "\n".join(f"| {n} | {c} | " + " | ".join("✓" if v[k] else ("✗" if v[k] is False else "·")
                                                                     for k in GOALS) + " |"
                                      for n, c, v in per_cell) + "\n\n</details>\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
