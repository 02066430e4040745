"""Cores and the OS scheduler: threads beyond the cores time-share them in quanta.

Each thread runs on a pool of logical CPUs: its own CPU when pinned (``uma``,
``numa``, a list), or all of them when the OS places it (``os``). A pool with
no more threads than CPUs never makes anyone wait, and work there is a plain
timeout (the fast path). An oversubscribed pool is a time-sharing scheduler: a
thread holds a CPU until its quantum runs out *and* someone is waiting (then
it goes back to the run queue) or until it blocks (lock, barrier) or yields;
every time it gets a CPU it pays ``context_switch_s``. A thread descheduled
inside a critical section keeps the lock — the convoy of oversubscribed locks.

The scheduler is Linux's EEVDF (6.6+), whose ``sched_yield`` the executor's spinning lock waiters call
every 64 spins: the run queue is ordered by CPU time received (the fair scheduler's vruntime, equal
weights) and a yielding spinner that is *eligible* (had no more CPU time than the runnable average)
forfeits the rest of its slice (kernel commit 79104becf42b, "Forfeit vruntime on yield", in 6.12.63+ and
6.15+); it then hands its CPU to the least-served queued thread once it has had more CPU time than that
one, or at once to a descheduled lock holder. So waiters that meet contention leave the CPU to threads
that can work, and descheduling lands at lock waits.

A single-CPU pool whose runnable threads all spin on one held mutex (or all wait to write a read-write lock
they cannot take), each yielding at once, passes its CPU from spinner to spinner every context switch and
nothing another thread can see changes: it rotates in closed form (:class:`Rotation`), without events, and is
brought up to date, float for float, only when it is looked at, joined, or the lock comes free (then the
spinner whose turn comes first takes it). So a turn
costs arithmetic, not an event, and whole rounds go at once where they repeat; ``FAST_ROTATION`` off, every
turn is an event (``WHOLE_ROUNDS`` off, every turn is taken one by one).

SimPy runs the events of one instant in order of rank (priority, then the order they were made), and step
times from a preset are constants, so the turns of many pools fall on the same instants. For a rotation to
rank its turns as events would, a run of turns that end as soon as they begin keeps one rank on either
path (:meth:`Cores._handed_on`), and the environment tells how far the current instant has got
(:class:`simasgd.sim.primitives.Environment`). What a rotation does not keep is rounding: whole rounds at
once multiply what turns add up, so CPU times can differ in their last bits. Spinners whose CPU times tie, or
come within that rounding of each other (constant step times make them: a preset's), turn in the order the
rounding gives, not the order they queued in, from then on: another round robin of the same spinners, with
the same statistics (``tests/sim/test_sim_rotation.py``).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable, Generator

import simpy
from simpy.events import NORMAL

from simasgd.machines.machine import Machine
from simasgd.sim.memory import Transfer
from simasgd.sim.primitives import Environment, Mutex, Req, RWLock, WriteRequest
from simasgd.sim.tick import Tick

Then = Callable[[float], Transfer]  # a memory transfer that starts so many seconds from now
Spun = Mutex | RWLock  # a lock whose spinners rotate: a mutex's, a read-write lock's writers

FAST_ROTATION = True  # a pool of spinners of a held lock rotates in closed form (Rotation); tests compare without
WHOLE_ROUNDS = True  # a periodic rotation's rounds go many at once (Cores._jump); tests compare turn by turn
# Every CPU grant and give-up as (worker, its CPU or -1 where the OS places it, instant, on), where a caller collects
# them: benchmarks/sched_trace.py compares them with a kernel trace. With FAST_ROTATION off every turn is one of them.
TURNS: list[tuple[int, int, float, bool]] | None = None


class CpuGrant(simpy.Event):
    """A thread's request for a CPU of its pool; granted, it fires once the context switch is paid."""

    __slots__ = ("at", "eid", "key", "th")

    def __init__(self, env: simpy.Environment, th: Thread, key: tuple[float, float, int]) -> None:
        super().__init__(env)
        self.th, self.key = th, key
        self.at = -1.0  # when it was granted (-1: not yet; -2: withdrawn)
        self.eid = -1  # its rank among the events of the instant it fires at (SimPy's event id)


