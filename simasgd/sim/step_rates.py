"""What a read, an update or a fresh-vector pass of the model costs where its lines are, and what a line's move
costs: the tables :class:`~simasgd.sim.costs.Platform` times a worker's steps by.

- :class:`StepTables` (caches and coherence): a step's time by the streams it moves, on the worker's own
  lines, on lines another core wrote last, and on lines both hold (:mod:`caches`), from the warm
  ``[copy_by_size]`` rates, replaced by those timed in a worker's cycle where calibrated;
- :class:`LineCosts` (locks, CAS, atomic passes): a CAS, a lock's hand-off (a line's move between cores);
- :func:`executor_costs`: the executor's loss snapshot and its bookkeeping between two cycles.

Every figure is the calibrated profile's (docs/profile.md) where it has one; without it the memory model
(:mod:`memory`) prices the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from simasgd.machines.machine import Machine
from simasgd.machines.profile_model import Profile
from simasgd.sim.caches import CacheModel, LastWriter
from simasgd.sim.executor import executor_traits
from simasgd.sim.profile_tables import (
    FRESH_COPIES,
    READ_COPIES,
    UPDATE_COPIES,
    bookkeeping_s,
    cas_latency_s,
    handoff_s,
    profile_snapshot,
)
from simasgd.spec.scenario import Scenario

LINE_BYTES = 64  # a cache line, where the profile's [cache] does not say

Rates = dict[int, float]  # a step's seconds by the model-sized streams it moves (READ_COPIES, ...)


@dataclass
class StepTables:
    """Step times where the model's lines are (caches and coherence), per worker; None off the cache model."""

    caches: CacheModel | None    # cache-resident model buffers (None: through the memory model)
    model_bytes: int
    coherent: bool               # the model's lines may have been written by another core
    held: bool                   # [sim] held_lines: lines valid in two caches cost an invalidation
    private_copy_s: float | None  # a copy between two of a worker's own buffers
    cached_s: list[Rates | None]  # on the worker's own lines
    shared_s: list[Rates | None]  # on lines another core wrote last
    held_s: list[Rates | None]    # on lines valid here and in another core's cache
    mirrored_s: list[Rates | None]  # a mirrored update of its own last write, another core having read it since
    lines: LastWriter             # who wrote the model's lines last, who holds them
    evicts: bool                  # a gradient on a private copy evicts the model's lines

    @classmethod
    def build(cls, sc: Scenario, machine: Machine, model_bytes: int) -> StepTables:
        n = sc.workers.count
        caches = CacheModel.from_profile(machine.profile) if sc.sim.cache_model else None
        resident = caches if caches is not None and caches.in_cache(model_bytes, n) else None
        coherent = n > 1 and sc.sim.coherence
        held = sc.sim.held_lines
        t = cls(resident, model_bytes, coherent, held,
                None if resident is None else resident.read_s(model_bytes), [], [], [], [None] * n,
                LastWriter(n, sc.sim.coherence_recency), False)
        cached, shared, both = t.rates()
        t.cached_s, t.shared_s, t.held_s = [cached] * n, [shared] * n, [both] * n
        # A gradient on a private copy evicts the model's lines from the worker's private cache when the copy
        # and the model do not fit it together (a 1 MB L2 and a 680 KB model; not a 2 MB L2)
        private = _private_cache_bytes(machine.profile)
        t.evicts = coherent and held and private is not None and 2 * model_bytes > private
        return t

    def rates(self) -> tuple[Rates | None, Rates | None, Rates | None]:
        """Step times by streams moved, on a worker's own lines, on another core's, and on lines both hold
        (:data:`~simasgd.sim.caches.HELD`): the warm ``[copy_by_size]`` rates; another core's lines cost the
        slower of those and ``[coherence]``'s rate (they come from that core's cache or, where the cycle
        evicted them, from the next level: not both), and so do held lines (``held_read_gbs``/
        ``held_update_gbs``, when calibrated and ``[sim] held_lines``). A fresh-vector pass
        (:data:`FRESH_COPIES`: Leashed-SGD's) is a step like the others: its four streams at the rate of the
        lines it finds, held ones at the held update's rate (each write must first invalidate the other's
        copy). (None, None, None) off the cache model."""
        c, s = self.caches, self.model_bytes
        if c is None:
            return None, None, None
        own = {READ_COPIES: c.read_s(s), UPDATE_COPIES: c.update_s(s), FRESH_COPIES: c.update_into_s(s)}
        if not self.coherent:
            return own, None, None
        shared = {READ_COPIES: max(own[READ_COPIES], c.read_s(s, True)),
                  UPDATE_COPIES: max(own[UPDATE_COPIES], c.update_s(s, True)),
                  FRESH_COPIES: max(own[FRESH_COPIES], c.update_into_s(s, True))}
        read, update = c.held_s(s, False), c.held_s(s, True)
        if not self.held or read is None or update is None:
            return own, shared, None
        return own, shared, {READ_COPIES: max(own[READ_COPIES], read), UPDATE_COPIES: max(own[UPDATE_COPIES], update),
                             FRESH_COPIES: max(own[FRESH_COPIES], update * FRESH_COPIES / UPDATE_COPIES)}

    def gradient_extra_s(self, vectors: int) -> float:
        """What a gradient adds where its worker's cycle touches ``vectors`` model-sized vectors
        (:meth:`CacheModel.gradient_extra_s`, ``[copy_by_size]``); 0 off the cache model."""
        return 0.0 if self.caches is None else self.caches.gradient_extra_s(self.model_bytes, vectors)

    def mirrored(self, w: int) -> None:
        """Worker ``w``'s update leaves the new θ in its copy too, its gradient having been written over the copy
        (the cpu executor's lock loops: ``update_rule.step_mirrored``). Where the lines are its own last write
        and another core has read them since, each write must invalidate that core's copy while the copy's
        stores queue behind it: such an update runs at ``[coherence] held_mirrored_gbs``
        (:meth:`CacheModel.held_mirrored_s`), or the slower warm rate of its own lines, where calibrated."""
        held, c = self.held_s[w], self.caches
        if held is None or c is None or UPDATE_COPIES not in held:
            return
        t = c.held_mirrored_s(self.model_bytes)
        if t is not None:
            self.mirrored_s[w] = held | {UPDATE_COPIES: max(c.update_s(self.model_bytes), t)}


