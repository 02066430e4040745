"""The one registry of algorithm names and their parameters, shared by every backend.

A backend declares the subset it implements with :func:`require`; asking a
backend for an algorithm it lacks is a clear error that lists what it has.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Param:
    name: str
    default: object
    doc: str


@dataclass(frozen=True)
class AlgorithmInfo:
    name: str
    title: str
    reference: str
    params: tuple[Param, ...] = field(default=())

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


_BACKOFF = Param("backoff", "none", "backoff between failed lock/CAS attempts: none | linear | exponential | random")
_ELASTIC = (
    Param("alpha", 0.1, "elastic moving rate: how far worker and centre pull towards each other"),
    Param("tau", 1, "communication period: local steps between elastic exchanges"),
)

ALGORITHMS: dict[str, AlgorithmInfo] = {a.name: a for a in (
    AlgorithmInfo("sequential", "Sequential SGD (one worker)", "reference"),
    AlgorithmInfo("sync", "Synchronous SGD: barrier, gradients averaged, one update a round",
                  "Dutta, Wang, Joshi 2018"),
    AlgorithmInfo("k_sync", "K-sync SGD: first k of N gradients, the rest cancelled",
                  "Dutta, Wang, Joshi 2018", (Param("k", 1, "gradients per step"),)),
    AlgorithmInfo("k_async", "K-async SGD: update when k gradients arrived, the others keep computing",
                  "Dutta, Wang, Joshi 2018", (Param("k", 1, "gradients per step"),)),
    AlgorithmInfo("backup", "Synchronous SGD with b backup workers (wait for N-b)",
                  "Chen et al. 2016", (Param("backup", 1, "backup workers whose gradients are dropped"),)),
    AlgorithmInfo("ssp", "Stale-synchronous parallel: no worker more than `bound` clocks ahead",
                  "Ho et al. 2013", (Param("bound", 3, "maximum clock difference between workers"),)),
    AlgorithmInfo("mutex", "Lock-based AsyncSGD with a mutex", "Ek 2021, Alg. 2", (_BACKOFF,)),
    AlgorithmInfo("rwlock", "Lock-based AsyncSGD with a read-write lock", "Ek 2021",
                  (Param("priority", "writer", "reader | writer"), _BACKOFF)),
    AlgorithmInfo("hogwild", "HOGWILD!: unsynchronised element-wise updates", "Recht et al. 2011"),
    AlgorithmInfo("leashed", "Leashed-SGD: CAS on a pointer to the latest parameter vector",
                  "Bäckström et al. 2021",
                  (Param("persistence", "inf", "max failed CAS attempts before the update is dropped: int >= 0 | inf"),
                   _BACKOFF)),
    AlgorithmInfo("lopez", "Master/worker ASGD accumulating gradients atomically", "Lopez et al. 2020"),
    AlgorithmInfo("easgd", "Elastic averaging SGD with a lock on the centre", "Zhang et al. 2015", _ELASTIC),
    AlgorithmInfo("eawild", "Elastic averaging without a lock (EA-wild)", "Zhang et al. 2015", _ELASTIC),
    AlgorithmInfo("param_server", "Parameter server / Downpour with sharded parameters", "Dean et al. 2012",
                  (Param("shards", 1, "parameter shards, each with its own lock"),
                   Param("fetch_every", 1, "local steps between fetches"),
                   Param("push_every", 1, "local steps between pushes"))),
    AlgorithmInfo("keuper", "Decentralised ASGD: states to a random peer, Parzen-window acceptance",
                  "Keuper & Pfreundt 2015",
                  (Param("exchange_every", 10, "local steps between sending the state to a random peer"),
                   Param("parzen_window", 1.0, "acceptance width: accept a peer state if its loss is within it"))),
)}


class UnsupportedAlgorithm(ValueError):
    pass


def names() -> list[str]:
    return list(ALGORITHMS)


def require(backend: str, name: str, supported: frozenset[str] | set[str]) -> None:
    """Raise a clear error if ``backend`` does not implement ``name``."""
    if name in supported:
        return
    have = ", ".join(n for n in ALGORITHMS if n in supported)
    raise UnsupportedAlgorithm(
        f"backend {backend!r} does not implement algorithm {name!r}; it has: {have}")
