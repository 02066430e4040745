"""Scenario loading: overrides, one clear line per problem, and no traceback on junk."""

from __future__ import annotations

import math
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simasgd.spec import loader
from simasgd.spec.loader import ScenarioError, parse_value
from simasgd.spec.scenario import Scenario

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_quickstart_loads_and_is_frozen() -> None:
    sc = loader.load(REPO / "scenarios" / "quickstart.toml")
    assert sc.name == "quickstart" and sc.workers.count == 4
    with pytest.raises(ValidationError):
        sc.workers.count = 8  # type: ignore[misc]


def test_design_example_keys_all_accepted(tmp_path: Path) -> None:
    # A contract-style example using most tables (the scenario format: docs/reference/scenario.md).
    p = write(tmp_path, """
name = "mutex-8-threads"
seed = 42
repeats = 10
[machine]
sockets = 2
cores_per_socket = 8
threads_per_core = 2
local_latency_ns = 90
remote_latency_ns = 150
mem_bandwidth_gbs = 40
link_bandwidth_gbs = 16
[workers]
count = 8
placement = "numa"
stragglers = { count = 1, slowdown = 4.0 }
[workload]
model = "mlp"
layers = [784, 128, 128, 128, 10]
dataset = "digits"
batch_size = 64
[timing]
gradient = { dist = "exponential", mean_s = 1e-3 }
read     = { dist = "deterministic", mean_s = 0.0 }
update   = { dist = "deterministic", mean_s = 0.0 }
[algorithm]
name = "leashed"
persistence = 1
backoff = { kind = "exponential", initial_s = 1e-6, max_s = 1e-4 }
[optimizer]
lr = 0.005
momentum = 0.0
[stop]
epsilon = 0.05
max_time_s = 60
max_updates = 100000
[sim]
numerics = true
""")
    sc = loader.load(p)
    assert sc.algorithm.param("persistence") == 1
    assert sc.algorithm.param("backoff").kind == "exponential"
    assert sc.timing.gradient is not None and sc.timing.gradient.build().mean == pytest.approx(1e-3)


@pytest.mark.parametrize("text, value", [("16", 16), ("0.005", 0.005), ("inf", math.inf), ("[1,2]", [1, 2]),
                                          ("true", True), ("hogwild", "hogwild"), ('"x y"', "x y")])
def test_parse_value(text: str, value: object) -> None:
    assert parse_value(text) == value


def test_overrides_dotted_and_top_level(tmp_path: Path) -> None:
    p = write(tmp_path, '[algorithm]\nname = "mutex"\n[workers]\ncount = 2\n')
    sc = loader.load(p, ["workers.count=16", "repeats=3", "algorithm.name=leashed",
                         "algorithm.persistence=inf", "optimizer.lr=0.003"])
    assert (sc.workers.count, sc.repeats, sc.algorithm.name) == (16, 3, "leashed")
    assert sc.algorithm.param("persistence") == math.inf and sc.optimizer.lr == 0.003


def test_every_problem_reported_once_each_naming_file_key_value(tmp_path: Path) -> None:
    p = write(tmp_path, """
[workers]
count = 0
placment = "uma"
[algorithm]
name = "mutex"
persistence = 3
[optimizer]
lr = "fast"
""", name="bad.toml")
    with pytest.raises(ScenarioError) as ei:
        loader.load(p)
    lines = ei.value.problems
    assert f"{p}: workers.count = 0: must be an integer >= 1" in lines
    assert any(l.startswith(f"{p}: workers.placment: unknown key (allowed: count, placement") for l in lines)
    assert any(l.startswith(f"{p}: algorithm.persistence = 3:") and "not a parameter of 'mutex'" in l for l in lines)
    assert any(l.startswith(f'{p}: optimizer.lr = "fast": must be a number') for l in lines)
    assert len(lines) == 4


