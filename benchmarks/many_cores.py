"""The simulator beyond two cores: a prepared run for a many-core machine, written as a corpus entry.

A quick calibration, then mutex, HOGWILD!, Leashed-SGD persistence 1 and Lopez at 1, 2, 4, 8 and 16 threads,
B = 16, two runs a cell, each measured (`cpu`) and simulated (`sim` on the calibrated profile) by
``fidelity_sweep.py``; the measured runs become the machine's corpus entry (``OUT/corpus``) and today's model
is scored against it (``OUT/score.json``, the table on stdout). About 6-8 minutes on a 16-core machine:

    .venv/bin/python benchmarks/many_cores.py OUT [--threads 1 2 4 8 16] [--profile PROFILE] [--no-score]

``--profile`` uses a profile already calibrated on this machine instead of calibrating. ``--no-score``
leaves the scoring (the simulator only, any machine: ``simasgd corpus score``) for later, where the many-core
machine's time is short (``benchmarks/device_check.sh``). With
``--threads 1 2`` it is the dry run the tests make on a 2-CPU machine. Copy ``OUT/corpus/*.json.gz`` into
the repository's ``corpus/`` to keep the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fidelity_sweep, record
import fidelity_sweep
import record

ALGORITHMS = ("mutex", "hogwild", "leashed persistence=1", "lopez")
THREADS = (1, 2, 4, 8, 16)


def machine_name() -> str:
    """The entry's name: the CPU family and this machine's CPU count (``intel_xeon_16cpu``)."""
    return f"{record.machine_kind()}_{len(os.sched_getaffinity(0))}cpu"


def sweep_args(out: Path, args: argparse.Namespace) -> list[str]:
    extra = ["--profile", str(args.profile)] if args.profile else ["--recalibrate", "--quick-calibration"]
    return ["--threads", *map(str, args.threads), "--batches", "16", "--repeats", "2", "--attempts", "1",
            "--max-updates", str(args.max_updates), "--max-time-s", str(args.max_time_s),
            "--algorithms", *args.algorithms, "--out", str(out / "cells"), "--table", str(out / "table.md"), *extra]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--threads", type=int, nargs="*", default=list(THREADS))
    p.add_argument("--algorithms", nargs="*", default=list(ALGORITHMS))
    p.add_argument("--max-updates", type=int, default=4000)
    p.add_argument("--max-time-s", type=float, default=10.0)
    p.add_argument("--profile", type=Path, default=None, help="a profile of this machine (else calibrate quickly)")
    p.add_argument("--machine", default=None, help="the entry's name (default: CPU family and count)")
    p.add_argument("--no-score", action="store_true", help="write the entry only (score it later, elsewhere)")
    args = p.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    profile = (args.profile or out / "this.toml").resolve()
    os.environ["SIMASGD_PROFILE"] = str(profile)
    start = time.perf_counter()
    fidelity_sweep.main(sweep_args(out, args))
    from simasgd.corpus import score, store
    from simasgd.machines import profile as prof

    name = args.machine or machine_name()
    entry = store.entry_from(store.measured_folders([out / "cells"]), prof.read(profile), name)
    path = store.save(entry, out / "corpus")
    if args.no_score:
        print(f"{path} ({path.stat().st_size / 1024:.0f} KiB), {time.perf_counter() - start:.0f} s; not scored "
              f"(simasgd corpus score)")
        return 0
    # the goals only: a far placement would simulate every cell twice on the device's few minutes; the entry's
    # bands come from `simasgd corpus score` on any machine afterwards
    result = score.score(entry, jobs=min(len(os.sched_getaffinity(0)), 8), placements=False)
    import json

    (out / "score.json").write_text(json.dumps(result.to_json(), indent=2))
    print(" | ".join(score.TABLE_HEAD))
    for row in score.table([result]):
        print(" | ".join(row))
    print(f"{path} ({path.stat().st_size / 1024:.0f} KiB), {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
