"""The backends behind one interface: ``run_once(scenario, run, advance) -> RunResult``.

Backends are imported lazily by name, so that ``simasgd validate`` never
pays for numba or SimPy, and a backend that is absent says so plainly.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable, Protocol

from simasgd import metadata
from simasgd.progress import Advance
from simasgd.results import RunResult, merge
from simasgd.scenario import Scenario


class Backend(Protocol):
    NAME: str
    ALGORITHMS: frozenset[str]

    def run_once(self, scenario: Scenario, run: int, advance: Advance | None = None) -> RunResult: ...


BACKENDS: dict[str, str] = {
    "serial": "simasgd.serial",
    "sim": "simasgd.sim.backend",
    "cpu": "executors.cpu.backend",
    "cuda": "executors.cuda.backend",
}
DEFAULT = "sim"


class BackendError(ValueError):
    pass


def load(name: str) -> Backend:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(BACKENDS[name])  # type: ignore[return-value]
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


def run(scenario: Scenario, backend: str = DEFAULT, *, repeats: int | None = None,
        out: str | Path | None = None, advance: Advance | None = None,
        on_run: Callable[[RunResult], None] | None = None) -> RunResult:
    """Run every repeat; with ``out``, the folder is rewritten after each repeat so a crash keeps the finished ones."""
    impl = load(backend)
    done: list[RunResult] = []
    for r in range(repeats or scenario.repeats):
        result = impl.run_once(scenario, r, advance)
        result.metadata = {**metadata.collect(backend, scenario.hash), **result.metadata}
        done.append(result)
        merged = merge(done)
        if out is not None:
            merged.save(out)
        if on_run is not None:
            on_run(merged)
    return merge(done)
