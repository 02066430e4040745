"""The project's citation and changelog keep up with its version: a release that bumps pyproject.toml's
version without them fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; mkdocs brings it

ROOT = Path(__file__).resolve().parents[1]


def version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def test_the_citation_is_cff_1_2_and_cites_this_version() -> None:
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    missing = [k for k in ("message", "title", "authors") if not cff.get(k)]  # CFF 1.2.0's required keys
    assert not missing, f"CITATION.cff lacks {missing}"
    assert all(isinstance(a, dict) and (a.get("name") or a.get("family-names")) for a in cff["authors"])
    assert str(cff["version"]) == version(), "CITATION.cff's version differs from pyproject.toml's"


def test_the_changelog_has_an_unreleased_section_and_one_for_this_version() -> None:
    heads = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert heads and heads[0] == "Unreleased", "Keep a Changelog: the Unreleased section comes first"
    assert version() in heads, f"CHANGELOG.md has no section for version {version()}"
