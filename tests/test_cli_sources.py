"""``simasgd config --sources``: each key of the resolved scenario, its value and where the value comes from."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.spec.loader import parse_value

REPO = Path(__file__).resolve().parents[1]
QUICK = REPO / "scenarios" / "quickstart.toml"
runner = CliRunner()


def sources(path: Path, *overrides: str) -> dict[str, tuple[str, str]]:
    """key -> (value as printed, source), from the command's output."""
    args = ["config", str(path), "--sources"] + [a for o in overrides for a in ("-s", o)]
    res = runner.invoke(app, args, env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if line and not line.startswith("#")]
    head = lines[0]
    at_value, at_source = head.index("value"), head.index("source")
    return {line[:at_value].strip(): (line[at_value:at_source].strip(), line[at_source:].strip())
            for line in lines[1:]}


def toml_value(text: str) -> Any:
    return tomllib.loads(f"v = {text}")["v"]


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def test_a_file_value_an_override_and_a_default_each_name_their_origin() -> None:
    rows = sources(QUICK, "stop.max_updates=300")
    assert rows["workers.count"] == ("4", str(QUICK))  # quickstart.toml: [workers] count = 4
    assert rows["stop.max_updates"] == ("300", "-s stop.max_updates=300")  # the file's 4000, overridden
    assert rows["optimizer.staleness_aware"] == ("false", "default")  # the file has no such key
    assert rows["stop.explode_factor"][1] == "default"


def test_the_last_override_of_a_key_wins_and_a_table_override_gives_only_its_own_keys() -> None:
    rows = sources(QUICK, "workers.count=2", "workers.count=3", "sim={numerics=false}")
    assert rows["workers.count"] == ("3", "-s workers.count=3")
    assert rows["sim.numerics"] == ("false", "-s sim={numerics=false}")
    assert rows["sim.read_chunks"][1] == "default"  # replaced table: the key it leaves out is the schema's
    assert rows["workers.placement"] == ('"os"', str(QUICK))  # the file's other keys of [workers] stay


def test_a_table_given_as_one_value_gives_its_keys_and_a_file_without_name_is_named_after_it(tmp_path: Path) -> None:
    sc = tmp_path / "bare.toml"
    sc.write_text('[algorithm]\nname = "mutex"\nbackoff = "none"\n[sweep.grid]\nworkers.count = [1, 2]\n')
    rows = sources(sc)
    assert rows["name"] == ('"bare"', f"{sc} (its file name)")
    assert {rows[f"algorithm.backoff.{k}"][1] for k in ("kind", "initial_s", "max_s", "start")} == {str(sc)}
    assert rows["sweep.grid.workers.count"] == ("[1, 2]", str(sc))
    assert rows["workers.count"] == ("1", "default")


def test_every_source_agrees_with_what_it_gave_and_the_values_are_configs(tmp_path: Path) -> None:
    """A key from the file has the file's value, one from -s the override's; a default is given by neither; the
    values are those `simasgd config` prints (one resolution, not a second guess)."""
    overrides = ("optimizer.lr=0.01", "stop={epsilon=0.2}", "workers.placement=uma")
    rows = sources(QUICK, *overrides)
    given = flat(tomllib.loads(QUICK.read_text()))
    for item in overrides:
        key, _, value = item.partition("=")
        for k in [k for k in given if k.startswith(key + ".")]:
            del given[k]
        parsed = parse_value(value)  # as the loader reads it: a bare word is a string
        given.update(flat(parsed, key + ".") if isinstance(parsed, dict) else {key: parsed})
    for key, (value, source) in rows.items():
        if source == "default":
            assert not any(key == g or key.startswith(g + ".") for g in given), key
        elif value != "not set" and key in given:
            assert toml_value(value) == given[key], (key, value, given[key])
    assert rows["stop.max_updates"][1] == "default"  # the -s stop table replaced the file's [stop]
    printed = runner.invoke(app, ["config", str(QUICK)] + [a for o in overrides for a in ("-s", o)])
    assert printed.exit_code == 0, printed.output
    resolved = flat(tomllib.loads(printed.output))
    assert resolved and all(toml_value(rows[k][0]) == v for k, v in resolved.items()), resolved
    assert {k for k, (v, _) in rows.items() if v != "not set" and "not set" not in v} == set(resolved)


def test_sources_of_a_bad_scenario_exit_2_naming_the_key() -> None:
    res = runner.invoke(app, ["config", str(QUICK), "--sources", "-s", "workers.count=0"])
    assert res.exit_code == 2 and "workers.count" in res.output and "Traceback" not in res.output
