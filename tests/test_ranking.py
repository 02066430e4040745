"""The simulator's order of the algorithms against the machine's (``simasgd.corpus.ranking``), on constructed
groups whose answer is known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simasgd.corpus import ranking
from simasgd.corpus.ranking import Speeds
from simasgd.corpus.score import CellScore, MachineScore


def test_tau_is_one_for_the_same_order_and_minus_one_reversed() -> None:
    x = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert ranking.kendall_tau_b(x, [10 * v + 7 for v in x]) == pytest.approx(1.0)  # any increasing map
    assert ranking.kendall_tau_b(x, [-v for v in x]) == pytest.approx(-1.0)


@pytest.mark.parametrize("n", [2, 3, 5, 7])
def test_one_swap_of_neighbours_costs_four_over_n_n_minus_one(n: int) -> None:
    """One discordant pair of the n(n − 1)/2: τ = 1 − 2 / (n(n − 1)/2) = 1 − 4/(n(n − 1))."""
    x = list(range(n))
    y = list(range(n))
    y[1], y[2 % n] = y[2 % n], y[1]
    if n == 2:
        y = [1, 0]  # the only swap there is: every pair discordant
    want = 1 - 4 / (n * (n - 1))
    assert ranking.kendall_tau_b(x, y) == pytest.approx(want)


def test_ties_are_counted_as_tau_b_counts_them() -> None:
    """x = 1, 2, 3, 4 against y = 1, 1, 2, 3: of the 6 pairs one is tied in y and 5 concordant:
    τ-b = 5 / √(6 · 5); scipy's τ-b agrees on random samples with ties."""
    assert ranking.kendall_tau_b([1, 2, 3, 4], [1, 1, 2, 3]) == pytest.approx(5 / math.sqrt(30))
    rng = np.random.default_rng(2)
    for _ in range(20):
        a, b = rng.integers(0, 4, 9).astype(float), rng.integers(0, 4, 9).astype(float)
        want = stats.kendalltau(a, b, variant="b").statistic
        got = ranking.kendall_tau_b(a, b)
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want)


