"""Progress for long work: a rich bar on a terminal, silence elsewhere (CI, pipes, tests)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Advance = Callable[[float], None]


def interactive() -> bool:
    return sys.stderr.isatty()


@contextmanager
def bar(description: str, total: float | None, enabled: bool | None = None) -> Iterator[Advance]:
    """Yield ``advance(n)``; draws a bar with an ETA only when stderr is a terminal."""
    if not (interactive() if enabled is None else enabled):
        def nothing(n: float = 1.0) -> None:
            return None
        yield nothing
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f}"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as p:
        task = p.add_task(description, total=total)

        def advance(n: float = 1.0) -> None:
            p.advance(task, n)
        yield advance
