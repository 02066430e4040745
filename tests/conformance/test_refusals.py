"""Refuse, never ignore: every parameter of every (algorithm, backend) pair runs as defined or is refused by name.

The triples (algorithm, parameter, backend) are discovered, as the pairs of
``conftest.py`` are: every available backend (``backends.available()``), every
algorithm in its ``ALGORITHMS`` (a backend with ``RUNS_AS``, serial, runs that
one definition), every parameter of the algorithm's definition. A backend
module declares where it does not run every value (``algorithms.require_values``):

- ``VALUES = {algorithm: {key: (values it runs, ...)}}``: each other value of the
  parameter's ``allowed`` is refused by ``run_once`` — before it builds the
  workload or starts anything — with an ``UnsupportedAlgorithm`` that names the
  backend, the algorithm, the key (``backoff.kind`` for a table) and the values it runs;
- ``MOOT = {algorithm: {key: why}}``: the parameter chooses nothing in its mechanics.

Every other parameter the backend must read: the static evidence here is that
its source (the package of its ``backend`` module, or the module itself),
comments and docstrings aside, names the key — a string ``"key"``
(``param("onebit")``), an attribute ``.key``, or an upper-case constant that
contains it (``C_LOCAL_COPY``, a config word the cpu layout fills from
``local_copy``). Cheap and coarse (a key read for one algorithm counts for
another of the same backend), but a backend that never names a key cannot run
its values: it would run them all as one, unannounced.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from simasgd import algorithms, backends, loader
from simasgd.algorithms import UnsupportedAlgorithm

ROOT = Path(__file__).resolve().parents[2]


PAIRS = backends.pairs()
BACKENDS = sorted({b for _, b in PAIRS})
TRIPLES = [(a, p.name, b) for a, b in PAIRS for p in algorithms.ALGORITHMS[a].params]


def _declared(backend: str, table: str) -> dict[str, dict[str, Any]]:
    return getattr(backends.load(backend), table, {})


def _values(backend: str, algorithm: str, key: str) -> tuple[Any, ...] | None:
    return _declared(backend, "VALUES").get(algorithm, {}).get(key)


def _moot(backend: str, algorithm: str, key: str) -> str | None:
    return _declared(backend, "MOOT").get(algorithm, {}).get(key)


def _show(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


REFUSED = [(a, k, b, v) for a, k, b in TRIPLES if (only := _values(b, a, k)) is not None
           for v in algorithms.ALGORITHMS[a].param(k).allowed if v not in only]
RUNS = [(a, k, b, v) for a, k, b in TRIPLES if (only := _values(b, a, k)) is not None for v in only]
READ = [(a, k, b) for a, k, b in TRIPLES if _values(b, a, k) is None and _moot(b, a, k) is None]


def scenario(algorithm: str, params: dict[str, Any]) -> Any:
    """The smallest valid scenario of ``algorithm`` with ``params`` (the rest its defaults)."""
    d = algorithms.ALGORITHMS[algorithm]
    workers = min(max(2, d.min_workers), d.max_workers or 2)
    return loader.from_dict({"name": f"refusal-{algorithm}", "workers": {"count": workers, "placement": "os"},
                             "workload": {"model": "least_squares", "batch_size": 1},
                             "algorithm": {"name": algorithm, **params},
                             "stop": {"max_updates": 10, "max_time_s": 5.0}, "cpu": {"pin": False}})


def _sources(backend: str) -> list[Path]:
    """The backend's own source: the folder of its module when that module is its package's ``backend``
    (executors/torchmp/, executors/cuda/, simasgd/sim/), else the module file alone (simasgd/serial.py)."""
    spec = importlib.util.find_spec(backends.BACKENDS[backend])
    assert spec is not None and spec.origin is not None
    origin = Path(spec.origin)
    return sorted(origin.parent.rglob("*.py")) if origin.stem == "backend" else [origin]


@cache
def _names(path: Path) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """The file's string constants, attribute names, and upper-case identifiers (comments never reach the AST)."""
    strings, attrs, upper = set(), set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\w+", node.value):
            strings.add(node.value)
        elif isinstance(node, ast.Attribute):
            attrs.add(node.attr)
        ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
            (node.asname or node.name) if isinstance(node, ast.alias) else None
        if ident and ident.isupper():
            upper.add(ident)
    return frozenset(strings), frozenset(attrs), frozenset(upper)


