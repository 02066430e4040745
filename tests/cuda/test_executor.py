"""The cuda backend under the simulator: rows and staleness from the device's version counter,
atomic sums that lose nothing, the update rule through the step kernel, and the refusal without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simasgd.numerics.workloads.constant import STEP, ConstWorkload, first_loss
from simasgd.runs import backends

ROOT = Path(__file__).resolve().parents[2]


def _run(sc: Any, wl: Any = None) -> Any:
    if wl is None:
        return backends.load("cuda").run_once(sc, 0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("simasgd.numerics.workloads.build_workload", lambda cfg, seed, base_dir=None: wl)
        return backends.load("cuda").run_once(sc, 0)


@pytest.fixture(scope="module")
def hogwild_mlp(cuda: Any, tiny: Any) -> Any:
    return _run(tiny("mlp", workers={"count": 3}))


@pytest.mark.slow
def test_hogwild_rows_carry_the_device_versions(hogwild_mlp: Any) -> None:
    r = hogwild_mlp
    u, run = r.updates, r.runs[0]
    assert run.updates == 12 and len(u) == 12 and u["applied"].all()
    np.testing.assert_array_equal(np.sort(u["version"]), np.arange(1, 13))  # one atomic increment each
    assert (u["staleness"] == u["version"] - 1 - u["read_version"]).all()
    assert (u["staleness"] >= 0).all() and (u["read_version"] >= 0).all()
    assert set(u["worker"]) <= {0, 1, 2}
    assert (u["t_start"] <= u["t_grad_start"]).all() and (u["t_grad_end"] <= u["t_write"]).all()
    assert r.metadata["gradient_on_device"] is True
    assert r.curve["updates"].iloc[-1] == 12 and np.isfinite(r.curve["loss"]).all()


@pytest.mark.slow
def test_hogwild_staleness_is_what_the_streams_interleaving_made(hogwild_mlp: Any) -> None:
    # Each row's read version is the number of increments that had happened when it read; a row's
    # staleness counts the versions of *other* rows made between its read and its write (docs/results.md).
    u = hogwild_mlp.updates
    for _, row in u.iterrows():
        others = u[(u["worker"] != row["worker"]) & (u["version"] > row["read_version"])
                   & (u["version"] < row["version"])]
        assert len(others) == row["staleness"]


@pytest.mark.parametrize("workers", [3])
@pytest.mark.slow
def test_sync_sums_every_gradient_exactly(cuda: Any, tiny: Any, workers: int) -> None:
    # θ0 = 1 and G·lr = 2⁻¹⁶: the mean of the workers' atomically summed gradients is exact, so a lost
    # or doubled atomic add would move θ off 1 − N·2⁻¹⁶.
    sc = tiny("mlp", workers={"count": workers}, algorithm={"name": "sync"},
              optimizer={"lr": 2.0 ** -8}, stop={"max_updates": 10, "eval_every_updates": 5})
    r = _run(sc, ConstWorkload(dim=40, loss_kernel=first_loss))
    u = r.updates
    assert r.runs[0].updates == 10 and len(u) == 10 * workers
    assert (u["staleness"] == 0).all() and (u.groupby("version")["worker"].nunique() == workers).all()
    assert r.curve["loss"].iloc[-1] == 1.0 - 10 * STEP


def test_atomic_accumulation_from_many_streams_loses_nothing(cuda: Any) -> None:
    from executors.cuda import kernels as K
    from executors.cuda.model import launch

    d, n = 70, 6
    total = cuda.to_device(np.zeros(d))
    streams = [cuda.stream() for _ in range(n)]
    gs = [cuda.to_device(np.full(d, 2.0 ** -(w + 1))) for w in range(n)]
    for _ in range(3):
        for s, g in zip(streams, gs, strict=False):
            launch(K.accumulate, d, s, total, g)
    for s in streams:
        s.synchronize()
    assert (total.copy_to_host() == 3 * sum(2.0 ** -(w + 1) for w in range(n))).all()


@pytest.mark.slow
def test_leashed_drops_past_persistence_and_applies_each_version_once(cuda: Any, tiny: Any) -> None:
    sc = tiny("mlp", workers={"count": 3}, algorithm={"name": "leashed", "persistence": 0},
              optimizer={"lr": 2.0 ** -8}, stop={"max_updates": 15, "eval_every_updates": 5})
    r = _run(sc, ConstWorkload(dim=24, loss_kernel=first_loss))
    u = r.updates
    a = u[u["applied"]]
    np.testing.assert_array_equal(np.sort(a["version"]), np.arange(1, r.runs[0].updates + 1))
    assert (u["retries"] <= 1).all() and (u.loc[~u["applied"], "retries"] == 1).all()
    dropped = u[~u["applied"]]
    assert (dropped["version"] >= dropped["read_version"] + 1).all()
    assert r.curve["loss"].iloc[-1] == 1.0 - r.runs[0].updates * STEP  # each applied update exactly once


@pytest.mark.parametrize("aware,expected", [(True, (0.5, 0.0, -0.375)), (False, (0.5, -0.25, -1.125))])
def test_step_kernel_gives_the_hand_computed_sequence(cuda: Any, aware: bool, expected: tuple[float, ...]) -> None:
    # tests/conformance/test_update_rule.py's sequence: lr = m = 0.5, g = 1, staleness 0, 2, 4.
    from executors.cuda import kernels as K
    from executors.cuda.model import launch

    d = 20
    s = cuda.stream()
    theta, vel, g = cuda.to_device(np.ones(d)), cuda.to_device(np.zeros(d)), cuda.to_device(np.ones(d))
    for i, (tau, want) in enumerate(zip((0, 2, 4), expected, strict=False)):
        recr, recv = cuda.to_device(np.array([0], np.int64)), cuda.to_device(np.array([tau], np.int64))
        launch(K.step, d, s, theta, vel, g, 1.0, 0.5, 0.5, aware, recv, recr, 0)
        s.synchronize()
        assert (theta.copy_to_host() == want).all(), (i, theta.copy_to_host()[:3])


@pytest.mark.slow
def test_without_gpu_or_simulator_the_backend_says_so_in_one_line(tmp_path: Path) -> None:
    if Path("/dev/nvidia0").exists() or os.environ.get("SIMASGD_TEST_GPU", "0") not in ("", "0"):
        pytest.skip("this machine has a GPU: the refusal cannot happen here")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    p = subprocess.run([sys.executable, "-m", "simasgd.cli", "run", str(ROOT / "scenarios/quickstart.toml"),
                        "--backend", "cuda", "-s", "algorithm.name=hogwild", "--out", str(tmp_path / "r")], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "no CUDA GPU" in lines[0] and "NUMBA_ENABLE_CUDASIM=1" in lines[0], p.stderr


# The paper's GPU scenario (Lopez et al. 2020, a CNN, a stream per worker) through the command line, as a user
# types it, shrunk for the simulator: there every CUDA thread is a Python thread, seconds a CNN update.
UPDATES = 2
SMALL_OVERRIDES = ["-s", "workers.count=2", "-s", "algorithm.name=hogwild", "-s", "workload.features=108",
                   "-s", "workload.layers=[3,3,2,4]", "-s", "workload.batch_size=4", "-s", "workload.samples=40",
                   "-s", "workload.eval_rows=16", "-s", "workload.dtype=float64", "-s", f"stop.max_updates={UPDATES}",
                   "-s", "stop.max_time_s=600", "-s", "repeats=1"]


@pytest.mark.slow
def test_the_gpu_scenario_runs_from_the_command_line_under_the_simulator(tmp_path: Path) -> None:
    from simasgd.runs.results import RunResult

    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    p = subprocess.run([sys.executable, "-m", "simasgd.cli", "run", "scenarios/lopez2020/gpu_streams.toml",
                        "--backend", "cuda", *SMALL_OVERRIDES, "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    r = RunResult.load(tmp_path / "r")
    assert r.backend == "cuda" and r.runs[0].updates == UPDATES and len(r.updates) == UPDATES
    assert r.metadata["device"]["simulator"] is True and r.metadata["gradient_on_device"] is True


def test_the_backend_lists_the_loops_it_has(cuda: Any) -> None:
    from executors.cuda import IMPLEMENTATIONS, backend

    assert frozenset(IMPLEMENTATIONS) == backend.ALGORITHMS
    for name, ref in IMPLEMENTATIONS.items():  # every entry is a loop that exists (the lazy import loads it)
        assert callable(ref.load()), name


@pytest.mark.slow
def test_listing_the_backend_imports_no_numba_cuda() -> None:
    code = ("import sys; from simasgd.runs import backends; m = backends.load('cuda'); "
            "assert 'numba.cuda' not in sys.modules, 'numba.cuda imported'; print(sorted(m.ALGORITHMS))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr[-1500:]
    assert "lopez" in p.stdout and "sync" in p.stdout


def _signature(a: Any) -> tuple[Any, ...]:
    """What numba compiles a kernel for: an array's dtype, rank and contiguity, a scalar's type."""
    if hasattr(a, "dtype") and hasattr(a, "ndim") and getattr(a, "ndim", 0) > 0:
        c = a.is_c_contiguous() if hasattr(a, "is_c_contiguous") else bool(np.asarray(a).flags.c_contiguous)
        return ("array", str(a.dtype), a.ndim, c)
    return ("scalar", str(a.dtype) if hasattr(a, "dtype") else type(a).__name__)


@pytest.mark.parametrize("model,algorithm", [("mlp", {"name": "sync"}), ("mlp", {"name": "leashed", "persistence": 0}),
                                             ("mlp", {"name": "lopez"}), ("mlp", {"name": "hogwild"})])
@pytest.mark.slow
def test_the_rehearsal_launches_every_kernel_signature_the_run_launches(cuda: Any, tiny: Any, model: str,
                                                                          algorithm: dict[str, Any]) -> None:
    # numba compiles a kernel at its first launch with each signature of argument types; a launch in the
    # timed run with a signature the rehearsal did not launch is a compile counted as the algorithm's time.
    from executors.cuda import kernels as K
    from executors.cuda import runner

    phases: list[set[tuple[Any, ...]]] = []
    dispatcher = type(K.step)
    getitem = dispatcher.__getitem__

    def recording(kernel: Any, config: Any) -> Any:
        launcher = getitem(kernel, config)
        name = getattr(kernel, "__name__", None) or kernel.py_func.__name__

        def launch(*args: Any) -> Any:
            phases[-1].add((name, *map(_signature, args)))
            return launcher(*args)
        return launch

    run = runner._run

    def phase(*args: Any) -> Any:
        phases.append(set())
        return run(*args)

    sc = tiny(model, workers={"count": 2}, algorithm=algorithm, stop={"max_updates": 8, "eval_every_updates": 4})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dispatcher, "__getitem__", recording)
        mp.setattr(runner, "_run", phase)
        mp.setattr(runner, "_REHEARSED", set())
        mp.setattr(runner, "REHEARSE_ON_SIMULATOR", True)  # the simulator compiles nothing; a GPU would
        _run(sc)
        assert len(runner._REHEARSED) == 1, "the scenario is not rehearsed again in this process"
    assert len(phases) == 2, "one rehearsal, then the run"
    rehearsed, timed = phases
    assert timed, "the runs launched nothing"
    assert timed <= rehearsed, sorted(timed - rehearsed)
