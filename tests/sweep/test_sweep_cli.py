"""``simasgd sweep`` end to end: kill and resume, failed tasks, bad input, the summary command."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.sweep import load

HERE = Path(__file__).resolve().parent
SMALL = str(HERE / "small_grid.toml")
cli = CliRunner()
# Each task ~0.2 s on the serial backend: epsilon out of reach, so every run spends its 3000 updates.
SLOW_TASKS = ["-b", "serial", "-n", "1", "-s", "stop.epsilon=0.0001", "-s", "stop.max_updates=3000"]


def sweep_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "simasgd.cli", "sweep", SMALL, *args]


def task_files(out: Path) -> dict[str, int]:
    folder = out / "tasks"
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.parquet")} if folder.exists() else {}


@pytest.mark.slow
def test_killed_sweep_resumes_without_rerunning_finished_tasks(tmp_path: Path) -> None:
    out = tmp_path / "s"
    grid = ["-g", "optimizer.lr=0.01:0.05:0.01", "-g", "workload.batch_size=16,32"]  # 10 cells x 2 algorithms
    tasks = 20
    proc = subprocess.Popen(sweep_cmd(*grid, *SLOW_TASKS, "-j", "1", "-o", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(task_files(out)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    before = task_files(out)
    assert 3 <= len(before) < tasks, "the kill must land mid-sweep"
    assert not [p for p in (out / "tasks").iterdir() if p.name.startswith(".")], "no half-written files"

    done = subprocess.run(sweep_cmd(*grid, *SLOW_TASKS, "-j", "2", "-o", str(out), "--resume"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(before)} already done" in done.stdout
    after = task_files(out)
    assert len(after) == tasks
    # Finished tasks were not rerun: their files are untouched.
    assert all(after[name] == mtime for name, mtime in before.items())
    df = load(out)
    assert len(df) == tasks and set(df["status"]) == {"ok"}
    assert not df.duplicated(["optimizer.lr", "workload.batch_size", "algorithm.name", "repeat"]).any()


def test_bad_grid_and_cells_exit_2_with_one_line_each(tmp_path: Path) -> None:
    res = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(tmp_path / "s"),
                           "-g", "workers.count=0,2", "-g", "optimizer.lr=0.3:0.1:0.1"])
    assert res.exit_code == 2
    assert "optimizer.lr=0.3:0.1:0.1" in res.output and "below the start" in res.output
    res = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(tmp_path / "s"),
                           "-g", "workers.count=0,2", "-g", "optimizer.momentum=2"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 2 and any("workers.count" in ln for ln in lines)
    assert any("optimizer.momentum" in ln for ln in lines)
    assert not (tmp_path / "s").exists()  # nothing started


def test_unreachable_dask_scheduler_is_a_clear_error(tmp_path: Path) -> None:
    res = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(tmp_path / "s"), "-g", "optimizer.lr=0.1",
                           "-g", "workload.batch_size=16", "-g", "algorithm.name=mutex",
                           "--dask", "tcp://127.0.0.1:1"])
    assert res.exit_code == 2 and "cannot reach a Dask scheduler" in res.output


@pytest.mark.parametrize("address", ["nonesuch", "tcp://host-without-port", "tcp://[::1"])
def test_a_dask_address_without_a_host_and_port_is_refused_before_dask_starts(tmp_path: Path,
                                                                             address: str) -> None:
    res = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(tmp_path / "s"), "-g", "optimizer.lr=0.1",
                           "--dask", address])
    assert res.exit_code == 2, res.output
    assert f"--dask {address}" in res.output and "tcp://host:8786" in res.output


def test_failing_cells_are_recorded_and_the_rest_finish(tmp_path: Path) -> None:
    out = tmp_path / "s"
    # A dataset folder that does not exist: valid syntax, so the task itself raises in the worker.
    res = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(out), "-j", "0",
                           "-g", f"workload.dataset=digits,mnist:{tmp_path / 'nowhere'}",
                           "-g", "optimizer.lr=0.1", "-g", "algorithm.name=mutex"])
    assert res.exit_code == 0, res.output
    assert "4 ok, 4 failed" in res.output
    df = load(out)
    bad = df[df["workload.dataset"] != "digits"]
    assert len(bad) == 4 and set(bad["status"]) == {"failed"} and bad["error"].str.contains("nowhere").all()
    assert set(df[df["workload.dataset"] == "digits"]["status"]) == {"ok"}


@pytest.mark.slow
def test_sweep_summary_command_prints_table_and_writes_heatmaps(tmp_path: Path) -> None:
    import sweep_fakes as fakes

    from simasgd.sweep import plan, runner

    runner.run(plan.build(SMALL, backend="serial"), tmp_path / "s", jobs=0, body=fakes.fake_body)
    res = cli.invoke(app, ["sweep-summary", str(tmp_path / "s"), "--plots", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    assert "mutex" in res.output and "hogwild" in res.output and "within 10%" in res.output
    assert len(list((tmp_path / "p").glob("*.png"))) == 2
    bad = cli.invoke(app, ["sweep-summary", str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "not a sweep folder" in bad.output


def test_dry_run_counts_what_is_left_and_runs_nothing(tmp_path: Path) -> None:
    import sweep_fakes as fakes

    from simasgd.sweep import plan, runner

    out = tmp_path / "s"
    fresh = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(out), "--dry-run"])
    assert fresh.exit_code == 0 and "8 cells x 2 repeats = 16 tasks" in fresh.output and not out.exists()
    runner.run(plan.build(SMALL, ["optimizer.lr=0.05"], backend="serial"), tmp_path / "part", jobs=0,
               body=fakes.fake_body)
    part = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(tmp_path / "part"), "--dry-run",
                            "-g", "optimizer.lr=0.05"])
    assert part.exit_code == 0 and "8 done, 0 failed, 0 left" in part.output
    other = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(tmp_path / "part"), "--dry-run"])
    assert other.exit_code == 2 and "different sweep" in other.output


def test_sweep_summary_of_a_sweep_not_started_yet(tmp_path: Path) -> None:
    from simasgd.sweep import plan, store

    p = plan.build(SMALL, backend="serial")
    store.SweepStore(tmp_path / "s").open(p.identity(), p.base.to_dict(), resume=False)
    res = cli.invoke(app, ["sweep-summary", str(tmp_path / "s"), "--plots", str(tmp_path / "p")])
    assert res.exit_code == 0 and "no finished tasks yet" in res.output


def _children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


@pytest.mark.slow
def test_sigkill_leaves_no_pool_workers_behind_and_the_folder_loads(tmp_path: Path) -> None:
    out = tmp_path / "s"
    proc = subprocess.Popen(sweep_cmd("-g", "optimizer.lr=0.01:0.1:0.01", *SLOW_TASKS, "-j", "2", "-o", str(out)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(task_files(out)) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = _children(proc.pid)
    assert workers, "the pool should be running"
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{w}").exists() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()
             and "Z" not in Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    assert not alive, f"orphaned workers {alive}"
    df = load(out)
    assert len(df) == len(task_files(out)) and set(df["status"]) == {"ok"}


def test_in_process_sweep_restores_the_sigterm_handler(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    res = cli.invoke(app, ["sweep", SMALL, "-b", "serial", "-o", str(tmp_path / "s"), "-j", "0", "-n", "1",
                           "-g", "optimizer.lr=0.1", "-g", "workload.batch_size=16", "-g", "algorithm.name=mutex"])
    assert res.exit_code == 0, res.output
    assert signal.getsignal(signal.SIGTERM) is before
