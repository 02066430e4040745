"""``[tick]`` (executors/calibration/tick.py): the timer found in spinning threads' pauses.

Synthetic pauses with a known timer (every period, on both CPUs, a known skew apart) among pauses at
random moments: the analysis must name that frequency, not a multiple of its period (which folds the
same pauses as well) nor a near one, give its pause length and the skew, and find no timer where the
pauses come at random. One short real spin checks the record's shape on this machine (whatever its
timer).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from executors.calibration import tick as ct

SPAN = 1.0


def _cpu(rng: np.random.Generator, hz: float | None, skew: float, pause: float = 16e-6,
         noise_per_s: float = 150) -> tuple[np.ndarray, np.ndarray]:
    """One CPU's pauses: the timer's (every 1/hz from 1.3 ms + skew) and random ones, sorted."""
    ticks = np.arange(1.3e-3, SPAN, 1 / hz) + skew if hz else np.zeros(0)
    other = rng.uniform(0, SPAN, rng.poisson(noise_per_s * SPAN))
    starts = np.concatenate([ticks, other])
    lengths = np.concatenate([rng.normal(pause, 1e-6, len(ticks)), rng.uniform(5e-6, 40e-6, len(other))])
    order = np.argsort(starts)
    return starts[order], lengths[order]


@pytest.mark.parametrize("hz", [250, 1000, 100])
def test_the_timer_is_found_with_its_pause_and_skew(hz: int) -> None:
    rng = np.random.default_rng(hz)
    out = ct.timer([_cpu(rng, hz, 0.0), _cpu(rng, hz, 2e-7)], SPAN)
    assert out["hz"] == hz and out["period_s"] == pytest.approx(1 / hz)
    assert out["hit_rate"] >= 0.95
    assert out["pause_s"] == pytest.approx(16e-6, abs=1e-6)
    assert out["skew_s"] == pytest.approx(2e-7, abs=1e-7)
    assert len(out["pauses_per_s"]) == 2


def test_random_pauses_are_no_timer() -> None:
    rng = np.random.default_rng(7)
    out = ct.timer([_cpu(rng, None, 0.0), _cpu(rng, None, 0.0)], SPAN)
    assert out["hit_rate"] < ct.MIN_HIT and "pause_s" not in out and "skew_s" not in out


def test_time_slices_on_a_loaded_host_are_no_timer() -> None:
    """Pauses one a period and a whole slice long (threads taking turns on a busy CPU) fold like a timer's;
    their length says they are not one: no pause_s, and why."""
    rng = np.random.default_rng(3)
    out = ct.timer([_cpu(rng, 250, 0.0, pause=4.06e-3), _cpu(rng, 250, 2e-7, pause=4.06e-3)], SPAN)
    assert out["hz"] == 250 and out["hit_rate"] >= 0.95
    assert "pause_s" not in out and "skew_s" not in out and "not a timer" in out["reason"]


def test_fold_counts_the_periods_with_a_pause_at_the_mode() -> None:
    starts = np.arange(0.5e-3, SPAN, 4e-3)[::2]  # every other period of 4 ms
    mode, hit = ct.fold(starts, 4e-3, SPAN)
    assert mode == pytest.approx(0.5e-3, abs=4e-3 / 100) and hit == pytest.approx(0.5, abs=0.01)
    assert ct.fold(np.zeros(0), 4e-3, SPAN) == (0.0, 0.0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 1, reason="needs a CPU")
def test_a_real_spin_gives_a_table_of_that_shape() -> None:
    out = ct.tick_table(0.05, max_cpus=2)
    assert out["cpus"] == min(2, len(os.sched_getaffinity(0))) and out["duration_s"] == 0.05
    assert out["hz"] in ct.HZ and 0 <= out["hit_rate"] <= 1
    assert ("pause_s" in out) == (out["hit_rate"] >= ct.MIN_HIT and "reason" not in out)
    assert "reason" not in out or out["hit_rate"] >= ct.MIN_HIT  # only a timer's fold can be refused so
