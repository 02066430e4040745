"""A worker's gradient times and its given read and update times: the draws :class:`~simasgd.sim.costs.Platform`
turns into events.

A gradient's time is a draw from ``[timing] gradient``, else the calibrated profile's samples
(:func:`~simasgd.sim.profile_tables.profile_gradient`: those timed with k threads at once where the
profile has them), else the workload's flops at the machine's rate with gamma jitter (``[sim]
gradient_cv``). Then, per worker: its straggler slowdown and its socket's (:mod:`sockets`), a
transient pause and the timer tick's stalls (:mod:`tick`). Every draw
comes from the worker's own ``Role.TIMING`` stream (:mod:`draws`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from simasgd.machines.machine import Machine
from simasgd.sim.draws import Sampler, gradient_draw, timing_dist
from simasgd.sim.profile_tables import profile_gradient
from simasgd.sim.sockets import SocketShares
from simasgd.sim.tick import Tick, split, tick_params
from simasgd.spec import distributions, seeds
from simasgd.spec.scenario import Scenario


def _streams(sc: Scenario, run: int, w: int) -> list[np.random.Generator]:
    """Worker ``w``'s four timing streams: gradient, read, update, straggler pause."""
    return [np.random.default_rng(s) for s in seeds.sequence(sc.timing_seed, run, seeds.Role.TIMING, w).spawn(4)]


@dataclass
class GradientDraws:
    """Each worker's gradient time (``draws[w]()``), and what the platform does around it."""

    draws: list[Callable[[], float]]
    slow: list[float]            # a worker's socket slowdown (turbo, shared L3), in every draw
    miss: list[float]            # bytes of a gradient's traffic its socket's L3 cannot hold (from DRAM)
    tick: Tick | None            # the timer that stalls every CPU at once (:mod:`tick`)

    @classmethod
    def build(cls, sc: Scenario, machine: Machine, run: int, cpus: list[int | None], shares: SocketShares | None,
              flops_per_sample: float | None) -> GradientDraws:
        n = sc.workers.count
        # gradients computing at once: one per worker, at most one per (distinct) CPU
        at_once = min(n, len(set(cpus)) if None not in cpus else machine.hw_threads)
        grad = gradient_dist(sc, machine, flops_per_sample, at_once)
        derived = sc.timing.gradient is None and not isinstance(grad, distributions.Empirical)
        slow = [1.0] * n if shares is None or not derived else shares.slowdown
        miss = [0.0] * n if shares is None or not derived else shares.miss_bytes
        grad, tick = timer_tick(sc, machine, grad, run)
        st = sc.workers.stragglers
        pause = timing_dist(st.pause, sc.base_dir, "workers.stragglers.pause") if st.probability > 0 else None
        draws: list[Callable[[], float]] = []
        for w in range(n):
            rg, _, _, rp = _streams(sc, run, w)
            s = (st.slowdown if w < st.count else 1.0) * slow[w]
            draws.append(Sampler(gradient_draw(grad, rg, s, st.probability, pause, rp)))
        return cls(draws, slow, miss, tick)


def given_steps(sc: Scenario, run: int, dim: int | None) -> tuple[list[Sampler | None], list[Sampler | None]]:
    """Each worker's read and update samplers where ``[timing]`` gives them (None: derived from the machine)."""
    read = timing_dist(sc.timing.read, sc.base_dir, "timing.read")
    update = timing_dist(sc.timing.update, sc.base_dir, "timing.update")
    if (read is None or update is None) and dim is None:
        raise ValueError("derived read/update costs need the model dimension (give [timing] read and update)")
    reads: list[Sampler | None] = []
    updates: list[Sampler | None] = []
    for w in range(sc.workers.count):
        _, rr, ru, _ = _streams(sc, run, w)
        reads.append(None if read is None else Sampler(partial(_sample, read, rr)))
        updates.append(None if update is None else Sampler(partial(_sample, update, ru)))
    return reads, updates


def _sample(d: distributions.Distribution, rng: np.random.Generator, k: int) -> np.ndarray:
    """``k`` draws of ``d`` (a :class:`~simasgd.sim.draws.Sampler`'s block)."""
    return np.asarray(d.sample(rng, k))


def timer_tick(sc: Scenario, machine: Machine, grad: distributions.Distribution,
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
    stream = seeds.sequence(sc.timing_seed, run, seeds.Role.TIMING, 0).spawn(7)[6]  # apart from _streams' four
    return distributions.Empirical(parts[0]), Tick(period, hit, parts[1], np.random.default_rng(stream))


def gradient_dist(sc: Scenario, m: Machine, flops: float | None, at_once: int = 1) -> distributions.Distribution:
    """One gradient's time: given, from the profile (k = ``at_once`` threads at once), or from the flops."""
    given = timing_dist(sc.timing.gradient, sc.base_dir, "timing.gradient")
    if given is not None:
        return given
    prof = profile_gradient(m.profile, sc.workload, at_once)
    if prof is not None:
        return prof
    if flops is None:
        raise ValueError("timing.gradient not given and the workload's flops are unknown")
    mean = flops * sc.workload.batch_size / (m.gflops_per_core * 1e9)
    cv = sc.sim.gradient_cv
    return distributions.Deterministic(mean) if cv == 0 else distributions.Gamma(mean, 1.0 / cv**2)
