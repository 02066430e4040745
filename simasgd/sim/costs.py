"""What each step of a worker costs on the simulated machine, and on which CPU it runs.

A worker's three steps — read the model, compute a gradient, update the
model — become SimPy events here. Durations come from ``[timing]`` when the
scenario gives them; otherwise they follow from the machine and the workload:

- gradient: the calibrated profile's samples (preset ``this``, ``[gradient."<workload>"]``
  of docs/profile.md; those measured with k = min(workers, CPUs) threads at once,
  ``concurrent.k<k>``, when the profile has them) when present, else ``flops_per_sample × batch / gflops_per_core``
  with gamma jitter of
  coefficient of variation ``[sim] gradient_cv``;
- read: a copy of the model, ``2·d·itemsize`` bytes (load shared, store local);
- update: ``θ ← θ − η·g``, ``3·d·itemsize`` bytes; both at the calibrated bandwidth of
  the model's buffer size where it lives (:mod:`caches`), through :mod:`memory` when the
  run's buffers spill out of the last-level cache or no such table was calibrated;
- atomic adds (Lopez accumulation): d × the calibrated ``[cas] latency_s`` (a locked add on a line the
  core holds), plus one line's move (``[locks] handoff_s``) per line of the buffer when another core
  reads it meanwhile; else an update.

A worker's gradient time is a draw times its straggler slowdown, plus a
transient pause with the configured probability (:mod:`draws`: every draw from
the worker's own ``Role.TIMING`` stream, one child stream per step kind, in
blocks). What the profile holds is read in :mod:`profile_tables`.
"""

from __future__ import annotations

import math

import simpy

from simasgd.machines.machine import Machine, place
from simasgd.sim import sockets
from simasgd.sim.caches import HELD, OTHERS, OWN
from simasgd.sim.cpu import Cores, take_cpu
from simasgd.sim.draws import Sampler, timing_dist
from simasgd.sim.gradients import GradientDraws, given_steps
from simasgd.sim.memory import Memory, Transfer
from simasgd.sim.nodes import NodeMemory
from simasgd.sim.profile_tables import (
    FRESH_COPIES,
    READ_COPIES,
    UPDATE_COPIES,
    profile_machine,
    spin_yield_s,
)
from simasgd.sim.step_rates import LineCosts, Rates, StepTables, executor_costs
from simasgd.spec.scenario import Scenario


def _cores(env: simpy.Environment, sc: Scenario, machine: Machine,
           cpus: list[int | None]) -> tuple[list[int], Cores]:
    """Each worker's socket and the cores with their time slices (spinning or sleeping lock waiters)."""
    # "os" placement: the OS spreads threads over sockets like numa does (for memory paths).
    spread = [c for c in place(machine, sc.workers.count, "numa") if c is not None]  # numa places every one
    where = [machine.socket_of(c if c is not None else s) for c, s in zip(cpus, spread, strict=True)]
    cores = Cores(env, machine, cpus, spin_yield_s(sc, machine), spread)
    return where, cores


