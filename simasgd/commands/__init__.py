"""CLI command groups. Shared helpers for turning library errors into clear exits."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import typer

EXIT_BAD_INPUT = 2


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@contextmanager
def user_errors() -> Iterator[None]:
    """Bad input (scenario, results, backend, machine) exits 2 with its message, never a traceback."""
    from simasgd.algorithms import UnsupportedAlgorithm
    from simasgd.backends import BackendError
    from simasgd.loader import ScenarioError
    from simasgd.machine import MachineError
    from simasgd.results import ResultsError

    try:
        yield
    except (ScenarioError, ResultsError, BackendError, MachineError, UnsupportedAlgorithm) as e:
        print(f"error: {e}" if "\n" not in str(e) else str(e), file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except ValueError as e:
        # Workload and data problems (bad layers for the dataset, missing IDX files) are input errors too.
        if type(e).__name__.endswith("Error") and type(e).__module__.startswith("simasgd"):
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        raise
