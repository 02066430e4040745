"""The backends behind one interface: ``run_once(scenario, run, advance) -> RunResult``.

Backends are imported lazily by name, so that ``simasgd validate`` never
pays for numba or SimPy, and a backend that is absent says so plainly.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from simasgd import metadata
from simasgd.progress import Advance
from simasgd.results import RunResult, merge
from simasgd.scenario import Scenario
from simasgd.traits import ExecutorTraits


class Backend(Protocol):
    NAME: str
    ALGORITHMS: frozenset[str]
    MEASURES_HOST: bool  # its timings are this host's (real threads): never two at once on one host
    # TRAITS: ExecutorTraits | None, how its workers read, wait, snapshot and book (simasgd/traits.py)
    # NEEDS_PROFILE: bool, or needs_profile(scenario) -> bool where the scenario decides (sim: preset "this")

    def run_once(self, scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult: ...


BACKENDS: dict[str, str] = {
    "serial": "simasgd.serial",
    "sim": "simasgd.sim.backend",
    "cpu": "executors.cpu.backend",
    "torch": "executors.torchmp.backend",  # one process per worker (torch.multiprocessing); needs simasgd[torch]
    "cuda": "executors.cuda.backend",
    "gpu": "executors.resident.backend",  # workers resident on the GPU, or a fused attempt per stream launch
    "dist": "executors.dist.backend",  # one torch.distributed (gloo) process per node; needs simasgd[torch]
}
DEFAULT = "sim"


class BackendError(ValueError):
    pass


def load(name: str) -> Backend:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(BACKENDS[name])
    except ModuleNotFoundError as e:
        if e.name and (BACKENDS[name].startswith(e.name) or e.name.startswith(BACKENDS[name].split(".")[0])):
            raise BackendError(f"backend {name!r} is not available in this build of simasgd "
                               f"(module {BACKENDS[name]} is missing)") from None
        raise


def available() -> dict[str, bool]:
    out = {}
    for name, module in BACKENDS.items():
        try:
            out[name] = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            out[name] = False
    return out


def pairs() -> list[tuple[str, str]]:
    """Every (algorithm, backend) pair of the present backends: the algorithms a backend lists, or, for a
    backend with ``RUNS_AS`` (serial, the reference), the one definition its runs follow."""
    from simasgd import algorithms

    out = []
    for name, present in available().items():
        if not present:
            continue
        mod = load(name)
        runs = [mod.RUNS_AS] if hasattr(mod, "RUNS_AS") else [a for a in algorithms.ALGORITHMS if a in mod.ALGORITHMS]
        out += [(a, name) for a in runs]
    return out


def measures_host(name: str) -> bool:
    """The backend's ``MEASURES_HOST`` trait (BackendError if it is unknown or absent)."""
    return bool(load(name).MEASURES_HOST)


def traits(name: str) -> ExecutorTraits | None:
    """The backend's executor traits (``TRAITS``): None where it declares none, or declares that the
    simulator models no CPU executor of it (BackendError if it is unknown or absent). A backend may declare
    them in its package (``executors/cpu/__init__.py``), which is read first: the simulator then imports
    no executor to learn them."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    package = BACKENDS[name].rpartition(".")[0]
    try:
        found = getattr(importlib.import_module(package), "TRAITS", None) if package else None
    except ModuleNotFoundError:
        found = None
    if found is None:
        found = getattr(load(name), "TRAITS", None)
    return found if isinstance(found, ExecutorTraits) else None


def with_traits() -> list[str]:
    """The present backends that declare executor traits: the values ``[sim] traits`` may name."""
    return [b for b, ok in available().items() if ok and traits(b) is not None]


def needs_profile(name: str, scenario: Scenario) -> bool:
    """Whether running ``scenario`` on the backend reads the calibrated profile (``needs_profile`` or
    ``NEEDS_PROFILE``)."""
    impl = load(name)
    decide = getattr(impl, "needs_profile", None)
    if callable(decide):
        return bool(decide(scenario))
    return bool(getattr(impl, "NEEDS_PROFILE"))  # noqa: B009 - not in Backend: some decide per scenario


def run_metadata(backend: str, scenario: Scenario) -> dict[str, object]:
    """What ``backends.run`` records with a result: :func:`metadata.collect`, and the profile it read, if any."""
    out = metadata.collect(backend, scenario.hash)
    if needs_profile(backend, scenario):
        from simasgd import machine, profile

        path = machine.profile_path()
        if path.exists():
            out["profile"] = profile.describe(path)
    return out


def run(scenario: Scenario, backend: str = DEFAULT, *, repeats: int | None = None,
        out: str | Path | None = None, advance: Advance | None = None,
        on_run: Callable[[RunResult], None] | None = None) -> RunResult:
    """Run every repeat; with ``out``, the folder is rewritten after each repeat so a crash keeps the finished ones."""
    impl = load(backend)
    done: list[RunResult] = []
    for r in range(repeats or scenario.repeats):
        meta = run_metadata(backend, scenario)  # before the run: the profile it reads
        result = impl.run_once(scenario, r, advance)
        result.metadata = {**meta, **result.metadata}
        done.append(result)
        merged = merge(done)
        if out is not None:
            merged.save(out)
        if on_run is not None:
            on_run(merged)
    return merge(done)
