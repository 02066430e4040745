"""Where a preset's numbers come from, kept beside the numbers.

Every machine, GPU and network preset carries a :class:`Cited`: what the machine is, and for each of its
keys the vendor datasheet or published measurement the value is taken from, or the derivation with its
reason, and whether the figure could be checked when it was written. ``docs/reference/presets.md`` is
generated from these (``python -m simasgd.reference --write``) and ``simasgd list --presets`` shows every number,
so a number and its source cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Cited:
    """``what``: the machine in one sentence; ``sources``: space-separated keys → where their values come from;
    ``notes``: what a run on it models and does not, or anything else its user must know."""

    what: str
    sources: dict[str, str] = field(default_factory=dict)
    notes: str = ""

    def source_of(self, key: str) -> str | None:
        """The citation that covers ``key`` (None: the preset cites nothing for it)."""
        return next((text for keys, text in self.sources.items() if key in keys.split()), None)

    def keys(self) -> set[str]:
        return {k for keys in self.sources for k in keys.split()}

    def uncited(self, keys: Iterable[str]) -> list[str]:
        """Those of ``keys`` no citation covers."""
        have = self.keys()
        return [k for k in keys if k not in have]
