"""The same sweep on the process pool and on a Dask LocalCluster gives the same results."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.sweep import load

HERE = Path(__file__).resolve().parent
SMALL = str(HERE / "small_grid.toml")
# The serial backend measures wall time; everything else it reports is a function of the seeds.
DETERMINISTIC = ["optimizer.lr", "workload.batch_size", "algorithm.name", "repeat", "status", "seed", "updates",
                 "updates_to_eps", "crashed", "not_reached", "initial_loss", "final_loss", "mean_staleness", "attempts"]


@pytest.mark.slow
def test_pool_and_dask_local_cluster_agree(tmp_path: Path) -> None:
    cli = CliRunner()
    args = ["sweep", SMALL, "-b", "serial", "-s", "stop.epsilon=0.3", "-s", "stop.max_updates=400",
            "-g", "optimizer.lr=0.05,0.5"]
    pool = cli.invoke(app, [*args, "-j", "2", "-o", str(tmp_path / "pool")])
    assert pool.exit_code == 0, pool.output
    dask = cli.invoke(app, [*args, "-j", "2", "--dask", "local", "-o", str(tmp_path / "dask")])
    assert dask.exit_code == 0, dask.output
    a, b = load(tmp_path / "pool"), load(tmp_path / "dask")
    assert len(a) == 16 and set(a["status"]) == {"ok"}
    pd.testing.assert_frame_equal(a[DETERMINISTIC], b[DETERMINISTIC])
    # The comparison is not vacuous: the cells differ from each other.
    assert a["final_loss"].nunique() > 8



@pytest.mark.slow
def test_real_backend_tasks_take_a_cluster_lock_per_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import nullcontext
    from functools import partial

    import sweep_fakes as fakes

    from simasgd.sweep import execution, plan

    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("SWEEP_CALLS", str(calls))
    # Without the file lock (as for workers with private temp folders), only the Dask lock keeps tasks apart.
    monkeypatch.setattr(execution, "host_lock", lambda: nullcontext())
    p = plan.build(SMALL, ["optimizer.lr=0.05", "algorithm.name=mutex"], backend="serial")
    tasks = [plan.Task(**{**t.__dict__, "backend": "cpu"}) for t in p.tasks()]
    pool = execution.DaskPool("local", 2, processes=False)  # in-process workers see the monkeypatch
    try:
        outs = list(pool.imap_unordered(partial(execution.run_task, body=fakes.locked_interval_body), tasks))
    finally:
        pool.close(cancel=False)
    assert [o.row["status"] for _, o in outs] == ["ok"] * 4, [o.row["error"] for _, o in outs]
    spans = sorted(tuple(map(float, f.read_text().split())) for f in calls.iterdir())
    assert len(spans) == 4 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
