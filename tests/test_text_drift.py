"""Text that names the code — keys in the docs, paths and backends in the CLI's help, the CLI reference, the
README's counts — held to the code it names."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.reference.cli_page import commands

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
WIDE = {"COLUMNS": "400"}  # no wrapping: a path or a list stays on one line


def invoke(*args: str, env: dict[str, str] | None = None) -> str:
    res = runner.invoke(app, list(args), env=env or WIDE)
    assert res.exit_code == 0, res.output
    return res.output


# --- scenario keys in the documentation -----------------------------------------------------------

def _members(ann: Any) -> list[Any]:
    """A field's annotation as the types it allows (unions, optionals and Annotated unwrapped)."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _members(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(ann) for m in _members(a)]
    return [ann]


def schema_keys() -> tuple[set[str], set[str]]:
    """Every dotted key and table the scenario schema accepts, and the tables that take any key (a dict)."""
    from simasgd.spec.scenario import Scenario

    keys: set[str] = set()
    open_tables: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            key = prefix + name
            keys.add(key)
            for m in _members(field.annotation):
                if isinstance(m, type) and issubclass(m, BaseModel):
                    walk(m, key + ".")
                elif typing.get_origin(m) is dict or m is dict:
                    open_tables.add(key)
    walk(Scenario, "")
    return keys, open_tables


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)\s*(?:=.*)?$")
BRACKETED = re.compile(r"^\[([a-z_][a-z0-9_.]*)\]\s+([a-z_][a-z0-9_]*)\s*(?:=.*)?$")
OVERRIDE = re.compile(r"(?:^|\s)-s\s+'?([a-z_][a-z0-9_.]*)=")


def written_keys(text: str, tables: set[str]) -> list[str]:
    """The scenario keys a page writes in backticks: `table.key`, `table.key = value`, `[table] key` and
    `... -s table.key=value`, where the first part is a table of the scenario."""
    out = []
    for span in SPAN.findall(text):
        span = span.strip()
        found = [m.group(1) for m in [DOTTED.match(span)] if m]
        found += [f"{m.group(1)}.{m.group(2)}" for m in [BRACKETED.match(span)] if m]
        found += OVERRIDE.findall(span)
        out += [k for k in found if k.split(".")[0] in tables]
    return out


def test_the_key_finder_finds_each_form_and_only_scenario_tables() -> None:
    text = ("`stop.eval_updates`, `[sim] traits`, `machine.preset = \"this\"`, `simasgd run F -s workers.count=16`, "
            "`simasgd.sim.costs`, `scenario.toml`, `np.dot`")
    assert written_keys(text, {"stop", "sim", "machine", "workers"}) == [
        "stop.eval_updates", "sim.traits", "machine.preset", "workers.count"]


# Keys a page writes that the schema has not, on purpose: (page, key) -> why.
NOT_KEYS = {("docs/howto/add-an-algorithm.md", "algorithm.my_param"): "the new parameter the how-to adds"}


def test_every_scenario_key_the_docs_write_is_one_the_schema_accepts() -> None:
    keys, open_tables = schema_keys()
    tables = {k.split(".")[0] for k in keys if "." in k}
    assert {"stop.eval_every_updates", "sim.traits", "workers.stragglers.count"} <= keys  # the walk reaches them
    assert "stop.eval_updates" not in keys
    unknown, seen = [], 0
    for path in doc_files():
        page = str(path.relative_to(REPO))
        for key in written_keys(path.read_text(encoding="utf-8"), tables):
            seen += 1
            if key not in keys and not any(key.startswith(t + ".") for t in open_tables) \
                    and (page, key) not in NOT_KEYS:
                unknown.append(f"{page}: `{key}`")
    assert seen > 50  # the pages do write keys: the finder finds them
    assert not unknown, unknown


# --- paths the CLI prints ----------------------------------------------------------------------------

DOC_PATH = re.compile(r"docs/[A-Za-z0-9_./-]+?\.md")


