"""Cores and the OS scheduler: threads beyond the cores time-share them in quanta.

Each thread runs on a pool of logical CPUs: its own CPU when pinned (``uma``,
``numa``, a list), or all of them when the OS places it (``os``). A pool with
no more threads than CPUs never makes anyone wait, and work there is a plain
timeout (the fast path). An oversubscribed pool is a round-robin scheduler: a
thread holds a CPU until its quantum runs out *and* someone is waiting (then
it goes to the back of the run queue) or until it blocks (lock, barrier);
every time it gets a CPU it pays ``context_switch_s``. A thread descheduled
inside a critical section keeps the lock — the convoy of oversubscribed locks.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Generator

import simpy

from simasgd.machine import Machine


class Thread:
    """Scheduler state of one worker thread."""

    __slots__ = ("pool", "req", "left", "sliced", "cpu", "holds")

    def __init__(self, pool: simpy.Resource, sliced: bool, cpu: int | None):
        self.pool = pool
        self.req: simpy.Event | None = None
        self.left = 0.0
        self.sliced = sliced
        self.cpu = cpu
        self.holds = 0  # locks held (a spinner yields its CPU to a descheduled holder)


class Cores:
    """The CPUs of the machine and the threads placed on them."""

    def __init__(self, env: simpy.Environment, machine: Machine, cpus: list[int | None]):
        self.env = env
        self.quantum = machine.quantum_s
        self.switch = machine.context_switch_s
        pools: dict[int | None, simpy.Resource] = {}
        load = Counter(cpus)
        self.threads: list[Thread] = []
        for cpu in cpus:
            if cpu not in pools:
                pools[cpu] = simpy.Resource(env, machine.hw_threads if cpu is None else 1)
            pool = pools[cpu]
            self.threads.append(Thread(pool, load[cpu] > pool.capacity, cpu))
        self.holder_out = env.event()  # succeeds (and is re-armed) when a lock holder loses its CPU

    @property
    def oversubscribed(self) -> bool:
        return any(t.sliced for t in self.threads)

    def work(self, w: int, seconds: float, then: Callable[[], simpy.Event] | None = None) -> simpy.Event:
        """``seconds`` of CPU work by thread ``w``, then (optionally) an event it waits for on its CPU."""
        th = self.threads[w]
        if not th.sliced:
            if then is None:
                return self.env.timeout(seconds)
            return then() if seconds <= 0 else self.env.process(_after(self.env, seconds, then))
        return self.env.process(cpu_burst(self.env, self, th, seconds, then))

    def spin_wait(self, w: int, req: simpy.Event,
                  request: Callable[[], simpy.Event]) -> Generator[simpy.Event, object, simpy.Event]:
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
        pending: simpy.Event | None = req
        while pending is None or not pending.triggered:
            if th.req is None:  # spinning takes a CPU; back on one, it asks for the lock again
                yield from take_cpu(self.env, self, th)
                if pending is None:
                    pending = request()
                continue
            if self._holder_waiting(th.pool):  # sched_yield: the holder runs, this one queues again
                pending.cancel()
                th.pool.release(th.req)
                th.req, pending = None, None
                continue
            t0 = self.env.now
            yield self.env.any_of([pending, self.env.timeout(max(th.left, 0.0)), self.holder_out])
            th.left -= self.env.now - t0
            if not pending.triggered and th.left <= 1e-15 and self.quantum_over(th):
                pending.cancel()  # preempted while spinning: withdrawn, to the back of the run queue
                pending = None
        return pending

    def _holder_waiting(self, pool: simpy.Resource) -> bool:
        return any(t.holds and t.req is None and t.pool is pool for t in self.threads)

    def quantum_over(self, th: Thread) -> bool:
        """``th`` spent its quantum: preempted (True; to the back of the run queue) when someone
        waits for a CPU of its pool, else it keeps the CPU with a fresh quantum."""
        if not th.pool.queue:
            th.left = self.quantum
            return False
        th.pool.release(th.req)
        th.req = None
        self._preempted(th)
        return True

    def hold(self, w: int, held: bool) -> None:
        """Thread ``w`` took (True) or released (False) a lock."""
        self.threads[w].holds += 1 if held else -1

    def _preempted(self, th: Thread) -> None:
        if th.holds and not self.holder_out.triggered:
            out, self.holder_out = self.holder_out, self.env.event()
            out.succeed()

    def block(self, w: int) -> None:
        """Thread ``w`` is about to sleep (lock, barrier): its CPU goes to the next in the run queue."""
        th = self.threads[w]
        if th.req is not None:
            th.pool.release(th.req)
            th.req = None


def _after(env: simpy.Environment, seconds: float,
           then: Callable[[], simpy.Event]) -> Generator[simpy.Event, object, None]:
    """On an unshared CPU: ``seconds`` of work, then the event (a memory transfer) it waits for."""
    yield env.timeout(seconds)
    yield then()


def take_cpu(env: simpy.Environment, cores: Cores, th: Thread) -> Generator[simpy.Event, object, None]:
    """Wait for a CPU of ``th``'s pool; it starts a fresh quantum and pays the context switch."""
    req = th.pool.request()
    try:
        yield req
    except simpy.Interrupt:  # cancelled while queued (k-sync)
        req.cancel()
        if req.triggered:
            th.pool.release(req)
        raise
    th.req, th.left = req, cores.quantum
    if cores.switch > 0:
        yield env.timeout(cores.switch)


def cpu_burst(env: simpy.Environment, cores: Cores, th: Thread, seconds: float,
              then: Callable[[], simpy.Event] | None) -> Generator[simpy.Event, object, None]:
    """Run ``seconds`` of work on an oversubscribed pool, quantum by quantum."""
    left = seconds
    try:
        while True:
            if th.req is None:
                yield from take_cpu(env, cores, th)
            if left <= 0:
                break
            run = left if left < th.left else th.left
            yield env.timeout(run)
            left -= run
            th.left -= run
            if th.left <= 1e-15:
                cores.quantum_over(th)
        if then is not None:
            yield then()  # a memory transfer: the thread stalls on its CPU
    except simpy.Interrupt:
        return  # cancelled work (k-sync): the thread keeps its CPU until it blocks
