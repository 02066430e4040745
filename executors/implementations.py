"""Each backend's table from algorithm to implementation (``IMPLEMENTATIONS``), and its lazy entries.

Every backend has one module-level dict ``IMPLEMENTATIONS``: algorithm (a registry name) → what runs it,
and its ``ALGORITHMS`` are that dict's keys, so the list a backend declares and the code it dispatches to
cannot disagree. The implementations live in one module per algorithm family, named as the simulator's
(``simasgd/sim/algorithms/``: ``sequential``, ``locks``, ``lockfree``, ``synchronous``, ``bounded``,
``lopez``, ``decentral``, ``elastic``, ``param_server``); a backend has the families it implements.
Where importing the family modules would import numba.cuda (backends ``cuda`` and ``gpu``), an entry is a
:class:`Lazy` reference, loaded when a run starts, so listing a backend's algorithms imports no GPU library.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Lazy:
    """``module.name``, imported on :meth:`load`."""

    module: str
    name: str

    def load(self) -> Any:
        return getattr(importlib.import_module(self.module), self.name)
