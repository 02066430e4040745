"""Every backend's table from algorithm to implementation (``IMPLEMENTATIONS``, executors/implementations.py):
its declared ``ALGORITHMS`` are the table's keys, every entry loads, and every implementation lives in a module
named after one of the simulator's algorithm families (simasgd/sim/algorithms/)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest

from executors.implementations import Lazy
from simasgd.runs import backends
from simasgd.sim import algorithms as sim_families
from simasgd.spec import algorithms

# Where each backend keeps its table. serial has none: it runs every scenario as sequential SGD (RUNS_AS).
TABLES = {
    "sim": "simasgd.sim.algorithms",
    "cpu": "executors.cpu.wiring",
    "torch": "executors.torchmp.worker",
    "cuda": "executors.cuda",
    "gpu": "executors.gpu",
    "dist": "executors.dist.ranks",
}
FAMILIES = {m.name for m in pkgutil.iter_modules(sim_families.__path__)}


def _table(backend: str) -> dict[str, Any]:
    table: dict[str, Any] = importlib.import_module(TABLES[backend]).IMPLEMENTATIONS
    return table


def _function(entry: Any) -> Any:
    """What runs the algorithm: a lazy entry loaded, a cpu table row's loop (its Python function)."""
    if isinstance(entry, Lazy):
        entry = entry.load()
    loop = getattr(entry, "loop", None)
    if loop is not None:
        entry = loop
    return getattr(entry, "py_func", entry)


def test_every_backend_but_serial_has_a_table() -> None:
    assert set(TABLES) == set(backends.BACKENDS) - {"serial"}


@pytest.mark.parametrize("backend", sorted(TABLES))
def test_a_backends_algorithms_are_its_tables_keys(backend: str) -> None:
    mod = backends.load(backend)
    table = _table(backend)
    assert frozenset(table) == mod.ALGORITHMS
    assert set(table) <= set(algorithms.names())


@pytest.mark.parametrize("backend", sorted(TABLES))
def test_every_entry_loads_to_what_runs_it(backend: str) -> None:
    for name, entry in _table(backend).items():
        loaded = entry.load() if isinstance(entry, Lazy) else entry
        assert loaded is not None, (backend, name)
        if backend != "gpu":  # the gpu backend's entries are its host-side rows (resident/wiring.py)
            assert callable(_function(entry)), (backend, name)


@pytest.mark.parametrize("backend", sorted(set(TABLES) - {"gpu"}))
def test_implementations_live_in_modules_named_after_a_family(backend: str) -> None:
    for name, entry in _table(backend).items():
        module = _function(entry).__module__.rsplit(".", 1)[-1]
        assert module in FAMILIES, (backend, name, module)


def test_a_lazy_entry_names_a_missing_function_when_loaded() -> None:
    with pytest.raises(AttributeError):
        Lazy("executors.implementations", "no_such_function").load()
