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

Every other parameter the backend runs, and so must read: each is given a value other than its default
and the backend runs the scenario (``run_once``, on the constant-gradient workload) while every read of
a parameter from the scenario's ``[algorithm]`` table is recorded — in this process and in any it forks
(the dist ranks, the torch workers). The run must make updates, and the key must have been read during
it by the code that runs (a read by the scenario's own loading or validation does not count). A backend
that never reads a key cannot run its values: it would run them all as one, unannounced. Each value a
backend's ``VALUES`` lists, and a ``MOOT`` parameter's other value, must run too.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from simasgd.numerics.workloads.constant import ConstWorkload, first_loss
from simasgd.runs import backends
from simasgd.spec import algorithms, loader
from simasgd.spec.algorithms import UnsupportedAlgorithm
from simasgd.spec.loader import ScenarioError
from simasgd.spec.scenario import AlgorithmConfig

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
MOOT = [(a, k, b) for a, k, b in TRIPLES if _moot(b, a, k) is not None]
PARAM_NAMES = frozenset(p.name for d in algorithms.ALGORITHMS.values() for p in d.params)


def scenario(algorithm: str, params: dict[str, Any]) -> Any:
    """The smallest valid scenario of ``algorithm`` with ``params`` (the rest its defaults): two workers, or
    more where the parameters need them (``backup = 2`` takes three), a short budget of updates."""
    d = algorithms.ALGORITHMS[algorithm]
    least = min(max(2, d.min_workers), d.max_workers or 2)
    for workers in range(least, (d.max_workers or least + 3) + 1):
        try:
            return loader.from_dict({
                "name": f"refusal-{algorithm}", "seed": 11, "workers": {"count": workers, "placement": "os"},
                "workload": {"model": "least_squares", "batch_size": 1},  # the constant workload where it runs
                "algorithm": {"name": algorithm, **params},
                "stop": {"max_updates": 10, "max_time_s": 30.0, "eval_every_updates": 5},
                "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3},
                           "read": {"dist": "deterministic", "mean_s": 1e-5},
                           "update": {"dist": "deterministic", "mean_s": 1e-5}},
                "cpu": {"pin": False, "join_timeout_s": 30.0}})
        except ScenarioError:
            if workers == (d.max_workers or least + 3):
                raise
    raise AssertionError("unreachable")


def other_value(algorithm: str, key: str) -> Any:
    """A valid value of the parameter other than its default: another of its ``allowed`` (a table's choice:
    another kind), else a number one step away (a probability halfway to 1, a bound instead of ``inf``)."""
    p = algorithms.ALGORITHMS[algorithm].param(key)
    if p.allowed:
        return next(v for v in p.allowed if v != p.default)
    if p.default == "inf":
        return 2
    if isinstance(p.default, int) and not isinstance(p.default, bool):
        return p.default + 1
    if isinstance(p.default, float):
        return (p.default + 1.0) / 2.0
    raise AssertionError(f"no other value known for {algorithm}.{key} = {p.default!r}: extend other_value")


def _reader(frame: FrameType | None) -> str | None:
    """Where a parameter read comes from: the first caller outside the scenario's own models, as
    ``path:function``; None where the read is the scenario's loading or validation (pydantic, the loader)."""
    where = None
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if "/pydantic/" in name or name.endswith("simasgd/spec/loader.py"):
            return None
        if where is None and not name.endswith("simasgd/spec/scenario.py"):
            path = Path(name)
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{frame.f_code.co_name}"
        frame = frame.f_back
    return where


@pytest.fixture
def reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], dict[str, set[str]]]:
    """Records every read of an algorithm parameter from any ``AlgorithmConfig`` from now on, in this
    process and in the processes it forks (they append to one file): returns a function giving
    ``{key: {reader, ...}}`` so far."""
    log = tmp_path / "parameter-reads.tsv"
    log.touch()
    original = AlgorithmConfig.__getattribute__

    def recording(self: AlgorithmConfig, name: str) -> Any:
        if name in PARAM_NAMES:
            where = _reader(sys._getframe(1))
            if where is not None:
                with log.open("a", encoding="utf-8") as f:
                    f.write(f"{name}\t{where}\n")
        return original(self, name)

    monkeypatch.setattr(AlgorithmConfig, "__getattribute__", recording)

    def so_far() -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for line in log.read_text(encoding="utf-8").splitlines():
            key, where = line.split("\t", 1)
            out.setdefault(key, set()).add(where)
        return out

    return so_far


