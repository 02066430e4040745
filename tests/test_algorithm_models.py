"""``[algorithm]`` as a union of one model per algorithm, generated from the registry (simasgd/spec/algorithms.py)
and discriminated on ``name``: each model has exactly its definition's parameters, the schema says which,
and the loader's messages still name the key and what is allowed."""

from __future__ import annotations

import math
import typing

import pytest

from simasgd.spec import algorithms, loader
from simasgd.spec.loader import ScenarioError
from simasgd.spec.scenario import ALGORITHM_MODELS, AlgorithmConfig, Scenario


@pytest.mark.parametrize("name", algorithms.names())
def test_each_model_has_exactly_its_definitions_parameters(name: str) -> None:
    model = ALGORITHM_MODELS[name]
    assert issubclass(model, AlgorithmConfig)
    assert set(model.model_fields) - {"name"} == set(algorithms.ALGORITHMS[name].param_names)
    for p in algorithms.ALGORITHMS[name].params:
        if p.allowed and all(isinstance(a, str) for a in p.allowed) and not p.choice:
            # a string choice's type is the Literal of its allowed values (and None: not given)
            literal = typing.get_args(model.model_fields[p.name].annotation)[0]
            assert set(typing.get_args(literal)) == set(p.allowed), p.name


def test_the_schema_maps_every_name_to_its_own_model() -> None:
    schema = Scenario.model_json_schema()
    mapping = schema["properties"]["algorithm"]["discriminator"]["mapping"]
    assert set(mapping) == set(algorithms.names())
    for name, ref in mapping.items():
        props = schema["$defs"][ref.rsplit("/", 1)[-1]]["properties"]
        assert set(props) == {"name", *algorithms.ALGORITHMS[name].param_names}


@pytest.mark.parametrize("name", algorithms.names())
def test_a_loaded_algorithm_is_its_own_model_and_reads_defaults(name: str) -> None:
    d = algorithms.ALGORITHMS[name]
    workers = max(d.min_workers, 2) if d.max_workers is None or d.max_workers >= 2 else d.min_workers
    sc = loader.from_dict({"workers": {"count": workers}, "algorithm": {"name": name}})
    assert type(sc.algorithm) is ALGORITHM_MODELS[name]
    for p in d.params:
        got = sc.algorithm.param(p.name)
        if p.name == "persistence":
            assert got == (math.inf if p.default == "inf" else p.default)
        elif p.name == "backoff":
            assert got.kind == p.default
        else:
            assert got == p.default, p.name


def test_another_algorithms_parameter_is_refused_naming_what_this_one_takes() -> None:
    with pytest.raises(ScenarioError) as e:
        loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "mutex", "persistence": 3, "bogus": 1}})
    text = "\n".join(e.value.problems)
    assert "algorithm.persistence = 3: `persistence` is not a parameter of 'mutex' (it takes: backoff)" in text
    assert "algorithm.bogus = 1: `bogus` is not a parameter of 'mutex' (it takes: backoff)" in text


def test_an_unknown_or_missing_name_says_what_is_allowed() -> None:
    with pytest.raises(ScenarioError, match=r'algorithm.name = "hogwlid": unknown algorithm; allowed: sequential'):
        loader.from_dict({"algorithm": {"name": "hogwlid"}})
    with pytest.raises(ScenarioError, match=r"algorithm.name: required"):
        loader.from_dict({"algorithm": {}})


def test_a_value_error_inside_an_algorithm_names_the_key_without_the_union_tag() -> None:
    with pytest.raises(ScenarioError, match=r'algorithm.priority = "z": must be one of'):
        loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "rwlock", "priority": "z"}})
    with pytest.raises(ScenarioError, match=r"algorithm.backup = -1: must be an integer >= 0"):
        loader.from_dict({"workers": {"count": 3}, "algorithm": {"name": "backup", "backup": -1}})


def test_another_algorithms_parameter_reads_as_not_given() -> None:
    sc = loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "mutex"}})
    assert sc.algorithm.persistence is None and getattr(sc.algorithm, "onebit", False) is None
    with pytest.raises(AttributeError):
        _ = sc.algorithm.no_such_parameter
