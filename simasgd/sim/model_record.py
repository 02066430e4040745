"""The model that ran, on the record: a simulated result's ``metadata["model"]``.

- ``traits``: the executor whose workers were simulated (``{"of": backend, ...}``, :mod:`simasgd.spec.traits`),
  None on a GPU machine (its own model);
- ``mechanisms``: the mechanisms that acted — a ``[sim]`` switch that is on, or an executor trait that
  asks for it, whose profile fields are there where it needs some (:data:`NEEDS`, :data:`TRAIT_MECHANISMS`),
  and those without a switch whose figures are there (:data:`UNSWITCHED`);
- ``missing``: those switched on whose fields the profile lacks (each also warned once per process, naming
  the fields, so a profile without them never changes the model silently; a preset has no profile: nothing
  to warn);
- ``tables``: the profile's tables the simulator read (:func:`simasgd.machines.profile_model.recording` notes each read
  of a typed table's field);
- ``keys``: the profile keys it read, as ``table.key`` (a workload's gradient table as ``gradient.<workload>``,
  numbered tables and keys as ``k<k>``; ``[machine]``'s keys included: the machine is built from them);
- ``profile_digest``: the profile's sha256 (:func:`simasgd.machines.profile.digest`), None for a preset.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from simasgd.machines import machine as machines
from simasgd.machines.machine import Machine
from simasgd.machines.profile_model import Profile, Reads
from simasgd.sim.caches import CacheModel
from simasgd.sim.executor import executor_traits
from simasgd.sim.profile_tables import (
    bookkeeping_s,
    profile_snapshot,
    workload_table,
)
from simasgd.sim.tick import tick_params
from simasgd.spec.scenario import Scenario, SimConfig
from simasgd.spec.traits import ExecutorTraits
from simasgd.spec.traits import describe as describe_traits

HEADER_TABLES = ("profile", "calibration")  # the file's own description: no measurement the simulator reads


class ModelWarning(UserWarning):
    """A mechanism switched on that cannot act: the profile lacks its table."""


def generic(key: str) -> str:
    """``key`` (``table.key``) with what names one of several alike tables or keys made generic: a workload's
    gradient table as ``gradient.<workload>``, a count in a name (``concurrent.k2``) as ``k<k>``."""
    key = re.sub(r"^gradient\.[^.]+\.", "gradient.<workload>.", key)
    return re.sub(r"k\d+(?=$|[._])", "k<k>", key)


def keys_read(m: object, reads: Reads) -> list[str]:
    """The keys of ``m``'s profile read in a run (:func:`generic`), ``[machine]``'s included: the machine is
    built from them."""
    doc = getattr(m, "profile", None)
    if not isinstance(doc, Profile):
        return []
    own = {f.name for f in fields(Machine)} - {"name", "profile"}
    machine = {f"machine.{k}" for k in machines.machine_keys(doc) if k in own}
    return sorted({generic(k) for k in reads.keys} | machine)


def tables_read(m: object, reads: Reads) -> list[str]:
    """The tables of ``m``'s profile read in a run, its ``[machine]`` included."""
    doc = getattr(m, "profile", None)
    if not isinstance(doc, Profile):
        return []
    return sorted((reads.tables | ({"machine"} if doc.machine is not None else set())) - set(HEADER_TABLES))


WORKLOAD = "gradient.<workload>."  # a need's field in the gradient table of the scenario's workload


@dataclass(frozen=True)
class Need:
    """What a mechanism needs besides its switch to act: the profile's fields (``table.key``; a key of the
    gradient table of the scenario's workload at the nearest batch size as ``gradient.<workload>.key``), each
    there unless ``acts`` decides from the figures themselves."""

    fields: tuple[str, ...] = ()
    acts: Callable[[Machine, Scenario], bool] | None = None  # whether it acts, where presence alone does not say
    replaced_by: str | None = None  # the [timing] step that, given, is what it would have modelled
    profile: bool = True  # a calibrated profile's figures (a preset has none: the mechanism is idle, unwarned)
    what: str = ""  # what it needs, where it is no profile field

    def lacking(self, m: Machine, sc: Scenario) -> list[str]:
        """The fields ``m``'s profile lacks of those this mechanism needs."""
        return [f for f in self.fields if _value(m.profile, sc, f) is None]

    def has(self, m: Machine, sc: Scenario) -> bool:
        return self.acts(m, sc) if self.acts is not None else not self.lacking(m, sc)


def _value(p: Profile | None, sc: Scenario, field: str) -> Any:
    """The profile's figure ``field`` names (:class:`Need`), None where it lacks it."""
    if p is None:
        return None
    if field.startswith(WORKLOAD):
        found = workload_table(p, sc.workload)
        return None if found is None else getattr(found[1], field[len(WORKLOAD):])
    name, key = field.split(".", 1)
    table = getattr(p, Profile.field_of(name))
    return None if table is None else getattr(table, key)


