"""Racing unlocked writers (simasgd/sim/racing.py): convoys and the executor's bookkeeping between cycles.

Oracle: two identical HOGWILD! workers with deterministic times stay in one convoy for the whole run.
Each round the follower ends one line's hand-off h after the leader, and where the bookkeeping between a
bump and the next read of the version (γ) outlasts h, the leader's next read already counts the
follower's update: one update of each round has τ = 0 and the other τ = 1, so τ̄ = 1/2 exactly (an even
budget). Without convoys each ends on its own time, and τ = 0 only after the rounds whose ends happen to
fall closer than γ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from two_core_profile import two_core_lines

from simasgd import loader, machine

H_NS = 40.0  # the profile's core-to-core hand-off
BOOKS_S = 1e-7  # the executor's bookkeeping: longer than the hand-off
RACE = [30.0, 20.0, 10.0]  # GB/s: two cores updating one buffer at once, slower than the update alone
# a leader writes lines the follower's cache holds too (it read them since): slower than the follower's
# update of lines the leader wrote, which so catches up with it
HELD_WRITE = [40.0, 30.0, 15.0]
# every read at the rate of one's own lines: the leader's and the follower's reads take alike times, so the
# follower begins its next update one hand-off behind again


def _profile(tmp_path: Path, books: float | None = BOOKS_S) -> Path:
    lines = [*two_core_lines(HELD_WRITE, RACE), "[c2c]", f"latency_ns = {H_NS}", ""]
    if books is not None:
        lines += ["[executor]", f"bookkeeping_s = {books!r}", ""]
    path = tmp_path / "this.toml"
    path.write_text("\n".join(lines))
    return path


def _hogwild(max_updates: int = 400, gradient: dict | None = None, sweep: str = "up", **switches):
    """Both writers sweep up by default here: a convoy is one writer following another the same way."""
    return loader.from_dict({
        "name": "r", "seed": 5, "workers": {"count": 2, "placement": "uma"}, "machine": {"preset": "this"},
        "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8, "features": 4000},
        "timing": {"gradient": gradient or {"dist": "deterministic", "mean_s": 1e-4}},
        "algorithm": {"name": "hogwild", "sweep": sweep}, "stop": {"max_updates": max_updates, "max_time_s": 10},
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


@pytest.mark.parametrize("convoys", [True, False])
@pytest.mark.slow
def test_the_leader_reads_the_followers_update_when_it_lands_within_the_bookkeeping(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, convoys: bool) -> None:
    """Two identical writers, worker 1 a stagger behind, meet every round. With convoys the follower ends
    one hand-off behind the leader each round; without, each ends on its own time (60-160 ns apart here,
    never a hand-off). Every update has τ = 0 or 1, and τ = 0 exactly for the first update and for the
    leader's update after each round whose two ends were less than γ apart: its read already counted the
    follower's. With convoys that is every round, so τ̄ = 1/2."""
    u = _run(tmp_path, monkeypatch, _hogwild(write_convoys=convoys, startup_stagger_s=STAGGER_S))
    assert len(u) == 400
    end, who, tau = u["t_write"].to_numpy(), u["worker"].to_numpy(), u["staleness"].to_numpy()
    apart = end[who == 1] - end[who == 0]  # the rounds' two ends: worker 1 always behind
    assert len(apart) == 200 and len(_pairs(u)) == 200  # worker 1 always began while worker 0 wrote
    h = H_NS * 1e-9
    assert np.isclose(apart, h, rtol=1e-6).all() == convoys and np.isclose(apart, h, rtol=1e-6).any() == convoys
    assert set(np.unique(tau)) <= {0, 1}
    assert (tau == 0).sum() == 1 + (apart[:-1] < BOOKS_S).sum()
    if convoys:
        assert tau.mean() == pytest.approx(0.5, abs=1e-12)


@pytest.mark.slow
def test_without_bookkeeping_the_leader_reads_before_the_follower_lands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """γ = 0 < h: the leader's next read comes before the follower's bump, so that update counts in its
    window again: τ = 1 for every update but the first; the convoy itself is unchanged. So without the
    profile's [executor] table, and with the torch executor's traits (its bookkeeping is the interpreter's,
    not priced)."""
    for books, traits in ((None, "cpu"), (BOOKS_S, "torch")):
        u = _run(tmp_path, monkeypatch, _hogwild(traits=traits, write_convoys=True), books)
        assert u["staleness"].mean() == pytest.approx((len(u) - 1) / len(u), abs=1e-12)
        gaps = _pairs(u)
        np.testing.assert_allclose(gaps, H_NS * 1e-9, rtol=1e-6)


@pytest.mark.slow
def test_bookkeeping_between_a_bump_and_the_next_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every next cycle of a worker begins exactly γ after its update's row (no loss snapshots here), with
    the cpu executor's traits; at once with the torch executor's, whose bookkeeping is not priced."""
    for traits, gap in (("cpu", BOOKS_S), ("torch", 0.0)):
        u = _run(tmp_path, monkeypatch, _hogwild(traits=traits))
        for _, w in u.groupby("worker"):
            w = w.sort_values("t_start")
            np.testing.assert_allclose(w["t_start"].to_numpy()[1:] - w["t_write"].to_numpy()[:-1], gap, atol=1e-15)


@pytest.mark.slow
def test_random_writers_follow_by_a_hand_off_or_end_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exponential gradients about as long as an update: the writers meet often, at any offset. An update
    that began while the other's was under way never ends less than h after it; some end exactly h after
    (a convoy), others later (the leader was done before the follower caught up: the follower's own time)."""
    u = _run(tmp_path, monkeypatch, _hogwild(3000, {"dist": "exponential", "mean_s": 3e-6}, write_convoys=True))
    gaps = _pairs(u)
    h = H_NS * 1e-9
    assert len(gaps) > 30
    assert gaps.min() >= h * (1 - 1e-6)
    together = np.isclose(gaps, h, rtol=1e-6)
    assert together.any() and (~together).any()


@pytest.mark.slow
def test_writers_sweeping_opposite_ways_cross_instead_of_following(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweep = "alternate"``: worker 1 writes from the top down. Begun a stagger behind worker 0, it meets
    it once, in the middle, and the two never end a hand-off apart (no convoy), with convoys on; with
    both sweeping up the same run is one convoy. Only the chunks where they cross race: the alternating
    pair's updates take less time than the same-way pair's."""
    runs = {sweep: _run(tmp_path, monkeypatch, _hogwild(sweep=sweep, write_convoys=True,
                                                        startup_stagger_s=STAGGER_S)) for sweep in ("up", "alternate")}
    h = H_NS * 1e-9
    for sweep, u in runs.items():
        end, who = u["t_write"].to_numpy(), u["worker"].to_numpy()
        apart = np.abs(end[who == 1] - end[who == 0])
        assert np.isclose(apart, h, rtol=1e-6).all() == (sweep == "up"), sweep
        assert np.isclose(apart, h, rtol=1e-6).any() == (sweep == "up"), sweep
    span = {s: float((u["t_write"] - u["t_grad_end"]).mean()) for s, u in runs.items()}
    assert span["alternate"] < span["up"]
