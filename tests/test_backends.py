"""``backends.run``: repeats on a process pool where the backend does not measure this host, the result equal
to a serial run's; one at a time where it does."""

from __future__ import annotations

import os
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.runs import backends, pools
from simasgd.runs.results import RunResult
from simasgd.spec import loader

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.toml"

# A backend standing in for a real one, importable by name in spawned workers (they inherit sys.path):
# each repeat records the process it ran in; ``boom`` repeats raise, ``slow`` ones take a second; every
# repeat warns.
FAKE = textwrap.dedent('''
    import os
    import time
    import warnings

    from simasgd.runs.results import RunResult, RunSummary, curve_frame, updates_frame

    NAME = "{name}"
    ALGORITHMS = frozenset({{"mutex"}})
    MEASURES_HOST = {measures}
    NEEDS_PROFILE = False
    TRAITS = None
    BOOM = {boom}
    SLOW = {slow}

    def run_once(scenario, run, advance=None):
        warnings.warn("the fake backend warns", UserWarning)
        if run in SLOW:
            time.sleep(1.0)
        if run in BOOM:
            raise RuntimeError(f"boom in repeat {{run}}")
        if advance is not None:
            advance(10)
        summary = RunSummary(run=run, updates=2, time_s=0.2, updates_to_eps=None, time_to_eps=None, crashed=False,
                             not_reached=False, initial_loss=1.0, final_loss=0.5, mean_staleness=0.0, attempts=2,
                             updates_per_s=10.0, extra={{"pid": os.getpid()}})
        return RunResult(scenario.to_dict(), NAME, [summary],
                         updates_frame(run, 0, [1, 2], [0, 1], [0.0, 0.1], [0.1, 0.2]),
                         curve_frame(run, [0.0, 0.2], [0, 2], [1.0, 0.5]))
''')


