"""What each step of a worker costs on the simulated machine, and on which CPU it runs.

A worker's three steps — read the model, compute a gradient, update the
model — become SimPy events here. Durations come from ``[timing]`` when the
scenario gives them; otherwise they follow from the machine and the workload:

- gradient: the calibrated profile's samples (preset ``this``, ``[gradient."<workload>"]``
  of docs/profile.md; those measured with k = min(workers, CPUs) threads at once,
  ``concurrent.k<k>``, when the profile has them) when present, else ``flops_per_sample × batch / gflops_per_core`` with gamma jitter of
  coefficient of variation ``[sim] gradient_cv``;
- read: a copy of the model, ``2·d·itemsize`` bytes (load shared, store local);
- update: ``θ ← θ − η·g``, ``3·d·itemsize`` bytes; both at the calibrated bandwidth of
  the model's buffer size where it lives (:mod:`caches`), through :mod:`memory` when the
  run's buffers spill out of the last-level cache or no such table was calibrated;
- atomic adds (Lopez accumulation): d × the calibrated ``[cas] latency_s``, else an update.

A worker's gradient time is a draw times its straggler slowdown, plus a
transient pause with the configured probability (:mod:`draws`: every draw from
the worker's own ``Role.TIMING`` stream, one child stream per step kind, in
blocks). What the profile holds is read in :mod:`profile_tables`.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import simpy

from simasgd import distributions, seeds
from simasgd.machine import Machine, place
from simasgd.scenario import Scenario
from simasgd.sim.caches import HELD, OTHERS, OWN, CacheModel, LastWriter
from simasgd.sim.cpu import Cores
from simasgd.sim.interference import Overlap, slowdowns
from simasgd.sim.host_speed import SharedDraw
from simasgd.sim.draws import Sampler, additions, gradient_draw, host_noise, host_speed, timing_dist
from simasgd.sim.profile_tables import (FRESH_COPIES, READ_COPIES, UPDATE_COPIES, pass_costs,
                                        profile_fresh_destinations, profile_gradient, profile_latency,
                                        profile_machine, profile_shared_fresh, profile_snapshot, profile_steps,
                                        spin_yield_s, workload_table)
from simasgd.sim.memory import Memory
from simasgd.sim.racing import Writers
from simasgd.sim.tick import Tick, split, tick_params
from simasgd.sim import sockets



class Platform:
    """The machine as the workers see it: ``gradient(w)``, ``read(w)``, ``update(w)`` are events."""

    def __init__(self, env: simpy.Environment, sc: Scenario, machine: Machine, run: int,
                 dim: int | None = None, itemsize: int = 8, flops_per_sample: float | None = None):
        self.env = env
        n = sc.workers.count
        self.machine = machine = profile_machine(machine)
        cpus = place(machine, n, sc.workers.placement)
        # "os" placement: the OS spreads threads over sockets like numa does (for memory paths).
        spread = place(machine, n, "numa")
        self.sockets = [machine.socket_of(c if c is not None else s) for c, s in zip(cpus, spread)]
        self.cores = Cores(env, machine, cpus, sc.sim.sched_yield, spin_yield_s(sc, machine),
                           spread if sc.sim.run_queues == "per_cpu" else None)
        self.memory = Memory(env, machine, self.sockets)
        self.model_bytes = (dim or 0) * itemsize
        self.dim = dim or 0
        caches = CacheModel.from_profile(machine.profile) if sc.sim.cache_model else None
        # cache-resident model buffers: fixed per-core step times (None = through the memory model)
        self._caches = caches if caches is not None and caches.in_cache(self.model_bytes, n) else None
        self._coherent = n > 1 and sc.sim.coherence  # the model's lines may have been written by another core
        self._in_cycle = sc.sim.steps_in_cycle
        self._held = sc.sim.held_lines
        # Leashed's pass timed with two workers at once (its destination held by the other's cache): in-cycle
        two = profile_shared_fresh(machine.profile, sc.workload) if self._in_cycle and self._held else None
        # ... by what it is built into: a claimed vector, or the worker's own again (a retry, or kept from a
        # dropped attempt), whose lines are in its cache
        dest = profile_fresh_destinations(machine.profile, sc.workload) \
            if two is not None and sc.sim.leashed_destinations else {}
        # persistence 0 as calibrated with it, where it was: workers that drop fall into step, and a claimed
        # pass then mostly overlaps the other worker's (docs/profile.md)
        dropping = sc.algorithm.name == "leashed" and sc.algorithm.param("persistence") == 0
        two = dest.get("claimed_dropping" if dropping and "claimed_dropping" in dest else "claimed", two)
        self._own_fresh_s = {k: dest[k] for k in ("retry", "kept") if k in dest} if self._coherent else {}
        cached, shared, held = self._rates(profile_steps(machine.profile, sc.workload) if self._in_cycle else {}, two)
        # a copy between two of a worker's own buffers (no other core wrote them)
        self._private_copy_s = None if self._caches is None else self._caches.read_s(self.model_bytes)
        # the executor's loss snapshot: θ copied into a ring slot in no cache (calibrated in a worker's cycle)
        self.snapshot_s = profile_snapshot(machine.profile, sc.workload) \
            if sc.sim.loss_snapshots and sc.timing.update is None and dim else None
        self._cached_s: list[dict[int, float] | None] = [cached] * n
        self._shared_s: list[dict[int, float] | None] = [shared] * n
        self._held_s: list[dict[int, float] | None] = [held] * n  # lines valid here and in another cache
        self._lines = LastWriter(n, sc.sim.coherence_recency)
        # A gradient on a private copy evicts the model's lines from the worker's private cache when the copy
        # and the model do not fit it together (2-vCPU AMD EPYC, 1 MB L2: a 680 KB model; not the Xeon's 2 MB)
        private = _private_cache_bytes(machine.profile)
        self._evicts = self._coherent and self._held and private is not None and 2 * self.model_bytes > private
        self._touched_at = [0.0] * n  # when each worker last read or wrote the model
        race_s = self._caches.race_s(self.model_bytes) \
            if self._caches is not None and self._coherent and sc.sim.racing_writes else None
        self._table: list[dict[int, float] | None] = [shared or cached] * n  # the step in progress (chunks)
        self._master: int | None = None  # a Lopez master, whose steps are timed by [passes] (lopez_master)
        self._pass_until = [-math.inf] * n  # when each worker's atomic pass over g ends (Lopez)
        self._model_miss = [0.0] * n  # the part of a read/update that streams from DRAM (sockets model)
        self._own_miss: list[dict[int, float]] = [{}] * n  # private bytes of a read/update missing the L3
        self.socket_shares = self._socket_shares(sc, machine, cpus, dim, itemsize, derived=cached is None)
        # A CAS moves the line from where the model lives (or takes what calibration measured).
        cas, handoff = profile_latency(machine, "cas", "latency_s"), profile_latency(machine, "locks", "handoff_s")
        self.cas_latency = list(self.memory.latency) if cas is None else [cas] * n
        # a Lopez pass's locked adds, alone and while another CPU reads the buffer (profile [passes])
        add, shared_add = pass_costs(machine, self.model_bytes)
        self.pass_add_s = add if add is not None else cas
        self.pass_shared_add_s = shared_add if shared_add is not None and sc.sim.coherence else self.pass_add_s
        self.handoff_s = list(self.memory.latency) if handoff is None else [handoff] * n
        # updates racing another on the same lines (HOGWILD!, EA-wild's centre): [coherence] race_gbs, when
        # calibrated; the later one trails the earlier by a line's hand-off between the cores (racing.py)
        c2c = profile_latency(machine, "c2c", "latency_ns")
        line = [c2c * 1e-9] * n if c2c is not None else self.handoff_s
        # (convoys only where every thread has a CPU of its own: a time-shared leader may lose its CPU
        # mid-sweep and be overtaken, which a wait on its chunk cannot tell)
        convoys = sc.sim.write_convoys and not self.cores.oversubscribed
        self._writers = None if race_s is None else Writers(env, self.cores, race_s, line, convoys)
        # the executor's record, budget check and clock between a version's bump and the next read of it
        self.bookkeeping_s = profile_latency(machine, "executor", "bookkeeping_s") \
            if sc.sim.bookkeeping and sc.timing.update is None else None
        # gradients computing at once: one per worker, at most one per (distinct) CPU
        at_once = min(n, len(set(cpus)) if None not in cpus else machine.hw_threads)
        # ... or, every worker on a CPU of its own, each gradient's work alone at the rate of how many compute
        self._overlap = self._interference(sc, machine, at_once)
        grad = self._gradient_dist(sc, machine, flops_per_sample, 1 if self._overlap else at_once)
        derived = sc.timing.gradient is None and not isinstance(grad, distributions.Empirical)
        ss = self.socket_shares
        self._grad_slow = [1.0] * n if ss is None or not derived else ss.slowdown
        self._grad_miss = [0.0] * n if ss is None or not derived else ss.miss_bytes
        noise = host_noise(sc, machine, grad, at_once)  # pauses beyond the calibrated calls' own spread
        grad, self._tick = self._timer_tick(sc, machine, grad, run)
        read = timing_dist(sc.timing.read, sc.base_dir, "timing.read")
        update = timing_dist(sc.timing.update, sc.base_dir, "timing.update")
        if (read is None or update is None) and dim is None:
            raise ValueError("derived read/update costs need the model dimension (give [timing] read and update)")
        st = sc.workers.stragglers
        pause = timing_dist(st.pause, sc.base_dir, "workers.stragglers.pause") if st.probability > 0 else None
        self._grad: list[Callable[[], float]] = []
        self._read: list[Sampler | None] = []
        self._update: list[Sampler | None] = []
        speed = host_speed(sc, machine, grad, run)
        for w in range(n):
            rg, rr, ru, rp, rn = (np.random.default_rng(s) for s in
                                  seeds.sequence(sc.seed, run, seeds.Role.TIMING, w).spawn(5))
            slow = (st.slowdown if w < st.count else 1.0) * self._grad_slow[w]
            if speed is None:
                self._grad.append(Sampler(gradient_draw(grad, rg, slow, st.probability, pause, rp, noise, rn)))
            else:  # the copula over the same samples; pauses and host noise added as without it
                self._grad.append(SharedDraw(grad.samples, speed[0], speed[1], lambda: env.now, slow, rg,
                                             additions(st.probability, pause, rp, noise, rn)))
            self._read.append(None if read is None else Sampler(lambda k, d=read, r=rr: d.sample(r, k)))
            self._update.append(None if update is None else Sampler(lambda k, d=update, r=ru: d.sample(r, k)))
        self._fast = [not t.sliced and not self._grad_miss[w] for w, t in enumerate(self.cores.threads)]

    @staticmethod
    def _timer_tick(sc: Scenario, machine: Machine, grad: distributions.Distribution,
                    run: int) -> tuple[distributions.Distribution, Tick | None]:
        """The gradient samples without the calls a timer tick fell into, and the run's timer (:mod:`tick`),
        where the profile found one (``[tick]``) and ``[sim] timer_tick``; else ``grad`` and None."""
        params = tick_params(machine.profile) if sc.sim.timer_tick and sc.timing.gradient is None else None
        if params is None or not isinstance(grad, distributions.Empirical):
            return grad, None
        period, hit, longest = params
        parts = split(grad.samples, period, hit, longest)
        if parts is None:
            return grad, None
        stream = seeds.sequence(sc.seed, run, seeds.Role.TIMING, 0).spawn(7)[6]  # 6th: host_speed's
        return distributions.Empirical(parts[0]), Tick(period, hit, parts[1], np.random.default_rng(stream))

    def _rates(self, steps: dict[int, float],
               shared_fresh: float | None = None) -> tuple[dict[int, float] | None, ...]:
        """Step times by streams moved, on a worker's own lines, on another core's, and on lines both hold
        (:data:`~simasgd.sim.caches.HELD`): the warm ``[copy_by_size]`` rates, replaced by ``steps`` (timed in
        a worker's cycle) where given; another core's lines cost the slower of those and ``[coherence]``'s
        rate (they come from that core's cache or, where the cycle evicted them, from the next level: not
        both), and so do held lines (``held_read_gbs``/``held_write_gbs``, when calibrated and ``[sim]
        held_lines``). ``shared_fresh``: Leashed's pass timed in two workers' cycles at once
        (``cycle_fresh_k2_median_s``), which is then the fresh pass on another core's lines: its
        destination is a vector both gradients read, held by the other's cache or evicted by the
        gradients' traffic in proportions no ping-pong reproduces. (None, None, None) off the cache model."""
        c, s = self._caches, self.model_bytes
        if c is None:
            return None, None, None
        own = {READ_COPIES: c.read_s(s), UPDATE_COPIES: c.update_s(s), FRESH_COPIES: c.update_into_s(s), **steps}
        if not self._coherent:
            return own, None, None
        shared = {READ_COPIES: max(own[READ_COPIES], c.read_s(s, True)),
                  UPDATE_COPIES: max(own[UPDATE_COPIES], c.update_s(s, True)),
                  FRESH_COPIES: shared_fresh or max(own[FRESH_COPIES], c.update_into_s(s, True))}
        read, update = c.held_s(s, False), c.held_s(s, True)
        if not self._held or read is None or update is None:
            return own, shared, None
        return own, shared, {READ_COPIES: max(own[READ_COPIES], read), UPDATE_COPIES: max(own[UPDATE_COPIES], update)}

    def lopez_master(self, w: int) -> None:
        """Worker ``w`` is a Lopez master: it steps back to back with no gradient between (a read of g, an
        update of θ), and alone writes θ. Its step takes ``[passes] step_s``, or ``step_shared_s`` when a
        worker's atomic pass over g is under way as it begins (calibrated as the executor's master steps:
        g ← acc/(N−1), then the update rule), split between the read and the update as the warm rates
        split them. Without those figures: the warm ``[copy_by_size]`` rates (its lines stay in its
        cache), not those timed in a worker's cycle; so too with ``[sim] steps_in_cycle = false``."""
        if self._caches is None:
            return
        own, shared, _ = self._rates({})
        alone, beside = pass_costs(self.machine, self.model_bytes, "step_s", "step_shared_s")
        if alone is not None and beside is not None and self._update[w] is None and self._in_cycle:
            part = own[READ_COPIES] / (own[READ_COPIES] + own[UPDATE_COPIES])
            own = {READ_COPIES: part * alone, UPDATE_COPIES: (1 - part) * alone}
            shared = {READ_COPIES: part * beside, UPDATE_COPIES: (1 - part) * beside} if self._coherent else None
            self._master = w
        # the master alone writes θ: lines it holds with a reader are the reader's to lose (its next read)
        self._cached_s[w], self._shared_s[w], self._held_s[w] = own, shared, None

    def _socket_shares(self, sc: Scenario, m: Machine, cpus: list[int | None], dim: int | None,
                       itemsize: int, derived: bool) -> sockets.SocketShares | None:
        """Turbo and last-level cache per socket (:mod:`sockets`) on a machine whose preset knows them."""
        if not sc.sim.socket_model or (m.base_ghz <= 0 and m.llc_mb <= 0):
            return None
        fp = sockets.footprint(sc.workload, dim or 0, itemsize, m.l2_kb * 1024) if dim else None
        ss = sockets.shares(m, cpus, self.sockets, fp, self.model_bytes)
        if derived and sc.timing.read is None and sc.timing.update is None:
            self._own_miss = ss.own_miss
        if derived and m.llc_gbs > 0 and self.model_bytes:
            for w, h in enumerate(ss.model_hit):
                if h > 0:  # θ's home L3 serves the hit part at the cache's per-core rate
                    self._cached_s[w] = self._shared_s[w] = {c: h * c * self.model_bytes / (m.llc_gbs * 1e9)
                                                             for c in (READ_COPIES, UPDATE_COPIES)}
                    self._held_s[w] = None
                    self._model_miss[w] = 1.0 - h
        return ss

    def _interference(self, sc: Scenario, m: Machine, at_once: int) -> Overlap | None:
        """Gradients that slow each other while computing at once (:mod:`interference`): with the profile's
        gradient times, the k-thread samples for k up to ``at_once``, and no time-shared CPU."""
        if not sc.sim.gradient_interference or sc.timing.gradient is not None or self.cores.oversubscribed:
            return None
        found = workload_table(m.profile, sc.workload)
        slow = None if found is None else slowdowns(found[1], at_once, sc.sim.gradient_in_cycle)
        return None if slow is None else Overlap(self.env, slow)

    @staticmethod
    def _gradient_dist(sc: Scenario, m: Machine, flops: float | None,
                       at_once: int = 1) -> distributions.Distribution:
        given = timing_dist(sc.timing.gradient, sc.base_dir, "timing.gradient")
        if given is not None:
            return given
        prof = profile_gradient(m.profile, sc.workload, at_once, in_cycle=sc.sim.gradient_in_cycle)
        if prof is not None:
            return prof
        if flops is None:
            raise ValueError("timing.gradient not given and the workload's flops are unknown")
        mean = flops * sc.workload.batch_size / (m.gflops_per_core * 1e9)
        cv = sc.sim.gradient_cv
        return distributions.Deterministic(mean) if cv == 0 else distributions.Gamma(mean, 1.0 / cv**2)

    def gradient(self, w: int) -> simpy.Event:
        seconds = self._grad[w]()
        if self._tick is not None:  # the timer's instants it runs over (on a time-shared CPU: as if it ran on)
            seconds += self._tick.stall(self.env.now, seconds)
        if self._fast[w]:
            if self._overlap is not None:
                return self.env.process(self._overlap.gradient(seconds))
            return self.env.timeout(seconds)
        miss = self._grad_miss[w]
        if miss:  # the part of its traffic the socket's L3 cannot hold streams from the socket's DRAM
            return self.cores.work(w, seconds, lambda: self.memory.stream(w, miss))
        return self.cores.work(w, seconds)

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

    def update(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True,
               racing: bool = False, down: bool = False) -> simpy.Event:
        """Apply (a ``part`` of) the update to the shared model; ``racing``: with no lock, so other workers
        may be writing the same lines at this moment (HOGWILD!, EA-wild's centre: :mod:`racing`), the
        parts from the top of the model down where ``down``."""
        s = self._update[w]
        if s is not None and seconds is None and part == 1.0 and self._fast[w]:
            return self.env.timeout(s())
        racing = racing and self._writers is not None
        if first:
            self._begin(w, writes=True)
            if racing:
                self._writers.begin(w, max(1, round(1 / part)), down)
        return self._step(w, s, UPDATE_COPIES, part, seconds, first, racing)

    def bookkeeping(self, w: int) -> simpy.Event | None:
        """The executor's own work between a worker's bump of the version and its next read of it (the
        record, the budget check, the clock: profile ``[executor] bookkeeping_s``), else None. It decides
        which of two updates ending a line's hand-off apart the next read sees (:mod:`racing`)."""
        return None if self.bookkeeping_s is None else self.cores.work(w, self.bookkeeping_s)

    def computes_on_copy(self, w: int) -> None:
        """Worker ``w`` begins a gradient on its private copy of the model. Where the copy and the model do
        not fit its private cache together, the copy it just took (or the update that wrote both) and the
        gradient's first pass over the copy evict the model's lines from its cache
        (:meth:`LastWriter.evicted`): the next write of the model need not invalidate them there. Found in
        the executor's mutex at 2 threads with reads skipped (2-vCPU AMD EPYC, B = 16, 680 KB): updates
        15-23 µs where the held-lines rate gave 60-79 (benchmarks/fidelity.md, 2026-11-26)."""
        if self._evicts:
            self._lines.evicted(w)

    def touch(self, w: int) -> None:
        """Worker ``w`` reads the shared model in place (Leashed-SGD's gradient on the latest vector): its
        lines are in this worker's cache from now on, at no step of their own."""
        self._lines.touch(w, writes=False)

    def _begin(self, w: int, writes: bool) -> None:
        """A read or update of the shared model begins: the rates it runs at (private, or another core's
        lines: :class:`LastWriter`) hold for all its chunks."""
        where = self._lines.touch(w, writes)
        # time-shared CPU: the other threads' turns since this worker's last step evicted its lines
        # (a worker's cycle is about as large as a core's private cache)
        if where != OTHERS and self._lines.recency and self.cores.turned_since(w, self._touched_at[w]):
            where = OTHERS
        self._touched_at[w] = self.env.now
        if w == self._master:  # the master's g is the workers' to write: is a pass under way?
            other = writes and self._table[w] is self._shared_s[w] or \
                not writes and any(t > self.env.now for t in self._pass_until)
            where = OTHERS if other else OWN
        table = self._shared_s[w] if where == OTHERS else self._held_s[w] if where == HELD else None
        self._table[w] = table if table is not None else self._cached_s[w]

    def update_into(self, w: int, dest: str = "claimed") -> simpy.Event:
        """θ' = θ − η·g into a fresh buffer (Leashed-SGD's pass, ``update_rule.step_into``): at a calibrated
        profile's rates for a cache-resident model, the update's streams plus the fresh buffer's lines
        read for ownership (``CacheModel.update_into_s``: measured so); at a preset's estimated L3 rate,
        through the memory model, or with a given ``[timing] update``: an update, as before (unmeasured
        there: on the Ek 2021 Xeon preset four streams turned Leashed's NUMA/UMA rate at 8 threads from
        above 1.1 to 1.06, the study's S1 measured 1.6-1.8). ``dest``: what the pass is built into,
        ``"claimed"`` (a free pool vector, after a publication), ``"retry"`` (the worker's own vector again
        after a failed CAS) or ``"kept"`` (the same after a dropped attempt and the next gradient); the
        last two at their calibrated times (``[sim] leashed_destinations``) unless other threads ran on
        this worker's CPU since its last pass (their traffic evicted the vector's lines)."""
        cached = self._cached_s[w]
        # no fresh-vector rate: a given update, the memory model, or a preset's estimated L3 (read/update only)
        if self._update[w] is not None or cached is None or FRESH_COPIES not in cached:
            return self.update(w)
        own = self._own_fresh_s.get(dest)
        if own is not None and self.cores.turned_since(w, self._touched_at[w]):
            own = None
        self._begin(w, writes=True)
        if own is not None:
            return self.cores.work(w, own)
        # whoever published the source, the destination is a pool vector the other workers' gradients have
        # read in place (Leashed reads every published vector without a copy): its lines must be taken
        # from their caches before they are written, so with 2+ workers a pass is always another core's
        # (``cycle_fresh_k2_median_s`` where calibrated: on the 2-vCPU EPYC 36-41 µs against 22 alone;
        # ``cycle_fresh_k2_claimed_median_s`` with destinations)
        self._table[w] = self._shared_s[w] or self._cached_s[w]
        return self._step(w, None, FRESH_COPIES, 1.0, None)

    def snapshot(self, w: int) -> simpy.Event:
        """The executor's loss snapshot (``executors.cpu.shared.take_snapshot``): worker ``w`` copies θ into
        the next slot of the loss ring, at the time calibrated in a worker's cycle
        (``cycle_snapshot_median_s``: a slot is written once a run or less, so it is in no cache). Only
        called when :attr:`snapshot_s` is set (:meth:`simasgd.sim.engine.SimRun.snapshot`)."""
        return self.cores.work(w, self.snapshot_s)

    def atomic_adds(self, w: int, reader: int | None = None) -> simpy.Event:
        """``g[i] += δ[i]`` for every i as d atomic float adds (Lopez accumulation).

        Each is a locked read-modify-write that cannot overlap the next: d × the calibrated
        ``[passes] add_s`` (or ``[cas] latency_s``); while thread ``reader`` (the Lopez master, which
        reads g whole at every step) holds a CPU as the pass begins, each add must also take its line
        back from the reader's cache: d × ``[passes] add_shared_s``. Without a calibrated figure, or
        when ``[timing] update`` is given, a pass costs an update.
        """
        if self._update[w] is None and self.pass_add_s is not None and self.dim:
            shared = reader is not None and reader != w and self.cores.on_cpu(reader)
            seconds = self.dim * (self.pass_shared_add_s if shared else self.pass_add_s)
            self._pass_until[w] = self.env.now + seconds  # the master's steps meanwhile are beside it
            return self.cores.work(w, seconds)
        return self.update(w)

    def private_copy(self, w: int) -> simpy.Event:
        """Copy a model-sized vector between two of the worker's own buffers (Lopez's g_old ← g): at the
        private-buffer rate of its size (``[copy_by_size]``), else through the memory model; with a
        given ``[timing] read``, a read's duration."""
        if self._read[w] is not None:
            return self.read(w)
        if self._private_copy_s is not None:
            return self.cores.work(w, self._private_copy_s)
        return self.cores.work(w, 0.0, lambda: self.memory.stream(w, READ_COPIES * self.model_bytes))

    def read_time(self, w: int) -> float | None:
        """A drawn read duration, or None when reads are derived from the memory model."""
        s = self._read[w]
        return None if s is None else s()

    def update_time(self, w: int) -> float | None:
        s = self._update[w]
        return None if s is None else s()

    def _step(self, w: int, sampler: Sampler | None, copies: int, part: float, seconds: float | None,
              first: bool = True, racing: bool = False) -> simpy.Event:
        """``racing``: an unlocked update's chunk at a derived, cache-resident time (:meth:`racing.Writers.chunk`)."""
        if seconds is None and sampler is not None:
            seconds = sampler() * part
        cached = self._table[w]
        own = self._own_miss[w].get(copies, 0.0) * part if seconds is None else 0.0
        if seconds is None and cached is not None:
            miss = self._model_miss[w] * copies * self.model_bytes * part
            if miss or own:
                return self.cores.work(w, cached[copies] * part, lambda: self._misses(w, miss, own, first))
            if racing:
                return self._writers.chunk(w, part, cached[copies] * part)
            seconds = cached[copies] * part
        if seconds is not None:
            return self.cores.work(w, seconds)
        nbytes = copies * self.model_bytes * part
        return self.cores.work(w, 0.0, lambda: self._misses(w, nbytes, own, first))

    def _misses(self, w: int, shared: float, own: float, first: bool) -> simpy.Event:
        """θ's bytes from where it lives and, at once, the worker's own missing bytes from its DRAM."""
        if not own:
            return self.memory.move(w, shared, first)
        if not shared:
            return self.memory.stream(w, own)
        return self.env.all_of([self.memory.move(w, shared, first), self.memory.stream(w, own)])

    def block(self, w: int) -> None:
        self.cores.block(w)


def _private_cache_bytes(profile: dict | None) -> float | None:
    """The largest cache level a core has to itself (profile ``[cache]``, ``shared_by`` 1), or None."""
    cache = (profile or {}).get("cache") or {}
    sizes, shared = cache.get("sizes_bytes") or [], cache.get("shared_by") or []
    private = [float(z) for z, k in zip(sizes, shared) if k == 1]
    return max(private) if private else None