class CpuPool:
    """The CPUs of a pool as a run queue ordered by CPU time received (the fair scheduler's vruntime), then
    by arrival. A grant hands the CPU over at once — the thread is on it from that instant, its quantum
    started — and wakes the thread once the context switch is paid: one event a turn on a CPU."""

    __slots__ = ("capacity", "counts", "env", "free", "heap", "order", "quantum", "switch", "waiting")

    def __init__(self, env: simpy.Environment, cpus: int, quantum: float, switch: float) -> None:
        self.env, self.capacity, self.free = env, cpus, cpus
        self.counts = isinstance(env, Environment)  # it counts the grants it schedules on a rank already taken
        self.quantum, self.switch = quantum, switch
        self.heap: list[tuple[tuple[float, float, int], CpuGrant]] = []
        self.waiting = 0  # requests in the heap not withdrawn
        self.order = itertools.count()

    def request(self, th: Thread) -> CpuGrant:
        g = CpuGrant(self.env, th, (th.cpu_time, self.env.now, next(self.order)))
        heapq.heappush(self.heap, (g.key, g))
        self.waiting += 1
        self._dispatch()
        return g

    def release(self, eid: int | None = None) -> None:
        """A CPU comes free; ``eid``: the rank the grant it makes takes (None: a fresh one)."""
        self.free += 1
        self._dispatch(eid)

    def least_served(self) -> float | None:
        """The CPU time of the least-served queued thread; None when nobody is queued."""
        heap = self.heap
        while heap and heap[0][1].at == -2.0:
            heapq.heappop(heap)  # withdrawn: dropped once it reaches the top
        return heap[0][0][0] if self.waiting else None

    def withdraw(self, g: CpuGrant) -> None:
        """A request still queued leaves the queue (k-sync cancels a thread's work)."""
        if g.at == -1.0:
            g.at = -2.0
            self.waiting -= 1

    def _dispatch(self, eid: int | None = None) -> None:
        while self.free and self.waiting:
            _key, g = heapq.heappop(self.heap)
            if g.at == -2.0:
                continue  # withdrawn
            self.waiting -= 1
            self.free -= 1
            self._grant(g, eid)
            eid = None

    def _grant(self, g: CpuGrant, eid: int | None) -> None:
        th, now = g.th, self.env.now
        g.at = now
        th.queued = False
        th.req, th.left, th.since = g, self.quantum, now
        if TURNS is not None:
            TURNS.append((th.w, -1 if th.cpu is None else th.cpu, now, True))
        th.rq.running += 1
        th.rq.since_sum += now
        if th.holds:
            th.rq.holders_off -= 1
        rot = th.rq.rotation
        if rot is not None:
            rot.cur, rot.at = g, now + self.switch  # the switch ends at the rotation's next turn: no event
            rot.phases.place(th.rq, rot)
            return
        env = self.env
        g._ok, g._value = True, None
        if eid is None:
            eid = next(env._eid)
        elif self.counts:
            env.reranked += 1  # type: ignore[attr-defined]
        g.eid = eid
        heapq.heappush(env._queue, (now + self.switch, NORMAL, eid, g))


class RunQueue:
    """The CPUs of one pool, the threads placed on them, and what wakes those threads' spinners: a thread
    joining this queue (``arrived``), a lock holder of this queue losing its CPU (``holder_out``). Nothing
    that happens on another pool wakes them, so an event costs the threads of one pool, not all of them."""

    __slots__ = ("arrived", "changes", "cpu_sum", "holder_out", "holders_off", "members", "parked", "pool",
                 "rotation", "running", "since_sum", "threads")

    def __init__(self, env: simpy.Environment, cpus: int, quantum: float, switch: float) -> None:
        self.pool = CpuPool(env, cpus, quantum, switch)
        self.threads: list[Thread] = []
        self.arrived = env.event()  # succeeds (and is re-armed) when a thread joins the run queue
        self.holder_out = env.event()  # succeeds (and is re-armed) when a lock holder loses its CPU
        self.holders_off = 0  # threads that hold a lock and no CPU
        self.parked = 0  # spinners of a lock (Spun) that gave their CPU up and have not asked for it again
        self.rotation: Rotation | None = None  # set while the pool rotates in closed form
        # The runnable threads (queued or on a CPU) in sums, so that their mean CPU time costs O(1): their
        # number, their CPU time before the current turn, and the running ones' number and turn starts.
        self.members, self.cpu_sum, self.running, self.since_sum = 0, 0.0, 0, 0.0
        self.changes = 0

    def mean_vruntime(self, now: float) -> float | None:
        """Mean CPU time received by the runnable threads, current turns included; None if none."""
        if not self.members:
            return None
        return (self.cpu_sum + (self.running * now - self.since_sum)) / self.members

    def changed(self) -> None:
        """Every so many changes the sums are taken again from the threads, so rounding cannot build up."""
        self.changes += 1
        if self.changes >= _RESUM:
            self.resum()

    def resum(self) -> None:
        """The sums taken again from the threads."""
        self.changes = 0
        members = [t for t in self.threads if t.queued or t.req is not None]
        self.members = len(members)
        self.cpu_sum = math.fsum(t.cpu_time for t in members)
        self.running = sum(t.req is not None for t in members)
        self.since_sum = math.fsum(t.since for t in members if t.req is not None)


class Thread:
    """Scheduler state of one worker thread."""

    __slots__ = ("cpu", "cpu_time", "holds", "left", "pool", "queued", "req", "rq", "since", "sliced", "spins_on", "w")

    def __init__(self, rq: RunQueue, sliced: bool, cpu: int | None, w: int = 0) -> None:
        self.w = w  # the worker it runs
        self.rq = rq
        self.pool = rq.pool
        self.req: CpuGrant | None = None  # its CPU, while it has one
        self.left = 0.0
        self.sliced = sliced
        self.cpu = cpu
        self.holds = 0  # locks held (a spinner yields its CPU to a descheduled holder)
        self.cpu_time = 0.0  # CPU time received before the current turn (the fair scheduler's vruntime)
        self.since = 0.0  # when the current turn on a CPU began
        self.queued = False  # waiting in its pool's run queue
        self.spins_on: Spun | None = None  # the lock it spins on, while parked (off its CPU or giving it up)


