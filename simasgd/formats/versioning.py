"""One rule for every versioned simasgd file (results, sweep manifest, fidelity, machine profile):
a format version is an integer >= 1, and one newer than this simasgd reads is refused, naming the file."""

from __future__ import annotations

import os
from typing import Any


def check(path: str | os.PathLike[str], found: Any, supported: int, kind: str, error: type[Exception],
          remedy: str = "upgrade simasgd to load it") -> int:
    """``found`` as a checked version; raises ``error`` naming ``path`` otherwise."""
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise error(f"{path}: unknown {kind} format version {found!r}")
    if found > supported:
        raise error(f"{path}: {kind} format version {found} is newer than this simasgd reads ({supported}); {remedy}")
    return found