def _evidence(backend: str, key: str) -> list[str]:
    """Where the backend's source names ``key`` as code reads a parameter (module docstring)."""
    parts = key.upper().split("_")
    found = []
    for path in _sources(backend):
        strings, attrs, upper = _names(path)
        consts = [u for u in upper if any(u.split("_")[i:i + len(parts)] == parts for i in range(len(u.split("_"))))]
        if key in strings or key in attrs or consts:
            found.append(f"{path.name}: " + ", ".join([f'"{key}"'] * (key in strings) + [f".{key}"] * (key in attrs)
                                                     + sorted(consts)))
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_declarations_name_real_parameters_and_values(backend: str) -> None:
    """``VALUES`` and ``MOOT`` speak of algorithms the backend lists, parameters they take, values they allow."""
    mod = backends.load(backend)
    values, moot = _declared(backend, "VALUES"), _declared(backend, "MOOT")
    for table in (values, moot):
        for a, keys in table.items():
            assert a in mod.ALGORITHMS, f"{backend}: declares parameters of {a!r}, which it does not list"
            for key in keys:
                assert key in algorithms.ALGORITHMS[a].param_names, f"{backend}: {key!r} is not a parameter of {a!r}"
    for a, keys in values.items():
        for key, only in keys.items():
            allowed = algorithms.ALGORITHMS[a].param(key).allowed
            assert allowed, f"{backend}: VALUES restricts {a}.{key}, which has no list of values to refuse from"
            assert only and set(only) < set(allowed), (f"{backend}: VALUES[{a!r}][{key!r}] = {only} must be some, "
                                                       f"not all, of {allowed}")
            assert key not in moot.get(a, {}), f"{backend}: {a}.{key} both restricted and moot"
    for keys in moot.values():
        assert all(isinstance(why, str) and why for why in keys.values()), f"{backend}: MOOT gives no reason"


@pytest.mark.parametrize(("name", "key", "backend_name", "value"),
                         [pytest.param(*t, id=f"{t[0]}-{t[1]}={_show(t[3])}-{t[2]}") for t in REFUSED])
def test_a_value_the_backend_does_not_run_is_refused_by_name(name: str, key: str, backend_name: str, value: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """(``name``: the algorithm; conftest parametrizes every test taking ``algorithm, backend`` by pair.)"""
    def built(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{backend_name} built the workload of {name} with {key} = {value!r} before refusing it")

    monkeypatch.setattr("simasgd.workloads.build_workload", built)
    sc = scenario(name, {key: value})
    with pytest.raises(UnsupportedAlgorithm) as e:
        backends.load(backend_name).run_once(sc, 0)
    choice = algorithms.ALGORITHMS[name].param(key).choice
    shown_key = f"{key}.{choice}" if choice else key
    given = _show(value) if isinstance(value, bool) else repr(value)
    allowed = ", ".join(_show(v) for v in _values(backend_name, name, key) or ())
    msg = str(e.value)
    for part in (f"backend {backend_name!r}", f"{name!r}", f"algorithm.{shown_key} = {given} ", f"allowed: {allowed}"):
        assert part in msg, (part, msg)


@pytest.mark.parametrize(("name", "key", "backend_name", "value"),
                         [pytest.param(*t, id=f"{t[0]}-{t[1]}={_show(t[3])}-{t[2]}") for t in RUNS])
def test_a_value_the_backend_runs_passes_its_check(name: str, key: str, backend_name: str, value: Any) -> None:
    algorithms.require_values(backend_name, scenario(name, {key: value}).algorithm, _declared(backend_name, "VALUES"))


@pytest.mark.parametrize(("name", "key", "backend_name"), [pytest.param(*t, id="-".join(t)) for t in READ])
def test_a_parameter_the_backend_does_not_restrict_is_read(name: str, key: str, backend_name: str) -> None:
    """Not in ``VALUES`` nor ``MOOT``: every value runs, so the backend's code names the key somewhere."""
    where = ", ".join(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in _sources(backend_name))
    assert _evidence(backend_name, key), (
        f"backend {backend_name!r} lists {name!r} and neither restricts nor reads its parameter {key!r}: no "
        f'string "{key}", attribute .{key} or constant naming it in {where}. Run it as defined, or declare the '
        f"values it runs in the backend's VALUES (refused by algorithms.require_values) or, where the parameter "
        f"chooses nothing there, in MOOT")


def test_a_table_parameter_is_refused_by_its_choice() -> None:
    """``backoff`` is a table; a backend restricts its ``kind`` (the other fields tune that kind)."""
    sc = scenario("mutex", {"backoff": {"kind": "exponential", "initial_s": 1e-6, "max_s": 1e-3}})
    only = {"mutex": {"backoff": ("none",)}}
    with pytest.raises(UnsupportedAlgorithm, match=r"^backend 'x': algorithm\.backoff\.kind = 'exponential' is not "
                                                   r"implemented for 'mutex'; allowed: none \(no retries\)$"):
        algorithms.require_values("x", sc.algorithm, only, {"backoff": "no retries"})
    algorithms.require_values("x", scenario("mutex", {}).algorithm, only, "no retries")  # the default: none
