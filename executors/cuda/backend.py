"""Backend ``cuda``: the scenario run for real on one GPU, one CUDA stream per worker (:mod:`.runner`).

numba.cuda is imported only when a run starts (:func:`executors.cuda.device.require`); without a
GPU and without numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) a run stops with one line
saying so.
"""

from __future__ import annotations

from typing import Any

from executors.cuda import IMPLEMENTATIONS, NAME
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult
from simasgd.spec import algorithms
from simasgd.spec.scenario import Scenario

ALGORITHMS = frozenset(IMPLEMENTATIONS)  # one loop per algorithm in executors/cuda/__init__.py (lazy: no numba.cuda)
# Parameter values the loops implement, where not every value (algorithms.require_values): HOGWILD!'s
# gradient is taken at a copy read by a kernel (lockfree.hogwild); sync adds the gradients as computed into
# the shared sum (no 1-bit quantisation); a leashed CAS that fails retries at once.
VALUES: dict[str, dict[str, tuple[Any, ...]]] = {
    "hogwild": {"local_copy": (True,)}, "sync": {"onebit": (False,)}, "leashed": {"backoff": ("none",)}}
WHY = {"local_copy": "each stream reads θ into its own copy",
       "onebit": "the streams add their gradients to the sum unquantised",
       "backoff": "a failed CAS on streams retries at once"}
# Parameters that choose nothing here: HOGWILD!'s writes have no order to choose (one kernel writes all
# of θ), so ``sweep`` is accepted and means nothing, as in the simulator of a GPU.
MOOT = {"hogwild": {"sweep": "one update kernel writes all of θ at once: its writes have no order to choose"}}
MEASURES_HOST = True   # real streams on this host's GPU: never two runs at once on one host
NEEDS_PROFILE = False  # it measures; it reads no calibrated profile
# No CPU executor's traits: each stream copies θ with a kernel at every read and no worker waits on a lock;
# the simulator's GPU machine (simasgd/sim/gpu.py) models its streams, whatever [sim] traits says.
TRAITS = None

__all__ = ["ALGORITHMS", "MEASURES_HOST", "NAME", "NEEDS_PROFILE", "TRAITS", "run_once"]


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    algorithms.require(NAME, scenario.algorithm.name, ALGORITHMS)
    algorithms.require_values(NAME, scenario.algorithm, VALUES, WHY)
    from executors.cuda import device, runner
    from simasgd.numerics.workloads import build_workload

    device.require()  # before building data: a missing GPU is one line, at once
    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    return runner.run_workload(scenario, run, wl, advance)
