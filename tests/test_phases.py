"""Where a cycle's time goes: phase durations from updates frames built with known phases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simasgd.evaluation import phases
from simasgd.runs.results import updates_frame

US = 1e-6  # the fixtures `cycles` (an updates frame with given phase durations) and `as_result`: tests/conftest.py


def test_phase_means_are_the_constructed_durations(cycles):
    stats = phases.phase_stats(phases.phase_frame(cycles())).set_index("phase")
    want = {"read": 10, "gradient": 200, "update": 5, "between": 3, "cycle": 218}
    assert list(stats.index) == list(phases.ALL_PHASES)
    for p, us in want.items():
        for s in ("mean", "median", "p90", "p99"):
            assert stats.loc[p, s] == pytest.approx(us * US, rel=1e-9), (p, s)
    # 2 runs × 2 workers × 200 attempts, the first 10 of each discarded; a worker's last attempt has no next start
    assert stats.loc["read", "n"] == 4 * 190 and stats.loc["between", "n"] == stats.loc["cycle", "n"] == 4 * 189


def test_random_phases_match_their_closed_form_within_the_standard_error(cycles):
    rng = np.random.default_rng(1)
    exp = lambda mean: (lambda g, n: g.exponential(mean, n))
    uni = lambda lo, hi: (lambda g, n: g.uniform(lo, hi, n))
    u = cycles(uni(5 * US, 15 * US), exp(200 * US), exp(5 * US), uni(1 * US, 5 * US), n=5000, rng=rng)
    f = phases.phase_frame(u)
    stats = phases.phase_stats(f).set_index("phase")
    truth = {"read": 10 * US, "gradient": 200 * US, "update": 5 * US, "between": 3 * US}
    truth["cycle"] = sum(truth.values())
    for p, mean in truth.items():
        x = f.loc[f["phase"] == p, "seconds"]
        assert abs(stats.loc[p, "mean"] - mean) < 4 * x.std() / math.sqrt(len(x)), p
    # the exponential gradient's median is mean·ln 2; its sample median's SE is 1/(2 f(m) √n) = mean/√n
    n = stats.loc["gradient", "n"]
    assert abs(stats.loc["gradient", "median"] - 200 * US * math.log(2)) < 4 * 200 * US / math.sqrt(n)


def test_cycle_delta_is_exactly_the_sum_of_the_phase_deltas(cycles):
    rng = np.random.default_rng(2)
    exp = lambda mean: (lambda g, n: g.exponential(mean, n))
    a = cycles(exp(10 * US), exp(220 * US), exp(5 * US), exp(3 * US), n=3000, rng=rng)
    b = cycles(exp(12 * US), exp(200 * US), exp(8 * US), exp(2 * US), n=2000, workers=3, rng=rng)
    e = phases.explain(a, b)
    assert sum(e.deltas_s[p] for p in phases.PHASES) == pytest.approx(e.cycle_delta_s, rel=1e-9, abs=1e-15)
    assert e.cycle_delta_s == pytest.approx(e.cycle_mean_s[0] - e.cycle_mean_s[1], rel=1e-9)
    assert e.phase == max(phases.PHASES, key=lambda p: abs(e.deltas_s[p]))


def test_explain_names_the_gradient_when_only_the_gradient_differs(cycles):
    a, b = cycles(gradient=220 * US), cycles(gradient=200 * US, workers=3)
    e = phases.explain(a, b)
    assert e.phase == "gradient"
    assert e.delta_s == pytest.approx(20 * US, rel=1e-6) and e.cycle_delta_s == pytest.approx(20 * US, rel=1e-6)
    assert e.share == pytest.approx(1.0, abs=1e-6)
    assert e.cycle_rel_err == pytest.approx(20 / 218, rel=1e-6)
    assert e.sentence() == "phase explaining most of the cycle-time error: gradient (Δ = +20.0 µs of +20.0 µs, 100%)"
    # a slower update side on the reference: the error now comes from `update`, with the opposite sign
    e = phases.explain(cycles(), cycles(update=50 * US))
    assert e.phase == "update" and e.delta_s == pytest.approx(-45 * US, rel=1e-6) and e.share == pytest.approx(1.0)


def test_compare_phases_puts_the_stats_side_by_side_with_relative_errors(cycles):
    t = phases.compare_phases(cycles(gradient=220 * US), cycles(), labels=("sim", "cpu"))
    assert list(t.index) == list(phases.ALL_PHASES)
    assert t.loc["gradient", "sim mean"] == pytest.approx(220 * US) and t.loc["gradient", "cpu mean"] == pytest.approx(200 * US)
    assert t.loc["gradient", "mean_rel_err"] == pytest.approx(0.10) and t.loc["gradient", "median_rel_err"] == pytest.approx(0.10)
    assert t.loc["read", "mean_rel_err"] == pytest.approx(0.0, abs=1e-9)
    assert t.loc["cycle", "mean_rel_err"] == pytest.approx(20 / 218)


def test_warm_up_attempts_are_discarded(cycles):
    slow_start = lambda g, n: np.where(np.arange(n) < 10, 5000 * US, 200 * US)
    u = cycles(gradient=slow_start, n=200)
    g = phases.phase_frame(u).query("phase == 'gradient'")["seconds"]
    assert g.max() == pytest.approx(200 * US) and len(g) == 4 * 190
    assert phases.phase_frame(u, warmup=0.0).query("phase == 'gradient'")["seconds"].max() == pytest.approx(5000 * US)
    assert phases.phase_frame(u, warmup=0.0).query("phase == 'read'")["attempt"].min() == 0


def test_attempts_are_ordered_by_start_within_run_and_worker(cycles):
    u = cycles(n=50)
    shuffled = u.sample(frac=1.0, random_state=3).reset_index(drop=True)
    a = phases.phase_stats(phases.phase_frame(u), by_worker=True)
    b = phases.phase_stats(phases.phase_frame(shuffled), by_worker=True)
    pd.testing.assert_frame_equal(a, b)
    # runs are not chained to each other: a run's last attempt has no `between`
    assert (phases.cycle_table(u).groupby(["run", "worker"])["between"].apply(lambda s: s.isna().sum()) == 1).all()


def test_per_worker_stats_are_per_worker(cycles):
    # worker w computes for (200 + 100 w) µs
    parts = [cycles(gradient=(200 + 100 * w) * US, workers=1, runs=1).assign(worker=w) for w in range(3)]
    u = pd.concat(parts, ignore_index=True)
    s = phases.phase_stats(phases.phase_frame(u), by_worker=True)
    g = s[s["phase"] == "gradient"].set_index("worker")["mean"]
    assert g.to_dict() == pytest.approx({0: 200 * US, 1: 300 * US, 2: 400 * US})
    assert set(s.groupby("worker")["phase"].apply(tuple)) == {phases.ALL_PHASES}
    w = phases.compare_by_worker(u, cycles(workers=3, runs=1), labels=("sim", "cpu"))
    grad = w[w["phase"] == "gradient"].set_index("worker")
    assert grad["mean_rel_err"].to_dict() == pytest.approx({0: 0.0, 1: 0.5, 2: 1.0}, abs=1e-9)


def test_frames_without_phase_columns_take_the_no_phases_path(cycles):
    old = cycles().drop(columns=["t_start", "t_grad_start", "t_grad_end"])  # as an old file before load fills NaN
    nan = updates_frame(0, [0, 1, 0], [1, 2, 3], [0, 1, 2], [0.1, 0.2, 0.3], [0.15, 0.25, 0.35])
    for u in (old, nan):
        assert phases.phase_frame(u).empty and not phases.has_phases(u)
        assert phases.explain(cycles(), u) is None
    pc = phases.breakdown(cycles(), nan, labels=("sim", "cpu"))
    assert not pc.available and pc.missing == ["cpu"] and pc.explanation is None
    assert pc.unavailable_line().startswith("phase breakdown: not available — cpu has no phase columns")
    assert pc.unavailable_line() in pc.markdown()
    doc = pc.to_json()
    assert doc["available"] is False and doc["explain"] is None
    assert doc["sides"]["reference"]["stats"]["gradient"]["n"] == 0
    assert doc["sides"]["predicted"]["stats"]["gradient"]["mean"] == pytest.approx(200 * US)


def test_breakdown_rows_markdown_and_json_are_in_microseconds(cycles, as_result):
    pc = phases.breakdown(as_result(cycles(gradient=220 * US), "sim"), as_result(cycles(), "cpu"), ("sim", "cpu"))
    rows = {r["phase"]: r for r in pc.rows()}
    assert rows["gradient"]["sim mean"] == "220.0" and rows["gradient"]["cpu p99"] == "200.0"
    assert rows["gradient"]["err"] == "+10.0%" and rows["read"]["err"] == "+0.0%"
    md = pc.markdown()
    assert "| gradient | 220.0 | 200.0 | +10.0% |" in md and pc.explanation.sentence() in md
    assert "| 1 | 10.0 / 10.0 (+0.0%) | 220.0 / 200.0 (+10.0%) |" in md  # per worker
    doc = pc.to_json()
    assert doc["explain"]["phase"] == "gradient" and doc["explain"]["share"] == pytest.approx(1.0)
    assert doc["errors"]["gradient"]["mean_rel_err"] == pytest.approx(0.1)
    assert doc["per_worker"]["0"]["gradient"]["predicted_mean"] == pytest.approx(220 * US)
    same = phases.breakdown(cycles(), cycles(), ("sim", "sim"))  # equal labels stay apart
    assert same.labels == ("sim (a)", "sim (b)") and same.explanation.share != same.explanation.share  # Δc = 0: NaN


def test_gradient_concurrency_is_the_time_average_count_in_gradients() -> None:
    # run 0: two workers, gradients [0, 4) and [2, 6) then [6, 8): span 8, lengths 4 + 4 + 2 = 10 -> 1.25;
    # run 1: one worker taking turns with itself, [0, 1) and [3, 4): span 4, lengths 2 -> 0.5
    u = pd.DataFrame({"run": [0, 0, 0, 1, 1], "worker": [0, 1, 1, 0, 0],
                      "t_grad_start": [0.0, 2.0, 6.0, 0.0, 3.0], "t_grad_end": [4.0, 6.0, 8.0, 1.0, 4.0]})
    assert phases.gradient_concurrency(u) == {0: pytest.approx(1.25), 1: pytest.approx(0.5)}
    assert phases.gradient_concurrency(u.drop(columns=["t_grad_end"])) == {}


def test_absence_is_the_share_of_time_in_cycles_past_twice_the_median() -> None:
    # run 0, worker 0: cycles 1, 1, 1, 5, 1, 1 (span 10): one cycle > 2 x the median 1 -> 5 / 10;
    #        worker 1: cycles 2, 2, 2 (span 6): none -> 0; the run's mean over workers: 0.25
    # run 1, worker 0: cycles 1, 3, 1, 1 (span 6): 3 > 2 -> 0.5
    t0 = [0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0]
    t1 = [0.0, 2.0, 4.0, 6.0]
    t2 = [0.0, 1.0, 4.0, 5.0, 6.0]
    u = pd.DataFrame({"run": [0] * 11 + [1] * 5, "worker": [0] * 7 + [1] * 4 + [0] * 5, "t_start": t0 + t1 + t2})
    assert phases.absence(u) == {0: pytest.approx(0.25), 1: pytest.approx(0.5)}
    assert phases.absence(u, factor=6.0) == {0: 0.0, 1: 0.0}  # no cycle past 6 x the median
    assert phases.absence(u.drop(columns=["t_start"])) == {}


def _cycles(starts_by_worker: dict[int, list[float]]) -> pd.DataFrame:
    rows = [(0, w, t) for w, ts in starts_by_worker.items() for t in ts]
    return pd.DataFrame(rows, columns=["run", "worker", "t_start"])


def test_host_away_is_the_reference_away_more_than_the_prediction() -> None:
    steady = _cycles({0: [0.0, 1.0, 2.0, 3.0, 4.0], 1: [0.0, 1.0, 2.0, 3.0, 4.0]})  # away 0
    gappy = _cycles({0: [0.0, 1.0, 2.0, 3.0, 4.0], 1: [0.0, 1.0, 2.0, 5.0, 6.0]})  # worker 1: 3 of 6 -> mean 0.25
    assert phases.mean_absence(gappy) == pytest.approx(0.25)
    assert phases.host_away(steady, gappy, workers=2, cpus=2) == pytest.approx(0.25)
    assert phases.host_away(gappy, steady, workers=2, cpus=2) is None  # the prediction away more: not the host
    assert phases.host_away(steady, gappy, workers=4, cpus=2) is None  # time-sharing: both sides model it
    assert phases.host_away(steady, steady.drop(columns=["t_start"]), 2, 2) is None  # nothing to compare


def test_compare_warns_when_the_host_took_the_reference_workers_cpus(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from simasgd.commands.compare import _host_away

    def result(updates: pd.DataFrame, cpus: tuple[int, ...] = (0, 1)) -> SimpleNamespace:
        return SimpleNamespace(updates=updates, scenario={"workers": {"count": 2}},
                               metadata={"host": {"run": 0, "affinity_start": list(cpus)}})

    steady = _cycles({0: [0.0, 1.0, 2.0, 3.0, 4.0], 1: [0.0, 1.0, 2.0, 3.0, 4.0]})
    gappy = _cycles({0: [0.0, 1.0, 2.0, 3.0, 4.0], 1: [0.0, 1.0, 2.0, 5.0, 6.0]})
    _host_away({"sim": result(steady), "cpu": result(gappy)})
    out = capsys.readouterr().out
    assert "warning (cpu): its workers were away 25% of the time" in out and "sim's 0%" in out
    _host_away({"sim": result(steady), "cpu": result(steady)})
    assert "away" not in capsys.readouterr().out
    _host_away({"sim": result(steady), "cpu": result(gappy, cpus=(0,))})  # 2 workers on the run's one CPU
    assert "away" not in capsys.readouterr().out


def _gradients(runs: dict[int, list[tuple[int, float, float]]]) -> pd.DataFrame:
    """(worker, start, end) of each gradient, per run."""
    rows = [(r, w, s, e) for r, gs in runs.items() for w, s, e in gs]
    return pd.DataFrame(rows, columns=["run", "worker", "t_grad_start", "t_grad_end"])


def test_took_turns_is_a_reference_run_computing_at_once_far_less_than_predicted() -> None:
    together = [(0, 0.0, 1.0), (1, 0.0, 1.0)]  # 2 gradients over 1 s: 2 at once
    in_turn = [(0, 0.0, 1.0), (1, 1.0, 2.0)]  # 2 over 2 s: 1 at once
    pred = _gradients({0: together})
    ref = _gradients({0: together, 1: in_turn})
    assert phases.took_turns(pred, ref, workers=2, cpus=2) == pytest.approx(0.5)  # the worst run, 1 of 2
    assert phases.took_turns(pred, _gradients({0: together, 1: together}), 2, 2) is None
    assert phases.took_turns(pred, ref, workers=4, cpus=2) is None  # time-sharing: both sides model it
    assert phases.took_turns(pred, ref, workers=1, cpus=2) is None
    mild = [(0, 0.0, 1.0), (1, 0.2, 1.2)]  # 2 over 1.2 s: 1.67 at once, 83% of 2: within the margin
    assert phases.took_turns(pred, _gradients({0: mild}), 2, 2) is None
    assert phases.took_turns(pred, ref.drop(columns=["t_grad_end"]), 2, 2) is None  # nothing to compare


def test_compare_warns_when_the_reference_workers_took_turns(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from simasgd.commands.compare import _host_away

    def result(updates: pd.DataFrame) -> SimpleNamespace:
        return SimpleNamespace(updates=updates, scenario={"workers": {"count": 2}},
                               metadata={"host": {"run": 0, "affinity_start": [0, 1]}})

    pred = _gradients({0: [(0, 0.0, 1.0), (1, 0.0, 1.0)]})
    ref = _gradients({0: [(0, 0.0, 1.0), (1, 1.0, 2.0)]})
    _host_away({"sim": result(pred), "cpu": result(ref)})
    assert "warning (cpu): in one of its runs the workers were inside a gradient at once 50% as much" \
        in capsys.readouterr().out
    _host_away({"sim": result(pred), "cpu": result(pred)})
    assert "took turns" not in capsys.readouterr().out


def test_update_concurrency_is_the_time_average_of_workers_inside_an_update() -> None:
    # run 1 spans 0 to 4 (first gradient start to last write); updates [1,4], [2,4], [3,4], [4,4]: 6 s of
    # updates over 4 s
    u = pd.DataFrame({"run": [1] * 4, "worker": [0, 1, 0, 1],
                      "t_grad_start": [0.0, 1.0, 2.0, 3.0], "t_grad_end": [1.0, 2.0, 3.0, 4.0],
                      "t_write": [4.0, 4.0, 4.0, 4.0]})
    assert phases.update_concurrency(u) == {1: pytest.approx(6.0 / 4.0)}
    assert phases.gradient_concurrency(u) == {1: pytest.approx(1.0)}  # its own span: first start to last end
    assert phases.update_concurrency(u.drop(columns=["t_write"])) == {}


def test_both_updating_is_the_share_of_time_with_two_updates_at_once() -> None:
    # run 0 spans 0 to 9: updates [2, 6] and [4, 8] overlap on [4, 6] (2 of 9); [8, 9] only touches [4, 8]
    side = pd.DataFrame({"run": [0, 0, 0], "worker": [0, 1, 0], "t_grad_start": [0.0, 1.0, 7.0],
                         "t_grad_end": [2.0, 4.0, 8.0], "t_write": [6.0, 8.0, 9.0]})
    assert phases.both_updating(side) == {0: pytest.approx(2.0 / 9.0)}
    # in turn: the same update lengths, never two at once
    turn = pd.DataFrame({"run": [0, 0], "worker": [0, 1], "t_grad_start": [0.0, 0.0],
                         "t_grad_end": [1.0, 5.0], "t_write": [5.0, 9.0]})
    assert phases.both_updating(turn) == {0: 0.0}
    assert phases.update_concurrency(turn) == {0: pytest.approx(8.0 / 9.0)}
    assert phases.both_updating(turn.drop(columns=["t_write"])) == {}
