"""The timer tick: a periodic interrupt that stops every CPU at the same instant.

On a small VM the host's pauses can be mostly a timer: a periodic tick on every CPU at nearly the
same instant, a short pause on a spinning thread (profile ``[tick]``, executors/calibration/tick.py).
A gradient that contains such an instant takes longer by more than the pause (the interrupt disturbs
its caches too). The calibrated gradient samples hold those slow calls, but a draw from them puts the
slow ones at random moments, independently for each worker. In the executor's runs the slow
gradients come at one phase of the tick's period, and two workers computing at once are slowed
together (most of one worker's slow gradients have a slow partner in the other's same round), so
the two keep their offset where independent draws would kick it. Leashed-SGD with persistence 0
stays in step that way, one worker dropping every round, and its mean staleness is far below what
independent draws give (the figures: benchmarks/README_sim.md, design measurements).

So with a ``[tick]`` table (``[sim] timer_tick``), the gradient samples are split
(:func:`split`): a call of median length m contains a tick with probability hit·m/P, and a tick adds
more than the calls' own spread, so the slowest hit·m/P share of the samples are those calls (of
those a tick could have slowed: up to ``MAX_STALL_PAUSES`` pauses over the body). The rest are drawn
at random, as without a tick; the excess of the slowest over the rest's median is a tick's stall. A
gradient running over a tick instant (every P from a phase drawn once a run) is stalled by that
tick's draw, the same draw on every CPU (:class:`Tick`). Reads, updates and passes are not: each is
short beside the period, so few of them contain a tick.

The tick stops a CPU, not a thread: where threads time-share a CPU (``sim/cpu.py``), the stall falls on
the turn of the one on it at the instant, which holds the CPU through it; the threads waiting for that
CPU lose nothing to it. So a CPU loses one stall an instant however many threads share it, as a thread
with a CPU of its own does, and the threads a tick stalls together are those on different CPUs.
"""

from __future__ import annotations

import math
from typing import TypeGuard

import numpy as np

from simasgd.machines.profile_model import Profile

MAX_SHARE = 0.5  # a split that would call more than half of the calls slow has no body left to trust
# A tick stalls a gradient by its pause plus what the interrupt evicted: a few pauses (the executor's
# excesses, benchmarks/README_sim.md). A calibrated call slower than the body by more than this many pauses
# lost its CPU for longer than a tick holds it (the host ran something else, for milliseconds), and stays
# in the body, drawn at random; taken as a tick's stall it would be drawn at every tick, and a stall
# longer than the period meets the next tick.
MAX_STALL_PAUSES = 5.0


def split(samples: np.ndarray, period_s: float, hit_rate: float,
          max_stall_s: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(the samples without the calls a tick fell into, what a tick added to those), or None when the
    samples hold no such call (fewer than one expected, or no call within ``max_stall_s`` of the body)."""
    s = np.sort(np.asarray(samples, dtype=float))
    share = min(MAX_SHARE, hit_rate * float(np.median(s)) / period_s)
    k = round(share * len(s))
    could = np.flatnonzero(s - float(np.median(s)) <= max_stall_s)  # the calls a tick could have slowed
    if k < 1 or len(could) <= k:
        return None
    ticked = could[-k:]  # the slowest of them
    base = np.delete(s, ticked)
    return base, np.maximum(s[ticked] - float(np.median(base)), 0.0)


class Tick:
    """The run's timer: instants ``phase_s + k·period_s``; tick k stalls a gradient it falls into by its
    own draw from ``stalls_s`` (with probability ``hit_rate``), the same on every CPU."""

    def __init__(self, period_s: float, hit_rate: float, stalls_s: np.ndarray, rng: np.random.Generator) -> None:
        self.period_s = period_s
        self.hit_rate = hit_rate
        self.stalls_s = np.asarray(stalls_s, dtype=float)
        self.phase_s = float(rng.uniform(0.0, period_s))  # where the run's start falls in the period
        self._rng = rng
        self._drawn = np.zeros(0)  # tick k's stall (0: it missed), drawn in order as the run reaches it

    def _stall(self, k: int) -> float:
        if k >= len(self._drawn):
            n = max(k + 1 - len(self._drawn), 256)
            hit = self._rng.random(n) < self.hit_rate
            more = np.where(hit, self.stalls_s[self._rng.integers(len(self.stalls_s), size=n)], 0.0)
            self._drawn = np.concatenate([self._drawn, more])
        return float(self._drawn[k])

    def stall(self, start: float, seconds: float) -> float:
        """What the ticks add to ``seconds`` of work that starts at ``start`` and runs through (a stall
        lengthens it, so a later tick may fall into it too)."""
        k = max(0, math.ceil((start - self.phase_s) / self.period_s))
        extra = 0.0
        while self.phase_s + k * self.period_s < start + seconds + extra:
            extra += self._stall(k)
            k += 1
        return extra


def tick_params(profile: Profile | None) -> tuple[float, float, float] | None:
    """(period, hit rate, the longest stall a tick can cause) of the profile's ``[tick]``, when it found a
    timer; else None."""
    t = None if profile is None else profile.tick
    if t is None:
        return None
    period, hit, pause = t.period_s, t.hit_rate, t.pause_s
    if not (_positive(period) and _positive(hit) and _positive(pause)):
        return None  # no pause_s: calibration.tick found no timer (its hit rate below MIN_HIT)
    if MAX_STALL_PAUSES * pause >= period:  # stalls that could fill a period are a loaded host's time slices,
        return None  # not a tick's (and a gradient would never get past the ticks that fall into it)
    return float(period), float(hit), MAX_STALL_PAUSES * float(pause)


def _positive(x: object) -> TypeGuard[float]:
    """A positive number (a profile's figure as TOML gives it)."""
    return isinstance(x, (int, float)) and x > 0