def test_unknown_top_level_and_algorithm_name(tmp_path: Path) -> None:
    p = write(tmp_path, 'seeed = 1\n[algorithm]\nname = "hogwlid"\n')
    with pytest.raises(ScenarioError) as ei:
        loader.load(p)
    text = str(ei.value)
    assert "seeed: unknown key" in text and "hogwild" in text and "unknown algorithm" in text


@pytest.mark.parametrize("key", ["stop.eval_every_s", "cpu.monitor_every_s"])
def test_keys_no_backend_reads_are_refused_not_ignored(key: str) -> None:
    """A key that nothing would act on is an unknown key, named with its file."""
    with pytest.raises(ScenarioError, match=rf"quickstart\.toml.*{key}"):
        loader.load(REPO / "scenarios" / "quickstart.toml", [f"{key}=0.5"])


PRUNED = ["sim.gradient_interference", "sim.shared_speed", "sim.write_convoys", "sim.leashed_destinations",
          "sim.socket_model", "sim.steps_in_cycle"]


@pytest.mark.parametrize("key", PRUNED)
def test_a_removed_mechanism_switch_is_refused_and_dropped_from_a_stored_scenario(key: str) -> None:
    """A scenario file that sets a switch whose mechanism left the model is refused, the line saying what
    the simulator does now; a scenario a result stored (every key of its day) loads again without it."""
    with pytest.raises(ScenarioError, match=rf"quickstart\.toml: {key}: removed from the model: "):
        loader.load(REPO / "scenarios" / "quickstart.toml", [f"{key}=true"])
    stored = loader.load(REPO / "scenarios" / "quickstart.toml").to_dict()
    stored["sim"][key.split(".")[1]] = False
    with pytest.raises(ScenarioError):
        loader.from_dict(stored)
    assert loader.from_dict(loader.without_removed(stored)).sim == Scenario().sim


def test_cross_checks(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="algorithm.k = 5 exceeds workers.count = 4"):
        loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "k_sync", "k": 5}})
    with pytest.raises(ScenarioError, match="sequential"):
        loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "sequential"}})


def test_file_problems_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        loader.load(tmp_path / "missing.toml")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        loader.load(write(tmp_path, "[workers\ncount = 1"))
    with pytest.raises(ScenarioError, match="expected KEY=VALUE"):
        loader.load(write(tmp_path, ""), ["workers.count"])


def test_hash_ignores_name_and_repeats_but_not_content() -> None:
    a = loader.from_dict({"name": "a", "repeats": 1})
    b = loader.from_dict({"name": "b", "repeats": 5})
    c = loader.from_dict({"optimizer": {"lr": 0.01}})
    assert a.hash == b.hash != c.hash


def test_to_dict_round_trips() -> None:
    sc = loader.from_dict({"workers": {"count": 3}, "algorithm": {"name": "leashed", "persistence": "inf"}})
    again = loader.from_dict(sc.to_dict())
    assert again == sc.model_copy(update={"base_dir": None}) and again.hash == sc.hash


# -- property test: junk in, clear lines out, never a traceback --------------------------------

_keys = st.sampled_from(["name", "seed", "repeats", "workers", "workload", "algorithm", "optimizer", "stop",
                         "timing", "machine", "sim", "bogus", "count", "lr", "dist", "persistence", "k"])
_scalars = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(string.printable, max_size=8),
                     st.booleans(), st.none())
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(_keys, inner, max_size=4)), max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=6))
@pytest.mark.slow
def test_junk_never_tracebacks(data: dict) -> None:
    try:
        sc = loader.from_dict(data, label="junk.toml")
    except ScenarioError as e:
        assert e.problems and all(line.startswith("junk.toml: ") for line in e.problems)
    else:
        assert isinstance(sc, Scenario)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_junk_text_files_never_traceback(tmp_path_factory, text: str) -> None:
    p = tmp_path_factory.mktemp("junk") / "j.toml"
    p.write_text(text)
    try:
        loader.load(p)
    except ScenarioError as e:
        assert all(str(p) in line for line in e.problems)
