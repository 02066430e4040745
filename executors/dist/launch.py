"""``torchrun ... -m executors.dist.launch SCENARIO [--out DIR] [-s key=value ...]``: one ``dist`` run across machines.

Every process torchrun starts runs this module with the same scenario file: it joins the process
group from torchrun's environment (``env://``: ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``), builds the workload (the same data everywhere: ``Role.DATA`` of the scenario's
seed), takes its role from its rank (:class:`executors.dist.world.Layout`: the servers or the centre
first, then the workers) and runs each repeat. Rank 0 gathers the rows and writes one results folder
(``--out``, default ``runs/<scenario name>-dist``) after each repeat, as ``simasgd run`` does; the
other ranks write nothing. torchrun must start exactly ``workers.count`` + servers processes in all
(``nnodes × nproc_per_node``): a launch of another size is refused by every rank, with the count.

A rank that fails prints ``simasgd dist: rank R (role) failed: ...`` and exits 1; torchrun then ends
the others, and the folder holds only the repeats that finished (none: no ``summary.json``).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from executors.dist.world import DistError, Layout, init, under_torchrun


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m executors.dist.launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="results folder (rank 0 writes it)")
    ap.add_argument("-s", "--set", dest="overrides", action="append", default=[], help="key=value override")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    if not under_torchrun():
        print("simasgd dist: run this module under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT unset); "
              "on one machine `simasgd run SCENARIO --backend dist` starts the processes itself", file=sys.stderr)
        return 2
    from simasgd.spec import loader

    sc = loader.load(args.scenario, args.overrides)
    rank = int(os.environ["RANK"])
    role = "?"
    try:
        from executors.dist.backend import NAME, require

        require(sc.algorithm.name)
        from simasgd.spec import seeds
        from simasgd.numerics.workloads import build_workload, check_backend

        check_backend(sc.workload, NAME)
        wl = build_workload(sc.workload, sc.seed, sc.base_dir)
        wl.warmup()
        role = Layout.of(sc, wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT)).shape[0]).role(rank)
        init(sc)
        _repeats(sc, wl, args.out or Path("runs") / f"{sc.name}-dist", args.repeats or sc.repeats)
    except BaseException as e:
        print(f"simasgd dist: rank {rank} ({role}) on {socket.gethostname()} failed: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        os._exit(1)  # a clean exit would wait on peers that may never answer
    return 0


def _repeats(sc: object, wl: object, out: Path, repeats: int) -> None:
    import torch.distributed as dist

    from executors.dist import collect
    from executors.dist.backend import NAME
    from executors.dist.ranks import run_rank
    from simasgd.runs import backends
    from simasgd.spec import seeds
    from simasgd.runs.results import RunResult, merge

    done: list[RunResult] = []
    for r in range(repeats):
        meta = backends.run_metadata(NAME, sc) if dist.get_rank() == 0 else {}  # type: ignore[arg-type]
        reports = run_rank(sc, r, wl)  # type: ignore[arg-type]
        if reports is None:
            continue
        theta0 = wl.init_theta(seeds.rng(sc.seed, r, seeds.Role.INIT))  # type: ignore[attr-defined]
        res = collect.result(sc, r, wl, theta0, reports, NAME, "torchrun")  # type: ignore[arg-type]
        res.metadata = {**meta, **res.metadata}
        done.append(res)
        merge(done).save(out)
        print(f"simasgd dist: repeat {r}: {res.runs[0].updates} updates in {res.runs[0].time_s:.3f} s "
              f"-> {out}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DistError as e:
        print(f"simasgd dist: {e}", file=sys.stderr)
        sys.exit(1)