def test_never_reaching_eps_ranks_slowest_and_two_such_tie() -> None:
    # simulated 1 < 2 < ∞ = ∞, measured 1 < 2 < 3 < ∞: one pair tied in x only
    got = ranking.kendall_tau_b([1.0, 2.0, math.inf, math.inf], [1.0, 2.0, 3.0, math.inf])
    assert got == pytest.approx(5 / math.sqrt(5 * 6))
    assert math.isnan(ranking.kendall_tau_b([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # one side all tied: undefined
    assert math.isnan(ranking.kendall_tau_b([1.0], [1.0]))
    with pytest.raises(ValueError, match="paired"):
        ranking.kendall_tau_b([1.0, 2.0], [1.0])


def test_the_machine_agrees_only_when_the_fastest_beats_every_run_of_every_other() -> None:
    runs = {"a": [100.0, 104.0, 102.0], "b": [95.0, 99.0, 97.0], "c": [50.0, 60.0, 55.0]}
    assert ranking.machine_fastest(runs, higher_is_faster=True) == "a"
    overlap = dict(runs, b=[95.0, 100.5, 97.0])  # one of b's runs beats a's slowest
    assert ranking.machine_fastest(overlap, higher_is_faster=True) is None
    # times: lower is faster; a run that never reached ε (+∞) beats nothing
    times = {"a": [1.0, 1.2, 1.1], "b": [1.3, 1.5, math.inf]}
    assert ranking.machine_fastest(times, higher_is_faster=False) == "a"
    assert ranking.machine_fastest({"a": [1.0, math.inf], "b": [2.0, 2.1]}, higher_is_faster=False) is None
    assert ranking.machine_fastest({"a": [1.0]}, higher_is_faster=True) is None


def test_the_agreement_rule_is_an_exact_five_percent_test_at_three_runs() -> None:
    """Two algorithms that run alike (runs drawn from one distribution): one's three runs all beat the
    other's with probability 1/C(6, 3) = 1/20, either way 1/10 — the rate at which the rule names a fastest
    where there is none. Checked over 4000 such groups against the binomial's interval."""
    rng = np.random.default_rng(7)
    trials = 4000
    named = sum(ranking.machine_fastest({"a": rng.normal(100, 5, 3).tolist(), "b": rng.normal(100, 5, 3).tolist()},
                                        higher_is_faster=True) is not None for _ in range(trials))
    p = 2 / math.comb(6, 3)
    assert abs(named / trials - p) <= 3 * math.sqrt(p * (1 - p) / trials)
    # far apart (10 standard deviations), the rule names the faster one every time
    assert all(ranking.machine_fastest({"a": rng.normal(150, 5, 3).tolist(), "b": rng.normal(100, 5, 3).tolist()},
                                       higher_is_faster=True) == "a" for _ in range(200))


def test_the_simulators_fastest_is_strictly_ahead_or_none() -> None:
    assert ranking.simulated_fastest({"a": 3.0, "b": 2.0}, higher_is_faster=True) == "a"
    assert ranking.simulated_fastest({"a": 3.0, "b": 2.0}, higher_is_faster=False) == "b"
    assert ranking.simulated_fastest({"a": 3.0, "b": 3.0, "c": 1.0}, higher_is_faster=True) is None


def _cell(algorithm: str, sim_rate: float, rates: list[float], sim_time: float, times: list[float],
          threads: int = 4, batch: int = 16) -> Speeds:
    return Speeds(algorithm, threads, batch, {"updates_per_s": sim_rate, "time_to_eps": sim_time},
                  {"updates_per_s": rates, "time_to_eps": times})


def test_a_group_is_judged_on_both_metrics() -> None:
    """By updates/s the simulator has a and b swapped (τ = 1 − 4/(3 · 2) = 1/3) and the machine agrees that a
    is fastest: wrong. By time to ε the orders are the same (τ = 1) but the machine's runs overlap: the
    fastest is not judged."""
    cells = [_cell("a", 90.0, [100.0, 101.0, 102.0], 1.0, [1.0, 1.2, 1.1]),
             _cell("b", 95.0, [80.0, 82.0, 81.0], 2.0, [1.15, 2.0, 2.1]),
             _cell("c", 10.0, [10.0, 11.0, 12.0], 3.0, [3.0, 3.1, 3.2])]
    g = ranking.rank_group("m", cells)
    rate, time = g.orders["updates_per_s"], g.orders["time_to_eps"]
    assert rate.tau == pytest.approx(1 / 3) and rate.machine == "a" and rate.simulated == "b" and rate.right is False
    assert time.tau == pytest.approx(1.0) and time.machine is None and time.simulated == "a" and time.right is None
    assert time.measured_best == "a"
    # updates/s: every pair separated, the simulator right on a > c and b > c, wrong on a > b; one run of each
    # orders them as the other runs do. Time to ε: a and b overlap, both separated from c, both right.
    assert (rate.decided, rate.decided_right, rate.replica) == (3, 2, pytest.approx(1.0))
    assert (time.decided, time.decided_right) == (2, 2)
    row = ranking.group_rows([g])[0]
    assert row[:4] == ["m", "4", "16", "3"] and row[4:7] == ["+0.33 (+1.00)", "2/3", "a / b ✗"]
    assert row[8:] == ["2/2", "(a) / a"]
    with pytest.raises(ValueError, match="several groups"):
        ranking.rank_group("m", [*cells, _cell("d", 1.0, [1.0], 1.0, [1.0], threads=8)])


def test_groups_and_the_machines_summary() -> None:
    right = [_cell("a", 200.0, [200.0, 201.0, 202.0], 1.0, [1.0, 1.01, 1.02], threads=2),
             _cell("b", 100.0, [100.0, 101.0, 102.0], 2.0, [2.0, 2.01, 2.02], threads=2)]
    wrong = [_cell("a", 100.0, [200.0, 201.0, 202.0], 2.0, [1.0, 1.01, 1.02], threads=8),
             _cell("b", 200.0, [100.0, 101.0, 102.0], 1.0, [2.0, 2.01, 2.02], threads=8)]
    groups = ranking.rank("m", wrong + right)
    assert [(g.threads, g.batch) for g in groups] == [(2, 16), (8, 16)]
    s = ranking.summary(groups, "updates_per_s")
    assert (s.groups, s.tau_met, s.agreed, s.right) == (2, 1, 2, 1)
    assert s.tau_mean == pytest.approx(0.0) and s.tau_min == pytest.approx(-1.0) and not s.goal
    assert ranking.summary(groups[:1], "time_to_eps").goal
    rows = ranking.summary_rows({"m": groups})
    assert rows == [["m", "2", "+0.00 (-1.00); +1.00", "1/2, 2/2", "1/2", "1/2", "+0.00 (-1.00); +1.00", "1/2, 2/2",
                     "1/2", "1/2"]]


def test_speeds_of_a_cell_from_its_scenario_and_runs() -> None:
    scenario = {"algorithm": {"name": "leashed", "persistence": 0.0}, "workers": {"count": 4},
                "workload": {"batch_size": 64}}
    sp = ranking.speeds_of(scenario, {"updates_per_s": np.array([10.0, 20.0]), "time_to_eps": np.array([1.0, np.nan])},
                           {"updates_per_s": np.array([12.0, np.nan]), "time_to_eps": np.array([2.0, 3.0])})
    assert sp.algorithm == "leashed persistence=0" and (sp.threads, sp.batch) == (4, 64)
    assert sp.simulated == {"updates_per_s": 15.0, "time_to_eps": math.inf}  # a run never reached ε
    assert sp.measured == {"updates_per_s": [12.0, 0.0], "time_to_eps": [2.0, 3.0]}
    assert sp.to_json()["simulated"]["time_to_eps"] is None


def test_the_machine_score_carries_its_ranking() -> None:
    a = _cell("a", 200.0, [200.0, 201.0, 202.0], 1.0, [1.0, 1.01, 1.02])
    b = _cell("b", 100.0, [100.0, 101.0, 102.0], 2.0, [2.0, 2.01, 2.02])
    m = MachineScore("m", [CellScore("x", speeds=a), CellScore("y", speeds=b), CellScore("z", error="boom")])
    doc = m.to_json()["ranking"]
    assert len(doc["groups"]) == 1 and doc["groups"][0]["updates_per_s"]["fastest_right"] is True
    assert doc["summary"]["time_to_eps"] == {"groups": 1, "tau_mean": 1.0, "tau_min": 1.0, "tau_met": 1,
                                             "agreed": 1, "fastest_right": 1, "goal": True,
                                             "replica_tau_mean": 1.0, "replica_tau_met": 1, "decided_pairs": 1,
                                             "decided_right": 1}


def test_decided_pairs_are_those_the_runs_separate_either_way_round() -> None:
    runs = {"a": [10.0, 11.0], "b": [9.0, 9.5], "c": [10.5, 12.0]}  # a and c overlap; both beat b
    assert ranking.decided_pairs(runs, higher_is_faster=True) == [("a", "b"), ("c", "b")]
    assert ranking.decided_pairs(runs, higher_is_faster=False) == [("b", "a"), ("b", "c")]
    assert ranking.decided_pairs({"a": [1.0, math.inf], "b": [2.0, 2.5]}, higher_is_faster=False) == []


def test_replica_tau_in_closed_form() -> None:
    """A = 1, 2, 4 and B = 3, 5, 6: the others' means of A (3, 2.5, 1.5) all lie below B's (5.5, 4.5, 4), and
    one run of A lies below one of B in 8 of the 9 choices (not 4 against 3): τ = (8 − 1) / 9."""
    assert ranking.replica_tau({"a": [1.0, 2.0, 4.0], "b": [3.0, 5.0, 6.0]}) == pytest.approx(7 / 9)
    assert ranking.replica_tau({"a": [10.0, 11.0], "b": [1.0, 2.0], "c": [5.0, 6.0]}) == pytest.approx(1.0)
    assert math.isnan(ranking.replica_tau({"a": [1.0], "b": [2.0, 3.0]}))  # a single run has no others
    assert math.isnan(ranking.replica_tau({"a": [1.0, 2.0]}))


def test_replica_tau_of_algorithms_that_run_alike_is_zero_in_expectation() -> None:
    """Algorithms whose runs come from one distribution: one run and the others' mean are independent, so τ
    is 0 in expectation; over 300 such groups (5 algorithms, 3 runs) the mean lies within 3 standard errors."""
    rng = np.random.default_rng(5)
    taus = np.array([ranking.replica_tau({k: rng.normal(100, 5, 3).tolist() for k in "abcde"}) for _ in range(300)])
    assert abs(taus.mean()) <= 3 * taus.std(ddof=1) / math.sqrt(len(taus))


def test_replica_tau_past_the_limit_samples_choices_with_a_fixed_seed() -> None:
    """7 algorithms of 4 runs: 16,384 choices, 4,096 drawn. The draw is the same each time, and within three
    standard errors of the exhaustive mean (|τ| ≤ 1, so the error is at most 1/√4096 a standard error)."""
    rng = np.random.default_rng(9)
    runs = {k: (rng.normal(100, 5, 4) + 3 * i).tolist() for i, k in enumerate("abcdefg")}
    sampled = ranking.replica_tau(runs)
    assert sampled == ranking.replica_tau(runs)
    assert abs(sampled - ranking.replica_tau(runs, limit=20_000)) <= 3 / math.sqrt(4096)


def test_tau_b_by_rows_is_scipys_tau_b_of_each_row() -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(0, 4, (50, 6)).astype(float)
    y = rng.integers(0, 4, (50, 6)).astype(float)
    x[0, :2] = y[1, 3:] = math.inf  # never reached ε: ties among themselves
    x[2] = 1.0  # a row all tied: undefined
    got = ranking._tau_b_rows(x, y)
    want = [stats.kendalltau(a, b, variant="b").statistic for a, b in zip(x, y, strict=True)]  # one row at a time
    assert got == pytest.approx(want, nan_ok=True) and math.isnan(got[2])