class Platform:
    """The machine as the workers see it: ``gradient(w)``, ``read(w)``, ``update(w)`` are events.

    It composes one object per mechanism: the cores and their time slices (:class:`~simasgd.sim.cpu.Cores`),
    memory bandwidth (:class:`~simasgd.sim.memory.Memory`; on a cluster's nodes
    :class:`~simasgd.sim.nodes.NodeMemory`), the step tables where the model's lines are
    (:class:`~simasgd.sim.step_rates.StepTables`), a line's moves (:class:`~simasgd.sim.step_rates.LineCosts`),
    sockets' turbo and L3 (:mod:`sockets`), and the
    gradient draws with the timer tick (:class:`~simasgd.sim.gradients.GradientDraws`).
    """

    def __init__(self, env: simpy.Environment, sc: Scenario, machine: Machine, run: int,
                 dim: int | None = None, itemsize: int = 8, flops_per_sample: float | None = None) -> None:
        self.env = env
        n = sc.workers.count
        self.machine = machine = profile_machine(machine)
        self.dim = dim or 0
        self.model_bytes = self.dim * itemsize
        cpus = place(machine, n, sc.workers.placement)
        self.sockets, self.cores = _cores(env, sc, machine, cpus)
        # a cluster's nodes share no memory: each worker's reads and updates are of its own node's (sim/nodes.py)
        self.memory: Memory | NodeMemory = (NodeMemory(env, machine, self.sockets) if machine.nodes
                                            else Memory(env, machine, self.sockets))
        self.steps = steps = StepTables.build(sc, machine, self.model_bytes)
        self.line_costs = lines = LineCosts.build(sc, machine, self.memory.latency)
        self.cas_latency, self.handoff_s = lines.cas_latency, lines.handoff_s
        self.snapshot_s, self.bookkeeping_s = executor_costs(sc, machine, dim)
        # a worker's step in progress: the rates it runs at (chunks), and its misses past the L3 (sockets)
        self._table: list[Rates | None] = [steps.shared_s[0] or steps.cached_s[0]] * n
        self._touched_at = [0.0] * n  # when each worker last read or wrote the model
        self._grad_extra = [0.0] * n  # what each gradient adds where the worker's cycle outgrows its cache
        self._given_gradient = sc.timing.gradient is not None  # the whole gradient's time, as the scenario says
        self._fused: int | None = None  # a worker whose update reads a sum the others add into (fuses_read)
        # when the latest atomic pass over that sum ends: a worker's passes follow one another, so a pass is under
        # way at some worker exactly when the latest end of all is still to come (one number, not one a worker)
        self._passes_end = -math.inf
        self._model_miss = [0.0] * n  # the part of a read/update that streams from DRAM (sockets model)
        self._own_miss: list[dict[int, float]] = [{}] * n  # private bytes of a read/update missing the L3
        self.socket_shares = self._socket_shares(sc, machine, cpus, dim, itemsize, derived=steps.cached_s[0] is None)
        self.gradients = GradientDraws.build(sc, machine, run, cpus, self.socket_shares, flops_per_sample)
        self._grad = self.gradients.draws
        self._read, self._update = given_steps(sc, run, dim)
        given = timing_dist(sc.timing.update, sc.base_dir, "timing.update")
        self._update_mean = None if given is None else float(given.mean)
        self._fast = [not t.sliced and not self.gradients.miss[w] for w, t in enumerate(self.cores.threads)]

    def fuses_read(self, w: int) -> None:
        """Worker ``w``'s update reads its operand in the same pass, a sum the other workers add into with
        atomic passes (a Lopez master: ``θ ← θ − η·acc/(N−1)``, :func:`simasgd.numerics.update_rule.step_scaled`), and
        alone writes θ. On a cache model its read costs nothing apart (a given ``[timing] read`` is still
        drawn); its update runs at the rates of lines another core writes while a pass is under way as it
        begins, else at its own warm rates (its lines stay in its cache)."""
        if self.steps.caches is None:
            return
        own, shared, _ = self.steps.rates()
        if own is None:  # never with a cache model: the rates of a worker's own lines
            return
        self._fused = w
        free = {READ_COPIES: 0.0}
        self.steps.cached_s[w] = own | free
        self.steps.shared_s[w] = None if shared is None else shared | free
        self.steps.held_s[w] = None  # lines it holds with a reader are the reader's to lose (its next read)

    def first_turn(self, w: int) -> simpy.Event | None:
        """Worker ``w``'s thread, at its start, waiting for the CPU it shares (its run queue's first turn for it):
        an event that fires once it holds one; None where it has a CPU of its own or holds one already."""
        th = self.cores.threads[w]
        if not th.sliced or th.req is not None:
            return None
        return self.env.process(take_cpu(self.env, self.cores, th))

    def cycle_vectors(self, w: int, vectors: int) -> None:
        """Worker ``w``'s cycle touches ``vectors`` model-sized vectors (Leashed-SGD's: the one its gradient reads,
        the gradient, the fresh vector it builds and the latest one it builds from): each gradient adds what
        its streams lose where those outgrow the private cache (:meth:`StepTables.gradient_extra_s`); a given
        ``[timing] gradient`` is the whole gradient's time."""
        if not self._given_gradient:
            self._grad_extra[w] = self.steps.gradient_extra_s(vectors)

    def mirrors(self, w: int) -> None:
        """Worker ``w``'s update leaves the new θ in its private copy too (the cpu executor's lock loops, whose
        reads it skips where the copy still is θ): on lines another core's cache holds too it runs at the
        rate timed for that update (:meth:`StepTables.mirrored`)."""
        self.steps.mirrored(w)

    def _socket_shares(self, sc: Scenario, m: Machine, cpus: list[int | None], dim: int | None,
                       itemsize: int, derived: bool) -> sockets.SocketShares | None:
        """Turbo and last-level cache per socket (:mod:`sockets`) on a machine whose preset knows them."""
        if m.base_ghz <= 0 and m.llc_mb <= 0:
            return None
        fp = sockets.footprint(sc.workload, dim or 0, itemsize, m.l2_kb * 1024) if dim else None
        ss = sockets.shares(m, cpus, self.sockets, fp, self.model_bytes)
        if derived and sc.timing.read is None and sc.timing.update is None:
            self._own_miss = ss.own_miss
        if derived and m.llc_gbs > 0 and self.model_bytes:
            for w, h in enumerate(ss.model_hit):
                if h > 0:  # θ's home L3 serves the hit part at the cache's per-core rate
                    self.steps.cached_s[w] = self.steps.shared_s[w] = {c: h * c * self.model_bytes / (m.llc_gbs * 1e9)
                                                             for c in (READ_COPIES, UPDATE_COPIES)}
                    self.steps.held_s[w] = None
                    self._model_miss[w] = 1.0 - h
        return ss

    def gradient(self, w: int) -> simpy.Event:
        seconds = self._grad[w]() + self._grad_extra[w]
        tick = self.gradients.tick  # the timer's instants it runs over on its CPU
        if self._fast[w]:
            return self.env.timeout(seconds if tick is None else seconds + tick.stall(self.env.now, seconds))
        miss = self.gradients.miss[w]
        if miss:  # the part of its traffic the socket's L3 cannot hold streams from the socket's DRAM
            return self.cores.work(w, seconds, lambda after: self.memory.stream(w, miss, after), tick)
        return self.cores.work(w, seconds, tick=tick)

    def read(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        """Copy (a ``part`` of) the model; ``seconds`` imposes a duration drawn earlier (chunked reads).

        Chunks after the ``first`` continue the same stream (no second memory latency).
        """
        s = self._read[w]
        if s is not None and seconds is None and part == 1.0 and self._fast[w]:
            return self.env.timeout(s())  # the hot path: a drawn duration on an unshared CPU
        if first:
            self._begin(w, writes=False)
        return self._step(w, s, READ_COPIES, part, seconds, first)

    def update(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        """Apply (a ``part`` of) the update to the shared model."""
        s = self._update[w]
        if s is not None and seconds is None and part == 1.0 and self._fast[w]:
            return self.env.timeout(s())
        if first:
            self._begin(w, writes=True)
        return self._step(w, s, UPDATE_COPIES, part, seconds, first)

    def server_update_s(self, part: float = 1.0) -> float:
        """Seconds of θ ← θ − η·g over ``part`` of θ by a rank that alone holds it — a parameter server's shard, an
        elastic centre, each a process of its own over a network — priced as this platform prices a worker's
        update of its own lines: a given ``[timing] update``'s mean; else worker 0's own-lines rate (the
        calibrated ``[copy_by_size]`` table, or a preset's L3 rate, on the model's home socket), its part that
        misses the L3 at one core's bandwidth; else one core alone streaming the update's bytes (the memory
        model without contention: local latency + bytes / min(a core's, the socket's bandwidth)). A number, not
        an event: the server's CPU (:meth:`simasgd.sim.network.Network.handle`) holds for it, serialised with
        the messages it handles, and no worker's core is charged."""
        if self._update_mean is not None:
            return self._update_mean * part
        m, nbytes = self.machine, UPDATE_COPIES * self.model_bytes * part
        stream_Bps = min(m.core_bandwidth_gbs, m.mem_bandwidth_gbs) * 1e9
        own = self.steps.cached_s[0]
        if own is not None and UPDATE_COPIES in own:
            return own[UPDATE_COPIES] * part + self._model_miss[0] * nbytes / stream_Bps
        return m.local_latency_ns * 1e-9 + nbytes / stream_Bps

    def bookkeeping(self, w: int) -> simpy.Event | None:
        """The executor's own work between a worker's bump of the version and its next read of it (the
        record, the budget check, the clock: profile ``[executor] bookkeeping_s``), else None. It decides
        which of two updates ending a line's hand-off apart the next read sees."""
        return None if self.bookkeeping_s is None else self.cores.work(w, self.bookkeeping_s)

    def computes_on_copy(self, w: int) -> None:
        """Worker ``w`` begins a gradient on its private copy of the model. Where the copy and the model do
        not fit its private cache together, the copy it just took (or the update that wrote both) and the
        gradient's first pass over the copy evict the model's lines from its cache
        (:meth:`LastWriter.evicted`): the next write of the model need not invalidate them there. The
        executor's mutex at 2 threads with reads skipped updates at the own-lines rate, several times
        faster than the held-lines rate would give (benchmarks/README_sim.md, design measurements)."""
        if self.steps.evicts:
            self.steps.lines.evicted(w)

    def touch(self, w: int) -> None:
        """Worker ``w`` reads the shared model in place (Leashed-SGD's gradient on the latest vector): its
        lines are in this worker's cache from now on, at no step of their own."""
        self.steps.lines.touch(w, writes=False)

    def _begin(self, w: int, writes: bool) -> None:
        """A read or update of the shared model begins: the rates it runs at (private, or another core's
        lines: :class:`LastWriter`) hold for all its chunks."""
        rewrites = writes and self.steps.lines.writer == w  # its own last write, which others may have read since
        where = self.steps.lines.touch(w, writes)
        # time-shared CPU: the other threads' turns since this worker's last step evicted its lines
        # (a worker's cycle is about as large as a core's private cache)
        if where != OTHERS and self.steps.lines.recency and self.cores.turned_since(w, self._touched_at[w]):
            where = OTHERS
        self._touched_at[w] = self.env.now
        if w == self._fused:  # the sum is the other workers' to write: is a pass under way?
            where = OTHERS if self._passes_end > self.env.now else OWN
        table = self.steps.shared_s[w] if where == OTHERS else self.steps.held_s[w] if where == HELD else None
        if where == HELD and rewrites and self.steps.mirrored_s[w] is not None:
            table = self.steps.mirrored_s[w]
        self._table[w] = table if table is not None else self.steps.cached_s[w]

    def update_into(self, w: int) -> simpy.Event:
        """θ' = θ − η·g into a fresh buffer (Leashed-SGD's pass, ``update_rule.step_into``): a step like an
        update, timed by where the model's lines are as it begins (:meth:`_begin`: its own, another core's,
        or held by another cache too), at a calibrated profile's rates for a cache-resident model: the
        update's streams plus the fresh buffer's lines read for ownership (``CacheModel.update_into_s``:
        measured so). At a preset's estimated L3 rate, through the memory model, or with a given
        ``[timing] update``: an update (unmeasured there: four streams would move Leashed's NUMA/UMA rate
        on the Ek 2021 preset further from the study's S1: benchmarks/README_sim.md, design measurements)."""
        cached = self.steps.cached_s[w]
        # no fresh-vector rate: a given update, the memory model, or a preset's estimated L3 (read/update only)
        if self._update[w] is not None or cached is None or FRESH_COPIES not in cached:
            return self.update(w)
        self._begin(w, writes=True)
        return self._step(w, None, FRESH_COPIES, 1.0, None)

    def snapshot(self, w: int) -> simpy.Event:
        """The executor's loss snapshot (``executors.cpu.shared.take_snapshot``): worker ``w`` copies θ into
        the next slot of the loss ring, at the time calibrated in a worker's cycle
        (``cycle_snapshot_median_s``: a slot is written once a run or less, so it is in no cache). Only
        called when :attr:`snapshot_s` is set (:meth:`simasgd.sim.engine.SimRun.snapshot`)."""
        if self.snapshot_s is None:
            raise RuntimeError("a loss snapshot without its calibrated time (snapshot_s)")
        return self.cores.work(w, self.snapshot_s)

    def atomic_adds(self, w: int, reader: int | None = None) -> simpy.Event:
        """``g[i] += δ[i]`` for every i as d atomic float adds (Lopez accumulation).

        Each is a locked read-modify-write that cannot overlap the next: d × ``[cas] latency_s`` on lines
        this core holds. While thread ``reader`` (the Lopez master, which reads g whole at every step) holds
        a CPU as the pass begins, g's lines sit in its cache: each must move back first, one line's move
        (``[locks] handoff_s``, a line between two cores) per :attr:`LineCosts.line_bytes` of g. With
        ``[sim] coherence = false``, not so. With a given ``[timing] update``, or no calibrated CAS, a pass
        costs an update.
        """
        lines = self.line_costs
        if self._update[w] is not None or not self.dim or not lines.calibrated:
            return self.update(w)
        seconds = self.dim * self.cas_latency[w]
        if lines.coherent and reader is not None and reader != w and self.cores.on_cpu(reader):
            seconds += math.ceil(self.model_bytes / lines.line_bytes) * self.handoff_s[w]
        # the reader's steps meanwhile are beside it
        self._passes_end = max(self._passes_end, self.env.now + seconds)
        return self.cores.work(w, seconds)

    def private_copy(self, w: int) -> simpy.Event:
        """Copy a model-sized vector between two of the worker's own buffers (Lopez's g_old ← g): at the
        private-buffer rate of its size (``[copy_by_size]``), else through the memory model; with a
        given ``[timing] read``, a read's duration."""
        if self._read[w] is not None:
            return self.read(w)
        if self.steps.private_copy_s is not None:
            return self.cores.work(w, self.steps.private_copy_s)
        return self.cores.work(w, 0.0, lambda after: self.memory.stream(w, READ_COPIES * self.model_bytes, after))

    def read_time(self, w: int) -> float | None:
        """A drawn read duration, or None when reads are derived from the memory model."""
        s = self._read[w]
        return None if s is None else s()

    def update_time(self, w: int) -> float | None:
        s = self._update[w]
        return None if s is None else s()

    def _step(self, w: int, sampler: Sampler | None, copies: int, part: float, seconds: float | None,
              first: bool = True) -> simpy.Event:
        if seconds is None and sampler is not None:
            seconds = sampler() * part
        cached = self._table[w]
        own = self._own_miss[w].get(copies, 0.0) * part if seconds is None else 0.0
        if seconds is None and cached is not None:
            miss = self._model_miss[w] * copies * self.model_bytes * part
            if miss or own:
                return self.cores.work(w, cached[copies] * part, lambda after: self._misses(w, miss, own, first, after))
            seconds = cached[copies] * part
        if seconds is not None:
            return self.cores.work(w, seconds)
        nbytes = copies * self.model_bytes * part
        return self.cores.work(w, 0.0, lambda after: self._misses(w, nbytes, own, first, after))

    def _misses(self, w: int, shared: float, own: float, first: bool, after: float) -> Transfer:
        """θ's bytes from where it lives and, at once, the worker's own missing bytes from its DRAM, ``after``
        seconds from now."""
        mem = self.memory
        if not own:
            return mem.move(w, shared, first, after)
        if not shared:
            return mem.stream(w, own, after)
        return Transfer(self.env, [mem.move_part(w, shared, first, after), mem.stream_part(w, own, after)])

    def block(self, w: int) -> None:
        self.cores.block(w)


def server_update_s(p: object, part: float = 1.0) -> float:
    """:meth:`Platform.server_update_s` where the machine is CPUs; 0 on a GPU's platform, whose model prices no
    server process."""
    return p.server_update_s(part) if isinstance(p, Platform) else 0.0

