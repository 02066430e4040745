"""The model that ran, on the record: a simulated result's ``metadata["model"]``.

- ``traits``: the executor whose workers were simulated (``{"of": backend, ...}``, :mod:`simasgd.traits`),
  None on a GPU machine (its own model);
- ``mechanisms``: the mechanisms that acted — a ``[sim]`` switch that is on, or an executor trait that
  asks for it, whose profile table is there where it needs one (:data:`NEEDS`, :data:`TRAIT_MECHANISMS`),
  and those without a switch whose figures are there (:data:`UNSWITCHED`);
- ``missing``: those switched on whose table the profile lacks (each also warned once per process, so a
  profile without a table never changes the model silently; a preset has no profile: nothing to warn);
- ``tables``: the profile's tables the simulator read (:class:`TrackedProfile` notes each);
- ``keys``: the profile keys it read, as ``table.key`` (a workload's gradient table as ``gradient.<workload>``,
  numbered tables and keys as ``k<k>``; ``[machine]``'s keys included: the machine is built from them);
- ``profile_digest``: the profile's sha256 (:func:`simasgd.profile.digest`), None for a preset.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from simasgd import machine as machines
from simasgd.machine import Machine
from simasgd.scenario import Scenario, SimConfig
from simasgd.sim.caches import CacheModel
from simasgd.sim.executor import executor_traits
from simasgd.sim.profile_tables import (
    profile_latency,
    profile_snapshot,
    profile_steps,
)
from simasgd.sim.tick import tick_params
from simasgd.traits import ExecutorTraits
from simasgd.traits import describe as describe_traits

HEADER_TABLES = ("profile", "calibration")  # the file's own description: no measurement the simulator reads


class ModelWarning(UserWarning):
    """A mechanism switched on that cannot act: the profile lacks its table."""


class TrackedTable(dict[str, Any]):
    """A profile table (or a table inside one) that notes, in its profile's set, each key read: ``get``,
    ``[]``, or a value met while iterating. Tables inside it come back tracked too."""

    def __init__(self, doc: dict[str, Any], path: str, leaves: set[str]) -> None:
        super().__init__(doc)
        self._path, self._leaves = path, leaves

    def _value(self, key: str) -> Any:
        v = dict.__getitem__(self, key)
        where = f"{self._path}.{key}"
        if isinstance(v, dict):
            return TrackedTable(v, where, self._leaves)
        self._leaves.add(where)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        return self._value(key) if dict.__contains__(self, key) else default

    def __getitem__(self, key: str) -> Any:
        return self._value(key)

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        return ((k, self._value(k)) for k in dict.keys(self))

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        return (self._value(k) for k in dict.keys(self))


class TrackedProfile(dict[str, Any]):
    """A calibrated profile that notes each of its tables read (``get`` or ``[]``), whoever reads it, and
    each key read inside them (:class:`TrackedTable`)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__(doc)
        self.read: set[str] = set()
        self.leaves: set[str] = set()  # the keys read, as table.key

    def _value(self, key: str) -> Any:
        v = dict.__getitem__(self, key)
        self.read.add(key)
        return TrackedTable(v, key, self.leaves) if isinstance(v, dict) else v

    def get(self, key: str, default: Any = None) -> Any:
        return self._value(key) if isinstance(key, str) and dict.__contains__(self, key) else default

    def __getitem__(self, key: str) -> Any:
        return self._value(key)


M = TypeVar("M")


def tracked(m: M) -> M:
    """``m`` (a :class:`Machine` or a GPU) with its profile tracked; as it is where it has none."""
    doc = getattr(m, "profile", None)
    if not isinstance(doc, dict):
        return m
    return replace(m, profile=TrackedProfile(doc))  # type: ignore[type-var]


def generic(key: str) -> str:
    """``key`` (``table.key``) with what names one of several alike tables or keys made generic: a workload's
    gradient table as ``gradient.<workload>``, a count in a name (``concurrent.k2``) as ``k<k>``."""
    key = re.sub(r"^gradient\.[^.]+\.", "gradient.<workload>.", key)
    return re.sub(r"k\d+(?=$|[._])", "k<k>", key)


