"""Backend ``gpu``: workers that live on the GPU — each worker a thread block looping read → gradient →
update on the device (cuMF_SGD; Ma, Rusu & Torres 2019), or, with ``[gpu] mode = "streams"``, the
same attempt launched once per attempt on the worker's own stream (Lopez et al. 2020 §IV-B).

numba.cuda is imported when a run starts; without a GPU and without numba's CUDA simulator a run
stops with one line. Workloads: the ``mlp`` and ``cnn`` models (gradients as block-level device
functions, :mod:`.gradients`) and the conformance tests' constant gradient; others are refused.
"""

from __future__ import annotations

from typing import Any

from executors.gpu import IMPLEMENTATIONS, NAME
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult
from simasgd.spec import algorithms
from simasgd.spec.scenario import Scenario

ALGORITHMS = frozenset(IMPLEMENTATIONS)  # one entry per algorithm (executors/gpu/__init__.py)
# Parameter values the kernels implement, where not every value (algorithms.require_values).
VALUES: dict[str, dict[str, tuple[Any, ...]]] = {
    "mutex": {"backoff": ("none",)}, "leashed": {"backoff": ("none",)}, "sync": {"onebit": (False,)}}
WHY = {"backoff": "the device spin lock and CAS retry at once",
       "onebit": "the workers' gradients are averaged unquantised"}
# Parameters that choose nothing here (algorithms.py, MOOT).
MOOT = {"hogwild": {"sweep": "a worker's lanes write all of θ in one pass: its writes have no order to choose"}}
MEASURES_HOST = True   # real blocks on this host's GPU: never two runs at once on one host
NEEDS_PROFILE = False
MAX_BATCH = 64  # a lane keeps a batch's sums of one output in registers
# No CPU executor's traits: its workers are thread blocks spinning on device words; the simulator's resident
# blocks (simasgd/sim/gpu_resident.py) model them, whatever [sim] traits says.
TRAITS = None

__all__ = ["ALGORITHMS", "MEASURES_HOST", "NAME", "NEEDS_PROFILE", "TRAITS", "run_once"]


def refuse(scenario: Scenario, kind: str | None = None, built: bool = False) -> None:
    """Every refusal, each naming the key and what is allowed: before any device work, and once the
    workload is ``built``, whether it has a device gradient (``kind``)."""
    a = scenario.algorithm
    algorithms.require(NAME, a.name, ALGORITHMS)
    algorithms.require_values(NAME, a, VALUES, WHY)
    mode = scenario.gpu.mode if scenario.gpu is not None else "resident"
    if mode == "streams" and a.name == "sync":
        raise algorithms.UnsupportedAlgorithm(
            f"backend {NAME!r}: algorithm 'sync' needs gpu.mode = \"resident\" (its device-wide barrier waits "
            "for blocks that, launched per attempt, need not be on the GPU together); backend 'cuda' runs sync "
            "on streams with a host barrier")
    if built and kind is None:
        raise algorithms.UnsupportedAlgorithm(
            f"backend {NAME!r}: workload.model = {scenario.workload.model!r} has no device gradient here; "
            "allowed: mlp, cnn (backend 'cuda' computes other models' gradients on the host)")
    if scenario.workload.batch_size > MAX_BATCH:
        raise algorithms.UnsupportedAlgorithm(
            f"backend {NAME!r}: workload.batch_size = {scenario.workload.batch_size} exceeds {MAX_BATCH}")


def run_once(scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult:
    refuse(scenario)
    from executors.cuda import device
    from executors.gpu import kernels
    from simasgd.numerics.workloads import build_workload

    device.require()  # before building data: a missing GPU is one line, at once
    wl = build_workload(scenario.workload, scenario.seed, scenario.base_dir)
    kind = kernels.kind_of(wl)
    refuse(scenario, kind, built=True)
    if kind == "cnn":
        from executors.gpu.gradients import cnn_refusal
        from simasgd.numerics.workloads.cnn import sizes

        s = sizes(wl.shape)
        why = cnn_refusal(str(wl.dtype), s["C"], s["H"], s["W"], s["k"])
        if why is not None:
            raise algorithms.UnsupportedAlgorithm(f"backend {NAME!r}: {why}")
    from executors.gpu import runner

    return runner.run_workload(scenario, run, wl, advance)
