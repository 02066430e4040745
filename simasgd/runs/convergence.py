"""The stop rule every backend shares: ε-convergence, crash and budget.

A backend feeds :class:`Monitor` the loss it measured at (t, updates); the
monitor keeps the curve, notices ε, crashes (NaN/inf or a loss beyond
``explode_factor`` × the initial loss) and builds the run's summary, so that
"reached ε" means the same thing on every backend. ``stop.epsilon = 0`` (the
default) sets no ε target: the run goes to its budget, is never "reached",
and is not counted ``not_reached``: there was no ε to reach.

Where a paper reports accuracy (Lopez et al. 2020: accuracy against time), a
backend also hands :meth:`Monitor.observe` the parameters it measured the loss
at, and the monitor records the test accuracy there (:func:`accuracy_of`, the
curve's ``accuracy`` column; the last one is the summary's ``final_accuracy``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from simasgd.runs.results import RunSummary, curve_frame
from simasgd.spec.scenario import StopConfig


@dataclass
class Monitor:
    stop: StopConfig
    run: int
    t: list[float] = field(default_factory=list)
    updates: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    updates_to_eps: int | None = None
    time_to_eps: float | None = None
    crashed: bool = False
    accuracy_of: Callable[[np.ndarray], float] | None = None  # θ -> test accuracy (None: not measured)
    accuracy: list[float] = field(default_factory=list)

    @property
    def initial_loss(self) -> float:
        return self.loss[0] if self.loss else math.nan

    @property
    def target(self) -> float:
        return self.stop.epsilon * self.initial_loss

    @property
    def reached(self) -> bool:
        return self.updates_to_eps is not None

    @property
    def done(self) -> bool:
        return self.reached or self.crashed

    def observe(self, t: float, updates: int, loss: float, theta: np.ndarray | None = None) -> bool:
        """Record one evaluation (and the test accuracy at ``theta``, when this monitor measures it);
        True when the run should stop (ε reached or crashed)."""
        self.t.append(float(t))
        self.updates.append(int(updates))
        self.loss.append(float(loss))
        measure = self.accuracy_of
        measured = measure is not None and theta is not None and math.isfinite(loss)
        self.accuracy.append(measure(theta) if measure is not None and theta is not None and measured else math.nan)
        if not math.isfinite(loss) or (len(self.loss) > 1 and loss > self.stop.explode_factor * self.initial_loss):
            self.crashed = True
        elif self.stop.has_target and self.updates_to_eps is None and len(self.loss) > 1 and loss <= self.target:
            self.updates_to_eps, self.time_to_eps = int(updates), float(t)
        return self.done

    def out_of_budget(self, t: float, updates: int) -> bool:
        return updates >= self.stop.max_updates or t >= self.stop.max_time_s

    def curve(self) -> pd.DataFrame:
        return curve_frame(self.run, self.t, self.updates, self.loss, accuracy=self.accuracy)

    def summary(self, updates: int, time_s: float, staleness: np.ndarray, attempts: int | None = None,
                **extra: object) -> RunSummary:
        """The run's summary; ``staleness`` holds the staleness of the applied updates."""
        return RunSummary(
            run=self.run, updates=int(updates), time_s=float(time_s),
            updates_to_eps=self.updates_to_eps, time_to_eps=self.time_to_eps,
            crashed=self.crashed, not_reached=self.stop.has_target and not self.crashed and not self.reached,
            initial_loss=self.initial_loss, final_loss=self.loss[-1] if self.loss else math.nan,
            mean_staleness=float(np.mean(staleness)) if len(staleness) else 0.0,
            attempts=int(updates if attempts is None else attempts),
            updates_per_s=updates / time_s if time_s > 0 else 0.0,
            extra=dict(extra) | ({"final_accuracy": self.accuracy[-1]}
                                 if self.accuracy and math.isfinite(self.accuracy[-1]) else {}))


def accuracy_of(wl: Any) -> Callable[[np.ndarray], float] | None:
    """The test accuracy of workload ``wl`` as a function of θ: the fraction of its held-out rows
    (``workload.test_fraction``, or the dataset's test files) classified right. None where there is
    nothing to measure: a regression workload, no test rows, or a workload without ``accuracy``."""
    if not getattr(wl, "classification", False) or getattr(wl, "n_test", 0) <= 0 or not hasattr(wl, "accuracy"):
        return None
    return lambda theta: float(wl.accuracy(np.ascontiguousarray(theta), test=True))
