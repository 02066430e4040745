"""The records shown on the site from outside docs/ (scripts/site_sources.py, an MkDocs hook): every page
is its file as it stands, its links lead where they led, includes take the section they name — and the
front page's figure script pools and pads the distributions it draws."""

from __future__ import annotations

import importlib.util
import posixpath
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; mkdocs brings it

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    return load("site_sources")


def nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in nav_pages(item)]
    if isinstance(node, dict):
        return [p for v in node.values() for p in nav_pages(v)]
    return []


def test_mkdocs_runs_the_hook_and_every_page_it_makes_is_in_the_nav(hook: ModuleType) -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    assert "scripts/site_sources.py" in config["hooks"]
    nav = nav_pages(config["nav"])
    assert set(hook.PAGES) <= set(nav), set(hook.PAGES) - set(nav)
    # a page made by the hook must not also exist in docs/: that would be the second copy it replaces
    assert not [p for p in hook.PAGES if (ROOT / "docs" / p).exists()]


@pytest.mark.parametrize("page", sorted(load("site_sources").PAGES))
def test_a_page_is_its_source_as_it_stands(hook: ModuleType, page: str) -> None:
    source = hook.PAGES[page]
    text = hook.page_text(page)
    original = (ROOT / source).read_text(encoding="utf-8")
    assert text.splitlines()[0] == original.splitlines()[0]  # the title stays the page's name
    assert f"`{source}`" in text.split("\n\n")[1]            # the note under it names the file
    # every line without a link (those are rewritten) is there unchanged, in order
    kept = [ln for ln in original.splitlines() if ln.strip() and "](" not in ln]
    at = 0
    for line in kept:
        at = text.find(line, at)
        assert at >= 0, f"{page}: {line!r} of {source} is missing"


def test_links_are_rewritten_to_where_their_targets_are_on_the_site(hook: ModuleType) -> None:
    text = ("[a](README_sim.md) [b](ek_numa.md#method) [c](../docs/model.md#gradient-time) "
            "[d](sim_scale.py) [`benchmarks/record.py`](record.py) [e](https://example.org/x.md) [f](#here)")
    out = hook.rewrite_links(text, "benchmarks/fidelity.md", "evidence/fidelity.md")
    assert out == ("[a](benchmarks-sim.md) [b](ek-numa.md#method) [c](../model.md#gradient-time) "
                   "d (`benchmarks/sim_scale.py`) `benchmarks/record.py` [e](https://example.org/x.md) [f](#here)")
    # from a study's folder two levels down, to a page of docs/ and to a record brought in
    out = hook.rewrite_links("[s](../../docs/algorithms.md#sources) [r](../../benchmarks/fidelity.md)",
                             "scenarios/ek2021/README.md", "studies/ek2021.md")
    assert out == "[s](../algorithms.md#sources) [r](../evidence/fidelity.md)"


def test_every_relative_link_of_a_brought_in_page_leads_to_a_page_of_the_site(hook: ModuleType) -> None:
    docs = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*") if p.is_file()}
    site = docs | set(hook.PAGES)
    for page in hook.PAGES:
        for _, _, target in hook.LINK.findall(hook.page_text(page)):
            if hook.EXTERNAL.match(target):
                continue
            path = posixpath.normpath(posixpath.join(posixpath.dirname(page), target.partition("#")[0]))
            assert path in site, f"{page}: link {target} leads to {path}, not a page of the site"


def test_an_include_takes_the_sections_body_up_to_the_next_heading_of_its_level(
        hook: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "r.md").write_text(
        "# R\n\n## A\n\nintro\n\n### B\n\nb text, see [x](x.md)\n\n```\n## not a heading\n```\n\n"
        "#### B.1\n\ndeeper\n\n### C\n\nc text\n\n## D\n", encoding="utf-8")
    monkeypatch.setattr(hook, "ROOT", tmp_path)
    assert hook.section("benchmarks/r.md", "B") == ("b text, see [x](x.md)\n\n```\n## not a heading\n```\n\n"
                                                    "#### B.1\n\ndeeper\n")
    assert hook.section("benchmarks/r.md", "D") == "\n"
    page = "# P\n\n<!-- include benchmarks/r.md § C -->\n\nafter\n"
    assert hook.expand(page, "evidence/p.md") == "# P\n\nc text\n\nafter\n"
    with pytest.raises(hook.SourceError, match="benchmarks/r.md has no heading 'E'"):
        hook.expand("<!-- include benchmarks/r.md § E -->", "evidence/p.md")
    with pytest.raises(hook.SourceError, match="benchmarks/none.md is not a file"):
        hook.section("benchmarks/none.md", "B")


def test_the_includes_of_the_docs_resolve(hook: ModuleType) -> None:
    found = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for source, title in hook.INCLUDE.findall(text):
            found += 1
            assert hook.section(source, title).strip(), f"{page}: the section {title!r} of {source} is empty"
    assert found >= 1  # docs/evidence/accuracy.md takes the corpus score from the fidelity record


def test_the_front_figure_pools_runs_into_shares_over_a_common_width() -> None:
    figure = load("front_figure")
    hist = np.array([[3, 1, 0], [1, 1, 2]])
    out = figure.shares(hist, 5)
    np.testing.assert_allclose(out, [4 / 8, 2 / 8, 2 / 8, 0, 0])
    d = figure.Distributions("c", "m", "cpu", out, figure.shares(np.array([[0, 4]]), 5), 2, 1, 0.0, 0.0)
    assert d.mean_measured == pytest.approx((2 + 4) / 8) and d.mean_predicted == pytest.approx(1.0)


def test_the_front_page_shows_the_figure_before_any_table() -> None:
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    figure = text.find("](img/front_staleness.png)")
    table = re.search(r"^\|", text, flags=re.MULTILINE)
    assert figure >= 0 and (ROOT / "docs" / "img" / "front_staleness.png").is_file()
    assert table is None or figure < table.start()
