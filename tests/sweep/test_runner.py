"""Running sweeps into a store: rows, resume, failures, refusal to mix sweeps, the host lock."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pandas as pd
import pytest
import sweep_fakes as fakes

from simasgd.runs.results import ResultsError
from simasgd.sweep import load, plan, runner, store

HERE = Path(__file__).resolve().parent
SMALL = HERE / "small_grid.toml"


def small_plan(*grid: str, backend: str = "serial") -> plan.Plan:
    return plan.build(SMALL, grid, backend=backend)


def test_load_gives_one_row_per_cell_and_repeat_with_grid_columns(tmp_path: Path) -> None:
    p = small_plan()
    rep = runner.run(p, tmp_path / "s", jobs=0, body=fakes.fake_body)
    assert (rep.total, rep.ok, rep.failed, rep.skipped) == (16, 16, 0, 0)
    df = load(tmp_path / "s")
    assert len(df) == 16
    assert list(df.columns[:5]) == ["optimizer.lr", "workload.batch_size", "algorithm.name", "repeat", "status"]
    for col in store.SUMMARY_FIELDS:
        assert col in df.columns
    assert not df.duplicated(["optimizer.lr", "workload.batch_size", "algorithm.name", "repeat"]).any()
    assert set(df["status"]) == {"ok"}
    # Each row is the task it claims to be: the fake's time_to_eps divides by the cell's own lr.
    reached = df[df["time_to_eps"].notna()]
    x = reached["final_loss"].astype(float)
    assert ((reached["time_to_eps"].astype(float) - x / reached["optimizer.lr"]).abs() < 1e-12).all()


def test_raising_task_is_recorded_failed_and_the_sweep_goes_on(tmp_path: Path) -> None:
    p = small_plan(f"optimizer.lr=0.05,{fakes.BOOM_LR}")
    rep = runner.run(p, tmp_path / "s", jobs=0, body=fakes.fake_body)
    assert rep.failed == 8 and rep.ok == 8
    df = load(tmp_path / "s")
    bad = df[df["optimizer.lr"] == fakes.BOOM_LR]
    assert len(bad) == 8 and set(bad["status"]) == {"failed"}
    assert bad["error"].str.contains("RuntimeError: boom in").all()
    assert bad["error"].str.contains("fakes.py").all()  # where it raised
    assert bad["updates"].isna().all()
    good = df[df["optimizer.lr"] == 0.05]
    assert set(good["status"]) == {"ok"} and good["error"].isna().all()


def test_resume_skips_done_and_retries_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("SWEEP_CALLS", str(calls))
    p = small_plan(f"optimizer.lr=0.05,{fakes.BOOM_LR}")
    runner.run(p, tmp_path / "s", jobs=0, body=fakes.counting_body)
    assert len(list(calls.iterdir())) == 16
    rep = runner.run(p, tmp_path / "s", jobs=0, resume=True, body=fakes.counting_body)
    # Only the 8 failed tasks ran again; they fail again and stay failed, still one row each.
    assert (rep.skipped, rep.failed, rep.ok) == (8, 8, 0)
    assert len(list(calls.iterdir())) == 24
    rep = runner.run(p, tmp_path / "s", jobs=0, resume=True, retry_failed=False, body=fakes.counting_body)
    assert rep.skipped == 16 and len(list(calls.iterdir())) == 24
    assert len(load(tmp_path / "s")) == 16


def test_success_after_failure_replaces_it(tmp_path: Path) -> None:
    p = small_plan()
    st = store.SweepStore(tmp_path / "s")
    st.open(p.identity(), p.base.to_dict(), resume=False)
    t = p.tasks()[0]
    st.write({"task_id": t.task_id, "cell_id": t.cell_id, "repeat": 0, "seed": 1, "status": "failed",
              "error": "x"})
    assert st.finished() == (set(), {t.task_id})
    runner.run(p, tmp_path / "s", jobs=0, resume=True, body=fakes.fake_body)
    ok, failed = st.finished()
    assert failed == set() and len(ok) == 16
    assert not list((tmp_path / "s" / "tasks").glob("*.failed.parquet"))


def test_refuses_to_mix_sweeps(tmp_path: Path) -> None:
    out = tmp_path / "s"
    runner.run(small_plan(), out, jobs=0, body=fakes.fake_body)
    with pytest.raises(ResultsError, match="--resume"):
        runner.run(small_plan(), out, jobs=0, body=fakes.fake_body)
    with pytest.raises(ResultsError, match="different sweep.*grid"):
        runner.run(small_plan("workload.batch_size=8,16"), out, jobs=0, resume=True, body=fakes.fake_body)
    other = plan.build(SMALL, overrides=["stop.max_updates=100"], backend="serial")
    with pytest.raises(ResultsError, match="scenario_hash"):
        runner.run(other, out, jobs=0, resume=True, body=fakes.fake_body)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.txt").write_text("x")
    with pytest.raises(ResultsError, match="not a sweep folder"):
        runner.run(small_plan(), tmp_path / "junk", jobs=0, body=fakes.fake_body)


def test_manifest_records_the_sweep(tmp_path: Path) -> None:
    p = small_plan()
    runner.run(p, tmp_path / "s", jobs=0, body=fakes.fake_body)
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert doc["format"] == "simasgd-sweep" and doc["format_version"] == store.FORMAT_VERSION == 2
    assert doc["grid"] == p.grid and doc["backend"] == "serial" and doc["repeats"] == 2
    assert doc["scenario"]["workload"]["layers"] == [64, 16, 10]
    doc["format_version"] = 99
    (tmp_path / "s" / "sweep.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="newer"):
        load(tmp_path / "s")


def test_keep_runs_saves_full_results(tmp_path: Path) -> None:
    from simasgd.runs.results import RunResult

    p = small_plan("optimizer.lr=0.05", "workload.batch_size=16", "algorithm.name=mutex")
    runner.run(p, tmp_path / "s", jobs=0, keep_runs=True, body=fakes.fake_body)
    runs = sorted((tmp_path / "s" / "runs").iterdir())
    assert [r.name for r in runs] == [t.task_id for t in p.tasks()]
    assert RunResult.load(runs[0]).runs[0].run == 0


@pytest.mark.slow
def test_process_pool_gives_the_same_rows_as_in_process(tmp_path: Path) -> None:
    p = small_plan(f"optimizer.lr=0.05,{fakes.BOOM_LR}")
    runner.run(p, tmp_path / "a", jobs=0, body=fakes.fake_body)
    rep = runner.run(p, tmp_path / "b", jobs=2, body=fakes.fake_body)
    assert rep.ok == 8 and rep.failed == 8
    a, b = (load(tmp_path / x).drop(columns=["wall_s", "host", "error"]) for x in "ab")
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.slow
def test_simulated_sweep_on_every_cpu_gives_the_rows_of_one_process(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.runs import pools
    from simasgd.sweep import execution

    monkeypatch.delenv(pools.JOBS_ENV, raising=False)  # the default: every CPU this process may use
    pool = execution.make_pool(None, None, real=False)
    pool.close(cancel=False)
    assert isinstance(pool, execution.LocalPool) and pool.jobs == len(os.sched_getaffinity(0))
    p = plan.build(SMALL, ["optimizer.lr=0.05", "workload.batch_size=16"], ["sim.numerics=false"], backend="sim")
    runner.run(p, tmp_path / "a", jobs=0, keep_runs=True)
    runner.run(p, tmp_path / "b", jobs=None if pool.jobs > 1 else 2, keep_runs=True)
    a, b = (load(tmp_path / x).drop(columns=["wall_s", "host", "error"]).sort_values("task_id", ignore_index=True)
            for x in "ab")
    assert len(a) == 4 and set(a["status"]) == {"ok"}
    pd.testing.assert_frame_equal(a, b)
    from simasgd.runs.results import RunResult

    for task in (tmp_path / "a" / "runs").iterdir():
        pooled = RunResult.load(tmp_path / "b" / "runs" / task.name)
        pd.testing.assert_frame_equal(RunResult.load(task).updates, pooled.updates)


@pytest.mark.slow
def test_real_backend_tasks_never_overlap_on_a_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.sweep import execution

    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("SWEEP_CALLS", str(calls))
    monkeypatch.setenv(execution.LOCK_DIR_ENV, str(tmp_path))
    # Bypass make_pool's jobs=1 for real backends: two processes, so only the lock can keep them apart.
    p = small_plan("optimizer.lr=0.05", "algorithm.name=mutex")
    tasks = [plan.Task(**{**t.__dict__, "backend": "cpu"}) for t in p.tasks()]
    assert all(t.real for t in tasks)
    from functools import partial

    pool = execution.LocalPool(2)
    try:
        outs = list(pool.imap_unordered(partial(execution.run_task, body=fakes.locked_interval_body), tasks))
    finally:
        pool.close(cancel=False)
    assert all(o.row["status"] == "ok" for _, o in outs)
    spans = sorted(tuple(map(float, f.read_text().split())) for f in calls.iterdir())
    assert len(spans) == 4
    assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(spans))


@pytest.mark.slow
def test_a_task_killing_its_worker_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    p = small_plan(f"optimizer.lr=0.05,{fakes.BOOM_LR}")
    rep = runner.run(p, tmp_path / "s", jobs=2, body=fakes.dying_body)
    df = load(tmp_path / "s")
    assert len(df) == 16 and rep.ok + rep.failed == 16
    dead = df[df["optimizer.lr"] == fakes.BOOM_LR]
    assert set(dead["status"]) == {"failed"} and dead["error"].str.contains("process").all()
    # Tasks in flight with a dying one may fail with it; --resume reruns exactly those.
    assert rep.ok >= 1
    rep2 = runner.run(p, tmp_path / "s", jobs=2, resume=True, body=fakes.fake_body)
    assert rep2.skipped == rep.ok and rep2.failed == 8  # the BOOM cells now raise instead
    assert set(load(tmp_path / "s").query("`optimizer.lr` == 0.05")["status"]) == {"ok"}


def test_progress_reports_finished_failed_and_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = small_plan(f"optimizer.lr=0.05,{fakes.BOOM_LR}")
    runner.run(p, tmp_path / "s", jobs=0, body=fakes.fake_body, show_progress=True)
    err = capsys.readouterr().err
    assert "16/16 finished (8 failed), 0 left" in err


def test_progress_is_silent_when_not_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner.run(small_plan(), tmp_path / "s", jobs=0, body=fakes.fake_body, show_progress=False)
    assert capsys.readouterr() == ("", "")


def test_python_entry_point_matches_plan_and_runner(tmp_path: Path) -> None:
    import simasgd.sweep as sweep

    rep = sweep.run(SMALL, tmp_path / "s", ["optimizer.lr=0.05"], backend="serial", repeats=1, jobs=0,
                    body=fakes.fake_body)
    assert rep.total == 4 and rep.ok == 4
    assert set(sweep.load(tmp_path / "s")["optimizer.lr"]) == {0.05}


@pytest.mark.slow
def test_pool_workers_get_one_thread_each_and_the_caller_keeps_its_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.sweep import execution

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")  # the user's own choice is respected
    pool = execution.LocalPool(1)
    try:
        (_, env), = list(pool.imap_unordered(fakes.thread_env, [None]))  # type: ignore[list-item]
    finally:
        pool.close(cancel=False)
    assert env == ("1", "2")
    assert "OPENBLAS_NUM_THREADS" not in os.environ


def test_load_of_a_sweep_with_nothing_finished_is_empty_with_all_columns(tmp_path: Path) -> None:
    p = small_plan()
    store.SweepStore(tmp_path / "s").open(p.identity(), p.base.to_dict(), resume=False)
    df = load(tmp_path / "s")
    assert len(df) == 0 and "optimizer.lr" in df.columns and "time_to_eps" in df.columns
