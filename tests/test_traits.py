"""Executor traits belong to backends (simasgd/spec/traits.py): what each declares, how a scenario names whose
the simulator models, the [sim] keys they replaced, and compare's choice of the reference's traits."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from simasgd.evaluation import fidelity
from simasgd.runs import backends
from simasgd.spec import loader
from simasgd.spec.scenario import REMOVED, SimConfig
from simasgd.spec.traits import ExecutorTraits, describe

REMOVED_SIM_KEYS = ("read_elision", "loss_snapshots", "bookkeeping", "spin_before_yield", "lock_waiters")


def test_the_cpu_and_torch_executors_declare_what_their_workers_do() -> None:
    assert backends.traits("cpu") == ExecutorTraits(reads="elided", lock_waiters="spin_pauses", snapshots=True,
                                                    bookkeeping="nopython", updates="mirrored")
    assert backends.traits("torch") == ExecutorTraits(reads="copy", lock_waiters="sleep", snapshots=True,
                                                      bookkeeping="python", updates="plain")


@pytest.mark.parametrize("name", ["sim", "serial", "cuda", "gpu", "dist"])
def test_backends_the_simulator_models_no_cpu_executor_of_declare_none(name: str) -> None:
    if not backends.available()[name]:
        pytest.skip(f"backend {name} is not in this build")
    assert backends.traits(name) is None


def test_sim_traits_allows_exactly_the_backends_that_declare_traits() -> None:
    allowed = set(typing.get_args(SimConfig.model_fields["traits"].annotation))
    assert allowed == set(backends.with_traits()) == {"cpu", "torch"}
    assert SimConfig().traits == "cpu"


def test_another_value_of_sim_traits_is_refused_naming_the_key_and_the_allowed_values() -> None:
    with pytest.raises(loader.ScenarioError) as e:
        loader.from_dict({"sim": {"traits": "cuda"}}, label="s.toml")
    (line,) = e.value.problems
    assert line.startswith('s.toml: sim.traits = "cuda": must be one of') and "'cpu'" in line and "'torch'" in line


@pytest.mark.parametrize("key", REMOVED_SIM_KEYS)
def test_a_removed_sim_key_is_refused_naming_it_and_sim_traits(tmp_path: Path, key: str) -> None:
    path = tmp_path / "old.toml"
    path.write_text(f"[sim]\n{key} = false\n")
    with pytest.raises(loader.ScenarioError) as e:
        loader.load(path)
    (line,) = e.value.problems
    assert line.startswith(f"{path}: sim.{key}: removed") and '[sim] traits = "cpu" or "torch"' in line
    with pytest.raises(loader.ScenarioError) as e:  # the same for -s
        loader.load(tmp_path / "old.toml", [f"sim.{key}=true"])
    assert f"sim.{key}: removed" in e.value.problems[0]
    assert f"sim.{key}" in REMOVED


def test_a_stored_scenario_loads_again_without_the_removed_keys() -> None:
    old = loader.from_dict({}).to_dict()
    old["sim"] = {**{k: v for k, v in old["sim"].items() if k != "traits"}, **dict.fromkeys(REMOVED_SIM_KEYS, True)}
    with pytest.raises(loader.ScenarioError):
        loader.from_dict(old)
    again = loader.from_dict(loader.without_removed(old))
    assert again.sim.traits == "cpu" and "read_elision" in old["sim"]  # the stored record itself is untouched


def test_the_traits_describe_whose_they_are() -> None:
    line = describe(ExecutorTraits("copy", "sleep", True, "python").record("torch"))
    assert line.startswith("executor traits: torch's (reads copy, lock waiters sleep")
    assert "spin with pauses" in describe(backends.traits("cpu").record("cpu"))  # type: ignore[union-attr]
    assert "none" in describe(None)


@pytest.fixture
def profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profile file exists: compare against a measuring backend simulates preset "this" without calibrating."""
    from simasgd.machines import machine

    path = tmp_path / "this.toml"
    path.write_text("[machine]\nsockets = 1\n")
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    return path


@pytest.mark.parametrize(("pair", "whose"), [(["sim", "torch"], "torch"), (["torch", "sim"], "torch"),
                                             (["sim", "cpu"], "cpu"), (["sim", "serial"], "cpu")])
def test_compare_simulates_the_executor_of_the_backend_it_is_compared_with(
        profile: Path, pair: list[str], whose: str) -> None:
    sc = loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "mutex"}})
    sim = fidelity.sim_scenario(sc, pair)
    assert sim.sim.traits == whose
    assert fidelity.traits_of(pair) == (None if whose == "cpu" and "serial" in pair else whose)
    assert sc.sim.traits == "cpu"  # the scenario given is not changed
    diff = {k for k, _, _ in fidelity.scenario_diff(sim.to_dict(), sc.to_dict())}
    assert diff == ({"sim.traits"} if whose != "cpu" else set()) | ({"machine.preset"} if "serial" not in pair else set())
    assert {"sim.traits", "machine.preset"} <= set(fidelity.COMPARABLE_DIFFS)


def test_a_result_stored_with_a_removed_key_stays_comparable() -> None:
    """A reference measured before the keys were removed records them: compare still takes it, and says so."""
    from types import SimpleNamespace

    new = loader.from_dict({"workers": {"count": 2}, "algorithm": {"name": "mutex"}}).to_dict()
    old = {**new, "sim": {**{k: v for k, v in new["sim"].items() if k != "traits"}, "read_elision": True}}
    a, b = (SimpleNamespace(scenario=s, scenario_hash=None) for s in (new, old))
    assert {d.split(" = ")[0] for d in fidelity.check_comparable(a, b)} == {"sim.read_elision", "sim.traits"}
    other = SimpleNamespace(scenario={**old, "seed": 9}, scenario_hash=None)
    with pytest.raises(fidelity.FidelityError, match="seed"):
        fidelity.check_comparable(a, other)
