"""Where the model's bytes live: the cache hierarchy, calibrated per buffer size.

A worker's read copies the model (θ → its private copy) and its update does
θ ← θ − η·g: each touches model-sized buffers of ``S = d·itemsize`` bytes. How
fast one core moves them depends on where they live, and that depends on the
machine: a 680 KB model sits in a core's L2 or the shared L3 and copies at
cache speed, while a copy bandwidth calibrated on a buffer larger than the
caches (the ``[copy]`` table: 8 MB) charges DRAM speed to every step: it
predicts too slow a cycle on a machine whose caches outrun its DRAM, and
errs the other way on one whose DRAM copy is faster than its cache-resident
update (benchmarks/README_sim.md, design measurements).

So the simulator takes one core's bandwidth at the model's buffer size from
the profile's ``[copy_by_size]`` table (``simasgd calibrate``: a warm copy
``dst[:] = src`` and a warm ``θ -= lr·g`` per size, docs/profile.md),
interpolated log-log between the measured sizes and clamped at the ends:

- read   = 2·S / read_gbs(S)    (bytes read + written, the table's accounting)
- update = 3·S / update_gbs(S)  (θ and g read, θ written)

Sharing. Per-core caches (L1, L2) are private, and a shared last-level cache
serves its cores from per-core slices, so concurrent copies of cache-resident
buffers do not split one bandwidth: the step is a fixed time on the worker's
CPU. Only when the run's footprint — the shared model plus one private
model-sized buffer per worker — exceeds the last-level cache (its capacity
divided among the threads using it) do transfers go to DRAM, where
:mod:`memory` shares the socket's bandwidth (each at most what one core streams, the `[copy]` rate).
``[sim] cache_model = false`` switches this off (the older single-bandwidth
model); the theory scenarios give ``[timing]`` and never reach it.

Coherence. With two or more workers the shared model's lines were last
written by another core: a read copies lines out of that core's cache, an
update takes lines another core holds. The profile's ``[coherence]`` table
times exactly that (a copy and an update of a buffer another pinned thread has
just written, per size), and with it the read and update of a multi-worker run
use ``read_gbs``/``update_gbs`` in place of the private-buffer rates. Their
ratio to the private rates depends on where the hypervisor put the CPUs (two
calibrations half an hour apart can differ by half: executors/c2c.py):
calibrate right before measuring.
``[sim] coherence = false`` switches it off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from simasgd.machines.profile_model import Profile

GRADIENT_VECTORS = 2  # model-sized vectors the calibrated gradient touches: the θ it reads, the gradient it writes


@dataclass(frozen=True)
class CacheModel:
    """Rates per buffer size, named as the profile names them: ``read`` a copy of θ into a private buffer,
    ``update`` θ -= lr·g, ``fresh`` Leashed's θ − η·g into another buffer; ``shared_*`` on lines another core
    wrote last, ``held_*`` on lines valid in this core's cache and another's (``[coherence]``)."""

    sizes: np.ndarray          # buffer sizes (bytes) the table was measured at, ascending
    read_gbs: np.ndarray       # one core's copy bandwidth at each size (read + written bytes)
    update_gbs: np.ndarray     # one core's θ -= lr·g bandwidth at each size (3 × bytes)
    llc_bytes: float           # last-level cache capacity (inf when unknown: never DRAM by this rule)
    shared_sizes: np.ndarray | None = None   # [coherence] sizes, and the rates after another core wrote:
    shared_read_gbs: np.ndarray | None = None    # a copy out of the other core's cache
    shared_update_gbs: np.ndarray | None = None  # an update of lines the other core holds
    shared_fresh_gbs: np.ndarray | None = None  # a fresh-vector pass, source and destination the other core's
    held_read_gbs: np.ndarray | None = None  # a copy of lines this core wrote and another core has since read
    held_update_gbs: np.ndarray | None = None  # an update of such lines: each write invalidates the other's copy
    held_mirrored_gbs: np.ndarray | None = None  # the lock workers' update of such lines, the new θ also into the copy

    @classmethod
    def from_profile(cls, profile: Profile | None) -> CacheModel | None:
        """The model from a calibrated profile, or None when it lacks ``[copy_by_size]``."""
        table = None if profile is None else profile.copy_by_size
        if table is None:
            return None
        sizes, read, upd = table.sizes_bytes, table.read_gbs, table.update_gbs
        if sizes is None or read is None or upd is None:
            return None
        if not sizes or not (len(sizes) == len(read) == len(upd)) or min(read + upd) <= 0:
            return None
        order = np.argsort(sizes)
        assert profile is not None  # it has [copy_by_size]
        levels = [] if profile.cache is None else profile.cache.sizes_bytes or []
        llc = float(levels[-1]) if levels else math.inf
        base = cls(np.asarray(sizes, float)[order], np.asarray(read, float)[order] * 1e9,
                   np.asarray(upd, float)[order] * 1e9, llc)
        coh = profile.coherence
        if coh is None:
            return base
        cs, cr, cu = coh.sizes_bytes, coh.read_gbs, coh.update_gbs
        if not (cs and cr is not None and cu is not None and len(cs) == len(cr) == len(cu) and min(cr + cu) > 0):
            return base
        o = np.argsort(cs)

        def column(values: list[float] | None) -> np.ndarray | None:
            """An optional per-size ``[coherence]`` column in bytes/s by size (older profiles: none)."""
            c = _column(values, len(cs))
            return None if c is None else c[o] * 1e9

        return replace(base, shared_sizes=np.asarray(cs, float)[o], shared_read_gbs=np.asarray(cr, float)[o] * 1e9,
                       shared_update_gbs=np.asarray(cu, float)[o] * 1e9,
                       shared_fresh_gbs=column(coh.fresh_gbs),  # none: the update's rate, four streams
                       held_read_gbs=column(coh.held_read_gbs),  # none: held lines at the private rates
                       held_update_gbs=column(coh.held_update_gbs),
                       held_mirrored_gbs=column(coh.held_mirrored_gbs))  # none: the update's rate, four streams

    def _rate(self, table: np.ndarray, size: float, sizes: np.ndarray | None = None) -> float:
        x = math.log(max(size, 1.0))
        at = self.sizes if sizes is None else sizes
        return float(math.exp(np.interp(x, np.log(at), np.log(table))))

    @property
    def has_coherence(self) -> bool:
        return self.shared_sizes is not None

    def read_s(self, model_bytes: float, shared: bool = False) -> float:
        """One core copying the model into a private buffer (cache-resident); ``shared``: lines
        another core wrote last (``[coherence] read_gbs``, when calibrated)."""
        if shared and self.shared_read_gbs is not None:
            return 2 * model_bytes / self._rate(self.shared_read_gbs, model_bytes, self.shared_sizes)
        return 2 * model_bytes / self._rate(self.read_gbs, model_bytes)

    def gradient_extra_s(self, model_bytes: float, vectors: int) -> float:
        """What a gradient adds where its worker's cycle touches ``vectors`` model-sized vectors, against the
        :data:`GRADIENT_VECTORS` the calibration timed it on (``executors/calibration/gradient.py``): its two
        model-sized streams (θ read, the gradient written) at the warm copy rate of the cycle's footprint (a copy of
        half of it: a copy of S bytes touches 2·S) rather than of the model's size; where the cycle outgrows the
        private cache, they come from the next level."""
        if vectors <= GRADIENT_VECTORS:
            return 0.0
        within = 2 * model_bytes / self._rate(self.read_gbs, vectors * model_bytes / 2)
        return max(0.0, within - self.read_s(model_bytes))

    def update_s(self, model_bytes: float, shared: bool = False) -> float:
        """One core applying θ -= lr·g to the model (cache-resident); ``shared``: lines another core
        holds (``[coherence] update_gbs``, when calibrated)."""
        if shared and self.shared_update_gbs is not None:
            return 3 * model_bytes / self._rate(self.shared_update_gbs, model_bytes, self.shared_sizes)
        return 3 * model_bytes / self._rate(self.update_gbs, model_bytes)

    def held_s(self, model_bytes: float, writes: bool) -> float | None:
        """A copy (``writes``: an update) of the model by a core whose lines are valid while another core's
        cache holds them too (:data:`HELD`: it read them since they were last written), calibrated as B's
        copy / update of a buffer B wrote and A then copied (``[coherence] held_read_gbs`` /
        ``held_update_gbs``: each write must first invalidate A's copy); None when not calibrated."""
        if writes:
            return self._coherent_s(self.held_update_gbs, 3, model_bytes)
        return self._coherent_s(self.held_read_gbs, 2, model_bytes)

    def held_mirrored_s(self, model_bytes: float) -> float | None:
        """The lock workers' update of held lines (:meth:`held_s`), the new θ also written into the worker's
        copy that its gradient was written over (``update_rule.step_mirrored``): four model-sized streams at
        ``[coherence] held_mirrored_gbs``. Timed as the executor runs it, since the two interleaved store
        streams do not cost what the plain update's one does where each write of θ must first invalidate
        another cache's copy (benchmarks/fidelity.md, the mirrored update); None when not calibrated."""
        return self._coherent_s(self.held_mirrored_gbs, 4, model_bytes)

    def _coherent_s(self, table: np.ndarray | None, streams: int, model_bytes: float) -> float | None:
        """``streams`` model-sized streams at an optional ``[coherence]`` column's rate; None without it."""
        if table is None or self.shared_sizes is None:
            return None
        return streams * model_bytes / self._rate(table, model_bytes, self.shared_sizes)

    def update_into_s(self, model_bytes: float, shared: bool = False) -> float:
        """θ' = θ − η·g written into *another* buffer (Leashed's fresh vector): four model-sized streams at
        the update's rate, since each line of the fresh buffer is read for ownership before it is written
        (the calibrated update rewrites θ in place: three); the executor's Leashed pass agrees with it
        (benchmarks/README_sim.md, design measurements). ``shared``: from a vector
        another core wrote into one another core wrote (``[coherence] fresh_gbs``, when calibrated)."""
        if shared and self.shared_fresh_gbs is not None:
            return 4 * model_bytes / self._rate(self.shared_fresh_gbs, model_bytes, self.shared_sizes)
        return self.update_s(model_bytes, shared) * 4 / 3

    def in_cache(self, model_bytes: float, workers: int) -> bool:
        """The shared model and one private model-sized buffer per worker fit the last-level cache."""
        return model_bytes * (1 + workers) <= self.llc_bytes


def _column(values: list[float] | None, n: int) -> np.ndarray | None:
    """An optional per-size ``[coherence]`` column: n positive rates, else None."""
    if values is None or len(values) != n or min(values) <= 0:
        return None
    return np.asarray(values, float)


# Where the lines a worker's read or update touches are, as :meth:`LastWriter.touch` tells:
OWN = 0     # in its own cache alone (it wrote them last, or nobody else has them)
OTHERS = 1  # written by another worker since this one last touched them: taken from that core's cache
HELD = 2    # valid in its cache and in another's (one read them since the last write): shared lines


class LastWriter:
    """Where the shared model's lines are: who wrote them last, and which workers' caches hold them now.

    A read or update pays the coherence rates (``[coherence]``: lines another core wrote last) only when
    another worker has begun writing the model since this worker's last read or write of it; otherwise
    the lines are the ones this worker's own last step left in its cache. So a worker that reads right
    after its own update (locks, HOGWILD!: update, then the next read) copies its own lines, and a Lopez
    master that alone writes θ never pays for another core's lines, while the reads of its workers do.

    Lines stay valid in every cache that read them until the next write (MESI's shared state), so a worker
    whose lines are valid may still find them in another cache too (:data:`HELD`): its update must then
    invalidate the other's copies, and its read finds its own lines downgraded. The executor's mutex at
    2 threads shows it: an update after the other worker has read the model (workers in lockstep:
    update A, update B, read A, read B) takes about twice as long as one after the other's update, as
    the calibrated ``held_update_gbs`` predicts (benchmarks/README_sim.md, design measurements).

    Kept per worker, not per CPU; where threads outnumber CPUs, a worker that lost its CPU since its last
    step finds its lines evicted by the other threads' turns (``Platform`` asks ``Cores.turned_since``)
    and pays as for another core's. ``recency = False`` (``[sim] coherence_recency``) charges every step of
    a multi-worker run as another core's.
    """

    __slots__ = ("_downgraded", "_lapsed", "_seen", "_valid", "_writer", "_writes", "recency")

    def __init__(self, n: int, recency: bool = True) -> None:
        self._writes = 0  # writes of the model begun, by anyone
        self._seen = [-1] * n  # the write count as of each worker's last touch (-1: none yet)
        self._valid = 0  # workers whose caches hold the lines of the last write (seen == writes)
        self._writer = -1  # who wrote last
        self._downgraded = False  # another worker read the last write: the writer's lines are shared too
        # the write count at which a reader's copies of that write were evicted by its own traffic (-1: never):
        # lapsed while it equals ``_writes``, so the next write clears every mark without a pass over the workers
        self._lapsed = [-1] * n
        self.recency = recency

    @property
    def writer(self) -> int:
        """The worker that wrote the model last (-1: none yet)."""
        return self._writer

    def evicted(self, w: int) -> None:
        """Worker ``w``'s own traffic since it last touched the model (a gradient on a private copy that,
        with the model, does not fit its private cache) has evicted the model's lines from its cache:
        it holds none of them, and the next write need not invalidate them there."""
        if self._holds(w):
            self._lapsed[w] = self._writes
            self._valid -= 1

    def _holds(self, w: int) -> bool:
        return self._seen[w] == self._writes and self._lapsed[w] != self._writes

    def touch(self, w: int, writes: bool) -> int:
        """Worker ``w`` reads (or, ``writes``, writes) the model now: where its lines were as it began
        (:data:`OWN`, :data:`OTHERS`, :data:`HELD`)."""
        if not self.recency or (self._seen[w] != self._writes and self._writes):
            where = OTHERS
        # another cache holds the lines: the holders but w (before the first write, w's own first touch asks
        # for two, as it always did)
        elif self._valid - self._holds(w) > (self._seen[w] != self._writes) and (writes or self._downgraded):
            where = HELD  # a writer must invalidate the others' copies; a reader's own lines were downgraded
        else:
            where = OWN
        if writes:
            self._writes += 1
            self._writer, self._valid, self._downgraded = w, 1, False
        else:
            if self._seen[w] != self._writes or self._lapsed[w] == self._writes:
                self._valid += 1
                self._lapsed[w] = -1
            self._downgraded = self._downgraded or w != self._writer
        self._seen[w] = self._writes
        return where