def keys_read(m: object) -> list[str]:
    """The keys of ``m``'s profile read since :func:`tracked` (:func:`generic`), ``[machine]``'s included."""
    doc = getattr(m, "profile", None)
    if not isinstance(doc, TrackedProfile):
        return []
    own = {f.name for f in fields(Machine)} - {"name", "profile"}
    machine = {f"machine.{k}" for k in (dict.get(doc, "machine") or {}) if k in own}
    return sorted({generic(k) for k in doc.leaves} | machine)


def tables_read(m: object) -> list[str]:
    """The tables of ``m``'s profile read since :func:`tracked`, its ``[machine]`` included."""
    doc = getattr(m, "profile", None)
    if not isinstance(doc, TrackedProfile):
        return []
    return sorted((doc.read | ({"machine"} & set(doc))) - set(HEADER_TABLES))


@dataclass(frozen=True)
class Need:
    """What a mechanism needs besides its switch to act."""

    has: Callable[[Machine, Scenario], bool]  # its table (or figure) is there
    what: str  # the table, as docs/profile.md names it
    replaced_by: str | None = None  # the [timing] step that, given, is what it would have modelled
    profile: bool = True  # a calibrated profile's table (a preset has none: the mechanism is idle, unwarned)


def _key(table: str, key: str) -> Callable[[Machine, Scenario], bool]:
    return lambda m, sc: ((m.profile or {}).get(table) or {}).get(key) is not None


# The [sim] switches that need more than being on, and what. A switch not named here acts when on.
NEEDS: dict[str, Need] = {
    "cache_model": Need(lambda m, sc: CacheModel.from_profile(m.profile) is not None, "[copy_by_size]"),
    "coherence": Need(_key("coherence", "read_gbs"), "[coherence]"),
    "coherence_recency": Need(_key("coherence", "read_gbs"), "[coherence]"),
    "held_lines": Need(_key("coherence", "held_read_gbs"), "[coherence] held_read_gbs"),
    "timer_tick": Need(lambda m, sc: tick_params(m.profile) is not None, "[tick]", "gradient"),
    "steps_in_cycle": Need(lambda m, sc: bool(profile_steps(m.profile, sc.workload)),
                           "[gradient.<workload>] cycle_read_median_s"),
}
# Mechanisms with no switch: each acts wherever its figures are.
UNSWITCHED: dict[str, Need] = {
    "socket_model": Need(lambda m, sc: m.base_ghz > 0 or m.llc_mb > 0, "a preset's base_ghz or llc_mb",
                         profile=False),
}
# [sim] switches that choose what is run rather than a mechanism of the machine or the executor
NOT_MECHANISMS = frozenset({"numerics", "read_lock"})
# The mechanisms an executor's traits ask for (simasgd/traits.py), each with what it needs.
TRAIT_MECHANISMS: dict[str, tuple[Callable[[ExecutorTraits], bool], Need | None]] = {
    "read_elision": (lambda t: t.reads == "elided",
                     Need(lambda m, sc: True, "", "read", profile=False)),
    "loss_snapshots": (lambda t: t.snapshots,
                       Need(lambda m, sc: profile_snapshot(m.profile, sc.workload) is not None,
                            "[gradient.<workload>] cycle_snapshot_median_s", "update")),
    "bookkeeping": (lambda t: t.bookkeeping == "nopython",
                    Need(lambda m, sc: profile_latency(m, "executor", "bookkeeping_s") is not None,
                         "[executor] bookkeeping_s", "update")),
    "spin_before_yield": (lambda t: t.lock_waiters == "spin_pauses",
                          Need(_key("scheduler", "spin_yield_s"), "[scheduler] spin_yield_s")),
}


def switches(sc: Scenario) -> list[str]:
    """The boolean [sim] mechanisms switched on in ``sc``."""
    return [name for name, f in SimConfig.model_fields.items()
            if f.annotation is bool and name not in NOT_MECHANISMS and getattr(sc.sim, name)]


def _state(need: Need | None, m: Machine, sc: Scenario) -> str:
    """"acted", "missing" (its profile table is not there) or "idle" (it has nothing to act on here)."""
    if need is None:
        return "acted"
    if need.replaced_by is not None and getattr(sc.timing, need.replaced_by) is not None:
        return "idle"
    if need.profile and m.profile is None:
        return "idle"
    if need.has(m, sc):
        return "acted"
    return "missing" if need.profile else "idle"


