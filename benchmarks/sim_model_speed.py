"""The calibrated model's speed, one checkout against another: is today's simulator no slower?

Times the simulator on a corpus machine's profile (every mechanism the profile feeds acting, as a
prediction runs), timing only, ``--updates`` updates a run, in a few cells (HOGWILD! at 2 threads,
Leashed-SGD persistence 0 at 2, mutex at 4, rwlock at 8; batch 16), in each checkout given, each in its own
fresh process (``PYTHONPATH`` = the checkout) and alternating between checkouts round by round, so that a
host's drift falls on both alike. Prints the best of ``--rounds`` per cell and checkout, and their ratio.
Each timed run reads the profile from its file, as a first run does (a checkout that keeps a parsed profile
between runs has it cleared first): the same work on both sides.

    .venv/bin/python benchmarks/sim_model_speed.py --checkout /path/to/older/checkout [--checkout .]

Ratios are what to read: absolute seconds follow the host and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CELLS = {"hogwild, 2 threads": ("hogwild", {}, 2), "leashed p0, 2 threads": ("leashed", {"persistence": 0}, 2),
         "mutex, 4 threads": ("mutex", {}, 4), "rwlock, 8 threads": ("rwlock", {}, 8)}

# Run inside the checkout's process: one timing per cell, JSON on stdout. The profile is given by path.
TIMER = """
import json, sys, time
from simasgd.machines import machine
from simasgd.spec import loader
from simasgd.sim import backend
cells, updates = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
def scenario(alg, params, n, updates):
    return loader.from_dict({"name": "speed", "seed": 1, "machine": {"preset": "this"},
                           "workers": {"count": n, "placement": "os"},
                           "workload": {"model": "mlp", "layers": [64, 256, 256, 10], "dataset": "digits",
                                        "batch_size": 16},
                           "algorithm": {"name": alg, **params}, "sim": {"numerics": False},
                           "stop": {"max_updates": updates, "max_time_s": 1e9}})
for name, (alg, params, n) in cells.items():  # imports, first calls: not timed
    backend.run_once(scenario(alg, params, n, 50), 0)
for name, (alg, params, n) in cells.items():
    sc = scenario(alg, params, n, updates)
    getattr(machine, "_read_profile", None) and machine._read_profile.cache_clear()  # parsed in every checkout
    t = time.perf_counter()
    backend.run_once(sc, 0)
    out[name] = time.perf_counter() - t
print(json.dumps(out))
"""


def time_checkout(checkout: Path, profile: Path, updates: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "SIMASGD_PROFILE": str(profile), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", TIMER, json.dumps(CELLS), str(updates)],
                       capture_output=True, text=True, env=env, cwd=checkout, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: the timer failed:\n{p.stderr[-2000:]}")
    result: dict[str, float] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    import tomli_w

    from simasgd.corpus import store

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, action="append", required=True,
                    help="a checkout of simasgd (repeatable; the first is the reference)")
    ap.add_argument("--corpus-entry", type=Path, default=ROOT / "corpus" / "amd_epyc_2vcpu.json.gz",
                    help="whose profile times the steps")
    ap.add_argument("--updates", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    checkouts = [c.resolve() for c in args.checkout]
    best: dict[Path, dict[str, float]] = {c: {} for c in checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "profile.toml"
        doc = store.load(args.corpus_entry).profile
        # as calibrated, keys and version: an older checkout refuses a newer format version than it reads
        profile.write_text(tomli_w.dumps(doc))
        for r in range(args.rounds):
            for c in checkouts if r % 2 == 0 else checkouts[::-1]:
                for name, s in time_checkout(c, profile, args.updates).items():
                    best[c][name] = min(s, best[c].get(name, s))
    ref = checkouts[0]
    head = " | ".join(str(c) for c in checkouts)
    print(f"| cell | {head} | ratio to the first |")
    print("|---|" + "---|" * (len(checkouts) + 1))
    for name in CELLS:
        times = " | ".join(f"{best[c][name]:.3f} s" for c in checkouts)
        ratios = ", ".join(f"{best[c][name] / best[ref][name]:.2f}" for c in checkouts[1:])
        print(f"| {name} | {times} | {ratios} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
