"""Fixtures shared across the test folders (tests never import each other's modules)."""

from __future__ import annotations

import importlib.util
import json
import math
import os

# The cuda backend's tests (tests/cuda, and its pairs in tests/conformance) run under numba's CUDA
# simulator: set before numba is first imported (numba reads it then), unless SIMASGD_TEST_GPU=1 asks
# for the real GPU. Only numba.cuda reads it; the CPU kernels are unaffected.
if os.environ.get("SIMASGD_TEST_GPU", "0") in ("", "0"):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

# A scenario without [machine] simulates this machine's calibrated profile when one exists
# (simasgd.machines.machine.preset_of). Tests see a profile only where they write one (monkeypatch.setenv), so a
# developer's own profiles/this.toml never changes what they simulate: this path can never be a file.
os.environ["SIMASGD_PROFILE"] = os.path.join(os.devnull, "no-profile.toml")

# A run's repeats (and a sweep's tasks) go to a process pool of every CPU unless told: each pool costs
# seconds of spawned imports, more than a test's repeats take. Tests run them in this process unless they
# ask for processes (jobs=2, -j 2) or SIMASGD_JOBS is set from outside (SIMASGD_JOBS=2 to pool them all).
os.environ.setdefault("SIMASGD_JOBS", "1")

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numba import njit

from executors import atomics as A
from simasgd.numerics.workloads.constant import G
from simasgd.runs.results import RunResult, RunSummary, curve_frame, merge, updates_frame
from simasgd.spec import loader
from simasgd.spec.scenario import Scenario


@njit(nogil=True, cache=True)
def _jitter() -> None:
    """A random 0–20 µs: breaks the lock-step two equal threads fall into."""
    until = A.now_ns() + np.random.randint(0, 20_000)
    while A.now_ns() < until:
        A.cpu_relax()


@njit(nogil=True, cache=True)
def jitter_grad(theta, X, y, idx, grad_out, shape):
    """The constant gradient after a random 0–20 µs."""
    _jitter()
    for i in range(grad_out.shape[0]):
        grad_out[i] = G
    return 0.0


@njit(nogil=True, cache=True)
def echo_grad(theta, X, y, idx, grad_out, shape):
    """g = θ after a random 0–20 µs: each update is θ_v = θ_{v−1} − η·θ_{rv}, replayable from the records."""
    _jitter()
    for i in range(grad_out.shape[0]):
        grad_out[i] = theta[i]
    return 0.0


@pytest.fixture(scope="session")
def jitter_kernel() -> Any:
    """A kernel with the constant gradient ``G`` of :mod:`simasgd.numerics.workloads.constant`, after a random delay."""
    return jitter_grad


@pytest.fixture(scope="session")
def echo_kernel() -> Any:
    """A kernel whose gradient is θ itself, after a random delay (tests/executors/test_cpu_read_elision.py)."""
    return echo_grad


# --- updates frames with known phase durations (tests/test_phases.py, tests/test_fidelity.py) ---------

US = 1e-6
Duration = float | Callable[[np.random.Generator, int], np.ndarray]


def cycles(read: Duration = 10 * US, gradient: Duration = 200 * US, update: Duration = 5 * US,
           between: Duration = 3 * US, *, n: int = 200, workers: int = 2, runs: int = 2, run0: int = 0,
           rng: np.random.Generator | None = None) -> pd.DataFrame:
    """An updates frame whose attempts have exactly the given phase durations (constants or samplers)."""
    rng = rng or np.random.default_rng(0)

    def draw(d: Duration) -> np.ndarray:
        return d(rng, n) if callable(d) else np.full(n, float(d))

    parts = []
    for run in range(run0, run0 + runs):
        for w in range(workers):
            r, g, u, b = draw(read), draw(gradient), draw(update), draw(between)
            t0 = 1e-3 * w + np.concatenate([[0.0], np.cumsum(r + g + u + b)[:-1]])
            v = np.arange(1, n + 1)
            parts.append(updates_frame(run, w, v, v - 1, t0 + r, t0 + r + g + u, t_start=t0, t_grad_start=t0 + r,
                                       t_grad_end=t0 + r + g))
    return pd.concat(parts, ignore_index=True)