@pytest.fixture
def fake_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``make(measures_host, boom=(), slow=())`` registers a fake backend module and returns its name."""
    folder = tmp_path / "fakes"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))

    def make(measures: bool, boom: tuple[int, ...] = (), slow: tuple[int, ...] = ()) -> str:
        name = f"fake_backend_{'host' if measures else 'free'}_{len(boom)}"
        (folder / f"{name}.py").write_text(FAKE.format(name=name, measures=measures, boom=boom, slow=slow))
        monkeypatch.setitem(backends.BACKENDS, name, name)
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return make


def quickstart(*overrides: str) -> Any:
    return loader.load(QUICKSTART, list(overrides))


def assert_same_result(a: RunResult, b: RunResult) -> None:
    pd.testing.assert_frame_equal(a.updates, b.updates)
    pd.testing.assert_frame_equal(a.curve, b.curve)
    pd.testing.assert_frame_equal(a.summary_frame(), b.summary_frame())
    assert [r.run for r in a.runs] == [r.run for r in b.runs]
    assert (a.backend, a.scenario) == (b.backend, b.scenario)
    # metadata.created is when each repeat started; everything else is the same
    assert {k: v for k, v in a.metadata.items() if k != "created"} == \
        {k: v for k, v in b.metadata.items() if k != "created"}


# --- how many processes -------------------------------------------------------------------------------


def test_repeats_use_every_cpu_at_most_one_per_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pools.JOBS_ENV, raising=False)
    cpus = len(os.sched_getaffinity(0))
    assert backends.repeat_jobs("sim", 64) == min(64, cpus)
    assert backends.repeat_jobs("sim", 1) == 1
    assert backends.repeat_jobs("sim", 8, jobs=3) == 3
    assert backends.repeat_jobs("sim", 2, jobs=5) == 2
    assert backends.repeat_jobs("serial", 8, jobs=1) == 1
    monkeypatch.setenv(pools.JOBS_ENV, "3")
    assert backends.repeat_jobs("sim", 8) == 3
    assert backends.repeat_jobs("sim", 8, jobs=2) == 2  # asked for beats the environment


def test_a_bad_jobs_variable_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pools.JOBS_ENV, "many")
    with pytest.raises(pools.JobsError, match="SIMASGD_JOBS='many'"):
        backends.repeat_jobs("sim", 8)


@pytest.mark.filterwarnings("ignore:the fake backend warns")
def test_a_backend_that_measures_the_host_runs_its_repeats_here_one_at_a_time(fake_backend: Any) -> None:
    name = fake_backend(measures=True)
    assert backends.measures_host(name) and backends.repeat_jobs(name, 8, jobs=4) == 1
    result = backends.run(quickstart(), name, repeats=3, jobs=4)
    assert [r.extra["pid"] for r in result.runs] == [os.getpid()] * 3


@pytest.mark.filterwarnings("ignore:the fake backend warns")
def test_run_jobs_on_a_measuring_backend_says_it_runs_one_at_a_time(fake_backend: Any, tmp_path: Path) -> None:
    name = fake_backend(measures=True)
    res = CliRunner().invoke(app, ["run", str(QUICKSTART), "-b", name, "-n", "2", "-j", "2",
                                   "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert f"note: backend {name!r} measures this machine; running one repeat at a time (not --jobs 2)" in res.output
    assert [r.extra["pid"] for r in RunResult.load(tmp_path / "r").runs] == [os.getpid()] * 2


# --- on a pool ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pool_runs_repeats_in_other_processes_with_their_progress_and_warnings(fake_backend: Any,
                                                                              tmp_path: Path) -> None:
    name = fake_backend(measures=False)
    ticks: list[float] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        result = backends.run(quickstart(), name, repeats=4, jobs=2, out=tmp_path / "r", advance=ticks.append)
    pids = {r.extra["pid"] for r in result.runs}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert [r.run for r in result.runs] == [0, 1, 2, 3]
    assert sum(ticks) == 40  # every repeat's progress reached this process
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == ["the fake backend warns"]
    assert_same_result(RunResult.load(tmp_path / "r"), result)


@pytest.mark.slow
def test_an_error_in_one_repeat_surfaces_with_its_message_and_the_finished_ones_are_kept(
        fake_backend: Any, tmp_path: Path) -> None:
    name = fake_backend(measures=False, boom=(1,), slow=(0,))
    with pytest.raises(RuntimeError, match="boom in repeat 1"):
        backends.run(quickstart(), name, repeats=3, jobs=2, out=tmp_path / "r")
    # repeat 0, still running when repeat 1 failed, finished and was kept, as a serial run keeps it
    kept = [r.run for r in RunResult.load(tmp_path / "r").runs]
    assert 0 in kept and 1 not in kept


@pytest.mark.slow
def test_timing_only_repeats_on_two_processes_equal_the_serial_run(tmp_path: Path) -> None:
    sc = quickstart("sim.numerics=false", "stop.max_updates=1500")
    serial = backends.run(sc, "sim", repeats=3, jobs=1)
    assert_same_result(serial, backends.run(sc, "sim", repeats=3, jobs=2))
    for jobs in ("1", "2"):  # through the CLI, which also records each result's bands in its folder
        res = CliRunner().invoke(app, ["run", str(QUICKSTART), "-s", "sim.numerics=false", "-s",
                                       "stop.max_updates=1500", "-n", "3", "-j", jobs, "-o", str(tmp_path / f"j{jobs}")])
        assert res.exit_code == 0, res.output
        assert "note:" not in res.output
    pooled = RunResult.load(tmp_path / "j2")
    assert len(pooled.updates) and pooled.updates["run"].is_monotonic_increasing
    assert_same_result(RunResult.load(tmp_path / "j1"), pooled)


@pytest.mark.slow
def test_repeats_with_numerics_on_two_processes_equal_the_serial_run(tmp_path: Path) -> None:
    sc = quickstart("stop.max_updates=300", "stop.epsilon=0.0")
    ticks: dict[int, list[float]] = {1: [], 2: []}
    serial = backends.run(sc, "sim", repeats=2, jobs=1, advance=ticks[1].append)
    pooled = backends.run(sc, "sim", repeats=2, jobs=2, out=tmp_path / "r", advance=ticks[2].append)
    assert_same_result(serial, pooled)
    assert pooled.curve["loss"].notna().all() and len(pooled.curve) > 4
    assert_same_result(RunResult.load(tmp_path / "r"), serial)
    assert sum(ticks[1]) == sum(ticks[2]) > 0