@pytest.fixture
def constant_workload(jitter_kernel: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every backend builds the constant-gradient workload (conftest's ``outcome`` does the same)."""
    wl = ConstWorkload(dim=16, kernel=jitter_kernel, loss_kernel=first_loss)
    monkeypatch.setattr("simasgd.numerics.workloads.build_workload", lambda cfg, seed, base_dir=None: wl)
    yield


def _run(backend: str, sc: Any) -> Any:
    result = backends.load(backend).run_once(sc, 0)
    summary = result.runs[0]
    assert summary.updates > 0 and not summary.crashed, f"{backend} ran {sc.algorithm}: {summary}"
    return result


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

    monkeypatch.setattr("simasgd.numerics.workloads.build_workload", built)
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
@pytest.mark.slow
def test_a_value_the_backend_runs_runs(name: str, key: str, backend_name: str, value: Any,
                                       constant_workload: None) -> None:
    """A value ``VALUES`` lists passes the backend's check and the backend runs it to updates."""
    _run(backend_name, scenario(name, {key: value}))


@pytest.mark.parametrize(("name", "key", "backend_name"), [pytest.param(*t, id="-".join(t)) for t in MOOT])
@pytest.mark.slow
def test_a_moot_parameter_runs_with_any_value(name: str, key: str, backend_name: str, constant_workload: None) -> None:
    _run(backend_name, scenario(name, {key: other_value(name, key)}))


@pytest.mark.parametrize(("name", "key", "backend_name"), [pytest.param(*t, id="-".join(t)) for t in READ])
@pytest.mark.slow
def test_a_parameter_the_backend_does_not_restrict_is_read_by_its_run(
        name: str, key: str, backend_name: str, constant_workload: None,
        reads: Callable[[], dict[str, set[str]]]) -> None:
    """Not in ``VALUES`` nor ``MOOT``: every value runs, so the run reads the key (module docstring)."""
    value = other_value(name, key)
    sc = scenario(name, {key: value})
    assert reads() == {}, "the scenario's loading is not the backend's read"
    _run(backend_name, sc)
    seen = reads()
    assert key in seen, (
        f"backend {backend_name!r} ran {name!r} with algorithm.{key} = {value!r} without reading {key!r} (it read: "
        f"{', '.join(sorted(seen)) or 'no parameter'}). Run it as defined, or declare the values it runs in the "
        f"backend's VALUES (refused by algorithms.require_values) or, where the parameter chooses nothing there, "
        f"in MOOT")


def test_the_recorder_sees_a_read_by_running_code_and_not_by_loading(
        reads: Callable[[], dict[str, set[str]]]) -> None:
    """The check above can fail: loading a scenario (its validators read the keys it sets) records nothing,
    a run that never asks for a key leaves it out, and one that asks, here or in a forked process, is seen."""
    import multiprocessing

    sc = scenario("easgd", {"tau": 3, "alpha": 0.5})
    assert reads() == {}
    assert sc.algorithm.name == "easgd" and reads() == {}  # not a parameter
    assert sc.algorithm.param("tau") == 3
    assert reads() == {"tau": {f"{Path(__file__).relative_to(ROOT)}:"
                               "test_the_recorder_sees_a_read_by_running_code_and_not_by_loading"}}
    child = multiprocessing.get_context("fork").Process(target=_read_alpha, args=(sc,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert set(reads()) == {"tau", "alpha"} and any(w.endswith(":_read_alpha") for w in reads()["alpha"])


def _read_alpha(sc: Any) -> None:
    assert math.isclose(sc.algorithm.alpha, 0.5)


def test_a_table_parameter_is_refused_by_its_choice() -> None:
    """``backoff`` is a table; a backend restricts its ``kind`` (the other fields tune that kind)."""
    sc = scenario("mutex", {"backoff": {"kind": "exponential", "initial_s": 1e-6, "max_s": 1e-3}})
    only = {"mutex": {"backoff": ("none",)}}
    with pytest.raises(UnsupportedAlgorithm, match=r"^backend 'x': algorithm\.backoff\.kind = 'exponential' is not "
                                                   r"implemented for 'mutex'; allowed: none \(no retries\)$"):
        algorithms.require_values("x", sc.algorithm, only, {"backoff": "no retries"})
    algorithms.require_values("x", scenario("mutex", {}).algorithm, only, "no retries")  # the default: none
