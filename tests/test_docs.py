"""The documentation site: generated reference pages match the code, the site builds strictly, and
nothing in the project points outside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simasgd import reference
from simasgd.reference.scenario_page import undescribed

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return reference.render()


def test_generated_pages_match_the_code(pages: dict[str, str]) -> None:
    stale = [p for p, text in pages.items()
             if not (ROOT / p).exists() or (ROOT / p).read_text(encoding="utf-8") != text]
    assert not stale, f"{', '.join(stale)} differ from the code: run `{reference.COMMAND}` and commit them"


def test_the_check_notices_a_drifted_page(tmp_path: Path, pages: dict[str, str]) -> None:
    for p, text in pages.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(text, encoding="utf-8")
    assert reference.drifted(tmp_path) == []
    scenario = tmp_path / "docs/reference/scenario.md"
    scenario.write_text(scenario.read_text(encoding="utf-8").replace("`max_updates`", "`max_steps`"),
                        encoding="utf-8")
    assert reference.drifted(tmp_path) == ["docs/reference/scenario.md"]


def test_every_scenario_key_is_on_the_page_with_a_description(pages: dict[str, str]) -> None:
    from simasgd.spec import algorithms, scenario

    page = pages["docs/reference/scenario.md"]
    assert undescribed() == [], "describe these keys (a comment in the model, or simasgd/reference/key_docs.py)"
    for model in (scenario.MachineConfig, scenario.WorkersConfig, scenario.WorkloadConfig, scenario.StopConfig,
                  scenario.SimConfig, scenario.OptimizerConfig, scenario.DistSpec, scenario.BackoffConfig):
        for name, f in model.model_fields.items():
            if not f.exclude:
                assert f"| `{name}` |" in page, f"{model.__name__}.{name} missing from the scenario page"
    for d in algorithms.ALGORITHMS.values():
        assert f"| `{d.name}` |" in page
        for p in d.params:
            assert f"| `{p.name}` |" in page


def test_the_example_scenario_loads(tmp_path: Path) -> None:
    from simasgd.reference.scenario_page import EXAMPLE
    from simasgd.spec import loader

    path = tmp_path / "example.toml"
    path.write_text(EXAMPLE, encoding="utf-8")
    sc = loader.load(path)
    assert sc.algorithm.name == "leashed" and sc.algorithm.param("persistence") == 1


def test_results_page_lists_every_column_and_summary_field(pages: dict[str, str]) -> None:
    import dataclasses

    from simasgd.runs import results

    page = pages["docs/reference/results-format.md"]
    for name in [f.name for f in dataclasses.fields(results.RunSummary)] + list(results.UPDATE_COLUMNS) + \
            list(results.CURVE_COLUMNS):
        assert f"| `{name}` |" in page
    assert f"`\"format_version\": {results.FORMAT_VERSION}`" in page


def test_cli_page_lists_every_command(pages: dict[str, str]) -> None:
    import typer.main

    from simasgd.cli import app

    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="simasgd")
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        assert f"## `simasgd {name}`" in pages["docs/reference/cli.md"]


def test_algorithms_page_has_a_section_per_algorithm_naming_its_parameters() -> None:
    import re

    from simasgd.spec import algorithms

    text = (ROOT / "docs/algorithms.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^### `(\w+)`\n(.*?)(?=^#)", text, flags=re.DOTALL | re.MULTILINE))
    assert set(sections) == set(algorithms.ALGORITHMS), "one `### `name`` section per algorithm"
    for name, d in algorithms.ALGORITHMS.items():
        for p in d.param_names:
            assert f"`{p}`" in sections[name], f"docs/algorithms.md, {name}: parameter {p} not described"
        assert "](#" in sections[name] or d.reference == "reference", f"{name}: no source cited"


def test_backends_page_describes_every_backend() -> None:
    from simasgd.runs import backends

    text = (ROOT / "docs/backends.md").read_text(encoding="utf-8")
    for name in [*backends.BACKENDS, "peer"]:
        assert f"| `{name}` |" in text, f"docs/backends.md has no row for backend {name!r}"


def test_model_page_names_every_sim_switch() -> None:
    import re

    from simasgd.spec.scenario import SimConfig

    text = (ROOT / "docs/model.md").read_text(encoding="utf-8")
    missing = [k for k in SimConfig.model_fields if not re.search(rf"\b{k}\b", text)]
    assert not missing, f"docs/model.md does not say what these [sim] keys model: {missing}"


def test_profile_page_names_the_format_and_its_version() -> None:
    from simasgd.machines import profile

    text = (ROOT / "docs/profile.md").read_text(encoding="utf-8")
    assert f'`"{profile.FORMAT}"`' in text
    assert f"`{profile.FORMAT_VERSION}`" in text


def test_profile_page_describes_every_key_of_every_table() -> None:
    from simasgd.machines import profile_model

    undescribed = [f"[{name}] {key}" for name, cls in profile_model.TABLES.items()
                   for key, info in cls.model_fields.items() if not info.description]
    assert undescribed == [], "describe these profile keys (Field(description=...) in simasgd/machines/profile_model.py)"


def test_profile_page_has_a_section_for_every_table_a_run_reads(tmp_path: Path) -> None:
    """The tables a simulated run on a corpus machine's profile read (its record) each have their section."""
    import re

    from simasgd.runs import backends
    from simasgd.spec import loader

    sc = loader.from_dict({"machine": {"preset": "amd_epyc_2vcpu"}, "workers": {"count": 2},
                           "workload": {"model": "mlp", "layers": [64, 256, 256, 10], "dataset": "digits"},
                           "algorithm": {"name": "mutex"}, "stop": {"max_updates": 50}, "sim": {"numerics": False}})
    read = backends.run(sc, "sim", repeats=1, jobs=1).metadata["model"]["tables"]
    assert {"gradient", "copy_by_size", "coherence", "tick"} <= set(read)
    text = (ROOT / "docs/profile.md").read_text(encoding="utf-8")
    missing = [t for t in read if not re.search(rf"^## `\[{t}[\]\.]", text, flags=re.MULTILINE)]
    assert not missing, f"docs/profile.md has no section for the profile tables {missing}"


@pytest.mark.slow
def test_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    proc = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        assert (tmp_path / "site" / "notebooks" / notebook.stem / "index.html").exists(), notebook.name


def test_paths_the_docs_name_exist() -> None:
    import re

    pages = [ROOT / "DEVELOPERS.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        for path in re.findall(r"`((?:simasgd|executors|tests|scripts|benchmarks|scenarios|docs|notebooks)/[\w/.\-]+)",
                               page.read_text(encoding="utf-8")):
            if not (ROOT / path.split("::")[0].rstrip("/")).exists():
                missing.append(f"{page.name}: {path}")
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)


# Built from pieces, so this file does not match its own pattern.
OUTSIDE = ("shared" + "/", "../" + "shared")


def test_nothing_in_the_project_points_outside_it() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    hits = []
    for name in files.decode().split("\0"):
        path = ROOT / name
        if not name or name.startswith((".git/", ".venv/")) or not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{name}:{i}: {line.strip()[:120]}" for i, line in enumerate(text.splitlines(), 1)
                 if any(p in line for p in OUTSIDE)]
    assert not hits, "the project points outside itself:\n" + "\n".join(hits)
