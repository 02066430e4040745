"""CLI command groups. Shared helpers for turning library errors into clear exits."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

import typer

if TYPE_CHECKING:
    from rich.console import Console

EXIT_BAD_INPUT = 2


def version() -> str:
    """simasgd's version as installed (``pip install -e .`` from a clone records it from pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("simasgd")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@contextmanager
def user_errors(source: object = None) -> Iterator[None]:
    """Bad input (scenario, results, backend, machine) exits 2 with its message, never a traceback.
    ``source``: the scenario file the command runs; a backend's refusal of its algorithm or of a parameter
    value (raised once the run starts, after the file loaded) then names it, as the loader's errors do."""
    from simasgd.algorithms import UnsupportedAlgorithm
    from simasgd.backends import BackendError
    from simasgd.loader import ScenarioError
    from simasgd.machine import MachineError
    from simasgd.results import ResultsError

    try:
        with warnings.catch_warnings():
            warnings.showwarning = _plain(warnings.showwarning)
            yield
    except (ScenarioError, ResultsError, BackendError, MachineError, UnsupportedAlgorithm) as e:
        msg = f"{source}: {e}" if source is not None and isinstance(e, UnsupportedAlgorithm) else str(e)
        print(f"error: {msg}" if "\n" not in msg else msg, file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except ValueError as e:
        # Workload and data problems (bad layers for the dataset, missing IDX files) are input errors too.
        if type(e).__name__.endswith("Error") and type(e).__module__.startswith("simasgd"):
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        raise


def _plain(shown: Any) -> Any:
    """``warnings.showwarning`` printing simasgd's own warnings as ``warning: ...`` lines on stderr, as the
    CLI prints every other warning; others' (numpy, torch) as Python shows them."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if category.__module__.startswith("simasgd"):
            print(f"warning: {message}", file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)
    return show
