"""The one registry of algorithms: names, parameters, validation and row contract, shared by every backend.

An algorithm is *defined* here, once: its parameters (defaults, allowed
values), what a scenario must satisfy to run it (:func:`check`: worker
bounds, relations between parameters and workers), how its applied
gradients reach θ (:class:`Definition` ``applies``) and what one row of
``updates.parquet`` is for it (:class:`Rows`). The update rule itself lives in
:mod:`simasgd.update_rule`. A backend supplies only mechanics (threads,
locks, simulated resources) and declares the subset it implements; asking a
backend for an algorithm it lacks is a clear error (:func:`require`).
``tests/conformance`` holds every (algorithm, backend) pair to its definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol


class Params(Protocol):
    """What validation reads parameters through (``scenario.AlgorithmConfig``): value or registry default."""

    def param(self, key: str) -> Any: ...


@dataclass(frozen=True)
class Param:
    name: str
    default: object
    doc: str
    allowed: tuple[object, ...] = ()  # the values it may take, where it is a choice (the scenario's type uses them)


@dataclass(frozen=True)
class Rows:
    """The row contract: what one row of ``updates.parquet`` is, on every backend.

    ``per = "update"``: one row per update attempt, one gradient each; an applied row's
    ``version`` is the version its update made, so each version 1..N has exactly one applied
    row. ``per = "gradient"``: one row per gradient; ``version`` is the first version that
    includes it, so rows share versions; ``per_version`` gives how many applied rows each
    version has (None: any number, including 0). Always: ``read_version`` is the global
    version when the worker read θ, ``staleness = version − 1 − read_version`` ≥ 0 for an
    applied row; a dropped attempt (``applied = false``, only where ``drops``) carries the
    version it would have had (global version at the drop + 1)."""

    per: Literal["update", "gradient"]
    version: str
    read_version: str = "the global version when the worker read θ"
    per_version: Callable[[Params, int], int | None] = field(default=lambda p, n: 1)
    drops: bool = False


# How a version's applied gradients reach θ (conformance checks θ against it on a known gradient):
#   "mean"        the update is one update_rule step with the mean of its applied rows' gradients,
#                 each divided by update_rule.divisor(its staleness): every applied gradient exactly once;
#   "racy"        per "mean" with one writer; concurrent element-wise writes may overwrite each other;
#   "latest_sum"  a master step applies the mean of every worker's latest gradient (a gradient may
#                 count in several steps, or in none): per "mean" (unscaled) once each worker has reported.
Applies = Literal["mean", "racy", "latest_sum"]

_PER_UPDATE = Rows("update", "the version this update made (1, 2, ...)")
_PER_ATTEMPT = Rows("update", "the version this update made; dropped: the version it would have had", drops=True)


@dataclass(frozen=True)
class Definition:
    name: str
    title: str
    reference: str
    params: tuple[Param, ...] = field(default=())
    min_workers: int = 1
    max_workers: int | None = None
    workers_why: str = ""                         # why the bound (in the refusal)
    checks: Callable[[Params, int], list[str]] = field(default=lambda p, n: [])  # more refusals
    rows: Rows = _PER_UPDATE
    applies: Applies = "mean"

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


AlgorithmInfo = Definition  # the former name


def _k_within(p: Params, n: int) -> list[str]:
    k = p.param("k")
    return [f"algorithm.k = {k} exceeds workers.count = {n}"] if k > n else []


def _backup_below(p: Params, n: int) -> list[str]:
    b = p.param("backup")
    return [f"algorithm.backup = {b} must be < workers.count = {n}"] if b >= n else []


BACKOFF_KINDS = ("none", "linear", "exponential", "random")
_BACKOFF = Param("backoff", "none", "backoff between failed lock/CAS attempts: none | linear | exponential | random",
                 BACKOFF_KINDS)
_ELASTIC = (
    Param("alpha", 0.1, "elastic moving rate: how far worker and centre pull towards each other"),
    Param("tau", 1, "communication period: local steps between elastic exchanges"),
)
_ROUND = Rows("gradient", "the version of the round's update (every gradient of a round shares it)",
              "the global version when the worker read θ (the previous round's: staleness 0)",
              per_version=lambda p, n: n)
_K = Rows("gradient", "the version of the update that includes it (k gradients share it)",
          per_version=lambda p, n: p.param("k"))

ALGORITHMS: dict[str, Definition] = {a.name: a for a in (
    Definition("sequential", "Sequential SGD (one worker)", "reference", max_workers=1,
               workers_why="one worker; set workers.count = 1"),
    Definition("sync", "Synchronous SGD: barrier, gradients averaged, one update a round",
               "Dutta, Wang, Joshi 2018", rows=_ROUND),
    Definition("k_sync", "K-sync SGD: first k of N gradients, the rest cancelled",
               "Dutta, Wang, Joshi 2018", (Param("k", 1, "gradients per step"),), checks=_k_within, rows=_K),
    Definition("k_async", "K-async SGD: update when k gradients arrived, the others keep computing",
               "Dutta, Wang, Joshi 2018", (Param("k", 1, "gradients per step"),), checks=_k_within, rows=_K),
    Definition("backup", "Synchronous SGD with b backup workers (wait for N-b)",
               "Chen et al. 2016", (Param("backup", 1, "backup workers whose gradients are dropped"),),
               checks=_backup_below),
    Definition("ssp", "Stale-synchronous parallel: no worker more than `bound` clocks ahead",
               "Ho et al. 2013", (Param("bound", 3, "maximum clock difference between workers"),)),
    Definition("mutex", "Lock-based AsyncSGD with a mutex", "Ek 2021, Alg. 2", (_BACKOFF,)),
    Definition("rwlock", "Lock-based AsyncSGD with a read-write lock", "Ek 2021",
               (Param("priority", "writer", "reader | writer", ("reader", "writer")), _BACKOFF)),
    Definition("hogwild", "HOGWILD!: unsynchronised element-wise updates", "Recht et al. 2011", applies="racy"),
    Definition("leashed", "Leashed-SGD: CAS on a pointer to the latest parameter vector",
               "Bäckström et al. 2021",
               (Param("persistence", "inf", "max failed CAS attempts before the update is dropped: int >= 0 | inf"),
                _BACKOFF), rows=_PER_ATTEMPT),
    Definition("lopez", "Master/worker ASGD accumulating gradients atomically", "Lopez et al. 2020",
               min_workers=2, workers_why="worker 0 is the master; the others compute gradients",
               rows=Rows("gradient", "the first master step whose read of the gradient sum includes it",
                         per_version=lambda p, n: None, drops=True),
               applies="latest_sum"),
    Definition("easgd", "Elastic averaging SGD with a lock on the centre", "Zhang et al. 2015", _ELASTIC),
    Definition("eawild", "Elastic averaging without a lock (EA-wild)", "Zhang et al. 2015", _ELASTIC),
    Definition("param_server", "Parameter server / Downpour with sharded parameters", "Dean et al. 2012",
               (Param("shards", 1, "parameter shards, each with its own lock"),
                Param("fetch_every", 1, "local steps between fetches"),
                Param("push_every", 1, "local steps between pushes"))),
    Definition("keuper", "Decentralised ASGD: states to a random peer, Parzen-window acceptance",
               "Keuper & Pfreundt 2015",
               (Param("exchange_every", 10, "local steps between sending the state to a random peer"),
                Param("parzen_window", 1.0, "acceptance width: accept a peer state if its loss is within it"))),
)}


class UnsupportedAlgorithm(ValueError):
    pass


def names() -> list[str]:
    return list(ALGORITHMS)


def check(name: str, params: Params, workers: int) -> list[str]:
    """Every reason the definition refuses ``workers`` workers with these parameters (empty: runnable)."""
    d = ALGORITHMS[name]
    out = []
    why = f" ({d.workers_why})" if d.workers_why else ""
    if workers < d.min_workers:
        out.append(f"workers.count = {workers}: algorithm {name!r} needs >= {d.min_workers}{why}")
    if d.max_workers is not None and workers > d.max_workers:
        out.append(f"workers.count = {workers}: algorithm {name!r} runs at most {d.max_workers}{why}")
    return out + d.checks(params, workers)


def require(backend: str, name: str, supported: frozenset[str] | set[str]) -> None:
    """Raise a clear error if ``backend`` does not implement ``name``."""
    if name in supported:
        return
    have = ", ".join(n for n in ALGORITHMS if n in supported)
    raise UnsupportedAlgorithm(
        f"backend {backend!r} does not implement algorithm {name!r}; it has: {have}")
