"""The cyclic collector while a simulated run goes (simasgd/sim/collector.py): rarer, never off, given back."""

from __future__ import annotations

import gc
import threading
from collections.abc import Generator, Iterator

import pytest
import simpy

from simasgd.sim import collector
from simasgd.sim.primitives import Environment

State = tuple[tuple[int, int, int], int]  # the collector's thresholds and how many objects are frozen


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    """Each test starts from CPython's own thresholds and no frozen heap, and leaves the process so."""
    saved = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    yield
    gc.unfreeze()
    gc.set_threshold(*saved)


def _seen_inside(env: Environment, seen: list[State]) -> Generator[simpy.Event]:
    yield env.timeout(1.0)
    seen.append((gc.get_threshold(), gc.get_freeze_count()))


def test_a_run_collects_rarely_and_gives_the_collector_back() -> None:
    env, seen = Environment(), list[State]()
    env.process(_seen_inside(env, seen))
    env.run()
    (threshold, frozen), = seen
    assert threshold == (collector.YOUNG_THRESHOLD, 10, 10)
    assert frozen > 0  # what existed before the run is out of its collections
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_failing_run_gives_the_collector_back() -> None:
    env = Environment()

    def fails() -> Generator[simpy.Event]:
        yield env.timeout(1.0)
        raise ValueError("the model's own error")

    env.process(fails())
    with pytest.raises(ValueError, match="the model's own error"):
        env.run()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_callers_freeze_is_left_alone() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    since = [[] for _ in range(1000)]  # tracked objects made after the caller's freeze: a run's freeze would take them
    env, seen = Environment(), list[State]()
    env.process(_seen_inside(env, seen))
    env.run()
    assert 0 < seen[0][1] <= frozen  # the run froze nothing more (a freeze of its own would be undone with the caller's)
    assert 0 < gc.get_freeze_count() <= frozen  # and undid nothing of the caller's
    assert gc.get_freeze_count() > frozen - len(since)
    del since


def test_overlapping_runs_restore_what_the_first_found() -> None:
    """A run in another thread starts and ends inside this one: the collector stays as runs want it until
    the last run ends, and only then is given back."""
    a_inside, b_done = threading.Event(), threading.Event()
    states: dict[str, State] = {}

    def state() -> State:
        return gc.get_threshold(), gc.get_freeze_count()

    def a() -> None:
        env = Environment()

        def waits() -> Generator[simpy.Event]:
            yield env.timeout(1.0)
            a_inside.set()
            assert b_done.wait(30)
            states["a after b"] = state()

        env.process(waits())
        env.run()

    def b() -> None:
        assert a_inside.wait(30)
        env, seen = Environment(), list[State]()
        env.process(_seen_inside(env, seen))
        env.run()
        states["b inside"], states["b after"] = seen[0], state()
        b_done.set()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    quiet = (collector.YOUNG_THRESHOLD, 10, 10)
    assert [states[k][0] for k in ("b inside", "b after", "a after b")] == [quiet] * 3
    assert min(states[k][1] for k in ("b inside", "b after", "a after b")) > 0
    assert state() == ((700, 10, 10), 0)


class _Cycle:
    alive = 0

    def __init__(self) -> None:
        self.me = self  # garbage only the cyclic collector can free
        _Cycle.alive += 1

    def __del__(self) -> None:
        _Cycle.alive -= 1


def test_garbage_cycles_made_in_a_run_are_still_collected() -> None:
    """Off, the collector would leave every cycle a run makes alive until it ends; rarer, it keeps them to
    about a young generation's worth."""
    made = 20 * collector.YOUNG_THRESHOLD
    env = Environment()

    def churn() -> Generator[simpy.Event]:
        for _ in range(made // 1000):
            for _ in range(1000):
                _Cycle()
            yield env.timeout(1.0)

    env.process(churn())
    env.run()
    assert _Cycle.alive < made // 4
    gc.collect()
    assert _Cycle.alive == 0