def test_every_docs_page_the_cli_names_exists(tmp_path: Path) -> None:
    """Help of every command, and what init, list, config and a refused key print."""
    texts = [invoke("--help"), *(invoke(*name.split()[1:], "--help") for name, _ in commands())]
    example = tmp_path / "example.toml"
    texts += [invoke("init", str(example)), example.read_text(), invoke("list"), invoke("list", "--presets"),
              invoke("config", str(example)), invoke("config", str(example), "--sources")]
    bad = tmp_path / "bad.toml"
    bad.write_text("[nosuchtable]\nkey = 1\n[workers.nosuch]\nkey = 1\n")
    refused = runner.invoke(app, ["validate", str(bad)], env=WIDE)
    assert refused.exit_code == 2
    texts.append(refused.output)
    named = {p for t in texts for p in DOC_PATH.findall(t)}
    assert "docs/reference/scenario.md" in named  # init's example names the key reference
    missing = sorted(p for p in named if not (REPO / p).is_file())
    assert not missing, missing


# --- backends in run's and sweep's help -------------------------------------------------------------

def option_help(command: str, option: str) -> str:
    """One option's help text from ``simasgd COMMAND --help`` (the rich panel's row and its continuation)."""
    out = invoke(command, "--help")
    rows = [line.strip("│ ").rstrip() for line in out.splitlines() if line.startswith("│")]
    start = next(i for i, r in enumerate(rows) if r.startswith(option + " ") or r.startswith(option + ","))
    text = [rows[start]]
    for r in rows[start + 1:]:
        if r.startswith("-"):
            break
        text.append(r)
    return " ".join(" ".join(text).split())


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_run_and_sweep_help_name_every_registered_backend(command: str) -> None:
    from simasgd.runs import backends

    text = option_help(command, "--backend")
    listed = re.search(r"Backend: ([\w |]+?) \(", text)
    assert listed, text
    assert [b.strip() for b in listed.group(1).split("|")] == list(backends.BACKENDS)


def test_measures_host_as_the_help_reads_it_is_each_backends_own() -> None:
    from simasgd.commands import measuring_backends
    from simasgd.runs import backends

    read = measuring_backends()
    assert set(read) == set(backends.BACKENDS)
    checked = []
    for name, present in backends.available().items():
        if not present:
            assert read[name] is None, name
            continue
        try:
            actual = backends.measures_host(name)
        except (backends.BackendError, ImportError):  # an optional dependency (torch) missing here
            continue
        assert read[name] is actual, name
        checked.append(name)
    assert {"sim", "serial", "cpu"} <= set(checked)


def _named(text: str, pattern: str) -> list[str]:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return [b.strip(" `") for b in re.split(r",|\band\b", found.group(1)) if b.strip(" `")]


def test_the_backends_run_one_at_a_time_are_the_same_in_sweep_run_and_the_docs() -> None:
    from simasgd.commands import measuring_backends

    measuring = {b for b, m in measuring_backends().items() if m}
    others = {b for b, m in measuring_backends().items() if m is False}
    assert measuring and others
    sweep = option_help("sweep", "--jobs")
    assert set(_named(sweep, r"Backends that time this machine \(([^)]*)\) run one task at a time")) == measuring
    run = option_help("run", "--jobs")
    assert set(_named(run, r"Backends that time this machine \(([^)]*)\) always run them one at a time")) == measuring
    assert set(_named(run, r"does not time this machine: ([^)]*)\)")) == others
    page = (REPO / "docs" / "backends.md").read_text(encoding="utf-8")
    section = page.split("## Measuring backends", 1)[1]
    assert set(_named(section, r"^\s*(.*?) time this host\b")) == measuring
    repeats = page.split("## Repeats at once", 1)[1]
    assert set(_named(repeats, r"not time this host \(([^)]*)\)")) == others


# --- the CLI reference -------------------------------------------------------------------------------

