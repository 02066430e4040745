"""benchmarks/sched_trace.py: a kernel trace's switches read into stays, placed on a run's clock, and summarised
alike with the simulator's own turns (``simasgd.sim.cpu.TURNS``), on constructed cases whose answers are known."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

LINES = """\
     python  4242 [001] 100.000100:       sched:sched_switch: prev_comm=python prev_pid=4242 prev_prio=120 \
prev_state=R ==> next_comm=python next_pid=4343 next_prio=120
     python  4343 [001] 100.000050:       sched:sched_waking: comm=perf pid=7 prio=120 target_cpu=000
     swapper     0 [000] 100.000000:       sched:sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 \
prev_state=R ==> next_comm=python next_pid=4242 next_prio=120
     python  4242 [000] 100.000300:       sched:sched_switch: prev_comm=python prev_pid=4242 prev_prio=120 \
prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
"""


@pytest.fixture(name="st")
def st_fixture(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("sched_trace")


def test_switch_lines_become_each_threads_stays(st: Any) -> None:
    """Only sched_switch lines count, in time order; a stay runs from the switch onto a CPU to the next switch
    of that CPU (the first switch of a CPU opens a stay and closes none)."""
    sw = st.parse_switches(LINES)
    assert [(s.t, s.cpu, s.prev, s.state, s.next) for s in sw] == [
        (100.0, 0, 0, "R", 4242), (100.0001, 1, 4242, "R", 4343), (100.0003, 0, 4242, "S", 0)]
    on = st.stays(sw)
    assert on[4242].tolist() == [[100.0, 100.0003, 0]] and set(on) == {4242}


def _irregular_stays(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two threads taking turns on one CPU in stays of 0.2–3 ms (irregular, so no shift of the clock but the
    true one lines every update up with its thread)."""
    edges = np.concatenate([[0.0], np.cumsum(rng.uniform(2e-4, 3e-3, n))])
    iv = np.stack([edges[:-1], edges[1:], np.zeros(n)], axis=1)
    return iv[0::2], iv[1::2]


def test_the_runs_clock_and_each_workers_thread_are_found(st: Any) -> None:
    """Updates written inside their worker's stays (row time = trace time − 12.3456 s): the alignment finds
    the offset to its fine step, each worker's thread, and every sampled update on its thread's stays."""
    rng = np.random.default_rng(3)
    a, b = _irregular_stays(rng, 400)
    off = 12.3456
    shift = np.array([off, off, 0.0])  # the trace's clock; the CPU column as it was
    on_cpu = {101: a + shift, 202: b + shift, 303: np.array([[off + 5.0, off + 5.1, 1]])}
    rows = []
    for w, iv in ((0, a), (1, b)):
        for s, e, _cpu in iv:
            rows.append({"worker": w, "t_write": (s + e) / 2, "applied": True})
    found, threads, matched = st.align(on_cpu, pd.DataFrame(rows))
    assert threads == {0: 101, 1: 202} and matched == 1.0
    assert abs(found - off) <= 2e-4  # within the coarse step's neighbourhood, refined
    # the idle task (pid 0) on the other CPU all along covers every update at any offset: never a worker's thread
    on_cpu[0] = np.array([[off - 1.0, off + 10.0, 1]])
    again, threads, matched = st.align(on_cpu, pd.DataFrame(rows))
    assert threads == {0: 101, 1: 202} and matched == 1.0 and again == found
    # a trace without one worker's stays cannot be matched one to one: said, not summarised
    with pytest.raises(SystemExit, match="one to one"):
        st.align({101: on_cpu[101], 303: on_cpu[303]}, pd.DataFrame(rows))


def _rows(cycles: list[tuple[int, float, float, float, float, int]]) -> pd.DataFrame:
    """Update rows (worker, t_start, t_grad_start, t_grad_end, t_write, staleness), versions in write order."""
    df = pd.DataFrame(cycles, columns=["worker", "t_start", "t_grad_start", "t_grad_end", "t_write", "staleness"])
    df = df.sort_values("t_write").reset_index(drop=True)
    df["version"] = np.arange(1, len(df) + 1)
    df["read_version"] = df.version - 1 - df.staleness
    df["applied"] = True
    return df


