"""The documentation's reference pages, generated from the code so they cannot drift from it.

Five pages under ``docs/reference/`` and one beside them: the scenario format (every key of every table of
:mod:`simasgd.spec.scenario`, its type, default, unit and allowed values, with the comment or
description the model gives it, or :mod:`simasgd.reference.key_docs`; the algorithms'
parameters from :mod:`simasgd.spec.algorithms`), the results format (:mod:`simasgd.runs.results`: the
summary's fields, both tables' columns, the row contracts), the backends' support (each
backend's ``ALGORITHMS``, ``VALUES``, ``MOOT``), the command line (the typer app) and the preset catalogue
(every machine, GPU and network preset with each number's source, :mod:`simasgd.machines.provenance`, and the shipped
corpus's measured machines); and the machine profile's format (``docs/profile.md``: every table of
:mod:`simasgd.machines.profile_model`).

``python -m simasgd.reference --write`` rewrites them; ``--check`` exits 1 naming the pages
that differ (``tests/test_docs.py`` runs the same comparison).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from simasgd.reference.backends_page import backends_page
from simasgd.reference.cli_page import cli_page
from simasgd.reference.common import COMMAND
from simasgd.reference.presets_page import presets_page
from simasgd.reference.profile_page import profile_page
from simasgd.reference.results_page import results_page
from simasgd.reference.scenario_page import scenario_page

ROOT = Path(__file__).resolve().parents[2]

PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/scenario.md": scenario_page,
    "docs/reference/results-format.md": results_page,
    "docs/reference/backends.md": backends_page,
    "docs/reference/cli.md": cli_page,
    "docs/reference/presets.md": presets_page,
    "docs/profile.md": profile_page,
}


def render() -> dict[str, str]:
    return {path: page() for path, page in PAGES.items()}


def drifted(root: Path = ROOT) -> list[str]:
    """The pages whose committed text differs from what the code generates now."""
    return [p for p, text in render().items()
            if not (root / p).exists() or (root / p).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simasgd.reference", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the pages")
    ap.add_argument("--check", action="store_true", help="exit 1 if a page differs from the code")
    args = ap.parse_args(argv)
    if args.write:
        for path, text in render().items():
            (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
            (ROOT / path).write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        return 0
    stale = drifted()
    for p in stale:
        print(f"{p}: differs from the code; run `{COMMAND}`", file=sys.stderr)
    return 1 if stale else 0


