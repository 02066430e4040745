"""Backup workers in the simulator: every round applies N gradients and discards exactly b; the round
time is the N-th order statistic of N + b gradient times (k-sync's theory, docs/theory.md); it reaches ε."""

from __future__ import annotations

import numpy as np
import pytest

from simasgd.runs import backends
from simasgd.spec import loader


def _run(workers: int, backup: int, updates: int = 2000, **more: object) -> object:
    sc = loader.from_dict({"name": "backup", "seed": 5, "workers": {"count": workers, **more},
                           # enough cores (no time-slicing), free reads, writes and hand-offs
                           "machine": {"preset": "xeon-e5-2687w-v2", "local_latency_ns": 0, "remote_latency_ns": 0},
                           "algorithm": {"name": "backup", "backup": backup}, "stop": {"max_updates": updates},
                           "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3},
                                      "read": {"dist": "deterministic", "mean_s": 0.0},
                                      "update": {"dist": "deterministic", "mean_s": 0.0}},
                           "sim": {"numerics": False}})
    return backends.load("sim").run_once(sc, 0)


@pytest.mark.parametrize("workers,backup", [(8, 1), (8, 3), (3, 2)])
def test_every_round_discards_exactly_b_gradients(workers: int, backup: int) -> None:
    r = _run(workers, backup, stragglers={"count": 1, "slowdown": 4.0})
    u, n = r.updates, r.runs[0].updates
    per = u.groupby("version")
    applied = per["applied"].sum().reindex(range(1, n + 1), fill_value=0)
    dropped = per["applied"].apply(lambda a: (~a).sum()).reindex(range(1, n + 1), fill_value=0)
    assert (applied == workers - backup).all() and (dropped == backup).all()
    assert (per["worker"].nunique() == workers).all()              # each worker once a round: used or discarded
    assert (u.loc[~u["applied"], "staleness"] == 0).all()          # a discarded gradient was on the round's θ
    straggler = u[u["worker"] == 0]
    assert (~straggler["applied"]).mean() > backup / workers       # the 4x straggler is discarded more than its share


def test_round_time_is_the_nth_of_n_plus_b_exponentials() -> None:
    # E[round] = (H_{N+b} − H_b)/μ with free reads and updates; the sample's 99.9% interval must hold it.
    workers, backup, mu = 8, 2, 1e3
    r = _run(workers, backup, updates=4000)
    t = r.updates.groupby("version")["t_write"].max().sort_index().to_numpy()
    rounds = np.diff(t)[100:]                                        # warm-up discarded
    harmonic = lambda k: sum(1.0 / i for i in range(1, k + 1))
    expected = (harmonic(workers) - harmonic(backup)) / mu
    half = 3.3 * rounds.std(ddof=1) / np.sqrt(len(rounds))
    assert abs(rounds.mean() - expected) < half, (rounds.mean(), expected, half)


@pytest.mark.parametrize("onebit", [False, True])
def test_backup_reaches_epsilon_on_least_squares(onebit: bool) -> None:
    sc = loader.from_dict({"name": "backup-ls", "seed": 1, "workers": {"count": 4},
                           "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 16},
                           "algorithm": {"name": "backup", "backup": 1, "onebit": onebit}, "optimizer": {"lr": 0.01},
                           "stop": {"epsilon": 0.1, "max_updates": 20000},
                           "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3}}})
    r = backends.load("sim").run_once(sc, 0)
    run = r.runs[0]
    assert run.updates_to_eps is not None and run.final_loss <= 0.1 * run.initial_loss
    if onebit:  # the N sent gradients were quantised: θ took another path than without
        plain = backends.load("sim").run_once(sc.model_copy(update={"algorithm": sc.algorithm.model_copy(
            update={"onebit": False})}), 0)
        assert not np.allclose(r.curve["loss"].to_numpy()[:5], plain.curve["loss"].to_numpy()[:5])