def as_result(updates: pd.DataFrame, backend: str, workers: int = 2) -> RunResult:
    """A saveable RunResult around an updates frame (one summary per run; same scenario for every backend)."""
    sc = Scenario(workers={"count": workers}, algorithm={"name": "hogwild"})
    parts = []
    for run, u in updates.groupby("run"):
        time_s = float(u["t_write"].max())
        s = RunSummary(run=int(run), updates=len(u), time_s=time_s, updates_to_eps=None, time_to_eps=None,
                       crashed=False, not_reached=True, initial_loss=1.0, final_loss=0.5, mean_staleness=0.0,
                       attempts=len(u), updates_per_s=len(u) / time_s)
        parts.append(RunResult(sc.to_dict(), backend, [s], u.reset_index(drop=True),
                               curve_frame(int(run), [0.0, time_s], [0, len(u)], [1.0, 0.5]),
                               {"scenario_hash": sc.hash, "backend": backend}))
    return merge(parts)


@pytest.fixture(scope="session", name="cycles")
def cycles_fixture() -> Callable[..., pd.DataFrame]:
    """``cycles(read, gradient, update, between, *, n, workers, runs, run0, rng)``: an updates frame."""
    return cycles


@pytest.fixture(scope="session", name="as_result")
def as_result_fixture() -> Callable[..., RunResult]:
    """``as_result(updates, backend, workers=2)``: a saveable RunResult around an updates frame."""
    return as_result


# --- RunResults from staleness samples (tests/test_analysis.py, test_fidelity.py, test_plots.py) ----

VERSION_OFFSET = 1 << 20


def make_result(samples: list[np.ndarray], workers: int = 4, rates: list[float] | None = None,
                backend: str = "sim", updates_to_eps: list[int | None] | None = None,
                scenario: Scenario | None = None, worker_of: list[np.ndarray] | None = None) -> RunResult:
    """One run per staleness sample; updates round-robin over workers (or ``worker_of``); time from the rate."""
    sc = scenario or Scenario(workers={"count": workers}, algorithm={"name": "hogwild"})
    parts = []
    for i, tau in enumerate(samples):
        tau = np.asarray(tau, dtype=np.int64)
        n = len(tau)
        rate = rates[i] if rates else 1000.0
        time_s = n / rate
        # the same versions in every run of n updates (a real run's are 1..n), offset so that every
        # read version v − 1 − τ stays ≥ 0 (fidelity compares runs over the versions they all made)
        v = np.arange(1, n + 1) + VERSION_OFFSET
        w = worker_of[i] if worker_of else np.arange(n) % workers
        t = np.linspace(0, time_s, n)
        upd = updates_frame(i, w, v, v - 1 - tau, t, t)
        eps = updates_to_eps[i] if updates_to_eps else None
        summary = RunSummary(run=i, updates=n, time_s=time_s, updates_to_eps=eps,
                             time_to_eps=None if eps is None else eps / rate, crashed=False,
                             not_reached=eps is None, initial_loss=1.0, final_loss=0.1,
                             mean_staleness=float(np.mean(tau)), attempts=n, updates_per_s=rate)
        parts.append(RunResult(sc.to_dict(), backend, [summary], upd,
                               curve_frame(i, [0.0, time_s], [0, n], [1.0, 0.1]),
                               {"scenario_hash": sc.hash, "backend": backend}))
    return merge(parts)


