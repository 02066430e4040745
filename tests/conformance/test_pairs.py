"""Each (algorithm, backend) pair against its definition: rows, θ recurrence, stop without ε.

On the constant-gradient workload every gradient is G, so θ after the run's N
versions follows from the rows alone: version v applies the mean over its
applied rows of G / update_rule.divisor(τ_row) (``applies = "mean"``; the
Lopez master applies G once its one worker has reported: ``"latest_sum"``
with two workers; HOGWILD! with one writer is ``"mean"``), through
v ← m·v + ĝ, θ ← θ − lr·v. Without momentum and staleness-awareness every step
is lr·G = 2⁻¹⁶ and θ = 1 − N·2⁻¹⁶ exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simasgd import update_rule
from simasgd.workloads.constant import G, STEP


def _applied(o: Any) -> Any:
    u = o.result.updates
    return u[u["applied"]]


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
    assert run.updates_to_eps is None and not run.diverged and not run.crashed  # no ε target: the budget


def _recurrence(o: Any) -> float:
    """θ[0] after the run's versions, from its rows and the definition (module docstring)."""
    opt, applies = o.scenario.optimizer, o.definition.applies
    theta0 = 1.0
    applied = _applied(o)
    by_version = applied.groupby("version")["staleness"].apply(list).to_dict()
    theta, vel = theta0, 0.0
    for v in range(1, o.run.updates + 1):
        if applies == "latest_sum":
            g = G
        else:
            taus = by_version[v]
            g = sum(G / update_rule.divisor(t, opt.staleness_aware) for t in taus) / len(taus)
        if opt.momentum > 0:
            vel = opt.momentum * vel + g
            theta -= opt.lr * vel
        else:
            theta -= opt.lr * g
    return theta


def test_theta_follows_the_update_rule(algorithm: str, backend: str, variant: str, outcome: Any) -> None:
    o = outcome(algorithm, backend, variant)
    d, n = o.definition, o.scenario.workers.count
    assert d.applies == "mean" or (d.applies == "racy" and n == 1) or (d.applies == "latest_sum" and n == 2)
    if variant == "plain":
        assert o.theta == 1.0 - o.run.updates * STEP                 # exact: every update applied once
    else:
        assert np.isclose(o.theta, _recurrence(o), rtol=1e-12, atol=0), (o.theta, _recurrence(o))
