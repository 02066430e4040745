"""The one registry of algorithms: names, parameters, validation and row contract, shared by every backend.

An algorithm is *defined* here, once: its parameters (defaults, allowed
values), what a scenario must satisfy to run it (:func:`check`: worker
bounds, relations between parameters and workers), how its applied
gradients reach θ (:class:`Definition` ``applies``) and what one row of
``updates.parquet`` is for it (:class:`Rows`). The update rule itself lives in
:mod:`simasgd.numerics.update_rule`. A backend supplies only mechanics (threads,
locks, simulated resources) and declares the subset it implements; asking a
backend for an algorithm it lacks is a clear error (:func:`require`).
``tests/conformance`` holds every (algorithm, backend) pair to its definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


class Params(Protocol):
    """What validation reads parameters through (``scenario.AlgorithmConfig``): value or registry default."""

    def param(self, key: str) -> Any: ...


@dataclass(frozen=True)
class Param:
    name: str
    default: object
    doc: str
    allowed: tuple[object, ...] = ()  # the values it may take, where it is a choice (the scenario's type uses them)
    # A table-valued parameter (backoff): the field of the table that is the choice among ``allowed``, the one
    # a backend's ``VALUES`` restricts (require_values compares it; the table's other fields tune that choice).
    choice: str = ""


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
#   "latest_sum"  (Lopez) a master step, at its own pace, applies (what it read of g)/(N−1), staleness 0;
#                 a gradient is in g from its add until its worker's next subtraction, so it counts in
#                 any number of steps (0 too) and a step may read g empty; conformance bounds θ by the
#                 steps that certainly held it (v .. the next row's read_version) and those that may.
#   "average_end" every worker steps its own θ_w (per "mean", one gradient, staleness 0); the result is
#                 the mean of the θ_w (SimuParallelSGD's final average, also the θ the loss is taken on);
#   "peer_merge"  every node steps its own θ_i with ĝ = g + δ·½(θ_i − θ_j), θ_j the last state received
#                 and δ = 1 when θ_i − η·g is closer to θ_j than θ_i is (Keuper & Pfreundt); the result
#                 is node 0's θ (their Alg. 5 returns w¹).
#   "elastic"     (EASGD family) version v is worker j's exchange with the centre x̃: d = α(x_j − x̃),
#                 x_j ← x_j − d, x̃ ← x̃ + d, then x_j takes `tau` update-rule steps (its own velocity,
#                 staleness 0) before its next exchange; θ is x̃. Replayed from the rows' worker order.
#   "elastic_racy" per "elastic" with one worker; concurrent centre writes may overwrite each other.
Applies = Literal["mean", "racy", "latest_sum", "average_end", "peer_merge", "elastic", "elastic_racy"]

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
                 BACKOFF_KINDS, choice="kind")
_ELASTIC = (
    Param("alpha", 0.1, "α = ηρ, the elastic moving rate: an exchange moves worker and centre by α(x_j − x̃) "
                        "towards each other (Zhang et al. suggest β = pα ≈ 0.9 for p workers)"),
    Param("tau", 1, "communication period: local steps between a worker's exchanges with the centre"),
)
# One row per exchange with the centre (the local steps since the worker's previous exchange reach x̃ in it).
_EXCHANGES = Rows("update", "the centre version this exchange made (1, 2, ...)",
                  "the centre version the worker's state reflects: its previous exchange's read version + 1 "
                  "(under a lock, the version that exchange made; at its first exchange, version − 1)")
ONEBIT = Param("onebit", False, "1-bit gradient quantisation with error feedback (Seide et al. 2014): each worker "
                                "sends Q(g + e) (simasgd/numerics/compression.py)", (True, False))


def _groups_divide(p: Params, n: int) -> list[str]:
    g = p.param("group_size")
    return [f"algorithm.group_size = {g} must divide workers.count = {n}"] if n % g else []


_ROUND = Rows("gradient", "the version of the round's update (every gradient of a round shares it)",
              "the global version when the worker read θ (the previous round's: staleness 0)",
              per_version=lambda p, n: n)
_K = Rows("gradient", "the version of the update that includes it (k gradients share it)",
          per_version=lambda p, n: p.param("k"))
_BACKUP = Rows("gradient", "the version of the round's update (its N applied gradients share it); a discarded "
               "gradient carries that same version", "the global version when the worker read θ (the previous round's)",
               per_version=lambda p, n: n - p.param("backup"), drops=True)
# Decentralised and independent workers: each steps its own state; a global counter still numbers every step.
_OWN = Rows("update", "the global count of steps after this one (every worker's steps counted)",
            "version − 1: a worker's gradient is computed on its own current state, which only it steps "
            "(staleness 0; how far workers drift apart is curve.parquet's spread)")
_EXCHANGE = Param("exchange_every", 1, "local steps between sending the state to a random other node "
                                       "(Keuper & Pfreundt Alg. 5: after every step)")
_PARTITION = Param("partition", True, "each worker samples minibatches from its own random H = ⌊m/n⌋ rows "
                                      "(Alg. 3/5 line 2); false: from all rows", (True, False))

# Lopez et al. 2020 (§III-B). Master (worker 0), one step = one version, never waiting for gradients
# (Alg. 2): announce step s = version + 1, read g (element by element, not a snapshot),
# z ← βz + (1−β)·g/(N−1) (update_rule; the paper's β-form is heavy ball with η = α(1−β)), w ← w − η·z
# written without a lock, version s. Worker (Alg. 3), per gradient: copy w (line 3; `model_read`), then
# g ← g − g_old (line 4; `subtract`), gradient on the copy (6), g ← g + g_new (7); each pass is d atomic
# adds. One updates.parquet row per gradient; its version is 1 + the step the master had announced when
# the worker, its add done, looked — the first step that began reading g after the gradient was in it
# (an earlier step may hold all, part or none of it). Applied: the master announced that step before the
# worker's look at the start of the pass that removes it; else applied = false (same version).
LOPEZ_SUBTRACT = ("before_gradient", "with_add")
LOPEZ_READ = ("torn", "consistent")
_LOPEZ_PARAMS = (
    Param("subtract", "before_gradient",
          "when a worker removes its previous gradient from g: before_gradient (Alg. 3 line 4, the paper: "
          "g lacks it while the new one is computed) | with_add (one pass g ← g − g_old + g_new at line 7: "
          "g always holds every worker's latest gradient)", LOPEZ_SUBTRACT),
    Param("model_read", "torn",
          "a worker's copy of w (Alg. 3 line 3): torn (the paper: plain copy while the master writes, "
          "§III-B) | consistent (seqlock: the copy is one version, retried if a step overlapped it)",
          LOPEZ_READ),
)
_LOPEZ_ROWS = Rows("gradient", "1 + the master step announced when the worker, its add done, looked (the "
                   "first step that began reading g after the gradient was in it); dropped: removed "
                   "before that step began", per_version=lambda p, n: None, drops=True)

ALGORITHMS: dict[str, Definition] = {a.name: a for a in (
    Definition("sequential", "Sequential SGD (one worker)", "reference", max_workers=1,
               workers_why="one worker; set workers.count = 1"),
    Definition("sync", "Synchronous SGD: barrier, gradients averaged, one update a round",
               "Dutta, Wang, Joshi 2018", (ONEBIT,), rows=_ROUND),
    Definition("k_sync", "K-sync SGD: first k of N gradients, the rest cancelled",
               "Dutta, Wang, Joshi 2018", (Param("k", 1, "gradients per step"),), checks=_k_within, rows=_K),
    Definition("k_async", "K-async SGD: update when k gradients arrived, the others keep computing",
               "Dutta, Wang, Joshi 2018", (Param("k", 1, "gradients per step"),), checks=_k_within, rows=_K),
    Definition("backup", "Synchronous SGD with backup workers: N + b compute, the first N gradients of a round "
               "are applied, the b others discarded", "Chen et al. 2016; Hattendorf 2024 §3.2",
               (Param("backup", 1, "b: backup workers; workers.count = N + b, a round applies the first "
                                   "N = count − b gradients"), ONEBIT),
               checks=_backup_below, rows=_BACKUP),
    Definition("ssp", "Stale-synchronous parallel: a worker blocks while it is more than `bound` clocks ahead "
               "of the slowest", "Ho et al. 2013",
               (Param("bound", 3, "s: a worker that has finished c iterations starts another only while "
                                  "c − (the slowest worker's) ≤ s"),)),
    Definition("mutex", "Lock-based AsyncSGD with a mutex", "Ek 2021, Alg. 2", (_BACKOFF,)),
    # Ek used the POSIX rw-lock (§3.1) with default attributes, which glibc makes reader-preferring
    # (pthread_rwlockattr_setkind_np(3): PTHREAD_RWLOCK_PREFER_READER_NP "is the default").
    Definition("rwlock", "Lock-based AsyncSGD with a read-write lock", "Ek 2021, §3.1",
               (Param("priority", "reader", "reader | writer (reader: the POSIX default Ek used)",
                      ("reader", "writer")), _BACKOFF)),
    Definition("hogwild", "HOGWILD!: unsynchronised element-wise updates", "Recht et al. 2011; Ek 2021 §3.1",
               (Param("local_copy", True, "the gradient at a local copy of θ read element by element while "
                      "others write (Ek 2021 §2.2.3, §3.1: the framework's ParameterContainer copy) | false: at "
                      "the live shared θ (PyTorch's mnist_hogwild); cpu and torch backends and the simulator run "
                      "both, cuda true only", (True, False)),
                Param("sweep", "alternate", "the order of a worker's element-wise writes: alternate (odd-numbered "
                      "workers from the top of θ down, so overlapping updates cross once instead of following "
                      "each other line by line, in convoys) | up (every worker from θ[0], as "
                      "the C++ framework's loop); cpu and torch backends, and the simulator of a CPU (a GPU's "
                      "update kernel writes all of θ at once)", ("alternate", "up"))), applies="racy"),
    Definition("leashed", "Leashed-SGD: CAS on a pointer to the latest parameter vector",
               "Bäckström et al. 2021",
               (Param("persistence", "inf", "max failed CAS attempts before the update is dropped: int >= 0 | inf"),
                _BACKOFF), rows=_PER_ATTEMPT),
    Definition("lopez", "Master/worker ASGD: workers keep their latest gradient in a shared sum g with "
               "atomic adds; the master steps w ← w − α/(N−1)·g at its own pace, never waiting",
               "Lopez, Chow, Tomov, Dongarra 2020, §III-B, Alg. 2/3", _LOPEZ_PARAMS,
               min_workers=2, workers_why="worker 0 is the master; the others compute gradients",
               rows=_LOPEZ_ROWS, applies="latest_sum"),
    Definition("easgd", "EASGD: workers step locally, exchange α(x_j − x̃) with the centre every tau steps, "
               "one exchange at a time (round-robin lock on the centre); with optimizer.momentum: EA-MSGD",
               "Zhang, Choromanska, LeCun 2015; Wongpanich et al. 2020 §2.3.2 eq. 2-3", _ELASTIC,
               rows=_EXCHANGES, applies="elastic"),
    Definition("eawild", "EA-wild: EASGD with the centre updated without a lock (Hogwild!-style), "
               "workers in synchronous groups whose leader exchanges with the centre",
               "Wongpanich, You, Demmel 2020 §3.1, Alg. 1",
               (*_ELASTIC, Param("group_size", 1, "workers per group: a group averages its gradients synchronously "
                                                  "and its first worker exchanges with the centre")),
               checks=_groups_divide, rows=_EXCHANGES, applies="elastic_racy"),
    Definition("param_server", "Asynchronous SGD through a parameter server: pull θ, compute, push g; "
               "shards updated independently (Downpour); with optimizer.momentum: Async MSGD (server momentum)",
               "Dean et al. 2012; Wongpanich et al. 2020 §4.2",
               (Param("shards", 1, "S: θ split into S contiguous shards, each with its own lock and transfer"),
                ONEBIT),
               rows=Rows("update", "the version this push made (when its last shard landed)",
                         "the global version when the worker's pull started")),
    Definition("keuper", "Decentralised ASGD: each node steps its own state, sends it to a random other node; "
               "a received state is merged when the local step moves towards it (Parzen window)",
               "Keuper & Pfreundt 2015, Alg. 5", (_EXCHANGE, _PARTITION), min_workers=2,
               workers_why="a node sends its state to another node", rows=_OWN, applies="peer_merge"),
    Definition("simuparallel", "SimuParallelSGD: independent SGD on every worker, the states averaged once at the end",
               "Zinkevich et al. 2010; Keuper & Pfreundt 2015, Alg. 3", (_PARTITION,), rows=_OWN,
               applies="average_end"),
)}
# The algorithms whose workers send messages over [network] (the others share memory: [network] does not apply).
NETWORKED = frozenset({"param_server", "easgd", "eawild", "sync", "backup", "keuper", "simuparallel"})


PARTITION_STREAM = 101  # the Role.DATA stream of the partition (workloads/data.py uses small ones)


def partition(n_rows: int, workers: int, seed: int) -> list[Any]:
    """Alg. 3 / 5 line 2 (Keuper & Pfreundt): a random partition of the training rows, H = ⌊m/n⌋ to each
    worker; part of the data set-up (``Role.DATA``: per scenario, the same on every backend and run)."""
    from simasgd.spec import seeds

    h = max(1, n_rows // workers)
    perm = seeds.rng(seed, 0, seeds.Role.DATA, PARTITION_STREAM).permutation(n_rows)
    return [perm[w * h:(w + 1) * h] if (w + 1) * h <= n_rows else perm[:h] for w in range(workers)]


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


def require_values(backend: str, algorithm: Any, only: dict[str, dict[str, tuple[Any, ...]]],
                   why: str | dict[str, str] = "") -> None:
    """Raise a clear error where ``algorithm`` (a scenario's ``[algorithm]`` table) sets a parameter to a
    value ``backend`` does not implement: ``only[name][key]`` lists the values it runs (a backend's
    ``VALUES``). A value it would quietly run as another (a 1-bit ``sync`` run unquantised, a backoff
    never waited) would label the results with a method that never ran. For a table-valued parameter
    the listed values are those of its ``choice`` field (``backoff``: its ``kind``). ``why`` ends the
    message: one reason, or one per key.

    The declarations a backend module makes, read here and by ``tests/conformance/test_refusals.py``:
    ``VALUES = {algorithm: {key: (values it runs, ...)}}`` where it does not run every value of a
    parameter; ``MOOT = {algorithm: {key: why}}`` where a parameter chooses nothing in its mechanics
    (every value runs the same, as the definition says: HOGWILD!'s ``sweep`` on a GPU). Every other
    parameter of an algorithm it lists it reads and runs as defined."""
    for key, values in only.get(algorithm.name, {}).items():
        v, shown = algorithm.param(key), key
        choice = ALGORITHMS[algorithm.name].param(key).choice
        if choice:  # a table (backoff): its choice field (kind)
            v, shown = getattr(v, choice), f"{key}.{choice}"
        if v not in values:
            reason = why.get(key, "") if isinstance(why, dict) else why
            show = ", ".join(str(x).lower() if isinstance(x, bool) else str(x) for x in values)
            given = str(v).lower() if isinstance(v, bool) else repr(v)
            raise UnsupportedAlgorithm(f"backend {backend!r}: algorithm.{shown} = {given} is not implemented for "
                                       f"{algorithm.name!r}; allowed: {show}{f' ({reason})' if reason else ''}")


def require(backend: str, name: str, supported: frozenset[str] | set[str]) -> None:
    """Raise a clear error if ``backend`` does not implement ``name``."""
    if name in supported:
        return
    have = ", ".join(n for n in ALGORITHMS if n in supported)
    raise UnsupportedAlgorithm(
        f"backend {backend!r} does not implement algorithm {name!r}; it has: {have}")
