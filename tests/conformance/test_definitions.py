"""The registry's definitions, and their validation applied by the loader for every backend."""

from __future__ import annotations

import typing

import pytest

from simasgd.spec import algorithms, loader
from simasgd.spec.loader import ScenarioError
from simasgd.spec.scenario import ALGORITHM_MODELS, BackoffConfig

NAMES = list(algorithms.ALGORITHMS)


@pytest.mark.parametrize("name", NAMES)
def test_worker_bounds_are_refused_at_load_time(name: str) -> None:
    d = algorithms.ALGORITHMS[name]
    if d.min_workers > 1:
        with pytest.raises(ScenarioError, match=rf"workers.count = {d.min_workers - 1}: algorithm '{name}' needs "
                                                rf">= {d.min_workers}"):
            loader.from_dict({"workers": {"count": d.min_workers - 1}, "algorithm": {"name": name}})
    if d.max_workers is not None:
        with pytest.raises(ScenarioError, match=rf"algorithm '{name}' runs at most {d.max_workers}"):
            loader.from_dict({"workers": {"count": d.max_workers + 1}, "algorithm": {"name": name}})
    ok = max(d.min_workers, 2) if d.max_workers is None else d.max_workers
    assert loader.from_dict({"workers": {"count": ok}, "algorithm": {"name": name}}).workers.count == ok


def test_lopez_needs_a_master_and_a_worker_on_every_backend() -> None:
    # Refused by the definition when the scenario is validated, before any backend sees it.
    with pytest.raises(ScenarioError, match=r"workers.count = 1: algorithm 'lopez' needs >= 2 \(worker 0 is the"):
        loader.from_dict({"workers": {"count": 1}, "algorithm": {"name": "lopez"}})


def test_parameter_relations() -> None:
    with pytest.raises(ScenarioError, match="algorithm.k = 3 exceeds workers.count = 2"):
        loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "k_async", "k": 3}})
    with pytest.raises(ScenarioError, match="algorithm.backup = 2 must be < workers.count = 2"):
        loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "backup", "backup": 2}})


def test_allowed_values_are_the_scenario_types() -> None:
    # The registry's allowed values are what the scenario schema accepts for them.
    prio = algorithms.ALGORITHMS["rwlock"].param("priority").allowed
    priority = ALGORITHM_MODELS["rwlock"].model_fields["priority"].annotation
    assert set(typing.get_args(typing.get_args(priority)[0])) == set(prio)
    assert set(typing.get_args(BackoffConfig.model_fields["kind"].annotation)) == set(algorithms.BACKOFF_KINDS)


@pytest.mark.parametrize("name", NAMES)
def test_row_contract_is_complete(name: str) -> None:
    d = algorithms.ALGORITHMS[name]
    assert d.rows.per in ("update", "gradient") and d.applies in typing.get_args(algorithms.Applies)
    sc = loader.from_dict({"workers": {"count": max(d.min_workers, d.max_workers or 2)}, "algorithm": {"name": name}})
    c = d.rows.per_version(sc.algorithm, sc.workers.count)
    # One row per update: exactly one applied row a version. Per gradient: a count or "any" (None).
    assert c == 1 if d.rows.per == "update" else (c is None or 1 <= c <= sc.workers.count)


@pytest.mark.parametrize("given,target", [({}, False), ({"epsilon": 0}, False), ({"epsilon": 0.05}, True)])
def test_epsilon_zero_or_left_out_means_no_target(given: dict, target: bool) -> None:
    sc = loader.from_dict({"stop": given})
    assert sc.stop.has_target is target
