"""Processor sharing on a virtual clock (simasgd/sim/sharing.py) against closed forms and a direct walk."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pytest
import simpy

from simasgd.sim.gpu import SMs
from simasgd.sim.sharing import Bandwidth


def _finishes(server_submit, jobs: list[tuple[float, float, float]], env: simpy.Environment) -> list[float]:
    """Each job (arrival, size, weight) submitted at its arrival; the instant each one is done."""
    ends = [np.nan] * len(jobs)

    def job(i: int, start: float, size: float, weight: float) -> Generator[simpy.Event, object, None]:
        yield env.timeout(start)
        yield server_submit(size, weight)
        ends[i] = env.now

    for i, (start, size, weight) in enumerate(jobs):
        env.process(job(i, start, size, weight))
    env.run()
    return ends


def _finishes_ahead(server_submit_after, jobs: list[tuple[float, float, float]], env: simpy.Environment,
                    lead: float) -> list[float]:
    """Each job (arrival, size, weight) submitted ``lead`` seconds before its arrival (or at 0), to start then."""
    ends = [np.nan] * len(jobs)

    def job(i: int, start: float, size: float, weight: float) -> Generator[simpy.Event, object, None]:
        told = max(0.0, start - lead)
        yield env.timeout(told)
        yield server_submit_after(size, weight, start - told)
        ends[i] = env.now

    for i, (start, size, weight) in enumerate(jobs):
        env.process(job(i, start, size, weight))
    env.run()
    return ends


def _direct_walk(jobs: list[tuple[float, float, float]], speed) -> list[float]:
    """The definition, walked event by event: between two events every job in service receives
    weight × speed(n, Σw) units a second; the next event is the next arrival or the first finish."""
    left = {i: size for i, (_, size, _) in enumerate(jobs)}
    order = sorted(range(len(jobs)), key=lambda i: jobs[i][0])
    active: set[int] = set()
    ends = [np.nan] * len(jobs)
    t, k = 0.0, 0
    while k < len(order) or active:
        if not active:
            t = jobs[order[k]][0]
        while k < len(order) and jobs[order[k]][0] <= t:
            active.add(order[k])
            k += 1
        rate = speed(len(active), sum(jobs[i][2] for i in active))
        finish = min(left[i] / (jobs[i][2] * rate) for i in active)
        nxt = jobs[order[k]][0] - t if k < len(order) else np.inf
        dt = min(finish, nxt)
        for i in list(active):
            left[i] -= dt * jobs[i][2] * rate
            if left[i] <= 1e-9 * jobs[i][1]:
                active.discard(i)
                ends[i] = t + dt
        t += dt
    return ends


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_n_equal_transfers_share_the_rate(n: int) -> None:
    # n transfers of b bytes that start together, rate r, no per-transfer cap: each gets r/n, all end at n·b/r.
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=1e9, cap_bytes_per_s=1e12)
    ends = _finishes(lambda size, _w: link.transfer(size), [(0.0, 1e6, 1.0)] * n, env)
    assert ends == pytest.approx([n * 1e6 / 1e9] * n, rel=1e-12)
    assert link.bytes_moved == n * 1e6


def test_the_cap_bounds_a_transfer_alone() -> None:
    # Fewer transfers than rate / cap: each one streams at the cap, as if alone.
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=40e9, cap_bytes_per_s=10e9)
    ends = _finishes(lambda size, _w: link.transfer(size), [(0.0, 1e9, 1.0)] * 3, env)
    assert ends == pytest.approx([0.1] * 3, rel=1e-12)


def test_staggered_arrivals_closed_form() -> None:
    # b bytes each at rate r, no cap; arrivals at 0, Δ, 4Δ, 6Δ, 8Δ with Δ = b / 2r. The first moves b/2 alone by Δ,
    # then shares the link with the second: its last b/2 at r/2 take b/r, it ends at Δ + b/r = 3Δ.
    r, b = 1e9, 1e6
    delta = b / (2 * r)
    jobs = [(0.0, b, 1.0), (delta, b, 1.0)] + [(2 * i * delta, b, 1.0) for i in range(2, 5)]
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=r, cap_bytes_per_s=1e12)
    ends = _finishes(lambda size, _w: link.transfer(size), jobs, env)
    assert ends == pytest.approx(_direct_walk(jobs, lambda n, _w: r / n), rel=1e-9)
    assert ends[0] == pytest.approx(delta + b / r, rel=1e-12)


@pytest.mark.parametrize("lead", [None, 0.4e-3, 5e-3, np.inf])
def test_random_arrivals_match_the_direct_walk(lead: float | None) -> None:
    # Each transfer started at its arrival (lead None) or submitted ahead of it, from a little to all the way
    # (lead ∞: every one submitted at 0), to wait in the calendar and be taken in by arithmetic.
    rng = np.random.default_rng(7)
    arrivals = np.sort(rng.exponential(1e-3, 200).cumsum())
    sizes = rng.exponential(1e6, 200)
    jobs = [(float(a), float(s), 1.0) for a, s in zip(arrivals, sizes, strict=True)]
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=2e9, cap_bytes_per_s=0.5e9)
    if lead is None:
        ends = _finishes(lambda size, _w: link.transfer(size), jobs, env)
    else:
        ends = _finishes_ahead(lambda size, _w, after: link.transfer(size, after=after), jobs, env, lead)
    assert ends == pytest.approx(_direct_walk(jobs, lambda n, _w: min(0.5e9, 2e9 / n)), rel=1e-9)
    assert link.bytes_moved == pytest.approx(sizes.sum())


@pytest.mark.parametrize("lead", [None, 2e-4])
def test_weighted_sharing_of_the_sms_matches_the_direct_walk(lead: float | None) -> None:
    # Kernels of occupancy f run at f·rate until Σf > 1, then at f·rate/Σf; each launched at its start (lead None)
    # or submitted 0.2 ms ahead of it, to wait in the calendar.
    rng = np.random.default_rng(3)
    n = 120
    jobs = [(float(a), float(s), float(f)) for a, s, f in
            zip(np.sort(rng.uniform(0, 1e-3, n)), rng.exponential(1e9, n), rng.uniform(0.05, 1.0, n), strict=True)]
    env = simpy.Environment()
    sms = SMs(env, 1e13)
    if lead is None:
        ends = _finishes(sms.run, jobs, env)
    else:
        ends = _finishes_ahead(lambda size, w, after: sms.server.submit(size, w, after=after), jobs, env, lead)
    assert ends == pytest.approx(_direct_walk(jobs, lambda _n, tot: 1e13 * min(1.0, 1.0 / tot)), rel=1e-9)


def test_a_job_of_nothing_is_done_at_once() -> None:
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=1e9, cap_bytes_per_s=1e9)
    assert link.transfer(0).triggered and len(link.server) == 0


def test_a_short_job_submitted_later_finishes_first_and_the_long_one_as_the_walk_says() -> None:
    # A (1 MB at 1 GB/s) starts at 0; at 0.1 ms B (10 kB) is submitted to start at 0.2 ms: it shares the link,
    # ends at 0.2 ms + 2·10 kB / 1 GB/s = 0.22 ms; A has then 1 MB − 0.2 ms·1 GB/s − 10 kB left, alone.
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=1e9, cap_bytes_per_s=1e12)
    ends: dict[str, float] = {}

    def a() -> Generator[simpy.Event, object, None]:
        yield link.transfer(1e6)
        ends["a"] = env.now

    def b() -> Generator[simpy.Event, object, None]:
        yield env.timeout(1e-4)
        yield link.transfer(1e4, after=1e-4)
        ends["b"] = env.now

    env.process(a())
    env.process(b())
    env.run()
    assert ends["b"] == pytest.approx(2.2e-4, rel=1e-12)
    assert ends["a"] == pytest.approx(2.2e-4 + (1e6 - 2e5 - 1e4) / 1e9, rel=1e-12)


def test_a_job_withdrawn_before_it_starts_slows_nobody() -> None:
    # B is due at 0.5 ms and withdrawn at 0.2 ms: A runs alone, as if B had never been submitted; the live timer,
    # set with B counted in, is replaced by one at A's own end.
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=1e9, cap_bytes_per_s=1e12)
    ends: dict[str, float] = {}
    b = env.event()

    def a() -> Generator[simpy.Event, object, None]:
        yield link.transfer(1e6)
        ends["a"] = env.now

    def withdraw() -> Generator[simpy.Event, object, None]:
        link.transfer(1e6, b, after=0.5e-3)
        yield env.timeout(0.2e-3)
        link.withdraw(b)

    env.process(a())
    env.process(withdraw())
    env.run()
    assert ends["a"] == pytest.approx(1e-3, rel=1e-12) and not b.triggered and link.bytes_moved == 1e6


def test_a_job_of_nothing_submitted_ahead_is_done_at_its_start() -> None:
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=1e9, cap_bytes_per_s=1e9)
    done = link.transfer(0, after=2e-3)
    env.run()
    assert done.ok and env.now == pytest.approx(2e-3)



@pytest.mark.parametrize("sizes", ["equal", "random"])
def test_submissions_ahead_into_a_busy_link_cost_steps_linear_in_the_jobs(sizes: str) -> None:
    # 256 threads each submit their misses 5 ms before they start (their work's length), into a link that
    # 1 MB jobs arriving over 10 ms overload: most of them share it at once, and each submission lands with
    # dozens of jobs in the calendar ahead of the first departure. Each job's finish is the direct walk's. The
    # steps: the calls of the link's speed (one a job taken in, one a calendar entry looked at). A job that
    # leaves no sooner in virtual time than the first departure looks at nothing: a few steps a job (3.5 at
    # 128–1,024 jobs). Each submission walking the calendar up to the first departure costs n²/7 (36 a job
    # at 256, 143 at 1,024).
    n, lead = 256, 5e-3
    rng = np.random.default_rng(11)
    starts = np.sort(rng.uniform(0.0, 1e-2, n))
    size = 1e6 * (np.ones(n) if sizes == "equal" else rng.uniform(0.5, 1.5, n))
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=2e9, cap_bytes_per_s=0.5e9)
    steps = 0
    share = link._share

    def counted(k: int, w: float) -> float:
        nonlocal steps
        steps += 1
        return share(k, w)

    link.server._speed = counted
    jobs = [(float(a), float(s), 1.0) for a, s in zip(starts, size, strict=True)]
    ends = _finishes_ahead(lambda b, _w, after: link.transfer(b, after=after), jobs, env, lead)
    assert ends == pytest.approx(_direct_walk(jobs, lambda k, _w: min(0.5e9, 2e9 / k)), rel=1e-9)
    assert steps <= 8 * n, steps


def test_a_job_that_fills_an_idle_spell_before_the_first_leaves_first() -> None:
    # An idle link at 1 GB/s. B (1 MB) is submitted at 0 to start at 1 ms; then A (1 MB, the same size) to start
    # at 0.2 ms. A runs alone for 0.8 ms (0.8 MB), then shares with B: its last 0.2 MB at 0.5 GB/s end at 1.4 ms;
    # B, 0.2 MB through by then, has 0.8 MB left alone: it ends at 2.2 ms. (A's finish in virtual time equals
    # the one B had alone, yet A leaves first: the idle spell it fills moves B's start in virtual time.)
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=1e9, cap_bytes_per_s=1e9)
    b = link.transfer(1e6, after=1e-3)
    a = link.transfer(1e6, after=0.2e-3)
    ends: dict[str, float] = {}
    a.callbacks.append(lambda _e: ends.setdefault("a", env.now))
    b.callbacks.append(lambda _e: ends.setdefault("b", env.now))
    env.run()
    assert ends["a"] == pytest.approx(1.4e-3, rel=1e-12)
    assert ends["b"] == pytest.approx(2.2e-3, rel=1e-12)


@pytest.mark.parametrize("spacing", [0.3e-3, 1e-3, 3e-3])
def test_submissions_ahead_in_any_order_match_the_direct_walk(spacing: float) -> None:
    # Each job submitted a random lead (0–5 ms) before its start, so submissions come in another order than
    # starts, into a link idle at times (3 ms apart), busy (1 ms) or overloaded (0.3 ms; jobs take 2 ms alone);
    # about half the jobs are exactly one of three sizes (ties in virtual time), the others within 1% of one.
    rng = np.random.default_rng(int(spacing * 1e5))
    n = 300
    starts = rng.exponential(spacing, n).cumsum()
    sizes = rng.choice([1e6, 1e6, 0.5e6, 2e6], n) * rng.uniform(0.99, 1.01, n) ** rng.integers(0, 2, n)
    leads = rng.uniform(0.0, 5e-3, n)
    env = simpy.Environment()
    link = Bandwidth(env, bytes_per_s=2e9, cap_bytes_per_s=0.5e9)
    ends = [np.nan] * n

    def thread(i: int) -> Generator[simpy.Event, object, None]:
        told = max(0.0, starts[i] - leads[i])
        yield env.timeout(told)
        yield link.transfer(float(sizes[i]), after=float(starts[i] - told))
        ends[i] = env.now

    for i in range(n):
        env.process(thread(i))
    env.run()
    jobs = [(float(a), float(s), 1.0) for a, s in zip(starts, sizes, strict=True)]
    assert ends == pytest.approx(_direct_walk(jobs, lambda k, _w: min(0.5e9, 2e9 / k)), rel=1e-9)