def geometric(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """docs/theory.md: τ ~ Geometric on {0, 1, …} with P(τ=k) = (1/M)(1 − 1/M)^k."""
    return rng.geometric(1.0 / m, size=n) - 1


@pytest.fixture(scope="session", name="make_result")
def make_result_fixture() -> Callable[..., RunResult]:
    """``make_result(samples, workers=4, rates=None, backend="sim", updates_to_eps=None, scenario=None,
    worker_of=None)``: one run per staleness sample."""
    return make_result


@pytest.fixture(scope="session", name="geometric")
def geometric_fixture() -> Callable[[np.random.Generator, int, int], np.ndarray]:
    """``geometric(rng, m, n)``: n draws of docs/theory.md's staleness of M workers."""
    return geometric


# --- a two-CPU machine profile with one gradient table (tests/sim/test_sim_*.py) -----------------

def two_cpu_profile(path: Path, key: str, batch: int, samples_s: list[float], concurrent: dict[str, Any]) -> Path:
    """Write a ``this`` profile: a 2-core machine and ``[gradient."<key>"]`` with ``samples_s`` and a
    ``concurrent`` sub-table (``k2`` samples, and whatever else the test calibrates)."""
    lines = ["[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1", "local_latency_ns = 90.0",
             "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0", "link_bandwidth_gbs = 10.0",
             "gflops_per_core = 1.0", "quantum_s = 0.004", "context_switch_s = 2e-6", "",
             f'[gradient."{key}"]', f"batch_size = {batch}", f"samples_s = {list(samples_s)}", "",
             f'[gradient."{key}".concurrent]'] + [f"{k} = {v!r}" for k, v in concurrent.items()] + [""]
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="session", name="two_cpu_profile")
def two_cpu_profile_fixture() -> Callable[..., Path]:
    """``two_cpu_profile(path, key, batch, samples_s, concurrent)``: a 2-CPU ``this`` profile file."""
    return two_cpu_profile


def tiny(model: str, **over: Any) -> Scenario:
    """A tiny scenario: a 6-5-3 mlp, or a 3-filter cnn on 3×6×6 images, batch 4."""
    wl = ({"model": "mlp", "layers": [6, 5, 3], "features": 6} if model == "mlp" else
          {"model": "cnn", "layers": [3, 3, 2, 4], "features": 3 * 6 * 6})
    doc: dict[str, Any] = {"name": f"tiny-{model}", "seed": 5, "workers": {"count": 2},
                           "workload": {**wl, "dataset": "synthetic", "classes": 3, "samples": 40,
                                        "batch_size": 4, "eval_rows": 16},
                           "algorithm": {"name": "hogwild"}, "optimizer": {"lr": 0.05},
                           "stop": {"max_updates": 12, "eval_every_updates": 6, "max_time_s": 120}}
    for k, v in over.items():
        doc[k] = {**doc.get(k, {}), **v} if isinstance(v, dict) else v
    return loader.from_dict(doc)


@pytest.fixture(scope="session", name="tiny")
def tiny_fixture() -> Any:
    """``tiny(model, **overrides)``: a tiny scenario (``model`` = "mlp" | "cnn")."""
    return tiny


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module: the benchmarks are scripts, not a package."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session", name="benchmark_script")
def benchmark_script_fixture() -> Callable[[str], ModuleType]:
    """``benchmark_script(name)``: ``benchmarks/<name>.py`` loaded as a module."""
    return load_benchmark


# --- the longest files first --------------------------------------------------------------------------
# scripts/test.sh hands each xdist worker a whole file (--dist loadfile), in the order collected: a long file
# handed out last keeps one CPU busy while the others sit idle. tests/durations.json holds each file's
# seconds from a whole run (`bash scripts/test.sh --store-durations`, hardware tests left out: they run
# alone); a file it does not know goes first. The order of the tests within a file is kept.

DURATIONS = Path(__file__).with_name("durations.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help="write each file's seconds (tests not marked hardware) into tests/durations.json")


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    known: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    items.sort(key=lambda item: -known.get(_file_of(item.nodeid), math.inf))


_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "hardware" not in report.keywords:
        file = _file_of(report.nodeid)
        _seconds[file] = _seconds.get(file, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not config.getoption("--store-durations") or hasattr(config, "workerinput") or not _seconds:
        return  # asked for, once, by the process that saw every report (xdist's controller, or a plain run)
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    known.update({f: round(s, 1) for f, s in _seconds.items()})
    tmp = DURATIONS.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")
    tmp.replace(DURATIONS)
