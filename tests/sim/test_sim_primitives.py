"""The simulator's primitives, cores and memory, each against what it must do by construction."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pytest
import simpy
from simpy.events import NORMAL, URGENT

from simasgd.machines.machine import PRESETS
from simasgd.sim.cpu import Cores
from simasgd.sim.memory import Memory, Transfer
from simasgd.sim.primitives import (
    AtomicCounter,
    Backoff,
    Barrier,
    CacheLine,
    CasCell,
    Environment,
    Interrupts,
    Mutex,
    RWLock,
    acquire,
    atomic,
)
from simasgd.sim.sharing import Bandwidth
from simasgd.spec.scenario import BackoffConfig


def hold(env: simpy.Environment, lock: RWLock, kind: str, start: float, duration: float, log: list) -> object:
    yield env.timeout(start)
    req = lock.read() if kind == "r" else lock.write()
    yield req
    log.append((kind, start, env.now))
    yield env.timeout(duration)
    lock.release(req)


@pytest.mark.parametrize("writer_priority,reader2_enters", [(True, 6.0), (False, 2.0)])
def test_rwlock_priority(writer_priority: bool, reader2_enters: float) -> None:
    # Reader 1 holds [0, 5); a writer asks at 1, reader 2 at 2.
    env, log = simpy.Environment(), []
    lock = RWLock(env, writer_priority=writer_priority)
    env.process(hold(env, lock, "r", 0, 5, log))
    env.process(hold(env, lock, "w", 1, 1, log))
    env.process(hold(env, lock, "r", 2, 1, log))
    env.run()
    got = {(k, s): t for k, s, t in log}
    assert got[("r", 2)] == reader2_enters
    # The writer waits for every reader inside to leave.
    assert got[("w", 1)] == 5.0
    assert lock.readers == 0 and lock.writer is None and lock.writers_waiting == 0


def test_rwlock_readers_share() -> None:
    env, log = simpy.Environment(), []
    lock = RWLock(env)
    for s in (0, 0.5, 1):
        env.process(hold(env, lock, "r", s, 5, log))
    env.run()
    assert [t for _, _, t in log] == [0, 0.5, 1]


def test_mutex_is_fifo() -> None:
    env, order = simpy.Environment(), []
    lock = Mutex(env)

    def user(i: int) -> object:
        yield env.timeout(i * 0.1)
        req = lock.request()
        yield req
        order.append(i)
        yield env.timeout(1)
        lock.release(req)

    for i in range(5):
        env.process(user(i))
    env.run()
    assert order == list(range(5)) and env.now == pytest.approx(5.0)


def test_barrier_releases_all_at_the_last_arrival_and_cycles() -> None:
    env, seen = simpy.Environment(), []
    barrier = Barrier(env, 3)

    def party(delay: float) -> object:
        for _ in range(2):
            yield env.timeout(delay)
            index = yield barrier.wait()
            seen.append((env.now, index))

    for d in (1, 2, 3):
        env.process(party(d))
    env.run()
    assert [t for t, _ in seen[:3]] == [3, 3, 3] and sorted(i for _, i in seen[:3]) == [0, 1, 2]
    assert [t for t, _ in seen[3:]] == [6, 6, 6]  # second generation: the slowest arrives at 3 + 3


def test_backoff_policies_starting_at_the_initial_delay() -> None:
    rng = np.random.default_rng(0)
    lin = Backoff(BackoffConfig(kind="linear", initial_s=1.0, max_s=3.0, start="initial"), rng)
    exp = Backoff(BackoffConfig(kind="exponential", initial_s=1.0, max_s=10.0, start="initial"), rng)
    rnd = Backoff(BackoffConfig(kind="random", initial_s=1.0, max_s=10.0, start="initial"), rng)
    assert [lin.delay(a) for a in range(5)] == [1, 2, 3, 3, 3]
    assert [exp.delay(a) for a in range(6)] == [1, 2, 4, 8, 10, 10]
    draws = np.array([rnd.delay(3) for _ in range(2000)])
    assert draws.min() >= 0 and draws.max() <= 8 and abs(draws.mean() - 4) < 4 * 8 / np.sqrt(12 * 2000)
    assert Backoff(None, rng).delay(7) == 0 and not Backoff(None, rng).spins


def test_backoff_starts_from_a_random_delay_by_default() -> None:
    # Ek 2021 §2.2.3: linear and exponential start from a random delay; random draws per thread.
    rng, n = np.random.default_rng(1), 4000
    exp = Backoff(BackoffConfig(kind="exponential", initial_s=1.0, max_s=100.0), rng)
    rnd = Backoff(BackoffConfig(kind="random", initial_s=1.0, max_s=10.0), rng)
    e2 = np.array([exp.delay(2) for _ in range(n)])  # uniform on (0, 4]: mean 2, sd 4/sqrt(12)
    assert e2.min() >= 0 and e2.max() <= 4 and abs(e2.mean() - 2) < 4 * 4 / np.sqrt(12 * n)
    r0 = np.array([rnd.delay(0) for _ in range(n)])  # uniform on (0, max_s] from the first wait
    assert r0.max() <= 10 and abs(r0.mean() - 5) < 4 * 10 / np.sqrt(12 * n)


def test_spinning_acquire_retries_on_the_backoff_schedule() -> None:
    env, got = simpy.Environment(), []
    lock = Mutex(env)
    backoff = Backoff(BackoffConfig(kind="exponential", initial_s=1.0, max_s=100.0, start="initial"),
                      np.random.default_rng(0))

    def holder() -> object:
        req = lock.request()
        yield req
        yield env.timeout(2.5)
        lock.release(req)

    def spinner() -> object:
        req = yield from acquire(env, lock.request, lambda: lock.free, backoff, lambda: None)
        got.append(env.now)
        lock.release(req)

    env.process(holder())
    env.process(spinner())
    env.run()
    assert got == [3.0]  # tries at 0, 1, 3 (delays 1, 2): free at 2.5, seen at 3


def test_cas_and_atomics_serialise_on_the_cache_line() -> None:
    env, done = simpy.Environment(), []
    line = CacheLine(env, 1e-7)
    cell, counter = CasCell(line, 0), AtomicCounter(line)

    def thread(i: int) -> object:
        yield from atomic(env, line)
        done.append(env.now)
        counter.fetch_add(1)

    for i in range(3):
        env.process(thread(i))
    env.run()
    assert done == pytest.approx([1e-7, 2e-7, 3e-7]) and counter.value == 3
    assert cell.compare_and_swap(0, 1) and not cell.compare_and_swap(0, 2) and cell.value == 1
    assert cell.failures == 1


def test_processor_sharing_bandwidth() -> None:
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=100.0, cap_bytes_per_s=1e9)
    ends: dict[str, float] = {}

    def job(name: str, start: float, nbytes: float) -> object:
        yield env.timeout(start)
        yield link.transfer(nbytes)
        ends[name] = env.now

    # A alone for 1 s (100 B), then A and B share: A's last 100 B take 2 s; B then finishes alone.
    env.process(job("a", 0, 200))
    env.process(job("b", 1, 300))
    env.run()
    assert ends["a"] == pytest.approx(3.0) and ends["b"] == pytest.approx(3.0 + 200 / 100)


def test_per_core_cap_and_remote_path() -> None:
    env = simpy.Environment()
    m = PRESETS["xeon-e5-2687w-v2"]  # 40 GB/s a socket, 16 GB/s link, 10 GB/s a core
    mem = Memory(env, m, sockets=[0, 1])
    ends = {}

    def copy(w: int) -> object:
        yield mem.move(w, 1e9)
        ends[w] = env.now

    env.process(copy(0))
    env.process(copy(1))
    env.run()
    assert ends[0] == pytest.approx(90e-9 + 1e9 / 10e9)  # local: one core's streaming rate
    assert ends[1] == pytest.approx(150e-9 + 1e9 / 10e9)  # remote: link has room for one core


def test_a_transfer_starts_after_its_work_and_latency_and_ends_with_its_last_part() -> None:
    # Two parts from socket 0's memory, after 2 ms of work: one latency (90 ns), then each at a core's 10 GB/s
    # (two transfers leave each 20 of the socket's 40 GB/s): 1 GB is through 0.1 s later, 2 GB 0.2 s later.
    env = simpy.Environment()
    mem = Memory(env, PRESETS["xeon-e5-2687w-v2"], sockets=[0, 1])
    t = Transfer(env, [mem.move_part(0, 1e9, after=2e-3), mem.stream_part(0, 2e9, after=2e-3)])
    env.run(until=2e-3 + 90e-9 + 0.1 + 1e-9)
    assert not t.triggered and mem.local[0].bytes_moved == 3e9
    env.run()
    assert t.ok and env.now == pytest.approx(2e-3 + 90e-9 + 0.2)


def test_misses_after_work_cost_one_event_each_departure_their_waiters_run_in_it() -> None:
    # Four threads, two a socket, each 1 GB after 2 ms of work: every one streams at a core's 10 GB/s (22 GB/s of
    # the socket's memory, 16 of the link, a transfer), locals after 90 ns, remotes after 150 ns. The parts wait
    # in their path's calendar, not as events, and each path's two equal transfers leave in one step that
    # resumes both waiters: 4 process starts, 4 process ends, 2 departures.
    env = Environment()
    mem = Memory(env, PRESETS["xeon-e5-2687w-v2"], sockets=[0, 0, 1, 1])
    ends: list[float] = []

    def thread(w: int) -> object:
        yield mem.move(w, 1e9, after=2e-3)
        ends.append(env.now)

    for w in range(4):
        env.process(thread(w))
    env.run()
    assert ends == pytest.approx([2e-3 + 90e-9 + 0.1] * 2 + [2e-3 + 150e-9 + 0.1] * 2, rel=1e-12)
    assert env.scheduled() == 4 + 4 + 2


def test_a_transfer_cancelled_before_it_starts_moves_nothing_and_one_under_way_goes_through() -> None:
    env = simpy.Environment()
    mem = Memory(env, PRESETS["xeon-e5-2687w-v2"], sockets=[0, 1])
    early, late = mem.stream(0, 1e9, after=1e-3), mem.stream(1, 1e9, after=1e-3)
    env.run(until=0.5e-3)
    early.cancel()
    env.run(until=0.05)  # the late one is under way
    late.cancel()
    env.run()
    assert not early.triggered and mem.local[0].bytes_moved == 0
    assert mem.local[1].bytes_moved == 1e9 and env.now == pytest.approx(1e-3 + 90e-9 + 0.1)


def test_a_stall_on_a_shared_cpu_is_cpu_time_of_the_quantum() -> None:
    # Two threads on one CPU (quantum 3.97 ms). Thread 0, on it, works 1 ms, then stalls on 100 MB from memory
    # (211 ns, then a core's 27.7 GB/s: 3.61 ms): the quantum is spent during the stall, and as thread 1 waits
    # the CPU goes to it when the stall ends. Were the stall not CPU time, thread 0 would keep the CPU.
    env = simpy.Environment()
    m = PRESETS["laptop-2core"]
    cores, mem = Cores(env, m, [0, 0]), Memory(env, m, sockets=[0, 0])
    ends: dict[str, float] = {}

    def zero() -> object:
        yield cores.work(0, 1e-6)  # on the CPU, quantum fresh
        yield cores.work(0, 1e-3, lambda after: mem.stream(0, 1e8, after))
        ends["stall"] = env.now
        ends["on_cpu"] = cores.threads[0].req is not None

    def one() -> object:
        yield env.timeout(1e-4)
        yield cores.work(1, 1e-6)
        ends["one"] = env.now

    env.process(zero())
    env.process(one())
    env.run()
    stall_end = m.context_switch_s + 1e-6 + 1e-3 + m.local_latency_ns * 1e-9 + 1e8 / (m.core_bandwidth_gbs * 1e9)
    assert ends["stall"] == pytest.approx(stall_end) and ends["on_cpu"] is False
    assert ends["one"] == pytest.approx(stall_end + m.context_switch_s + 1e-6)


def test_descheduled_lock_holder_keeps_cores_busy() -> None:
    # Two threads pinned to one CPU sharing a mutex: while the holder is preempted in its
    # critical section the other computes, and blocking gives the CPU back — no CPU time is lost.
    env = simpy.Environment()
    m = PRESETS["laptop-2core"]
    cores = Cores(env, m, [0, 0])
    lock, done = Mutex(env), [0, 0]

    def thread(w: int) -> object:
        while True:
            yield cores.work(w, 1e-3)
            if not lock.free:
                cores.block(w)
            req = lock.request()
            yield req
            yield cores.work(w, 3e-3)  # longer than... a quantum is 4 ms: sometimes preempted inside
            lock.release(req)
            done[w] += 1

    env.process(thread(0))
    env.process(thread(1))
    env.run(until=10.0)
    cpu_work = sum(done) * 4e-3
    assert cpu_work == pytest.approx(10.0, rel=0.01)
    assert abs(done[0] - done[1]) <= 0.05 * sum(done)


def test_a_contended_lock_costs_the_handoff_inside_the_lock() -> None:
    env, got = simpy.Environment(), {}
    lock = Mutex(env)
    fifo = Backoff(None, np.random.default_rng(0))

    def user(name: str, start: float) -> object:
        yield env.timeout(start)
        req = yield from acquire(env, lock.request, lambda: lock.free, fifo, lambda: None, handoff_s=0.25)
        got[name] = env.now
        yield env.timeout(1.0)
        lock.release(req)

    env.process(user("first", 0.0))   # free lock: no hand-off
    env.process(user("second", 0.5))  # waits until 1.0, then the line moves: 1.25
    env.process(user("third", 0.6))   # waits for second (released at 2.25), then 2.5
    env.run()
    assert got == {"first": 0.0, "second": 1.25, "third": 2.5}


def test_a_parked_writer_stays_announced_until_it_asks_again() -> None:
    # Writer priority. A reader holds [0, 2); a writer asks at 0.5 and is descheduled (parked) at 1: its
    # announcement stays, so a reader arriving at 1.5 waits although nobody holds the write lock. The
    # writer is back at 3, asks again, writes [3, 4), and only then may the reader in: at 4.
    env, log = simpy.Environment(), []
    lock = RWLock(env, writer_priority=True)
    env.process(hold(env, lock, "r", 0, 2, log))

    def writer() -> object:
        yield env.timeout(0.5)
        req = lock.write()
        yield env.timeout(0.5)
        req.park()
        assert lock.writers_waiting == 1 and not lock.put_queue
        yield env.timeout(2.0)
        req.unpark()
        req = lock.write()
        yield req
        log.append(("w", 0.5, env.now))
        yield env.timeout(1.0)
        lock.release(req)

    env.process(writer())
    env.process(hold(env, lock, "r", 1.5, 1, log))
    env.run()
    got = {(k, s): t for k, s, t in log}
    assert got[("w", 0.5)] == 3.0 and got[("r", 1.5)] == 4.0
    assert lock.readers == 0 and lock.writer is None and lock.writers_waiting == 0


def test_a_contended_spinner_yields_its_cpu_under_eevdf() -> None:
    # One CPU, two threads. Thread 0 spins for a lock another party holds until 1 ms; thread 1 has
    # 0.5 ms of work queued. EEVDF: the spinner forfeits its slice and yields at once, so thread 1
    # finishes at 0.5 ms (plus context switches), and the spinner takes the lock once back on the CPU.
    worker_done = 0.5e-3
    env, got = simpy.Environment(), {}
    m = PRESETS["laptop-2core"]
    cores = Cores(env, m, [0, 0])
    lock = Mutex(env)

    def owner() -> object:
        req = lock.request()
        yield req
        yield env.timeout(1e-3)
        lock.release(req)

    def spinner() -> object:
        yield env.timeout(1e-9)  # after the owner took the lock
        yield cores.work(0, 1e-9)  # on the CPU
        req = yield from cores.spin_wait(0, lock.request(), lock.request)
        got["lock"] = env.now
        lock.release(req)
        cores.block(0)

    def worker() -> object:
        yield env.timeout(2e-9)
        yield cores.work(1, 0.5e-3)
        got["worker"] = env.now
        cores.block(1)

    env.process(owner())
    env.process(spinner())
    env.process(worker())
    env.run()
    switches = 4 * m.context_switch_s
    assert worker_done <= got["worker"] <= worker_done + switches
    assert 1e-3 <= got["lock"] <= max(1e-3, got["worker"]) + switches
    assert all(t.cpu_time > 0 for t in cores.threads)


def test_a_sleeper_rejoins_the_fair_queue_at_most_a_slice_behind() -> None:
    # One CPU. Threads 0 and 1 compute for 40 ms; thread 2 sleeps 30 ms, then computes. Back from its
    # sleep, thread 2 is placed one quantum behind the others' CPU time (EEVDF bounds a sleeper's lag),
    # so it shares the CPU instead of holding it until it has caught up 15 ms of CPU time.
    env, done = simpy.Environment(), {}
    m = PRESETS["laptop-2core"]
    cores = Cores(env, m, [0, 0, 0])

    def thread(w: int, sleep: float, work: float) -> object:
        yield env.timeout(sleep)
        yield cores.work(w, work)
        done[w] = env.now
        cores.block(w)

    env.process(thread(0, 0.0, 40e-3))
    env.process(thread(1, 0.0, 40e-3))
    env.process(thread(2, 30e-3, 8e-3))
    env.run()
    # Round robin among three from ~30 ms on: thread 2's 8 ms take about 3 × 8 ms of wall time, not 8.
    assert done[2] > 30e-3 + 2 * 8e-3
    assert done[2] < 30e-3 + 3 * 8e-3 + 2 * m.quantum_s
    assert cores.threads[2].cpu_time >= 14e-3  # placed: its CPU time was lifted on joining


def test_turned_since_tells_a_thread_that_lost_its_cpu() -> None:
    """Two threads on one CPU, each working two quanta: thread 0 runs first and keeps its CPU through its
    first quantum (no turn lost since t = 0 while it works), then thread 1 gets a turn: from then on
    thread 0 has lost its CPU since any time before it got it back. A thread with a CPU of its own never
    has."""
    env = simpy.Environment()
    m = PRESETS["laptop-2core"]
    cores = Cores(env, m, [0, 0, 1])
    q = m.quantum_s
    seen: dict[str, bool] = {}

    def thread(w: int) -> object:
        yield cores.work(w, 2 * q)
        cores.block(w)

    def probe() -> object:
        yield env.timeout(0.5 * q)
        seen["mid first turn"] = cores.turned_since(0, 0.0)
        yield env.timeout(q)  # thread 1's turn
        seen["in the other's turn"] = cores.turned_since(0, 0.0)
        yield env.timeout(q)  # thread 0 back on the CPU, since 2q
        seen["back, since before"] = cores.turned_since(0, 0.0)
        seen["back, since its return"] = cores.turned_since(0, env.now - 0.1 * q)
        seen["own CPU"] = cores.turned_since(2, 0.0)

    for w in (0, 1, 2):
        env.process(thread(w))
    env.process(probe())
    env.run()
    assert seen == {"mid first turn": False, "in the other's turn": True, "back, since before": True,
                    "back, since its return": False, "own CPU": False}


@pytest.mark.parametrize("held_for,spinner_keeps_cpu", [(8e-6, True), (0.5e-3, False)])
def test_a_spinner_holds_its_cpu_for_its_pauses_before_it_yields(held_for: float, spinner_keeps_cpu: bool) -> None:
    # One CPU, two threads; thread 0 spins for a lock another party holds for ``held_for``, thread 1 has
    # 0.2 ms of work queued. The spinner (on its CPU from 3 µs, a context switch) calls sched_yield only
    # after 10 µs of pauses: a lock released within them is its at once and thread 1 waits for the
    # spinner's CPU; held longer, the spinner yields 10 µs after it asked (EEVDF) and thread 1 starts then.
    env, got = simpy.Environment(), {}
    m = PRESETS["laptop-2core"]
    spin = 10e-6
    cores = Cores(env, m, [0, 0], spin_yield_s=spin)
    lock = Mutex(env)

    def owner() -> object:
        req = lock.request()
        yield req
        yield env.timeout(held_for)
        lock.release(req)

    def spinner() -> object:
        yield env.timeout(1e-9)  # after the owner took the lock
        yield cores.work(0, 1e-9)  # on the CPU
        got["asked"] = env.now
        req = yield from cores.spin_wait(0, lock.request(), lock.request)
        got["lock"] = env.now
        yield cores.work(0, 0.1e-3)  # its critical section, on its CPU
        lock.release(req)
        cores.block(0)

    def worker() -> object:
        yield env.timeout(2e-9)
        t0 = env.now
        yield cores.work(1, 0.2e-3)
        got["worker_waited"] = env.now - t0 - 0.2e-3
        cores.block(1)

    env.process(owner())
    env.process(spinner())
    env.process(worker())
    env.run()
    if spinner_keeps_cpu:  # the lock at its release, and the worker behind the spinner's whole turn
        assert got["asked"] < held_for < got["asked"] + spin
        assert got["lock"] == pytest.approx(held_for, abs=1e-12)
        assert got["worker_waited"] >= got["lock"] + 0.1e-3 - 1e-9
    else:  # the spinner left after its pauses; the worker waited for them and a context switch only
        assert got["lock"] >= held_for
        assert got["worker_waited"] <= got["asked"] + spin + 2 * m.context_switch_s + 1e-9


def test_threads_the_os_places_join_one_cpus_run_queue_each() -> None:
    # Four OS-placed threads on a 2-CPU machine: with per-CPU run queues they are spread as given
    # (0 and 2 on one CPU, 1 and 3 on the other), each queue one CPU; with one shared queue, any CPU
    # runs any of them. Two threads on two CPUs share nothing, whatever the queues.
    env = simpy.Environment()
    m = PRESETS["laptop-2core"]
    per_cpu = Cores(env, m, [None] * 4, queues=[0, 1, 0, 1])
    t = per_cpu.threads
    assert t[0].pool is t[2].pool and t[1].pool is t[3].pool and t[0].pool is not t[1].pool
    assert all(th.pool.capacity == 1 and th.sliced for th in t)
    shared = Cores(env, m, [None] * 4).threads
    assert all(th.pool is shared[0].pool for th in shared) and shared[0].pool.capacity == m.hw_threads
    two = Cores(env, m, [None] * 2, queues=[0, 1]).threads
    assert two[0].pool is two[1].pool and not any(th.sliced for th in two)


def test_the_environment_knows_which_ranks_of_the_current_instant_have_run() -> None:
    env = Environment()
    env.rank_instants()
    seen: list[tuple[bool, bool, bool, bool]] = []
    first, middle, last = (env.timeout(1.0) for _ in range(3))
    ranks = [(NORMAL, eid) for _t, _p, eid, _ev in sorted(env._queue)]

    def look(_ev: object) -> None:
        # at t = 1, while the middle timeout runs: the first one ran, the last not yet, nor anything later
        seen.append((env.ran(1.0, ranks[0]), env.ran(1.0, ranks[2]), env.ran(0.5, ranks[2]), env.ran(2.0, ranks[0])))
        # an urgent event made now runs next, yet the first timeout stays run
        urgent = env.event()
        urgent._ok, urgent._value = True, None
        env.schedule(urgent, URGENT)
        urgent.callbacks.append(lambda _e: seen.append((env.ran(1.0, ranks[0]), env.ran(1.0, ranks[2]), True, False)))

    middle.callbacks.append(look)
    env.run()
    assert first.processed and last.processed
    assert seen == [(True, False, True, False), (True, False, True, False)]


def _interrupted_log(bulk: bool) -> list[tuple[float, str]]:
    """Five workers each wait on a piece of work of their own (a process, as k-sync's time-shared work is); at
    t = 1 a closer interrupts the four still waiting (worker 2 has finished) and goes on; each interrupted worker
    interrupts its work, logs, waits a moment and logs again, and each interrupted work logs. The log is the
    order of everything that happened."""
    env = simpy.Environment()
    log: list[tuple[float, str]] = []

    def work(w: int) -> Generator[simpy.Event, object, None]:
        try:
            yield env.timeout(0.5 if w == 2 else 5.0)
        except simpy.Interrupt:
            log.append((env.now, f"work {w} interrupted"))

    def worker(w: int) -> Generator[simpy.Event, object, None]:
        job = env.process(work(w))
        try:
            yield job
            log.append((env.now, f"worker {w} done"))
        except simpy.Interrupt as stop:
            log.append((env.now, f"worker {w} interrupted"))
            if job.is_alive:  # an interrupt thrown from an interrupted one, as k-sync's worker does
                if isinstance(stop.cause, Interrupts):
                    stop.cause.later(job)  # with the others' work, in one more event
                else:
                    job.interrupt()
            yield env.timeout(0.0)
            log.append((env.now, f"worker {w} after"))

    def closer(procs: list[simpy.Process]) -> Generator[simpy.Event, object, None]:
        yield env.timeout(1.0)
        waiting = [p for p in procs if p.is_alive]
        if bulk:
            Interrupts(env, waiting)
        else:
            for p in waiting:
                p.interrupt()
        log.append((env.now, "closed"))
        yield env.timeout(0.0)
        log.append((env.now, "closer after"))

    procs = [env.process(worker(w)) for w in range(5)]
    env.process(closer(procs))
    env.run()
    return log


def test_interrupts_as_one_event_throw_as_many_interrupt_calls_would() -> None:
    one, many = _interrupted_log(bulk=True), _interrupted_log(bulk=False)
    assert one == many  # the works too: thrown by one more event, after the workers', in the order asked
    assert [what for _t, what in one if what.startswith("worker") and what.endswith("interrupted")] == [
        f"worker {w} interrupted" for w in (0, 1, 3, 4)]
    assert sum(what.startswith("work ") for _t, what in one) == 4
    env = simpy.Environment()

    def brief() -> Generator[simpy.Event, object, None]:
        yield env.timeout(1.0)

    done = env.process(brief())
    env.run()
    with pytest.raises(RuntimeError, match="terminated"):
        Interrupts(env, [done])
