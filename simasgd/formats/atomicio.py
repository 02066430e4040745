"""Atomic file writes: a reader (or a later load after a kill) sees a whole file or the old one, never half."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], Any]) -> Path:
    """Call ``write(tmp)`` on a temporary name in the same folder, fsync it, then rename it into place."""
    path = Path(path)
    # A hidden, unique name (not mkstemp: its 0600 mode would stick to the renamed file).
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # the rename must not outlive the data on a power cut
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))
