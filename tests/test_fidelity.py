"""Fidelity of one result against another, on results built from known distributions."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.evaluation import analysis, fidelity, plots
from simasgd.runs import backends
from simasgd.runs.results import RunResult
from simasgd.spec.scenario import Scenario


@pytest.fixture(scope="module")
def staleness_pair(make_result, geometric):
    """``staleness_pair(rng, m_a, m_b, runs, n, rates_a, rates_b)``: sim and cpu results, geometric staleness."""
    def pair(rng, m_a=4, m_b=4, runs=4, n=3000, rates_a=None, rates_b=None):
        a = make_result([geometric(rng, m_a, n) for _ in range(runs)], rates=rates_a, backend="sim")
        b = make_result([geometric(rng, m_b, n) for _ in range(runs)], rates=rates_b, backend="cpu")
        return a, b
    return pair


def test_identical_results_agree_exactly(staleness_pair):
    rng = np.random.default_rng(10)
    a, _ = staleness_pair(rng)
    f = fidelity.compare(a, a)
    for name in ("ks", "wasserstein", "mean_staleness_rel_err", "p50_err", "p90_err", "p99_err",
                 "updates_per_s_rel_err"):
        assert f.overall[name].value == 0.0, name
    assert all(f.per_worker[w]["ks"].value == 0.0 for w in range(4))
    assert "updates_to_eps_rel_err" not in f.per_worker[0]  # a run reaches ε, not a worker
    assert f.verdicts["ks"] is True and f.verdicts["mean_staleness_rel_err"] is True
    assert f.verdicts["updates_to_eps_rel_err"] is None  # no run reached ε: undefined, not "agrees"


def test_pooled_ks_and_wasserstein_equal_scipy_on_the_pooled_samples(staleness_pair):
    rng = np.random.default_rng(11)
    a, b = staleness_pair(rng, m_a=4, m_b=6)
    f = fidelity.compare(a, b)
    ta, tb = a.updates["staleness"].to_numpy(), b.updates["staleness"].to_numpy()
    assert f.overall["ks"].value == pytest.approx(stats.ks_2samp(ta, tb).statistic, abs=1e-12)
    assert f.overall["wasserstein"].value == pytest.approx(stats.wasserstein_distance(ta, tb), rel=1e-9)
    assert f.overall["mean_staleness_rel_err"].value == pytest.approx(ta.mean() / tb.mean() - 1, rel=1e-9)
    assert f.overall["p90_err"].value == (np.quantile(ta, 0.9, method="inverted_cdf")
                                          - np.quantile(tb, 0.9, method="inverted_cdf"))
    w0a, w0b = ta[a.updates["worker"] == 0], tb[b.updates["worker"] == 0]
    assert f.per_worker[0]["ks"].value == pytest.approx(stats.ks_2samp(w0a, w0b).statistic, abs=1e-12)
    # Geometric means 3 against 5: a true −40% error, the goal of 5% is missed and said so.
    assert f.verdicts["mean_staleness_rel_err"] is False
    assert any("mean_staleness_rel_err" in s for s in plots.disagreements(f))


@pytest.mark.slow
def test_interval_covers_the_truth_and_shrinks_with_repeats(staleness_pair):
    rng = np.random.default_rng(12)

    def width_and_cover(runs: int) -> tuple[float, bool]:
        ra = list(rng.normal(1100.0, 100.0, runs))   # true rate error: 1100/1000 − 1 = +10%
        rb = list(rng.normal(1000.0, 100.0, runs))
        a, b = staleness_pair(rng, runs=runs, n=200, rates_a=ra, rates_b=rb)
        m = fidelity.compare(a, b, resamples=2000).overall["updates_per_s_rel_err"]
        return m.ci_high - m.ci_low, m.ci_low <= 0.10 <= m.ci_high

    w4, _ = width_and_cover(4)
    w40, cover = width_and_cover(40)
    # Bootstrap width scales like 1/sqrt(runs): 10x the runs, ~3.2x narrower; demand at least 2x.
    assert w40 < w4 / 2
    assert cover


def test_single_run_sides_have_no_interval(staleness_pair):
    rng = np.random.default_rng(13)
    a, b = staleness_pair(rng, runs=1)
    m = fidelity.compare(a, b).overall["ks"]
    assert math.isfinite(m.value) and math.isnan(m.ci_low) and math.isnan(m.ci_high)


def test_updates_to_eps_uses_only_runs_that_reached(make_result, geometric):
    rng = np.random.default_rng(14)
    a = make_result([geometric(rng, 4, 100) for _ in range(3)], updates_to_eps=[120, None, 120])
    b = make_result([geometric(rng, 4, 100) for _ in range(3)], updates_to_eps=[100, 100, 100], backend="cpu")
    f = fidelity.compare(a, b)
    assert f.overall["updates_to_eps_rel_err"].value == pytest.approx(0.2)
    assert f.verdicts["updates_to_eps_rel_err"] is False  # 20% > 15%
    assert f.predicted.outcomes["not_reached"] == 1


def test_different_scenarios_are_refused_naming_the_difference(make_result, geometric):
    rng = np.random.default_rng(15)
    a = make_result([geometric(rng, 4, 100)], scenario=Scenario(workers={"count": 4}, algorithm={"name": "mutex"}))
    b = make_result([geometric(rng, 4, 100)], scenario=Scenario(workers={"count": 8}, algorithm={"name": "mutex"}))
    with pytest.raises(fidelity.FidelityError, match=r"workers.count = 4 vs 8"):
        fidelity.compare(a, b)


def test_machine_preset_may_differ(make_result, geometric):
    rng = np.random.default_rng(16)
    a = make_result([geometric(rng, 4, 100)], scenario=Scenario(machine={"preset": "xeon-e5-2687w-v2"},
                                                                workers={"count": 4}, algorithm={"name": "mutex"}))
    b = make_result([geometric(rng, 4, 100)], scenario=Scenario(workers={"count": 4}, algorithm={"name": "mutex"}))
    f = fidelity.compare(a, b)
    assert f.scenario_diff == ["machine.preset = 'xeon-e5-2687w-v2' vs None"]


def test_fidelity_json_round_trip_and_markdown(tmp_path, staleness_pair):
    rng = np.random.default_rng(17)
    a, b = staleness_pair(rng, runs=3, n=500)
    f = fidelity.compare(a, b)
    path = f.save(tmp_path / "fidelity.json")
    doc = fidelity.load_json(path)
    assert doc["format"] == fidelity.FORMAT and doc["format_version"] == fidelity.FORMAT_VERSION
    assert doc["overall"]["ks"]["value"] == pytest.approx(f.overall["ks"].value)
    assert set(doc["per_worker"]) == {"0", "1", "2", "3"}
    md = plots.to_markdown(f, ["figures/staleness.png"])
    assert "| ks |" in md and "![staleness](figures/staleness.png)" in md
    # a non-finite figure anywhere (metadata, a side) is written as null, never as invalid JSON
    f.info["gradient_median_s"] = float("nan")
    f.info["per_run"] = [1.0, float("inf"), np.float64("nan")]
    doc2 = fidelity.load_json(f.save(tmp_path / "nan.json"))
    assert doc2["metadata"]["gradient_median_s"] is None and doc2["metadata"]["per_run"] == [1.0, None, None]
    (tmp_path / "bad.json").write_text(json.dumps({**doc, "format_version": 99}))
    with pytest.raises(fidelity.FidelityError, match="newer"):
        fidelity.load_json(tmp_path / "bad.json")


# --- `simasgd compare` end to end (tiny budgets) ----------------------------------------------

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.toml"
TINY = ["-s", "stop.max_updates=300", "-s", "stop.eval_every_updates=30", "-n", "2"]


@pytest.fixture(scope="module")
def serial_vs_sim(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    res = CliRunner().invoke(app, ["compare", str(QUICKSTART), "--backends", "serial,sim", "--out", str(out), *TINY])
    return out, res


@pytest.mark.slow
def test_compare_serial_sim_writes_results_fidelity_report_and_figures(serial_vs_sim):
    out, res = serial_vs_sim
    assert res.exit_code == 0, res.output
    for b in ("serial", "sim"):
        assert len(RunResult.load(out / b).runs) == 2
    doc = fidelity.load_json(out / "fidelity.json")
    assert doc["predicted"]["backend"] == "sim" and doc["reference"]["backend"] == "serial"
    # serial has staleness 0 everywhere, 4 simulated workers do not: the table must say they disagree.
    sim = RunResult.load(out / "sim")
    p0 = float((sim.updates["staleness"] == 0).mean())
    assert doc["overall"]["ks"]["value"] == pytest.approx(1 - p0)
    assert doc["overall"]["ks"]["ok"] is False
    assert "ks" in res.output and "✗" in res.output and "where they disagree" in res.output
    report = (out / "report.md").read_text()
    assert "figures/staleness.png" in report and (out / "figures" / "staleness.png").exists()
    assert "| updates_per_s | " in report  # each side on its own, with its t-interval
    assert (out / "figures" / "loss.png").exists()


@pytest.mark.slow
def test_compare_existing_folders_and_refusal(serial_vs_sim, tmp_path):
    out, _ = serial_vs_sim
    res = CliRunner().invoke(app, ["compare", "--results", str(out / "sim"), str(out / "serial"),
                                   "--out", str(tmp_path / "again")])
    assert res.exit_code == 0, res.output
    again = fidelity.load_json(tmp_path / "again" / "fidelity.json")
    first = fidelity.load_json(out / "fidelity.json")
    assert again["overall"]["ks"]["value"] == first["overall"]["ks"]["value"]
    other = RunResult.load(out / "sim")
    other.scenario = {**other.scenario, "workers": {**other.scenario["workers"], "count": 8}}
    other.save(tmp_path / "eight")
    res = CliRunner().invoke(app, ["compare", "--results", str(tmp_path / "eight"), str(out / "serial"),
                                   "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "workers.count = 8 vs 4" in res.output


def test_compare_rejects_bad_backend_lists(tmp_path):
    res = CliRunner().invoke(app, ["compare", str(QUICKSTART), "--backends", "sim", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "two different backends" in res.output
    res = CliRunner().invoke(app, ["compare", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "needs a SCENARIO" in res.output


@pytest.mark.slow
def test_compare_sim_cpu_end_to_end(tmp_path, monkeypatch):
    """sim (on the calibrated profile) against real threads: the contract of `simasgd compare` by default."""
    available = backends.available()
    assert available["sim"] and available["cpu"], f"compare sim,cpu needs both backends: {available}"
    profile = tmp_path / "this.toml"  # absent: compare calibrates (never the checkout's profiles/this.toml)
    monkeypatch.setenv("SIMASGD_PROFILE", str(profile))
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["compare", str(QUICKSTART), "--backends", "sim,cpu", "--out", str(out),
                                   "--quick-calibration", "-s", "workers.count=2", *TINY])
    assert res.exit_code == 0, res.output
    assert profile.exists()
    sim, cpu = RunResult.load(out / "sim"), RunResult.load(out / "cpu")
    assert sim.scenario["machine"]["preset"] == "this" and cpu.backend == "cpu"
    doc = fidelity.load_json(out / "fidelity.json")
    assert doc["scenario_diff"] and doc["scenario_diff"][0].startswith("machine.preset")
    ks = doc["overall"]["ks"]["value"]  # the pooled two-sample KS statistic of the applied staleness
    cut = doc["metadata"].get("up_to_version")  # over the versions every run of both made
    if cut:
        sim, cpu = analysis.up_to_version(sim, cut), analysis.up_to_version(cpu, cut)
    assert ks == pytest.approx(stats.ks_2samp(analysis.staleness(sim), analysis.staleness(cpu)).statistic, abs=1e-12)
    assert "✓" in res.output or "✗" in res.output
    assert (out / "report.md").exists() and (out / "figures" / "staleness.png").exists()


# --- where a cycle's time goes, in compare ----------------------------------------------------

US = 1e-6  # the updates frames: fixtures `cycles` and `as_result` (tests/conftest.py)


def test_fidelity_carries_the_phase_breakdown_and_old_files_without_it_load(tmp_path, cycles, as_result):
    f = fidelity.compare(as_result(cycles(gradient=220 * US), "sim"), as_result(cycles(), "cpu"))
    assert f.phases is not None and f.phases.explanation.phase == "gradient"
    doc = fidelity.load_json(f.save(tmp_path / "fidelity.json"))
    assert doc["phases"]["explain"]["phase"] == "gradient"
    assert doc["phases"]["sides"]["reference"]["label"] == "cpu"
    old = {k: v for k, v in doc.items() if k != "phases"}  # written before phases existed
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert "phases" not in fidelity.load_json(tmp_path / "old.json")
    assert "Where a cycle's time goes" in plots.to_markdown(f)


@pytest.mark.slow
def test_compare_folders_prints_the_phase_table_and_sentence(tmp_path, cycles, as_result):
    as_result(cycles(gradient=220 * US), "sim").save(tmp_path / "sim")
    as_result(cycles(), "cpu").save(tmp_path / "cpu")
    res = CliRunner().invoke(app, ["compare", "--results", str(tmp_path / "sim"), str(tmp_path / "cpu"),
                                   "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert "where a cycle's time goes" in res.output
    lines = res.output.splitlines()
    grad = next(x for x in lines if "gradient" in x and "220.0" in x)
    assert "200.0" in grad and "+10.0%" in grad
    assert "phase explaining most of the cycle-time error: gradient (Δ = +20.0 µs of +20.0 µs, 100%)" in lines
    doc = fidelity.load_json(tmp_path / "cmp" / "fidelity.json")
    assert doc["phases"]["available"] and doc["phases"]["explain"]["phase"] == "gradient"
    assert doc["phases"]["sides"]["predicted"]["stats"]["gradient"]["mean"] == pytest.approx(220 * US)
    report = (tmp_path / "cmp" / "report.md").read_text()
    assert "| gradient | 220.0 | 200.0 | +10.0% |" in report and "### Per worker" in report
    assert "figures/phases.png" in report and (tmp_path / "cmp" / "figures" / "phases.png").exists()


@pytest.mark.slow
def test_compare_says_so_when_a_side_has_no_phase_columns(tmp_path, cycles, as_result):
    as_result(cycles(), "sim").save(tmp_path / "sim")
    old = cycles()
    old[["t_start", "t_grad_start", "t_grad_end"]] = np.nan
    as_result(old, "cpu").save(tmp_path / "cpu")
    res = CliRunner().invoke(app, ["compare", "--results", str(tmp_path / "sim"), str(tmp_path / "cpu"),
                                   "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert "phase breakdown: not available — cpu has no phase columns" in res.output
    assert "phase explaining" not in res.output and "where a cycle's time goes" not in res.output
    assert fidelity.load_json(tmp_path / "cmp" / "fidelity.json")["phases"]["available"] is False
    assert not (tmp_path / "cmp" / "figures" / "phases.png").exists()


def test_repeatability_is_the_scaled_leave_one_out_error(make_result, geometric):
    """Each reference run against the other runs pooled, by the same metrics (scipy's KS on the pooled
    samples), root mean square over runs, × √((1/m + 1/n) / (1 + 1/(n − 1))) for m predicted runs."""
    rng = np.random.default_rng(21)
    taus = [geometric(rng, m, 400) for m in (3, 4, 6)]
    rates = [900.0, 1000.0, 1250.0]
    ref = make_result(taus, rates=rates, backend="cpu")
    n, m = 3, 2
    scale = math.sqrt((1 / m + 1 / n) / (1 + 1 / (n - 1)))
    rest = [np.concatenate([t for j, t in enumerate(taus) if j != i]) for i in range(n)]
    ks = [stats.ks_2samp(taus[i], rest[i]).statistic for i in range(n)]
    tau = [taus[i].mean() / rest[i].mean() - 1 for i in range(n)]
    ups = [rates[i] / np.mean([r for j, r in enumerate(rates) if j != i]) - 1 for i in range(n)]
    floor = fidelity.repeatability(ref, predicted_runs=m)
    for key, loo in (("ks", ks), ("mean_staleness_rel_err", tau), ("updates_per_s_rel_err", ups)):
        assert floor[key] == pytest.approx(math.sqrt(np.mean(np.square(loo))) * scale, rel=1e-9), key
    assert math.isnan(floor["updates_to_eps_rel_err"])  # no run reached ε
    assert fidelity.repeatability(make_result(taus[:1], backend="cpu")) == {}  # one run: nothing to say


@pytest.mark.slow
def test_repeatability_predicts_the_error_of_a_perfect_predictor(make_result):
    """A 'simulator' whose runs are more draws of the machine's own run-to-run variation (updates/s ~
    N(1000, 60²) per run) errs against 3 reference runs by err = mean(its 3)/mean(ref's 3) − 1; the floor,
    computed from the reference alone, must match that error's mean square: over 300 trials the mean of
    floor² − err² is zero to within 3 standard errors of the sample."""
    rng = np.random.default_rng(22)
    rows = make_result([np.zeros(20, dtype=np.int64)] * 3, backend="cpu")  # every trial's rows: only rates differ
    d = []
    for _ in range(300):
        ref_rates = rng.normal(1000.0, 60.0, 3)
        pred_rates = rng.normal(1000.0, 60.0, 3)
        ref = dataclasses.replace(rows, runs=[dataclasses.replace(s, updates_per_s=float(x), time_s=s.updates / x)
                                              for s, x in zip(rows.runs, ref_rates, strict=True)])
        err = pred_rates.mean() / ref_rates.mean() - 1
        d.append(fidelity.repeatability(ref)["updates_per_s_rel_err"] ** 2 - err ** 2)
    d = np.asarray(d)
    assert abs(d.mean()) <= 3 * d.std(ddof=1) / math.sqrt(len(d))


def test_compare_carries_the_floor_and_warns_of_an_unstable_reference(make_result, geometric, tmp_path):
    rng = np.random.default_rng(23)
    sim = make_result([geometric(rng, 4, 500) for _ in range(3)], rates=[1000.0] * 3, backend="sim")
    steady = make_result([geometric(rng, 4, 500) for _ in range(3)], rates=[1000.0, 1001.0, 999.0], backend="cpu")
    shaky = make_result([geometric(rng, 4, 500) for _ in range(3)], rates=[600.0, 1000.0, 1500.0], backend="cpu")
    f = fidelity.compare(sim, shaky)
    assert f.floor == fidelity.repeatability(shaky, 3)
    assert f.reproducible["updates_per_s_rel_err"] is False and f.reproducible["ks"] is True
    assert [w for w in plots.unstable(f) if w.startswith("updates_per_s_rel_err")]
    assert plots.unstable(fidelity.compare(sim, steady)) == []
    doc = json.loads(f.save(tmp_path / "fidelity.json").read_text())
    assert doc["reference_floor"]["updates_per_s_rel_err"] == pytest.approx(f.floor["updates_per_s_rel_err"])
    assert "Unstable reference" in plots.to_markdown(f)


def test_compare_is_over_the_versions_both_sides_made(make_result, geometric):
    """A predicted side that stopped at ε (400 updates a run) against a reference that ran on to its budget
    (1000), whose staleness grows after version 400: the errors are those of the first 400 versions of each
    (scipy's KS and the means on those rows), and each side's updates/s is over them too."""
    rng = np.random.default_rng(24)
    early = [geometric(rng, 4, 400) for _ in range(3)]
    ran_on = [np.concatenate([geometric(rng, 4, 400), geometric(rng, 9, 600)]) for _ in range(3)]
    sim = make_result(early, rates=[1000.0] * 3, backend="sim")
    cpu = make_result(ran_on, rates=[1000.0] * 3, backend="cpu")
    cut = int(sim.updates["version"].max())
    assert analysis.common_version(sim, cpu) == cut
    assert analysis.common_version(sim, sim) is None  # every run made the same versions: nothing to cut
    f = fidelity.compare(sim, cpu)
    assert f.info["up_to_version"] == cut
    first = np.concatenate([t[:400] for t in ran_on])
    ta = np.concatenate(early)
    assert f.overall["ks"].value == pytest.approx(stats.ks_2samp(ta, first).statistic, abs=1e-12)
    assert f.overall["mean_staleness_rel_err"].value == pytest.approx(ta.mean() / first.mean() - 1, rel=1e-9)
    whole = np.concatenate(ran_on)
    assert stats.ks_2samp(ta, whole).statistic > f.overall["ks"].value + 0.05  # the cut is what made it agree
    # updates/s over the window: 400 rows written by t(400) on both sides (make_result spreads a run's
    # rows evenly over n / rate seconds)
    cut_cpu = analysis.up_to_version(cpu, cut)
    t400 = 399 / 999 * (1000 / 1000.0)
    assert [r.updates for r in cut_cpu.runs] == [400] * 3
    assert cut_cpu.runs[0].updates_per_s == pytest.approx(400 / t400, rel=1e-9)
    assert cut_cpu.runs[0].mean_staleness == pytest.approx(ran_on[0][:400].mean(), rel=1e-12)
    assert "versions 1–" in plots.to_markdown(f)


def test_self_prediction_counts_the_runs_that_meet_every_goal_against_the_rest(make_result):
    """Three runs of τ = 2 except a share of τ = 3: run i against the other two pooled has τ̄ error
    mean_i / mean(rest) − 1 and KS |share_i − share(rest)|, updates/s error rate_i / mean(rest) − 1, each
    × √((1/3 + 1/3) / (1 + 1/2)) = 2/3 (three predicted runs against three, as ``repeatability``)."""
    def run(share: float, n: int = 1000) -> np.ndarray:
        return np.where(np.arange(n) < share * n, 3, 2)

    same = make_result([run(0.1)] * 3, rates=[1000.0] * 3, backend="cpu")
    assert fidelity.self_prediction(same) == 1.0
    # run 2's τ̄ 2.5 against 2.1 (+19%, scaled 12.7%): it misses; runs 0 and 1 against (2.1 + 2.5)/2 = 2.3
    # (−8.7%, scaled −5.8%) miss too
    odd = make_result([run(0.1), run(0.1), run(0.5)], rates=[1000.0] * 3, backend="cpu")
    assert fidelity.self_prediction(odd) == 0.0
    # only the updates/s differ: 1000, 1000, 1200 → run 2 errs +20% (scaled 13.3%, missed), runs 0 and 1
    # −9.1% (scaled −6.1%, met)
    fast = make_result([run(0.1)] * 3, rates=[1000.0, 1000.0, 1200.0], backend="cpu")
    assert fidelity.self_prediction(fast) == pytest.approx(2 / 3)
    # 1000, 1000, 1140: run 2's +14% scales to 9.3% for three predicted runs (met), to 13.2% for one
    # (× √((1 + 1/3) / 1.5) = 0.943: missed); runs 0 and 1 (−6.5%) meet it either way
    edge = make_result([run(0.1)] * 3, rates=[1000.0, 1000.0, 1140.0], backend="cpu")
    assert fidelity.self_prediction(edge) == 1.0
    assert fidelity.self_prediction(edge, predicted_runs=1) == pytest.approx(2 / 3)
    assert fidelity.self_prediction(make_result([run(0.1)], backend="cpu")) is None
