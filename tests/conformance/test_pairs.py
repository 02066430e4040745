"""Each (algorithm, backend) pair against its definition: rows, θ recurrence, stop without ε.

On the constant-gradient workload every gradient is G, so θ after the run's N
versions follows from the rows alone: version v applies the mean over its
applied rows of G / update_rule.divisor(τ_row) (``applies = "mean"``;
HOGWILD! with one writer is ``"mean"``), through v ← m·v + ĝ, θ ← θ − lr·v.
Without momentum and staleness-awareness every step is lr·G = 2⁻¹⁶ and
θ = 1 − N·2⁻¹⁶ exactly. ``"latest_sum"`` (Lopez, one master and one worker):
the master steps at its own pace with what g holds, G or 0 (element 0 is read
whole), so θ = 1 − k·2⁻¹⁶ for an integer k, and θ lies between the recurrences
over the steps that certainly held a gradient and those that may have
(:func:`_lopez_steps`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simasgd.numerics import update_rule
from simasgd.numerics.workloads.constant import STEP, G
from simasgd.runs import backends
from simasgd.spec.algorithms import UnsupportedAlgorithm


def _applied(o: Any) -> Any:
    u = o.result.updates
    return u[u["applied"]]


@pytest.mark.slow
def test_rows_follow_the_definition(algorithm: str, backend: str, outcome: Any) -> None:
    o = outcome(algorithm, backend)
    u, run, rows = o.result.updates, o.run, o.definition.rows
    applied = _applied(o)
    n = run.updates
    budget = o.scenario.stop.max_updates
    assert n == budget or run.extra.get("stop_reason") == "record_buffer_full", (n, run.extra)
    assert run.attempts == len(u)                                     # attempts = rows
    assert (applied["staleness"] >= 0).all()                          # version − 1 − read_version
    assert (applied["version"].between(1, n)).all()                   # only versions the run made
    if not rows.drops:
        assert u["applied"].all()
    dropped = u[~u["applied"]]
    assert (dropped["version"] >= dropped["read_version"] + 1).all()  # the version it would have had
    per_version = applied.groupby("version")["worker"]
    if rows.per == "update":
        np.testing.assert_array_equal(np.sort(applied["version"].to_numpy()), np.arange(1, n + 1))
    expected = rows.per_version(o.scenario.algorithm, o.scenario.workers.count)
    if expected is not None:
        counts = per_version.size().reindex(range(1, n + 1), fill_value=0)
        assert (counts == expected).all(), counts.value_counts().to_dict()
        assert (per_version.nunique() == expected).all()             # one gradient per worker in an update
    assert run.updates_to_eps is None and not run.not_reached and not run.crashed  # no ε target: the budget


def _lopez_steps(o: Any) -> tuple[np.ndarray, np.ndarray]:
    """Master steps 1..N (index s − 1) that certainly read the one worker's gradient in g, and those that
    may have (algorithms.py, lopez). Gradient j (rows in the worker's order, dropped ones too) went in
    after the worker's copy of w at rv_j (steps ≤ rv_j were done) and left after its next copy at
    rv_{j+1}, before its next add; the first step to begin reading g after its add is v_j. So steps
    v_j..rv_{j+1} certainly held it, and none outside rv_j + 1 .. v_{j+1} − 1 (the last: .. N) can have."""
    n = o.run.updates
    u = o.result.updates.sort_values("t_read", kind="stable")
    v, rv = u["version"].to_numpy(), u["read_version"].to_numpy()
    certain, possible = np.zeros(n, bool), np.zeros(n, bool)
    for j in range(len(u)):
        last = j + 1 == len(u)
        certain[v[j] - 1:(0 if last else min(rv[j + 1], n))] = True
        possible[rv[j]:(n if last else v[j + 1] - 1)] = True
    return certain, possible | certain


def _recurrence(o: Any, held: np.ndarray | None = None) -> float:
    """θ[0] after the run's versions, from its rows and the definition (module docstring); for
    ``latest_sum``, with G at the steps ``held`` marks and 0 at the others."""
    opt, applies = o.scenario.optimizer, o.definition.applies
    theta0 = 1.0
    applied = _applied(o)
    by_version = applied.groupby("version")["staleness"].apply(list).to_dict()
    theta, vel = theta0, 0.0
    for v in range(1, o.run.updates + 1):
        if applies == "latest_sum":
            g = G if held is not None and held[v - 1] else 0.0
        else:
            taus = by_version[v]
            g = sum(G / update_rule.divisor(t, opt.staleness_aware) for t in taus) / len(taus)
        if opt.momentum > 0:
            vel = opt.momentum * vel + g
            theta -= opt.lr * vel
        else:
            theta -= opt.lr * g
    return theta


def _elastic(o: Any) -> float:
    """The centre x̃[0] after the run's exchanges, replayed in version order (``applies = "elastic"``,
    algorithms.py): worker j's exchange d = α(x_j − x̃), x_j −= d, x̃ += d, then its `tau` local steps
    with G (its own velocity, staleness 0)."""
    a, opt = o.scenario.algorithm, o.scenario.optimizer
    alpha, tau = a.param("alpha"), a.param("tau")
    centre, x, vel = 1.0, {}, {}
    for w in _applied(o).sort_values("version")["worker"]:
        xj = x.get(w, 1.0)
        d = alpha * (xj - centre)
        xj -= d
        centre += d
        for _ in range(tau):
            if opt.momentum > 0:
                vel[w] = opt.momentum * vel.get(w, 0.0) + G
                xj -= opt.lr * vel[w]
            else:
                xj -= opt.lr * G
        x[w] = xj
    return centre


def _own(o: Any, steps: int) -> float:
    """θ[0] of one worker's own state after ``steps`` update-rule steps with G (staleness 0)."""
    opt = o.scenario.optimizer
    theta, vel = 1.0, 0.0
    for _ in range(steps):
        if opt.momentum > 0:
            vel = opt.momentum * vel + G
            theta -= opt.lr * vel
        else:
            theta -= opt.lr * G
    return theta


