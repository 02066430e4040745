"""Every (algorithm, backend) pair held to the algorithm's one definition (:mod:`simasgd.spec.algorithms`).

Pairs are discovered, not listed: every backend that is available
(``backends.available()``) contributes the names in its ``ALGORITHMS`` — or,
for a backend with ``RUNS_AS`` (serial, the reference), that one definition
whatever the scenario names. A new algorithm or backend gets these tests by
being registered. Runs use the constant-gradient workload
(:mod:`simasgd.numerics.workloads.constant`, loss = θ[0]) substituted for
``build_workload``, so θ after N updates has a closed form; each (pair,
variant) runs once per session and is shared by the tests that read it.
Real-thread pairs are marked ``hardware``; nothing here assumes that every
thread gets a CPU (the machine may have 2 for 3 threads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from simasgd.numerics.workloads.constant import LR, ConstWorkload, first_loss
from simasgd.runs import backends
from simasgd.runs.results import RunResult, RunSummary
from simasgd.spec import algorithms, loader
from simasgd.spec.scenario import Scenario

UPDATES = 200                 # the update budget of every run (epsilon left out: no ε stop)
# A Lopez master steps without waiting for gradients (tens of steps per gradient here): a budget of
# 200 steps would end most runs before the worker's first gradient lands.
UPDATES_BY_APPLIES = {"latest_sum": 50 * UPDATES}
UPDATES_ON = {"cuda": 60, "gpu": 16}  # where a run is slow: the cuda and gpu backends run under numba's CUDA simulator
MOMENTUM = 0.5
REAL_THREADS = {"cpu"}        # backends whose workers are OS threads

VARIANTS = {
    "plain": {},
    "momentum_aware": {"momentum": MOMENTUM, "staleness_aware": True},
}


PAIRS = backends.pairs()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking ``algorithm, backend`` runs for every pair (real-thread backends marked
    ``hardware``); one taking ``variant`` for every optimizer variant."""
    if {"algorithm", "backend"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("algorithm", "backend"), [
            pytest.param(a, b, id=f"{a}-{b}", marks=[pytest.mark.hardware] if b in REAL_THREADS else [])
            for a, b in PAIRS])
    if "variant" in metafunc.fixturenames:
        metafunc.parametrize("variant", list(VARIANTS))


def workers_for(d: algorithms.Definition) -> int:
    """Two workers where the definition allows (one for racy writes: θ then has a closed form)."""
    n = 1 if d.applies in ("racy", "elastic_racy") else 2
    return min(max(n, d.min_workers), d.max_workers or n)


def scenario_for(algorithm: str, backend: str, variant: str, params: tuple[tuple[str, Any], ...] = ()) -> Scenario:
    d = algorithms.ALGORITHMS[algorithm]
    updates = UPDATES_ON.get(backend) or UPDATES_BY_APPLIES.get(d.applies, UPDATES)
    return loader.from_dict({
        "name": f"conformance-{algorithm}-{backend}-{variant}", "seed": 11,
        "workers": {"count": workers_for(d), "placement": "os"},
        "workload": {"model": "least_squares", "batch_size": 1},  # replaced by the constant workload
        "algorithm": {"name": algorithm, **dict(params)},
        "optimizer": {"lr": LR, **VARIANTS[variant]},
        "stop": {"max_updates": updates, "max_time_s": 30.0, "eval_every_updates": updates // 4},
        "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3},
                   "read": {"dist": "deterministic", "mean_s": 1e-5},
                   "update": {"dist": "deterministic", "mean_s": 1e-5}},
        "sim": {"read_chunks": 4},
        "cpu": {"pin": False, "join_timeout_s": 10.0},
    })


@dataclass
class Outcome:
    scenario: Scenario
    definition: algorithms.Definition
    result: RunResult

    @property
    def run(self) -> RunSummary:
        return self.result.runs[0]

    @property
    def theta(self) -> float:
        """θ[0] after the run's last update (the loss of the constant workload here is θ[0])."""
        curve = self.result.curve
        assert int(curve["updates"].iloc[-1]) == self.run.updates, "the curve ends at the final version"
        return float(curve["loss"].iloc[-1])


_done: dict[tuple[str, str, str, tuple[tuple[str, Any], ...]], Outcome] = {}


@pytest.fixture(scope="session")
def outcome(jitter_kernel: Any) -> Any:
    """``outcome(algorithm, backend, variant, params)``: one run of the pair on the constant workload
    (``params``: algorithm parameters other than the defaults, as (key, value) pairs), cached."""

    def get(algorithm: str, backend: str, variant: str = "plain", params: tuple[tuple[str, Any], ...] = ()) -> Outcome:
        key = (algorithm, backend, variant, params)
        if key not in _done:
            sc = scenario_for(algorithm, backend, variant, params)
            wl = ConstWorkload(dim=16, kernel=jitter_kernel, loss_kernel=first_loss)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr("simasgd.numerics.workloads.build_workload", lambda cfg, seed, base_dir=None: wl)
                result = backends.load(backend).run_once(sc, 0)
            _done[key] = Outcome(sc, algorithms.ALGORITHMS[algorithm], result)
        return _done[key]

    return get