def test_a_preemption_in_the_gradient_and_how_long_its_thread_stays_off(st: Any) -> None:
    """Worker 0 computes from 1.0 s to 1.002 s but loses its CPU at 1.0005 s for 1.2 ms to worker 1, which had
    left the CPU waiting for the lock at 0.99957 s; worker 1 waits for the lock again from 1.0014 s and is
    switched out in that wait at 1.0017 s. The summary names
    the phase each long stay ended in, the time off after the gradient's preemption, and the cycle that held
    a descheduling (> 1 ms) in its gradient with its share of τ̄."""
    rows = _rows([(0, 0.9995, 0.9995, 0.9998, 0.99985, 0), (1, 0.9995, 0.9995, 0.99955, 1.0, 1),
                  (0, 1.0, 1.0, 1.002, 1.00204, 3), (1, 1.0005, 1.0005, 1.0014, 1.0025, 1),
                  (0, 1.00205, 1.00205, 1.0025, 1.0026, 1), (1, 1.0026, 1.0026, 1.0027, 1.0100, 1)])
    turns = pd.DataFrame([(1, 0, 0.99951, 0.99957), (0, 0, 0.9996, 1.0005), (1, 0, 1.0005, 1.0017), (0, 0, 1.0017, 1.0027),
                          (1, 0, 1.0027, 1.0099)], columns=["worker", "cpu", "a", "b"])
    s = st.summarise(turns, rows, warmup_s=0.0)
    assert s["long_out_per_s"]["gradient"] > 0 and s["long_out_per_s"]["write wait"] > 0
    span = 1.0100 - 0.9995
    assert s["long_out_per_s"]["gradient"] == pytest.approx(1 / span)
    assert s["off_after_gradient_us"]["median"] == pytest.approx(1200.0)
    # worker 1 took the CPU from it, resuming the wait for the lock its previous stay ended in, and kept it 1.2 ms
    assert s["taken_by_a_waiter"] == 1.0 and s["given_straight_back"] == 0.0
    assert s["descheduled_per_s"]["gradient"] == pytest.approx(1 / span)
    assert s["staleness_share"]["gradient"] == pytest.approx(3 / rows.staleness.sum())
    assert s["mean_staleness"] == pytest.approx(rows.staleness.mean())


def test_the_simulators_turns_are_its_threads_quanta(st: Any) -> None:
    """Two threads pinned to one CPU, 2.5 ms of work each, 1-ms quanta, no switch cost: the CPU's grants and
    give-ups are A [0, 1), B [1, 2), A [2, 3), B [3, 4), A [4, 4.5), B [4.5, 5) — the round robin in closed form;
    read as stays they are those six."""
    import simpy

    from simasgd.machines.machine import PRESETS
    from simasgd.sim import cpu

    m = dataclasses.replace(PRESETS["laptop-2core"], quantum_s=1e-3, context_switch_s=0.0)
    env = simpy.Environment()
    cores = cpu.Cores(env, m, [0, 0])

    def thread(w: int) -> Any:
        yield cores.work(w, 2.5e-3)
        cores.block(w)  # done: its CPU goes to the other

    cpu.TURNS = []
    try:
        for w in (0, 1):
            env.process(thread(w))
        env.run()
        log = cpu.TURNS
    finally:
        cpu.TURNS = None
    got = st.sim_turns(log).sort_values("a")
    assert got.worker.tolist() == [0, 1, 0, 1, 0, 1]
    np.testing.assert_allclose(got.a.to_numpy() * 1e3, [0, 1, 2, 3, 4, 4.5], atol=1e-9)
    np.testing.assert_allclose(got.b.to_numpy() * 1e3, [1, 2, 3, 4, 4.5, 5], atol=1e-9)
