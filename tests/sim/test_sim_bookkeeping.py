"""Unlocked writers and the executor's bookkeeping between cycles.

Oracle: two identical HOGWILD! workers with deterministic times, worker 1 a stagger behind, meet every
round and each ends on its own time, worker 1 behind. Where the bookkeeping between a bump and the next
read of the version (γ) outlasts the gap between the two ends, the leader's next read already counts the
follower's update (τ = 0 for the leader's next update); without bookkeeping it never does (τ = 1 for every
update but the first).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from two_core_profile import two_core_lines

from simasgd.machines import machine
from simasgd.spec import loader

BOOKS_S = 1e-7  # the executor's bookkeeping: longer than the gap between the two writers' ends
# a leader writes lines the follower's cache holds too (it read them since) as fast as the follower writes
# the lines the leader wrote ([coherence] update_gbs): the two updates take as long, the follower stays behind
HELD_WRITE = [120.0, 90.0, 40.0]


def _profile(tmp_path: Path, books: float | None = BOOKS_S) -> Path:
    lines = two_core_lines(HELD_WRITE)
    if books is not None:
        lines += ["[executor]", f"bookkeeping_s = {books!r}", ""]
    path = tmp_path / "this.toml"
    path.write_text("\n".join(lines))
    return path


def _hogwild(max_updates: int = 400, gradient: dict | None = None, sweep: str = "up", **switches):
    """Both writers sweep up by default here: one writer following another the same way."""
    return loader.from_dict({
        "name": "r", "seed": 5, "workers": {"count": 2, "placement": "uma"}, "machine": {"preset": "this"},
        "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8, "features": 4000},
        "timing": {"gradient": gradient or {"dist": "deterministic", "mean_s": 1e-4}},
        "algorithm": {"name": "hogwild", "sweep": sweep}, "stop": {"max_updates": max_updates, "max_time_s": 10,
                                                             "eval_every_updates": 10**9},
        "sim": {"numerics": True, "read_chunks": 16, **switches}})  # no snapshot's time in the profile: none


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sc, books: float | None = BOOKS_S):
    from simasgd.sim import backend

    monkeypatch.setenv(machine.PROFILE_ENV, str(_profile(tmp_path, books)))
    return backend.run_once(sc, 0).updates.sort_values("t_write").reset_index(drop=True)


def _pairs(u) -> np.ndarray:
    """For every update that began while the other worker's was under way: its end minus that one's."""
    start, end, who = u["t_grad_end"].to_numpy(), u["t_write"].to_numpy(), u["worker"].to_numpy()
    gaps: list[float] = []
    for i in range(len(u)):
        under = (who != who[i]) & (start < start[i]) & (end > start[i])
        gaps += list(end[i] - end[under])
    return np.array(gaps)


STAGGER_S = 1e-8  # worker 1 starts this much later: inside the other's first chunk


@pytest.mark.slow
def test_the_leader_reads_the_followers_update_when_it_lands_within_the_bookkeeping(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two identical writers, worker 1 a stagger behind, meet every round and each ends on its own time,
    worker 1 behind. Every update has τ = 0 or 1, and τ = 0 exactly for the first update and for the leader's update after
    each round whose two ends were less than γ apart: its read already counted the follower's."""
    u = _run(tmp_path, monkeypatch, _hogwild(startup_stagger_s=STAGGER_S))
    assert len(u) == 400
    end, who, tau = u["t_write"].to_numpy(), u["worker"].to_numpy(), u["staleness"].to_numpy()
    apart = end[who == 1] - end[who == 0]  # the rounds' two ends
    assert len(apart) == 200 and len(_pairs(u)) == 200  # worker 1 always began while worker 0 wrote
    assert (apart > 0).all()
    assert set(np.unique(tau)) <= {0, 1}
    assert (tau == 0).sum() == 1 + (apart[:-1] < BOOKS_S).sum()


@pytest.mark.slow
def test_without_bookkeeping_the_leader_reads_before_the_follower_lands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """γ = 0: the leader's next read comes before the follower's bump, so that update counts in its window
    again: τ = 1 for every update but the first. So without the profile's [executor] table, and with the
    torch executor's traits (its bookkeeping is the interpreter's, not priced)."""
    for books, traits in ((None, "cpu"), (BOOKS_S, "torch")):
        u = _run(tmp_path, monkeypatch, _hogwild(traits=traits, startup_stagger_s=STAGGER_S), books)
        assert (_pairs(u) > 0).all()
        assert u["staleness"].mean() == pytest.approx((len(u) - 1) / len(u), abs=1e-12)


@pytest.mark.slow
def test_bookkeeping_between_a_bump_and_the_next_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every next cycle of a worker begins exactly γ after its update's row (no loss snapshots here), with
    the cpu executor's traits; at once with the torch executor's, whose bookkeeping is not priced."""
    for traits, gap in (("cpu", BOOKS_S), ("torch", 0.0)):
        u = _run(tmp_path, monkeypatch, _hogwild(traits=traits))
        for _, w in u.groupby("worker"):
            w = w.sort_values("t_start")
            np.testing.assert_allclose(w["t_start"].to_numpy()[1:] - w["t_write"].to_numpy()[:-1], gap, atol=1e-15)