def test_the_cli_reference_is_generated_from_the_app_and_has_every_command() -> None:
    from simasgd.reference.cli_page import cli_page

    page = (REPO / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    assert page == cli_page(), "docs/reference/cli.md is stale: python -m simasgd.reference --write"
    names = [name for name, _ in commands()]
    assert {"simasgd corpus add", "simasgd corpus list", "simasgd corpus score"} <= set(names)
    headings = set(re.findall(r"^#+ `(simasgd[^`]*)`$", page, flags=re.M))
    assert set(names) <= headings, set(names) - headings


# --- development log in the documentation ------------------------------------------------------------

# Phrases that date a sentence to a change or to a session: what changed belongs in git and in dated tables.
DEV_LOG = re.compile(r"before this (?:revision|change)|this session|\bused to (?:be|compute|run|take|read|write)\b|"
                     r"\b(?:is|are) now (?:the )?default|\bthe former (?:policy|default|behaviou?r)|"
                     r"this checkout's machine|not available offline", re.I)


def test_the_log_finder_finds_the_phrases_of_a_development_log() -> None:
    for text in ("Before this revision every number was a guess.", "Cost, measured this session: 11 min",
                 "(the cpu loop used to compute on the live θ)", "`local_copy = true` is now the default",
                 '`start = "initial"` is the former policy.', "but this checkout's machine has 2 CPUs"):
        assert DEV_LOG.search(" ".join(text.split())), text
    assert not DEV_LOG.search("The default is `reader`; with `priority = \"writer\"` readers queue.")


def test_the_documentation_and_the_scenarios_readmes_state_what_is() -> None:
    pages = [*doc_files(), *sorted((REPO / "scenarios").rglob("*.md"))]
    found = [f"{p.relative_to(REPO)}: {m.group(0)!r}" for p in pages
             for m in DEV_LOG.finditer(" ".join(p.read_text(encoding="utf-8").split()))]
    assert not found, found


# --- the README's corpus counts ----------------------------------------------------------------------

def test_the_readmes_cell_counts_are_the_corpus_entries() -> None:
    """The full set of cells, its factors and each table row's "of N" against the corpus entries' cells."""
    from simasgd.corpus import store
    from simasgd.spec import algorithms

    entries = {p.name.split(".")[0]: store.load(p) for p in store.machines(REPO / "corpus")}
    cells = {name: [c.scenario if hasattr(c, "scenario") else c["scenario"] for c in e.cells]
             for name, e in entries.items()}
    full = max(cells.values(), key=len)

    def variant(sc: dict[str, Any]) -> str:
        a = sc["algorithm"]
        return f"{a['name']}/{a.get('persistence')}" if a["name"] == "leashed" else a["name"]
    variants = {variant(sc) for sc in full}
    threads = sorted({sc["workers"]["count"] for sc in full})
    batches = sorted({sc["workload"]["batch_size"] for sc in full})
    product = len(variants) * len(threads) * len(batches)
    refused = [(v, t, b) for v in variants for t in threads for b in batches
               if t < algorithms.ALGORITHMS[v.split("/")[0]].min_workers]
    assert len(full) == product - len(refused)  # every other cell was measured

    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"full set is (\d+) cells \((\d+) algorithm variants × ([\d, ]+) threads × batch (\d+) and "
                     r"(\d+) = (\d+), less Lopez et al.'s (\w+) 1-thread cells", readme)
    assert said, "README: the sentence on the corpus's cells"
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    assert int(said.group(1)) == len(full)
    assert int(said.group(2)) == len(variants)
    assert [int(t) for t in said.group(3).replace(",", " ").split()] == threads
    assert [int(said.group(4)), int(said.group(5))] == batches
    assert int(said.group(6)) == product and words[said.group(7)] == len(refused)
    assert {t for _, t, _ in refused} == {1}
    table = [line for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("|") and re.search(r"corpus `\w+`", line)]
    assert table
    for line in table:  # each "k of N" of a machine's row counts that entry's cells
        name = re.search(r"corpus `(\w+)`", line).group(1)  # type: ignore[union-attr]
        counts = {int(n) for n in re.findall(r"\bof (\d+)\b", line)}
        assert counts == {len(cells[name])}, (name, counts)