class Rotation:
    """A single-CPU pool whose runnable threads all spin on one held lock (Spun) and yield at once (no pauses
    between sched_yield calls): its CPU passes from spinner to spinner every context switch and nothing
    another thread can see changes. So it runs without events, a turn every context switch, and the pool is
    brought up to date (:meth:`Cores.replay`) only when someone looks at it, joins it, or the lock comes
    free. Once a round (every spinner one turn) ends as it began shifted in CPU time, all later rounds do,
    and whole rounds are taken at once."""

    __slots__ = ("at", "clock", "cur", "eid", "first", "forfeits", "lock", "members", "periodic", "phases", "seen",
                 "step")

    def __init__(self, lock: Spun, members: list[Thread], eid: int, phases: Phases) -> None:
        self.lock, self.members = lock, members
        self.phases = phases  # the rotating pools of its lock, by the phase of their turns
        self.eid = eid  # its turns' rank among the events of an instant: the one grant after grant kept by events
        self.cur: CpuGrant | None = None  # the spinner granted the CPU last
        self.at = math.inf  # when its context switch ends: the next turn
        self.clock = -math.inf  # a later turn's time, as the turns will add it up (Cores._lock_free)
        self.seen: set[Thread] = set()  # the spinners that turned in the round being checked
        self.first: Thread | None = None  # the one that began that round
        self.forfeits = 0  # slices each forfeited in it
        self.step: dict[Thread, float] = {}  # CPU time each gained in its last turn of a clean round
        self.periodic = False  # the last round was a shift of the one before: so are all later ones


class Phases:
    """The rotating pools of one lock (Spun), in the order of their turns' phase: a turn's time modulo the
    context switch. A rotating pool's turns fall a switch apart, so the pool whose turn comes first after a
    moment is the one whose phase comes first after that moment's, and a lock coming free looks at that pool
    and those within ``margin`` of it (:meth:`from_now`), not at every rotating pool. A phase is taken from
    one turn's time; the turns after it, added up switch by switch, drift from it by their rounding (half an
    ulp each at most), so every phase is taken again before the drift could reach ``margin / 2``."""

    __slots__ = ("bound", "keys", "margin", "order", "phase", "seq", "since", "switch")

    def __init__(self, switch: float) -> None:
        self.switch = switch
        self.margin = switch / 256  # wider finds more pools to look at; narrower, a drift bound reached sooner
        self.keys: list[tuple[float, int, RunQueue]] = []  # (phase, seq, pool), sorted (seq is unique)
        self.seq: dict[RunQueue, int] = {}  # each pool's place in the order the pools began to rotate
        self.phase: dict[RunQueue, float] = {}
        self.since = math.inf  # the earliest turn a phase in ``keys`` was taken from
        self.bound = math.inf  # the caller's latest turn of interest: pools whose turn must come later are not
        self.order = itertools.count()

    def __len__(self) -> int:
        return len(self.keys)

    def place(self, rq: RunQueue, rot: Rotation) -> None:
        """``rq``'s next turn is at ``rot.at``: its phase taken from it."""
        if rq in self.seq:
            self._drop(rq)
        else:
            self.seq[rq] = next(self.order)
        self._put(rq, rot.at)

    def remove(self, rq: RunQueue) -> None:
        if rq in self.seq:
            self._drop(rq)
            del self.seq[rq]

    def from_now(self, cores: Cores) -> Generator[RunQueue, None, None]:
        """The pools in the order of their phase from now on, from one a margin before now's: each one's next
        turn comes no earlier than its phase's distance from now's less twice the margin, so they stop at the
        first that must come after ``bound`` (the caller lowers it as it finds earlier turns)."""
        env = cores.env
        now, s, margin = env.now, self.switch, self.margin
        if ((now - self.since) / s + 2) * math.ulp(now + s) > margin / 2:
            self._refresh(cores)
        keys, n = self.keys, len(self.keys)
        p = math.fmod(now, s)
        lo = p - margin
        start = bisect.bisect_left(keys, (lo + s if lo < 0 else lo,))
        for j in range(n):
            phase, _seq, rq = keys[(start + j) % n]
            if (phase - p + margin) % s - 2 * margin > self.bound - now:
                return
            yield rq

    def _refresh(self, cores: Cores) -> None:
        """Every phase taken again from the pool's next turn, as its turns add it up."""
        pools = list(self.seq)
        self.keys.clear()
        self.since = math.inf
        for rq in pools:
            rot = rq.rotation
            assert rot is not None
            self._put(rq, cores._next_turn(rot))

    def _put(self, rq: RunQueue, at: float) -> None:
        phase = math.fmod(at, self.switch)
        self.phase[rq] = phase
        bisect.insort(self.keys, (phase, self.seq[rq], rq))
        if at < self.since:
            self.since = at

    def _drop(self, rq: RunQueue) -> None:
        key = (self.phase.pop(rq), self.seq[rq], rq)
        i = bisect.bisect_left(self.keys, key[:2])  # (phase, seq) comes before the entry it prefixes
        assert self.keys[i] == key
        del self.keys[i]