def _own_states(o: Any) -> bool:
    """``average_end`` and ``peer_merge`` (algorithms.py): every worker steps its own state.
    SimuParallel's θ is the mean of the workers' own recurrences, exactly. Keuper's is node 0's: each
    merge adds ½(θ_0 − θ_j) > 0 to a step's ĝ (a state is taken only when the local step −lr·ĝ moves
    towards it, i.e. θ_j < θ_0), so θ_0 is at most its own recurrence; without momentum no merge takes
    a node below the lowest state, which sinks by lr·G a step: θ_0 ≥ 1 − N·lr·G."""
    d, applied = o.definition, _applied(o)
    counts = applied.groupby("worker").size().reindex(range(o.scenario.workers.count), fill_value=0)
    if d.applies == "average_end":
        mean = float(np.mean([_own(o, int(c)) for c in counts]))
        assert np.isclose(o.theta, mean, rtol=1e-12, atol=0), (o.theta, mean)
        return True
    if d.applies == "peer_merge":
        assert o.theta <= _own(o, int(counts[0])) + 1e-12, (o.theta, _own(o, int(counts[0])))
        assert o.theta < 1.0 or counts[0] == 0                        # node 0 stepped (on 2 CPUs it may not)
        if o.scenario.optimizer.momentum == 0:
            assert o.theta >= 1.0 - o.run.updates * STEP - 1e-12, (o.theta, o.run.updates)
        return True
    return False