@dataclass
class LineCosts:
    """What moving one line costs, per worker: a CAS (a locked operation on a line), a lock's hand-off (a line
    moved from another core's cache); the line's size, and whether lines move between cores at all
    (``[sim] coherence``)."""

    cas_latency: list[float]
    handoff_s: list[float]
    line_bytes: int
    coherent: bool
    calibrated: bool  # the CAS's latency is the profile's (not a line from memory)

    @classmethod
    def build(cls, sc: Scenario, machine: Machine, memory_latency: list[float]) -> LineCosts:
        n = sc.workers.count
        # Without calibrated figures a line comes from where the model lives.
        cas, handoff = cas_latency_s(machine), handoff_s(machine)
        cache = None if machine.profile is None else machine.profile.cache
        line = None if cache is None else cache.line_bytes
        return cls(cas_latency=list(memory_latency) if cas is None else [cas] * n,
                   handoff_s=list(memory_latency) if handoff is None else [handoff] * n,
                   line_bytes=int(line) if line is not None and line > 0 else LINE_BYTES,
                   coherent=sc.sim.coherence, calibrated=cas is not None)


def executor_costs(sc: Scenario, machine: Machine, dim: int | None) -> tuple[float | None, float | None]:
    """(the executor's loss snapshot: θ copied into a ring slot in no cache, calibrated in a worker's cycle;
    its record, budget check and clock between a version's bump and the next read of it), each None where
    uncalibrated, not the executor's (its traits, :mod:`~simasgd.sim.executor`), or with a given ``[timing]
    update``."""
    traits = executor_traits(sc)
    snapshot = profile_snapshot(machine.profile, sc.workload) \
        if traits.snapshots and sc.timing.update is None and dim else None
    books = bookkeeping_s(machine) \
        if traits.bookkeeping == "nopython" and sc.timing.update is None else None
    return snapshot, books


def _private_cache_bytes(profile: Profile | None) -> float | None:
    """The largest cache level a core has to itself (profile ``[cache]``, ``shared_by`` 1), or None."""
    cache = None if profile is None else profile.cache
    if cache is None:
        return None
    sizes, shared = cache.sizes_bytes or [], cache.shared_by or []
    private = [float(z) for z, k in zip(sizes, shared, strict=False) if k == 1]
    return max(private) if private else None