class Cores:
    """The CPUs of the machine and the threads placed on them."""

    def __init__(self, env: simpy.Environment, machine: Machine, cpus: list[int | None],
                 spin_yield_s: float = 0.0, queues: list[int] | None = None) -> None:
        """``queues``: for threads the OS places (``cpus[w] is None``) when they outnumber the CPUs, the CPU
        whose run queue each joins — Linux keeps one a CPU and its balancer spreads the threads evenly;
        None = one queue for all the CPUs (any CPU runs the next thread)."""
        if queues is not None and cpus.count(None) > machine.hw_threads:
            cpus = [queues[w] if c is None else c for w, c in enumerate(cpus)]
        self.env = env
        self.quantum = machine.quantum_s
        self.switch = machine.context_switch_s
        self.spin_yield = spin_yield_s  # a spinner's pauses between two sched_yield calls (0: it yields at once)
        # a rotation's turns must know whether they would have run yet in the instant it is at (Environment.ran)
        self.ranked = env if FAST_ROTATION and isinstance(env, Environment) else None
        self.forfeit = max(self.quantum, self.switch, _EPS)  # what a spinner forfeits on yield, its slice being whole
        self.rotating: dict[Spun, Phases] = {}  # the rotating pools of each lock
        queues_of: dict[int | None, RunQueue] = {}
        load = Counter(cpus)
        self.threads: list[Thread] = []
        for cpu in cpus:
            if cpu not in queues_of:
                queues_of[cpu] = RunQueue(env, machine.hw_threads if cpu is None else 1, self.quantum, self.switch)
            rq = queues_of[cpu]
            th = Thread(rq, load[cpu] > rq.pool.capacity, cpu, len(self.threads))
            rq.threads.append(th)
            self.threads.append(th)

    @property
    def oversubscribed(self) -> bool:
        return any(t.sliced for t in self.threads)

    def on_cpu(self, w: int) -> bool:
        """Thread ``w`` holds a CPU now (a thread with a CPU of its own always does)."""
        th = self.threads[w]
        if th.rq.rotation is not None:
            self.catch_up(th.rq)
        return not th.sliced or th.req is not None

    def turned_since(self, w: int, t: float) -> bool:
        """Thread ``w`` shares its CPU and has lost it since time ``t`` (it holds none now, or its current
        turn began after ``t``): other threads ran on that CPU meanwhile."""
        th = self.threads[w]
        if th.rq.rotation is not None:
            self.catch_up(th.rq)
        return th.sliced and (th.req is None or th.since > t)

    def work(self, w: int, seconds: float, then: Then | None = None, tick: Tick | None = None) -> simpy.Event:
        """``seconds`` of CPU work by thread ``w``, then (optionally) a memory transfer it stalls on, on its
        CPU: ``then(after)`` starts one ``after`` seconds from now. A ``tick`` stalls the work at each of its
        instants the thread is on its CPU for (a thread waiting for a CPU loses nothing to it)."""
        th = self.threads[w]
        if not th.sliced:
            if tick is not None:
                seconds += tick.stall(self.env.now, seconds)
            if then is None:
                return self.env.timeout(seconds)
            return then(max(seconds, 0.0))
        if th.req is not None:
            held = seconds if tick is None else seconds + tick.stall(self.env.now, seconds)
            if th.left - held > _LEFT:
                # on its CPU, within its quantum: nothing can take the CPU from it meanwhile, so no scheduler step
                th.left -= held
                if then is None:
                    return self.env.timeout(held)
                return self._stalls(th, then(held), self.env.now + held)
        return self.env.process(cpu_burst(self.env, self, th, seconds, then, tick))

    def _stalls(self, th: Thread, transfer: Transfer, start: float) -> Transfer:
        """``th`` stalls on its CPU from ``start`` until ``transfer`` is through: the stall is CPU time, counted
        against its quantum before whoever waits on the transfer goes on."""
        def end(_ev: simpy.Event) -> None:
            if not transfer.cancelled:
                th.left -= self.env.now - start
                if th.left <= _LEFT and th.req is not None:
                    self.quantum_over(th)
        transfer.callbacks.append(end)  # before the waiter's: it has not yielded the transfer yet
        return transfer

    def spin_wait(self, w: int, req: Req, request: Callable[[], Req]) -> Generator[simpy.Event, object, Req]:
        """Thread ``w`` spins on its CPU until its lock request is granted; returns the granted request.

        A spinning waiter keeps its CPU and burns its quantum: the executor's locks spin, and the
        ``sched_yield`` a spinner calls every few spins hands the CPU over only to a thread that
        must run for the spinner to get anywhere — modelled as: it yields when a lock holder is
        waiting for a CPU of its pool. Otherwise it is preempted only when its quantum runs out with
        threads queued for the CPU. A descheduled spinner cannot take a lock (test-and-test-and-set:
        whoever runs when it is released gets it), so on either its request is withdrawn and made
        again, at the back, once it runs again. Not oversubscribed: a plain wait."""
        th = self.threads[w]
        if not th.sliced:
            yield req
            return req
        pending: Req | None = req
        parked: Req | None = None
        spun = self.env.now  # since when it has spun on this CPU without calling sched_yield
        wake: list[simpy.Event]
        while pending is None or not pending.triggered:
            if th.req is None:  # spinning takes a CPU; back on one, it asks for the lock again
                yield from take_cpu(self.env, self, th)
                spun = self.env.now
                if pending is None:
                    _unpark(th)
                    pending = _again(parked, request)
                continue
            assert pending is not None  # withdrawn only as it loses its CPU: asked again above, once back on one
            if self.env.now < spun + self.spin_yield:
                # its pauses before the next sched_yield: still on its CPU, it takes a lock released meanwhile
                wake = [pending, self.env.timeout(min(spun + self.spin_yield - self.env.now, max(th.left, 0.0)))]
            else:  # it calls sched_yield
                spun = self.env.now
                behind = self._behind(th)
                if (behind is not None and behind <= _EPS) or th.rq.holders_off:  # sched_yield
                    _withdraw(pending)
                    _park(th, pending)
                    if behind is not None and behind <= _EPS:
                        self._may_rotate(th)
                    self.give_up(th)
                    parked, pending = pending, None
                    continue
                # or someone joined the queue, or this one passes the least-served queued thread
                wake = [pending, self.env.timeout(max(th.left, 0.0)), th.rq.holder_out, th.rq.arrived]
                if behind is not None:
                    wake.append(self.env.timeout(behind))
            t0 = self.env.now
            yield self.env.any_of(wake)
            th.left -= self.env.now - t0
            if not pending.triggered and th.left <= _LEFT and self.quantum_over(th):
                _withdraw(pending)  # preempted while spinning: withdrawn, back to the run queue
                _park(th, pending)
                parked, pending = pending, None
        return pending

    def vruntime(self, th: Thread) -> float:
        """CPU time ``th`` has received, its current turn included."""
        return th.cpu_time + (self.env.now - th.since if th.req is not None else 0.0)

    def _behind(self, th: Thread) -> float | None:
        """EEVDF's yield for spinner ``th``: seconds until it has had more CPU time than the least-served
        thread queued for its pool (<= 0: it yields now); None when nobody is queued.

        An eligible yielder (no more CPU time than the runnable average) forfeits the rest of its slice;
        the spinner yields every few spins, so it forfeits slice after slice until it is not eligible."""
        rq = th.rq
        least = rq.pool.least_served()
        if least is None:
            return None
        for _ in range(_MAX_FORFEITS):
            mean = rq.mean_vruntime(self.env.now)
            assert mean is not None  # th runs on the pool (and others queue for it)
            if self.vruntime(th) > mean + _EPS:
                break
            forfeit = max(th.left, self.switch, _EPS)
            th.cpu_time += forfeit  # vruntime jumps to the deadline
            rq.cpu_sum += forfeit
            th.left = self.quantum  # and the deadline one slice on
        return least - self.vruntime(th)

    def joined(self, th: Thread) -> None:
        """``th`` joins its pool's run queue. EEVDF places it at most one slice behind the runnable mean
        (a sleeper's lag is bounded, so one back from a barrier does not hold the CPU until it has caught
        up with everyone's CPU time), and spinners waiting to yield to it are woken."""
        rq = th.rq
        rot = rq.rotation
        if rot is not None and th.spins_on is not rot.lock:  # a newcomer: the pool goes back to events
            self.catch_up(rq)
            self._stop(rq)
        mean = rq.mean_vruntime(self.env.now)
        if mean is not None:
            th.cpu_time = max(th.cpu_time, mean - self.quantum)
        th.queued = True
        rq.members += 1
        rq.cpu_sum += th.cpu_time
        rq.changed()
        _fire(rq, "arrived")

    def give_up(self, th: Thread) -> None:
        """``th`` leaves its CPU (yield, preemption, blocking): its turn's time is counted."""
        g = th.req
        assert g is not None  # only a thread on a CPU gives it up
        if TURNS is not None:
            TURNS.append((th.w, -1 if th.cpu is None else th.cpu, self.env.now, False))
        rq = th.rq
        th.req = None
        rq.members -= 1
        rq.running -= 1
        rq.since_sum -= th.since
        rq.cpu_sum -= th.cpu_time
        th.cpu_time += self.env.now - th.since
        if th.holds:
            rq.holders_off += 1
        rq.changed()
        th.pool.release(self._handed_on(g))

    def _handed_on(self, g: CpuGrant) -> int | None:
        """The rank of the grant a thread's giving up its CPU makes: ``g``'s own if it gives it up in the
        instant ``g`` fired (its switch just paid), so a run of turns that end as soon as they begin keeps
        one rank among the events of each instant, as a rotation's turns do (:class:`Rotation`); else None,
        a fresh one."""
        return g.eid if g.callbacks is None and self.env.now == g.at + self.switch else None

    def quantum_over(self, th: Thread) -> bool:
        """``th`` spent its quantum: preempted (True; to the back of the run queue) when someone
        waits for a CPU of its pool, else it keeps the CPU with a fresh quantum."""
        if not th.pool.waiting:
            th.left = self.quantum
            return False
        self.give_up(th)
        self._preempted(th)
        return True

    def hold(self, w: int, held: bool) -> None:
        """Thread ``w`` took (True) or released (False) a lock."""
        th = self.threads[w]
        th.holds += 1 if held else -1
        if th.sliced and th.req is None and th.holds == (1 if held else 0):
            th.rq.holders_off += 1 if held else -1  # a thread off its CPU took its first lock or released its last

    def _may_rotate(self, th: Thread) -> None:
        """``th``, a spinner of a held lock (Spun), yields its CPU at once: if every runnable thread of its
        single-CPU pool is such a spinner, the pool rotates in closed form from this turn on. Their CPU times
        within a few slices of each other, each turn's forfeits bring its spinner past the runnable mean
        (and so past the least-served queued one): every later turn yields at once too."""
        rq, lock, g = th.rq, th.spins_on, th.req
        if (self.ranked is None or self.spin_yield or lock is None or rq.rotation is not None or g is None
                or rq.pool.capacity != 1 or rq.parked != rq.members):
            return
        members = [t for t in rq.threads if t.queued or t.req is not None]
        if any(t.spins_on is not lock for t in members) or len(rq.pool.heap) != rq.pool.waiting:
            return
        cpu = [self.vruntime(t) for t in members]
        if max(cpu) - min(cpu) > _SPREAD * self.forfeit:
            return
        eid = self._handed_on(g)
        if eid is None:  # its turn did not end as it began: the next grant's rank is a fresh one
            return
        # before th's CPU changes hands: no event for the next one
        self.ranked.rank_instants()
        phases = self.rotating.get(lock)
        if phases is None:
            phases = self.rotating[lock] = Phases(self.switch)
        rq.rotation = Rotation(lock, members, eid, phases)
        lock.on_free = self._lock_free
        if isinstance(lock, RWLock):
            lock.on_release = self._turns_due

    def catch_up(self, rq: RunQueue) -> None:
        """Bring a rotating pool up to this moment: its turns that would have run by now, a turn at this very
        instant included if it ranks before the events already run at it (:meth:`Environment.ran`)."""
        rot = rq.rotation
        assert rot is not None
        env = self.ranked
        assert env is not None  # only a ranked environment rotates
        now = env.now
        self.replay(rq, now)
        if rot.at == now and env.ran(now, (NORMAL, rot.eid)):
            self._turns(rq, rot, math.nextafter(now, math.inf), 1)

    def replay(self, rq: RunQueue, until: float) -> None:
        """Bring a rotating pool up to ``until``: its turns before then as events would leave them, whole
        rounds at once where periodic (CPU times then as the multiplication rounds them)."""
        rot = rq.rotation
        assert rot is not None
        s, m = self.switch, len(rot.members)
        while rot.at < until:
            if rot.periodic:
                # the rounds that end a turn short of ``until`` at least (the division may round up a turn):
                # the last turns go one by one, each compared with ``until`` as its event would be
                rounds = (int((until - rot.at) / s) - 1) // m
                if rounds > 0 and WHOLE_ROUNDS:
                    self._jump(rq, rot, rounds)
                    continue
            self._turns(rq, rot, until, m)

    def _turns(self, rq: RunQueue, rot: Rotation, until: float, limit: int) -> None:
        """A rotating pool's turns before ``until``, one by one, ``limit`` at most or until it turns out
        periodic. Each is what the event path does at it, float for float, written out: its spinner, its
        switch paid, finds the lock held and calls sched_yield (``_behind``: forfeits, then behind the
        least-served); it gives the CPU up (``give_up``), which goes to the least-served queued (``_grant``);
        it joins the run queue again (``joined``) on the grant its process waits on (``CpuPool.request``)."""
        pool = rq.pool
        heap, order = pool.heap, pool.order
        s, q, f = self.switch, self.quantum, self.forfeit
        g, t = rot.cur, rot.at
        assert g is not None
        # a turn takes the pool from m runnable threads, one running, to m - 1 none and back: those counts
        # are fixed, and the sums live in locals between the exact sums (RunQueue.resum) that read them
        m, ones = rq.members, rq.running
        assert ones == 1 and pool.waiting == m - 1
        cpu_sum, since_sum, changes = rq.cpu_sum, rq.since_sum, rq.changes
        periodic = rot.periodic
        while t < until and limit > 0:
            limit -= 1
            th = g.th
            since = th.since
            c0 = c = th.cpu_time
            least = heap[0][0][0]  # a rotating pool's queue holds no withdrawn requests
            forfeits = 0
            while forfeits < _MAX_FORFEITS:
                if c + (t - since) > (cpu_sum + (ones * t - since_sum)) / m + _EPS:
                    break
                c += f
                cpu_sum += f
                forfeits += 1
            if least - (c + (t - since)) > _EPS:
                raise AssertionError("a rotating pool's spinner would not yield: the closed form does not hold")
            th.req = None  # give_up
            since_sum -= since
            cpu_sum -= c
            c += t - since
            th.cpu_time = c
            changes += 1
            if changes >= _RESUM:
                rq.members, rq.running = m - 1, 0
                rq.resum()
                cpu_sum, since_sum, changes = rq.cpu_sum, rq.since_sum, rq.changes
            g2 = heapq.heappop(heap)[1]  # release: the least-served is granted the CPU
            th2 = g2.th
            g2.at = th2.since = t
            th2.queued, th2.req, th2.left = False, g2, q
            since_sum += t
            gained = c  # joined: at most one slice behind the runnable mean
            lift = (cpu_sum + (ones * t - since_sum)) / (m - 1) - q
            if lift > c:
                c = lift
            th.cpu_time = c
            th.queued = True
            cpu_sum += c
            changes += 1
            if changes >= _RESUM:
                rq.members, rq.running = m, 1
                rq.resum()
                cpu_sum, since_sum, changes = rq.cpu_sum, rq.since_sum, rq.changes
            g.key = (c, t, next(order))  # request: queued again on the same grant
            g.at = -1.0
            heapq.heappush(heap, (g.key, g))
            g, t = g2, t + s
            rot.cur = g
            _check_round(rot, th, forfeits, c != gained, c - c0)
            if rot.periodic and not periodic:
                break
            periodic = rot.periodic
        rq.members, rq.running = m, ones
        rq.cpu_sum, rq.since_sum, rq.changes = cpu_sum, since_sum, changes
        rot.cur, rot.at = g, t

    def _jump(self, rq: RunQueue, rot: Rotation, rounds: int) -> None:
        """``rounds`` whole rounds at once: each spinner gains its round's CPU time that many times; the
        clock (turn after turn, as events would add it up), the grants' arrival order and the run queue's
        sums move on with them."""
        s, pool = self.switch, rq.pool
        turns = rounds * len(rot.members)
        for th in rot.members:
            th.cpu_time += rounds * rot.step[th]
        cur = rot.cur
        assert cur is not None
        since = cur.th.since
        for _ in range(turns):
            since += s
        cur.at = cur.th.since = since
        rot.at = since + s
        order = next(pool.order)
        pool.order = itertools.count(order + turns)
        heap = []
        for _key, g in pool.heap:
            if g.at != -2.0:  # the arrival time only breaks ties of CPU time, which a periodic rotation has not
                g.key = (g.th.cpu_time, g.key[1] + turns * s, g.key[2] + turns)
                heap.append((g.key, g))
        heapq.heapify(heap)
        pool.heap = heap
        rq.cpu_sum = math.fsum(t.cpu_time for t in rot.members)
        rq.since_sum = cur.th.since
        rq.changes = (rq.changes + 2 * turns) % _RESUM

    def _stop(self, rq: RunQueue) -> None:
        """A rotating pool, up to date, goes back to events: its pending turn is scheduled at its time."""
        rot = rq.rotation
        assert rot is not None and rot.cur is not None
        rq.rotation = None
        rot.phases.remove(rq)
        env = self.ranked
        assert env is not None  # only a ranked environment rotates
        g = rot.cur
        g._ok, g._value = True, None
        g.eid = rot.eid
        heapq.heappush(env._queue, (rot.at, NORMAL, rot.eid, g))
        env.reranked += 1

    def _lock_free(self, lock: Spun) -> None:
        """``lock`` was released with no spinner on a CPU waiting for it: the next to take it is the spinner
        of a rotating pool whose turn comes first (unless a thread running meanwhile does): the earliest turn
        not yet run, then the lowest rank. That pool alone is brought up to date and goes back to events from
        that turn; the others rotate on, their next turns being later. The pools are looked at in the order
        of their turns' phase from now on (:class:`Phases`), so only those whose turn may come first are."""
        phases = self.rotating.get(lock)
        if phases is None or not phases.keys:
            return
        best, best_key = None, (math.inf, 0, 0)
        phases.bound = math.inf
        for rq in phases.from_now(self):
            rot = rq.rotation
            assert rot is not None
            key = (self._next_turn(rot), rot.eid, phases.seq[rq])
            if key < best_key:
                best, best_key = rq, key
            phases.bound = best_key[0]
        assert best is not None
        self.catch_up(best)
        self._stop(best)

    def _turns_due(self, lock: RWLock) -> None:
        """A release of ``lock`` leaves it free for a writer, and the queue is served later in this instant:
        every rotating pool with a turn still to run at this instant goes back to events from that turn, which
        asks for the lock in between, as it would (only one can take it; the others find it taken)."""
        phases = self.rotating.get(lock)
        if phases is None or not phases.keys:
            return
        now, due = self.env.now, []
        phases.bound = now
        for rq in phases.from_now(self):
            rot = rq.rotation
            assert rot is not None
            if self._next_turn(rot) == now:
                due.append(rq)
        for rq in due:
            self.catch_up(rq)
            self._stop(rq)

    def _next_turn(self, rot: Rotation) -> float:
        """The time of a rotating pool's first turn not yet run. Its turns fall a switch apart whoever takes
        them, so it is found by adding switches to the pool's clock, as its turns add them, without taking the
        turns."""
        env = self.ranked
        assert env is not None  # only a ranked environment rotates
        now, s = env.now, self.switch
        t = rot.clock if rot.clock > rot.at else rot.at
        while t < now:
            t += s
        if t == now and env.ran(now, (NORMAL, rot.eid)):
            t += s
        rot.clock = t
        return t

    def _preempted(self, th: Thread) -> None:
        if th.holds:
            _fire(th.rq, "holder_out")

    def block(self, w: int) -> None:
        """Thread ``w`` is about to sleep (lock, barrier): its CPU goes to the next in the run queue."""
        th = self.threads[w]
        if th.req is not None:
            self.give_up(th)