@pytest.mark.slow
def test_theta_follows_the_update_rule(algorithm: str, backend: str, variant: str, outcome: Any) -> None:
    o = outcome(algorithm, backend, variant)
    d, n = o.definition, o.scenario.workers.count
    if _own_states(o):
        return
    if d.applies in ("elastic", "elastic_racy"):  # θ is the centre; one writer where writes race
        assert d.applies == "elastic" or n == 1
        assert np.isclose(o.theta, _elastic(o), rtol=1e-12, atol=0), (o.theta, _elastic(o))
        assert o.theta < 1.0                                          # the workers' steps reached the centre
        return
    assert d.applies == "mean" or (d.applies == "racy" and n == 1) or (d.applies == "latest_sum" and n == 2)
    if d.applies == "latest_sum":
        certain, possible = _lopez_steps(o)
        if variant == "plain":  # every step applied G or 0, exactly
            k = (1.0 - o.theta) / STEP
            assert k == int(k) and certain.sum() <= k <= possible.sum(), (k, certain.sum(), possible.sum())
        least, most = _recurrence(o, certain), _recurrence(o, possible)  # G ≥ 0: more steps, lower θ
        assert most - 1e-12 <= o.theta <= least + 1e-12, (most, o.theta, least)
    elif variant == "plain":
        assert o.theta == 1.0 - o.run.updates * STEP                 # exact: every update applied once
    else:
        assert np.isclose(o.theta, _recurrence(o), rtol=1e-12, atol=0), (o.theta, _recurrence(o))


LOPEZ_BACKENDS = [b for b, present in backends.available().items()
                  if present and "lopez" in getattr(backends.load(b), "ALGORITHMS", ())]


@pytest.mark.parametrize("params", [(("subtract", "with_add"),), (("model_read", "consistent"),)],
                         ids=["with_add", "consistent"])
@pytest.mark.parametrize("lopez_backend", LOPEZ_BACKENDS)
@pytest.mark.slow
def test_lopez_options_follow_the_definition(lopez_backend: str, params: Any, outcome: Any) -> None:
    """The named departures from the paper (algorithms.py, lopez) keep θ within the same bounds. With
    ``subtract = "with_add"`` a pass adds G − G = 0 after the first, so g holds G from the first add on:
    every step from the first row's version on applied G, and none up to its read_version."""
    o = outcome("lopez", lopez_backend, "plain", params)
    certain, possible = _lopez_steps(o)
    k = (1.0 - o.theta) / STEP
    assert k == int(k) and certain.sum() <= k <= possible.sum(), (k, certain.sum(), possible.sum())
    u, n = o.result.updates.sort_values("t_read", kind="stable"), o.run.updates
    if params[0][1] == "with_add" and len(u):
        first_v, first_rv = int(u["version"].iloc[0]), int(u["read_version"].iloc[0])
        assert n - first_v + 1 <= k <= n - first_rv, (k, first_v, first_rv, n)


HOGWILD_BACKENDS = [b for b, present in backends.available().items()
                    if present and "hogwild" in getattr(backends.load(b), "ALGORITHMS", ()) and
                    not hasattr(backends.load(b), "RUNS_AS")]


@pytest.mark.parametrize("local_copy", [True, False], ids=["local_copy", "live"])
@pytest.mark.parametrize("hogwild_backend", HOGWILD_BACKENDS)
@pytest.mark.slow
def test_hogwild_reads_as_local_copy_says_or_refuses_it_by_name(hogwild_backend: str, local_copy: bool,
                                                                 outcome: Any) -> None:
    """Each value of ``local_copy`` runs as it says (θ exact; on a backend that measures, a read phase
    exactly when it copies), or the backend refuses it naming the key and the values it runs (its
    ``VALUES``): never run quietly as the other value, which would label the rows with a read never made."""
    mod = backends.load(hogwild_backend)
    only = getattr(mod, "VALUES", {}).get("hogwild", {}).get("local_copy")
    params = (("local_copy", local_copy),)
    if only is not None and local_copy not in only:
        given, allowed = str(local_copy).lower(), ", ".join(str(v).lower() for v in only)
        with pytest.raises(UnsupportedAlgorithm, match=rf"algorithm\.local_copy = {given} .*allowed: {allowed}"):
            outcome("hogwild", hogwild_backend, "plain", params)
        return
    o = outcome("hogwild", hogwild_backend, "plain", params)
    assert o.theta == 1.0 - o.run.updates * STEP                     # one writer: every update applied once
    if backends.measures_host(hogwild_backend):
        u = o.result.updates
        read = u["t_read"] - u["t_start"]
        assert (read > 0).any() if local_copy else (read == 0).all(), read.describe()
