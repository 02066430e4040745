"""Progress for long work: a rich bar on a terminal; elsewhere (CI, pipes, tests) silence, or a plain line
every few seconds where ``$SIMASGD_PROGRESS=1`` asks for it (a long run in a log or a batch job)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Advance = Callable[[float], None]

ENV = "SIMASGD_PROGRESS"  # "1": progress on stderr even off a terminal (plain lines); "0": none, even on one
LINE_EVERY_S = 5.0  # off a terminal, a progress line at most this often


def interactive() -> bool:
    return sys.stderr.isatty()


def wanted() -> bool:
    """Whether to show progress: ``$SIMASGD_PROGRESS`` where it is 0 or 1, else whether stderr is a terminal."""
    asked = os.environ.get(ENV, "").strip()
    return asked == "1" if asked in ("0", "1") else interactive()


@contextmanager
def bar(description: str, total: float | None, enabled: bool | None = None) -> Iterator[Advance]:
    """Yield ``advance(n)``; draws a bar with an ETA on a terminal, or prints plain lines (done, share, elapsed,
    ETA) off one, when progress is :func:`wanted` (or ``enabled``)."""
    if not (wanted() if enabled is None else enabled):
        def nothing(n: float = 1.0) -> None:
            return None
        yield nothing
        return
    if not interactive():
        yield from _lines(description, total)
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f}"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as p:
        task = p.add_task(description, total=total)

        def advance(n: float = 1.0) -> None:
            p.advance(task, n)
        yield advance


def _lines(description: str, total: float | None) -> Iterator[Advance]:
    """Progress as a plain line on stderr at most every :data:`LINE_EVERY_S`, and one at the end: a log keeps
    every line (a bar's redraws would fill it)."""
    start = last = time.monotonic()
    done = 0.0

    def line(now: float) -> None:
        elapsed = now - start
        share = f" ({done / total:.0%})" if total else ""
        left = f", ~{elapsed * (total - done) / done:.0f} s left" if total and 0 < done < total else ""
        of = f"/{total:.0f}" if total else ""
        print(f"progress: {description}: {done:.0f}{of} updates{share}, {elapsed:.0f} s{left}", file=sys.stderr,
              flush=True)

    def advance(n: float = 1.0) -> None:
        nonlocal done, last
        done += n
        now = time.monotonic()
        if now - last >= LINE_EVERY_S:
            last = now
            line(now)
    yield advance
    line(time.monotonic())