def mechanisms(sc: Scenario, m: Machine, traits: ExecutorTraits) -> tuple[list[str], list[str]]:
    """(the mechanisms that act in a run of ``sc`` on ``m``, those switched on whose profile table is missing)."""
    wanted = [(name, NEEDS.get(name)) for name in switches(sc)] + list(UNSWITCHED.items())
    wanted += [(name, need) for name, (asks, need) in TRAIT_MECHANISMS.items() if asks(traits)]
    states = {name: _state(need, m, sc) for name, need in wanted}
    return ([n for n, s in states.items() if s == "acted"], [n for n, s in states.items() if s == "missing"])


_warned: set[str] = set()  # the mechanisms already warned of in this process


def warn_missing(missing: list[str], traits: str, corpus: str | None = None) -> None:
    """Say once per process, for each mechanism, that the profile lacks its table (the run goes on without
    it): one warning naming those not said before, with their tables and the command that measures them
    (``corpus``: the corpus entry whose profile it is, measured elsewhere)."""
    new = [name for name in missing if name not in _warned]
    if not new:
        return
    _warned.update(new)
    path = machines.profile_path()

    def what(name: str) -> str:
        if name in TRAIT_MECHANISMS:
            need = TRAIT_MECHANISMS[name][1]
            return f"the {traits} executor's {name} ({need.what if need is not None else '?'})"
        return f"{name} ({NEEDS[name].what})"
    if corpus is not None:
        warnings.warn(f"the profile of corpus entry {corpus} lacks what these mechanisms need, so the simulator "
                      f"runs without them: {', '.join(what(n) for n in new)}", ModelWarning, stacklevel=3)
        return
    warnings.warn(f"the profile {path} lacks what these mechanisms need, so the simulator runs without them: "
                  f"{', '.join(what(n) for n in new)}; `simasgd calibrate --out {path}` measures them",
                  ModelWarning, stacklevel=3)


def profile_digest(sc: Scenario) -> str | None:
    """The sha256 of the profile a run of ``sc`` reads (this machine's file, or a corpus machine's profile as
    the corpus scorer writes it), None for a preset."""
    return machines.profile_digest(sc.machine)


@dataclass
class ModelRecord:
    """The model of one run, taken before it (what acts) and completed after it (the tables read)."""

    traits: dict[str, Any] | None
    acted: list[str]
    missing: list[str]
    digest: str | None

    @classmethod
    def before(cls, sc: Scenario, m: Machine | None) -> ModelRecord:
        """What acts in a run of ``sc`` on the CPU machine ``m`` (None: a GPU, whose model is its own); warns
        of the mechanisms whose table is missing."""
        if m is None:
            return cls(None, [], [], profile_digest(sc))
        traits = executor_traits(sc)
        acted, missing = mechanisms(sc, m, traits)
        corpus = str(machines.corpus_path(m.name)) if machines.is_corpus(sc.machine) else None
        warn_missing(missing, sc.sim.traits, corpus)
        return cls(traits.record(sc.sim.traits), acted, missing, profile_digest(sc))

    def after(self, sc: Scenario, m: object) -> dict[str, Any]:
        """``metadata["model"]``, with the tables the run read of ``m``'s profile."""
        tables = tables_read(m)
        if sc.network is not None and sc.network.preset == "this":
            tables = sorted({*tables, "network"})  # read from the file by simasgd.sim.network
        return {"traits": self.traits, "mechanisms": self.acted, "missing": self.missing, "tables": tables,
                "keys": keys_read(m), "profile_digest": self.digest}


def describe(record: dict[str, Any] | None) -> list[str]:
    """One or two lines for ``metadata["model"]``: whose traits, then the mechanisms and the profile."""
    if not record:
        return ["model: not recorded (results written before simasgd recorded the model that ran)"]
    digest = record.get("profile_digest")
    profile = f"profile sha256 {digest[:12]}" if digest else "no profile (a preset)"
    missing = record.get("missing") or []
    lacking = f"; on without their table: {', '.join(missing)}" if missing else ""
    mech = ", ".join(record.get("mechanisms") or []) or "none"
    tables = ", ".join(record.get("tables") or []) or "none"
    keys = f" ({len(record['keys'])} keys)" if record.get("keys") else ""
    return [describe_traits(record.get("traits")),
            f"mechanisms: {mech}{lacking}; {profile}, tables read: {tables}{keys}"]