def _fire(rq: RunQueue, name: str) -> None:
    """Succeed the event ``rq.<name>`` (once per instant) for those waiting on it, and put a fresh one in its place."""
    ev = getattr(rq, name)
    if ev.callbacks:  # someone waits on it (else it stays armed: firing it would be an event that does nothing)
        setattr(rq, name, ev.env.event())
        ev.succeed()


def _park(th: Thread, req: simpy.Event) -> None:
    """A spinner gives its CPU up without the lock: while off it, it counts as a parked spinner of a mutex
    or, as a writer, of a read-write lock (a reader may share the lock with those holding it: not rotated)."""
    lock = getattr(req, "lock", None) if type(req) is not WriteRequest else req.resource
    if type(lock) is Mutex or type(lock) is RWLock:
        th.spins_on = lock
        th.rq.parked += 1


def _unpark(th: Thread) -> None:
    """Back on its CPU, the spinner asks for the lock again."""
    if th.spins_on is not None:
        th.spins_on = None
        th.rq.parked -= 1


def _check_round(rot: Rotation, th: Thread, forfeits: int, lifted: bool, gained: float) -> None:
    """Whether the rotation is periodic: a round in which every spinner turned once, each forfeiting as many
    slices and none placed behind the mean, ending with the CPU back at the spinner that began it, leaves
    the pool as it found it shifted in CPU time — so every later round is the same."""
    if lifted or (rot.seen and (forfeits != rot.forfeits or th in rot.seen)):
        rot.seen.clear()
        rot.periodic = False
        if lifted:
            return
    if not rot.seen:
        rot.first, rot.forfeits = th, forfeits
    rot.seen.add(th)
    rot.step[th] = gained
    if len(rot.seen) == len(rot.members):
        assert rot.cur is not None
        rot.periodic = rot.cur.th is rot.first
        rot.seen.clear()