def lacks(m: Machine, sc: Scenario, need: Need) -> str:
    """What ``m``'s profile lacks of ``need``, as docs/profile.md names it: ``[table]`` where the table is
    absent, else ``[table] key, key``."""
    if not need.fields:
        return need.what
    tables: dict[str, list[str]] = {}
    for f in need.lacking(m, sc) or need.fields:  # acts decided: name every field it reads
        table, key = (f[:len(WORKLOAD) - 1], f[len(WORKLOAD):]) if f.startswith(WORKLOAD) else f.split(".", 1)
        tables.setdefault(table, []).append(key)
    out = []
    for table, keys in tables.items():
        absent = not table.startswith("gradient") and m.profile is not None \
            and getattr(m.profile, Profile.field_of(table)) is None
        out.append(f"[{table}]" if absent else f"[{table}] {', '.join(keys)}")
    return "; ".join(out)


# The [sim] switches that need more than being on, and what. A switch not named here acts when on.
NEEDS: dict[str, Need] = {
    "cache_model": Need(("copy_by_size.sizes_bytes", "copy_by_size.read_gbs", "copy_by_size.update_gbs"),
                        lambda m, sc: CacheModel.from_profile(m.profile) is not None),
    "coherence": Need(("coherence.read_gbs",)),
    "coherence_recency": Need(("coherence.read_gbs",)),
    "held_lines": Need(("coherence.held_read_gbs",)),
    "timer_tick": Need(("tick.period_s", "tick.hit_rate", "tick.pause_s"),
                       lambda m, sc: tick_params(m.profile) is not None, "gradient"),
}
# Mechanisms with no switch: each acts wherever its figures are.
UNSWITCHED: dict[str, Need] = {
    "socket_model": Need(acts=lambda m, sc: m.base_ghz > 0 or m.llc_mb > 0, profile=False,
                         what="a preset's base_ghz or llc_mb"),
}
# [sim] switches that choose what is run rather than a mechanism of the machine or the executor
NOT_MECHANISMS = frozenset({"numerics", "read_lock"})
# The mechanisms an executor's traits ask for (simasgd/spec/traits.py), each with what it needs.
TRAIT_MECHANISMS: dict[str, tuple[Callable[[ExecutorTraits], bool], Need | None]] = {
    "read_elision": (lambda t: t.reads == "elided", Need(replaced_by="read", profile=False)),
    "loss_snapshots": (lambda t: t.snapshots,
                       Need((f"{WORKLOAD}cycle_snapshot_median_s",),
                            lambda m, sc: profile_snapshot(m.profile, sc.workload) is not None, "update")),
    "bookkeeping": (lambda t: t.bookkeeping == "nopython",
                    Need(("executor.bookkeeping_s",), lambda m, sc: bookkeeping_s(m) is not None, "update")),
    "spin_before_yield": (lambda t: t.lock_waiters == "spin_pauses", Need(("scheduler.spin_yield_s",))),
    "mirrored_updates": (lambda t: t.updates == "mirrored", Need(("coherence.held_mirrored_gbs",))),
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


def mechanisms(sc: Scenario, m: Machine, traits: ExecutorTraits) -> tuple[list[str], dict[str, str]]:
    """(the mechanisms that act in a run of ``sc`` on ``m``, those switched on whose profile figures are
    missing with what the profile lacks of them)."""
    wanted = [(name, NEEDS.get(name)) for name in switches(sc)] + list(UNSWITCHED.items())
    wanted += [(name, need) for name, (asks, need) in TRAIT_MECHANISMS.items() if asks(traits)]
    states = {name: (_state(need, m, sc), need) for name, need in wanted}
    return ([n for n, (s, _) in states.items() if s == "acted"],
            {n: lacks(m, sc, need) for n, (s, need) in states.items() if s == "missing" and need is not None})


_warned: set[str] = set()  # the mechanisms already warned of in this process


def warn_missing(missing: dict[str, str], traits: str, corpus: str | None = None) -> None:
    """Say once per process, for each mechanism, that the profile lacks its figures (``missing``: by mechanism,
    what the profile lacks; the run goes on without it): one warning naming those not said before, with what
    they lack and the command that measures it (``corpus``: the corpus entry whose profile it is, measured
    elsewhere)."""
    new = [name for name in missing if name not in _warned]
    if not new:
        return
    _warned.update(new)
    path = machines.profile_path()

    def what(name: str) -> str:
        if name in TRAIT_MECHANISMS:
            return f"the {traits} executor's {name} ({missing[name]})"
        return f"{name} ({missing[name]})"
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
        return cls(traits.record(sc.sim.traits), acted, list(missing), profile_digest(sc))

    def after(self, sc: Scenario, m: object, reads: Reads) -> dict[str, Any]:
        """``metadata["model"]``, with the tables and keys the run read of ``m``'s profile (``reads``: noted by
        :func:`simasgd.machines.profile_model.recording` around the run)."""
        tables = tables_read(m, reads)
        if sc.network is not None and sc.network.preset == "this":
            tables = sorted({*tables, "network"})  # read from the file by simasgd.sim.network
        return {"traits": self.traits, "mechanisms": self.acted, "missing": self.missing, "tables": tables,
                "keys": keys_read(m, reads), "profile_digest": self.digest}


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