_EPS = 1e-12  # seconds: below SimPy's clock resolution at run lengths of seconds
_LEFT = 1e-15  # seconds of a quantum left below which it is spent
_MAX_FORFEITS = 64
_RESUM = 256  # changes to a run queue's sums between two exact sums
_SPREAD = 16  # forfeits' worth of CPU time between a rotating pool's spinners, at most (each turn needs < 64)


def _withdraw(req: simpy.Event) -> None:
    """A descheduled spinner cannot take the lock: its request leaves the queue. A writer stays
    announced (rwlock: the executor's waiting-writer count is not undone by losing the CPU)."""
    park = getattr(req, "park", None)
    if park is not None:
        park()
    else:
        req.cancel()  # type: ignore[attr-defined]


def _again(parked: Req | None, request: Callable[[], Req]) -> Req:
    """Back on a CPU: the lock request made again (a parked writer's announcement carries over)."""
    unpark = getattr(parked, "unpark", None)
    if unpark is not None:
        unpark()  # the new request announces the writer again, in the same instant
    return request()


def take_cpu(env: simpy.Environment, cores: Cores, th: Thread) -> Generator[simpy.Event, object, None]:
    """Wait for a CPU of ``th``'s pool; it starts a fresh quantum and pays the context switch."""
    cores.joined(th)
    req = th.pool.request(th)  # the fair scheduler picks the least-served thread
    try:
        yield req
    except simpy.Interrupt:  # its work cancelled (k-sync)
        if th.rq.rotation is not None:
            cores.catch_up(th.rq)
            cores._stop(th.rq)
        if req.at == env.now and th.req is req:  # granted in this instant: the CPU goes back (if not yet)
            cores.give_up(th)
        elif req.at < 0:  # still queued
            th.queued = False
            th.rq.members -= 1
            th.rq.cpu_sum -= th.cpu_time
            th.pool.withdraw(req)
        raise  # granted before: it keeps the CPU, paying the switch


def cpu_burst(env: simpy.Environment, cores: Cores, th: Thread, seconds: float,
              then: Then | None, tick: Tick | None = None) -> Generator[simpy.Event, object, None]:
    """Run ``seconds`` of work on an oversubscribed pool, quantum by quantum; a ``tick``'s instants stall
    the turns they fall into (the thread holds its CPU through the stall, which its quantum pays)."""
    left = seconds
    try:
        while True:
            if th.req is None:
                yield from take_cpu(env, cores, th)
            if left <= 0:
                break
            run = left if left < th.left else th.left
            held = run if tick is None else run + tick.stall(env.now, run)
            yield env.timeout(held)
            left -= run
            th.left -= held
            if th.left <= _LEFT:
                cores.quantum_over(th)
        if then is not None:  # a memory transfer: the thread stalls on its CPU, and the stall is CPU time
            t0 = env.now
            yield then(0.0)
            th.left -= env.now - t0
            if th.left <= _LEFT and th.req is not None:
                cores.quantum_over(th)
    except simpy.Interrupt:
        return  # cancelled work (k-sync): the thread keeps its CPU until it blocks
