"""simasgd.evaluation.prediction_band against closed forms: coverage of a further run, widths, the host noise's estimators."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from simasgd.evaluation import prediction_band as pb
from simasgd.formats import model_error_file as files
from simasgd.machines import profile
from simasgd.machines.profile_model import Profile
from simasgd.runs.results import RunResult

Z90 = float(stats.norm.ppf(0.95))


def _coverage(hits: np.ndarray) -> tuple[float, float]:
    """The observed share and its binomial standard error at the nominal 90%."""
    return float(hits.mean()), math.sqrt(0.9 * 0.1 / len(hits))


@pytest.mark.parametrize("runs", [3, 10])
def test_geometric_staleness_band_holds_a_further_run_90_percent_of_the_time(runs: int) -> None:
    # τ of each update geometric on {0, 1, ...} with p = 0.3; a run's τ̄ is the mean of its n updates', so its
    # spread is known: sd(τ̄) = √((1 − p)/p² / n). The band of R runs must hold one more run 90% of the time.
    rng = np.random.default_rng(1)
    p, n, reps = 0.3, 400, 3000
    tau = rng.geometric(p, size=(reps, runs + 1, n)) - 1
    means = tau.mean(axis=2)
    hits = np.array([pb.predictive("mean_staleness", m[:runs]).contains(m[runs]) for m in means])  # type: ignore[union-attr]
    share, se = _coverage(hits)
    assert abs(share - 0.9) <= 3 * se, (share, se)


def test_geometric_staleness_band_width_is_the_closed_form_at_many_runs() -> None:
    # With many runs the t quantile is z and the log-scale sd of τ̄ is sd(τ̄)/E[τ̄] = 1/√(n (1 − p)) (delta method).
    rng = np.random.default_rng(2)
    p, n, runs = 0.3, 400, 4000
    means = (rng.geometric(p, size=(runs, n)) - 1).mean(axis=1)
    band = pb.predictive("mean_staleness", means)
    assert band is not None and band.scale == "log" and not band.host
    expected = 2 * Z90 / math.sqrt(n * (1 - p))
    # the sample sd of 4000 runs is within 2% of the true one (its relative se is 1/√(2·3999) ≈ 1.1%)
    assert band.width == pytest.approx(expected, rel=0.04)
    assert band.center == pytest.approx((1 - p) / p, rel=0.01)


def test_known_lognormal_host_factor_gives_the_predicted_width() -> None:
    # Simulated runs that all agree: the band is the host's alone, x0·exp(±z σ), exactly; τ̄ carries no host term.
    sigma, x0 = 0.1, 1234.0
    band = pb.predictive("updates_per_s", [x0] * 3, host_sigma=sigma)
    assert band is not None and band.host and math.isinf(band.df)
    assert band.low == pytest.approx(x0 * math.exp(-Z90 * sigma), rel=1e-12)
    assert band.high == pytest.approx(x0 * math.exp(Z90 * sigma), rel=1e-12)
    assert band.width == pytest.approx(2 * Z90 * sigma, rel=1e-12)
    tau = pb.predictive("mean_staleness", [2.5] * 3, host_sigma=sigma)
    assert tau is not None and not tau.host and tau.low == tau.high == pytest.approx(2.5)


def test_host_factor_and_simulator_spread_together_cover_90_percent() -> None:
    # A measured run = the simulator's run (log sd 0.05) × a lognormal host factor (σ = 0.1, known); the band of
    # R = 4 simulated runs with that σ must hold the measured run 90% of the time (Welch–Satterthwaite t).
    rng = np.random.default_rng(3)
    reps, runs, s_sim, s_host = 4000, 4, 0.05, 0.1
    sim = np.exp(rng.normal(0, s_sim, size=(reps, runs)))
    measured = np.exp(rng.normal(0, s_sim, size=reps) + rng.normal(0, s_host, size=reps))
    hits = np.array([pb.predictive("time_to_eps", s, s_host).contains(m)  # type: ignore[union-attr]
                     for s, m in zip(sim, measured, strict=True)])
    share, se = _coverage(hits)
    assert abs(share - 0.9) <= 3 * se, (share, se)
    # without the host term the same bands are far too narrow: the host's noise is most of the spread
    narrow = np.array([pb.predictive("time_to_eps", s).contains(m)  # type: ignore[union-attr]
                       for s, m in zip(sim, measured, strict=True)])
    assert narrow.mean() < 0.75


def test_fewer_than_two_runs_have_no_band_and_a_zero_keeps_the_linear_scale() -> None:
    assert pb.predictive("updates_per_s", [100.0]) is None
    assert pb.predictive("updates_to_eps", [100.0, math.nan, math.nan]) is None  # ε reached by one run only
    lone = pb.predictive("mean_staleness", [0.0, 0.0, 0.0])
    assert lone is not None and lone.scale == "linear" and lone.contains(0.0) and not lone.contains(0.01)
    mixed = pb.predictive("mean_staleness", [0.0, 0.1, 0.2])
    assert mixed is not None and mixed.scale == "linear"
    half = float(stats.t.ppf(0.95, 2)) * 0.1 * math.sqrt(1 + 1 / 3)
    assert (mixed.low, mixed.high) == pytest.approx((0.1 - half, 0.1 + half))


def _profile(rng: np.random.Generator, workloads: int, block_sigma: float, per_call_sigma: float,
             blocks: int = pb.BLOCKS, per_block: int = 25) -> Profile:
    """A profile whose gradient samples run at a speed that is constant within each block and lognormal across
    blocks (σ = ``block_sigma``), with lognormal per-call noise."""
    grads = {}
    for w in range(workloads):
        speed = np.repeat(rng.normal(0, block_sigma, blocks), per_block)
        s = 1e-4 * np.exp(speed + rng.normal(0, per_call_sigma, blocks * per_block))
        grads[f"w{w}"] = {"samples_s": s.tolist()}
    return profile.typed({"gradient": grads})


def test_calibration_spread_recovers_a_known_block_factor() -> None:
    rng = np.random.default_rng(4)
    got = pb.calibration_spread(_profile(rng, 60, 0.1, 0.1))
    assert got is not None and got.samples == 60
    # 60 workloads × 7 df each: the pooled variance's relative se is about √(2/420) ≈ 7%, its root's 3.5%
    assert got.sigma == pytest.approx(0.1, rel=0.15)
    flat = pb.calibration_spread(_profile(rng, 60, 0.0, 0.1))
    assert flat is not None and flat.sigma < 0.03  # sampling noise alone, taken away by the permutations
    assert pb.calibration_spread(profile.typed({"gradient": {"w": {"samples_s": [1e-4] * 20}}})) is None
    assert pb.calibration_spread(profile.typed({})) is None


def test_drift_spread_is_the_root_mean_square_of_the_log_ratios() -> None:
    ratios = [0.9, 1.1, 1.2, 0.95, 1.05]
    got = pb.drift_spread(ratios)
    assert got is not None and got.samples == 5
    assert got.sigma == pytest.approx(math.sqrt(np.mean(np.log(ratios) ** 2)))
    assert pb.drift_spread(ratios[:4]) is None
    # with refresh a drifted cell ran at its re-timed speed: its ratio counts as 1
    drifts = [{"ratio": r, "drifted": r >= 1.2} for r in [*ratios, 1.5]]
    refreshed = pb.host_noise_of_entry({}, drifts, refresh=True)
    assert refreshed is not None
    assert refreshed.sigma == pytest.approx(math.sqrt(np.mean(np.log([0.9, 1.1, 1.0, 0.95, 1.05, 1.0]) ** 2)))
    as_measured = pb.host_noise_of_entry({}, drifts)
    assert as_measured is not None and as_measured.sigma == pytest.approx(
        math.sqrt(np.mean(np.log([*ratios, 1.5]) ** 2)))
    # too few probes: the profile's samples instead
    rng = np.random.default_rng(5)
    fallback = pb.host_noise_of_entry(_profile(rng, 10, 0.1, 0.05), drifts[:2])
    assert fallback is not None and "gradient samples" in fallback.source


def test_check_counts_runs_inside_and_the_width_against_their_spread() -> None:
    sim = {"updates_per_s": [100.0, 110.0, 90.0], "mean_staleness": [1.0, 1.1, 0.9]}
    measured = {"updates_per_s": [100.0, 300.0, 95.0, 105.0], "mean_staleness": [1.0, 1.05, 0.95, 1.0]}
    checks = pb.check(sim, measured, pb.HostNoise(0.05, "test"))
    band = checks["updates_per_s"].band
    assert checks["updates_per_s"].inside == sum(band.low <= v <= band.high for v in measured["updates_per_s"]) == 3
    spread = 2 * Z90 * float(np.std(np.log(measured["mean_staleness"]), ddof=1))
    assert checks["mean_staleness"].sharpness == pytest.approx(checks["mean_staleness"].band.width / spread)
    inside, total = pb.coverage(checks.values())
    assert (inside, total) == (checks["updates_per_s"].inside + checks["mean_staleness"].inside, 8)
    assert pb.sharpness(checks.values()) == pytest.approx(
        float(np.median([c.sharpness for c in checks.values()])))


def test_host_noise_follows_the_result_and_record_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.runs.results import RunResult, RunSummary, curve_frame, empty_updates

    monkeypatch.setenv("SIMASGD_CORPUS", str(tmp_path / "no-corpus"))  # no fitted model error: the host's alone

    runs = [RunSummary(i, 100, t, 100, t, False, False, 1.0, 0.1, 2.0 + i / 10, 100, 100 / t)
            for i, t in enumerate([1.0, 1.1, 0.9])]
    result = RunResult({"name": "x"}, "sim", runs, empty_updates(), curve_frame(0, [], [], []),
                       {"host_noise": {"sigma_log": 0.07, "source": "test", "samples": 3}})
    simulated, host = pb.inputs(result)
    assert simulated and host == pb.HostNoise(0.07, "test", 3)
    result.save(tmp_path)
    found = pb.record(tmp_path, result, host)
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert set(doc["metadata"]["bands"]) == set(found) == {"mean_staleness", "updates_per_s", "updates_to_eps",
                                                          "time_to_eps"}
    assert doc["metadata"]["bands"]["updates_per_s"]["host"] is True
    assert doc["metadata"]["bands"]["updates_to_eps"]["low"] == doc["metadata"]["bands"]["updates_to_eps"]["high"]
    back = RunResult.load(tmp_path)  # still a results folder of this format
    assert pb.host_noise_for(back) == host
    # a profile recorded by path whose file changed since is not used
    moved = RunResult({"name": "x"}, "sim", runs, empty_updates(), curve_frame(0, [], [], []),
                      {"profile": {"path": str(tmp_path / "nowhere.toml"), "sha256": "0"}})
    assert pb.host_noise_for(moved) is None


def test_run_and_show_print_the_band_and_the_results_carry_it(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The simulator on the calibrated preset of a corpus machine's profile: the bands take that profile's host
    # noise; `run` records them in summary.json and `show` prints the same ones.
    from typer.testing import CliRunner

    from simasgd.cli import app
    from simasgd.corpus import store
    from simasgd.runs.results import RunResult

    repo = Path(__file__).resolve().parents[1]
    entry = store.load(repo / "corpus" / "amd_epyc_2vcpu.json.gz")
    prof = tmp_path / "profile.toml"
    prof.write_text(profile.to_toml(entry.profile))
    monkeypatch.setenv("SIMASGD_PROFILE", str(prof))
    corpus = tmp_path / "corpus"  # a corpus whose fitted model error is known
    corpus.mkdir()
    files.write(files.path_in(corpus), files.ModelErrorDoc(level=0.9, sigma_log={"updates_per_s": 0.2}, cells=40,
                                                           machines=["m1", "m2"], simulator_commit="abc"))
    monkeypatch.setenv("SIMASGD_CORPUS", str(corpus))
    monkeypatch.setenv("COLUMNS", "200")  # rich would wrap the band's cell at a narrow terminal's end
    out = tmp_path / "r"
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(repo / "scenarios" / "quickstart.toml"), "-b", "sim", "-n", "3", "-j", "1",
                              "-s", "machine.preset=this", "-s", "stop.max_updates=400", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "summary.json").read_text())
    want = pb.calibration_spread(profile.typed(entry.profile))
    assert want is not None and doc["metadata"]["host_noise"]["sigma_log"] == pytest.approx(want.sigma)
    bands = doc["metadata"]["bands"]
    rates = [r["updates_per_s"] for r in doc["runs"]]
    assert bands["updates_per_s"]["low"] < min(rates) and max(rates) < bands["updates_per_s"]["high"]
    # the host's and the model's terms alone make the updates/s band at least exp(±z √(σ_h² + σ_m²)) around its
    # centre; τ̄ takes no model error where the fit has none for it
    ups = bands["updates_per_s"]
    assert ups["model_sigma"] == 0.2 and "model_sigma" not in bands["mean_staleness"]
    assert math.log(ups["high"] / ups["low"]) >= 2 * Z90 * math.hypot(want.sigma, 0.2) * (1 - 1e-9)
    assert doc["metadata"]["model_error"]["sigma_log"] == {"updates_per_s": 0.2}
    shown = runner.invoke(app, ["show", str(out)])
    assert shown.exit_code == 0, shown.output
    text = "".join(shown.output.split())  # rich wraps cells and lines where the terminal ends
    band = pb.Band(**{k: v for k, v in ups.items() if k not in ("df", "other_placement", "model_sigma")}
                   | {"metric": "updates_per_s", "df": ups["df"] or math.inf, "other": ups.get("other_placement", 0.0),
                      "model": ups["model_sigma"]})
    assert "90%band" in text and "".join(band.text().split()) in text
    assert "fromthecalibration'sgradientsamples" in text
    assert "themodel'serror" in text and "fittedonthecorpus's2machines(m1,m2,simulatorabc)" in text
    back = RunResult.load(out)
    host = pb.host_noise_for(back)
    assert pb.of_result(back, host, model=pb.model_error_for(back, host))["updates_per_s"] == band
    # the fit recorded with the result stands when the corpus's changes
    files.path_in(corpus).unlink()
    assert pb.model_error_for(back, host) == pb.ModelError({"updates_per_s": 0.2}, back.metadata["model_error"]["source"],
                                                           40)


def test_corpus_score_pools_coverage_over_cells_and_metrics() -> None:
    from simasgd.corpus.score import BAND_HEAD, CellScore, MachineScore, band_table

    a = {"sim": {"updates_per_s": [100.0, 104.0, 96.0], "mean_staleness": [1.0, 1.1, 0.9]},
         "measured": {"updates_per_s": [100.0, 150.0, 99.0], "mean_staleness": [1.0, 1.0, 3.0]}}
    b = {"sim": {"updates_per_s": [50.0, 51.0, 49.0]}, "measured": {"updates_per_s": [50.0, 50.5, 49.5]}}
    host = pb.HostNoise(0.05, "test", 5)
    m = MachineScore("m", [CellScore("a", runs=a), CellScore("b", runs=b), CellScore("c", error="boom")], host=host)
    checks = [*pb.check(a["sim"], a["measured"], host).values(), *pb.check(b["sim"], b["measured"], host).values()]
    assert m.band_coverage == pb.coverage(checks) == (sum(c.inside for c in checks), 9)
    assert m.band_sharpness == pytest.approx(pb.sharpness(checks))
    doc = m.to_json()["bands"]
    assert doc["per_metric"]["updates_per_s"]["runs"] == 6 and doc["per_metric"]["updates_to_eps"]["runs"] == 0
    assert set(doc["per_cell"]) == {"a", "b"}
    row = band_table([m])[0]
    assert len(row) == len(BAND_HEAD) and row[2] == "none" and row[3].startswith(f"{m.band_coverage[0]}/9")


# --- two placements of the host's CPUs: the band of a mixture -----------------------------------------------

def test_a_mixture_of_one_placement_is_that_placements_band() -> None:
    runs = [100.0, 110.0, 95.0]
    alone = pb.predictive("updates_per_s", runs, 0.05)
    assert alone is not None
    for parts in ([(1.0, runs)], [(0.7, runs), (0.3, runs)], [(0.7, runs), (0.3, [50.0])]):  # the last: no band
        got = pb.mixture("updates_per_s", parts, 0.05)
        assert got is not None and got.center == alone.center and got.df == alone.df
        assert (got.low, got.high) == pytest.approx((alone.low, alone.high), rel=1e-9)
    assert pb.mixture("updates_per_s", [(0.7, [100.0]), (0.3, runs)], 0.05) is None  # none for the calibrated one


@pytest.mark.parametrize("share", [0.3, 0.02])
def test_a_mixture_of_two_far_placements_has_the_closed_form_quantiles(share: float) -> None:
    # Runs that agree within each placement and a known host σ: two normals on the log scale, 16 σ apart, so each
    # quantile falls in one of them alone. The 5% quantile is in the slow one at 0.05 / share where share > 5%,
    # else in the fast one at (0.05 − share) / (1 − share); the 95% one in the fast one at (0.95 − share) / (1 − share).
    s, fast, slow = 0.1, 100.0, 20.0
    band = pb.mixture("updates_per_s", [(1 - share, [fast] * 3), (share, [slow] * 3)], s)
    assert band is not None and band.other == pytest.approx(share) and band.center == pytest.approx(fast)
    low = (slow * math.exp(s * stats.norm.ppf(0.05 / share)) if share > 0.05
           else fast * math.exp(s * stats.norm.ppf((0.05 - share) / (1 - share))))
    assert band.low == pytest.approx(low, rel=1e-6)
    assert band.high == pytest.approx(fast * math.exp(s * stats.norm.ppf((0.95 - share) / (1 - share))), rel=1e-6)


def test_a_mixture_band_holds_a_further_run_of_either_placement_90_percent_of_the_time() -> None:
    # Each run lands in the far placement with probability 0.3 (its rate 1/5 of the near one's); each placement's
    # R = 3 simulated runs scatter by a log sd of 0.05 and the host by σ = 0.05. The band of the two sets of runs
    # must hold a further run of the mixture 90% of the time; the near placement's band alone, about 70%.
    rng = np.random.default_rng(6)
    reps, runs, s, share = 4000, 3, 0.05, 0.3
    near = np.exp(rng.normal(0, s, size=(reps, runs)))
    far = 0.2 * np.exp(rng.normal(0, s, size=(reps, runs)))
    moved = rng.random(reps) < share
    new = np.where(moved, 0.2, 1.0) * np.exp(rng.normal(0, s, reps) + rng.normal(0, s, reps))
    hits = np.array([pb.mixture("updates_per_s", [(1 - share, a), (share, b)], s).contains(x)  # type: ignore[union-attr]
                     for a, b, x in zip(near, far, new, strict=True)])
    got, se = _coverage(hits)
    assert abs(got - 0.9) <= 3 * se, (got, se)
    alone = np.array([pb.predictive("updates_per_s", a, s).contains(x)  # type: ignore[union-attr]
                      for a, x in zip(near, new, strict=True)])
    assert alone.mean() < 0.75


def test_check_mixes_the_other_placement_only_where_given_a_share() -> None:
    sim = {"updates_per_s": [100.0, 102.0, 98.0]}
    far = {"updates_per_s": [30.0, 31.0, 29.0]}
    measured = {"updates_per_s": [101.0, 30.5, 99.0]}
    host = pb.HostNoise(0.02, "test")
    one = pb.check(sim, measured, host)["updates_per_s"]
    both = pb.check(sim, measured, host, other=far, share=0.3)["updates_per_s"]
    assert one.inside == 2 and both.inside == 3 and both.band.other == pytest.approx(0.3)
    assert pb.check(sim, measured, host, other=far, share=0.0)["updates_per_s"].band == one.band


# --- the model's own error, fitted on other machines ------------------------------------------------------

def test_a_known_model_error_adds_its_variance_to_every_metric() -> None:
    # Simulated runs that all agree: the band is exp(±z √(σ_host² + σ_model²)) around them on a time-based metric,
    # exp(±z σ_model) on τ̄ (no host term), exactly; on the linear scale (a zero among the runs) σ_model is relative.
    x0, host, model = 800.0, 0.06, 0.08
    ups = pb.predictive("updates_per_s", [x0] * 3, host, model_sigma=model)
    assert ups is not None and ups.model == model and math.isinf(ups.df)
    assert ups.width == pytest.approx(2 * Z90 * math.hypot(host, model), rel=1e-12)
    assert ups.center == pytest.approx(x0, rel=1e-12)
    tau = pb.predictive("mean_staleness", [2.0] * 4, host, model_sigma=model)
    assert tau is not None and tau.width == pytest.approx(2 * Z90 * model, rel=1e-12)
    lin = pb.predictive("mean_staleness", [0.0, 2.0, 4.0], model_sigma=model)  # mean 2, sd 2, R = 3
    plain = pb.predictive("mean_staleness", [0.0, 2.0, 4.0])
    assert lin is not None and plain is not None and lin.scale == "linear"
    v_sim, v_model = 4.0 * (1 + 1 / 3), (model * 2.0) ** 2
    df = (v_sim + v_model) ** 2 / (v_sim ** 2 / 2)
    assert lin.high - lin.center == pytest.approx(stats.t.ppf(0.95, df) * math.sqrt(v_sim + v_model), rel=1e-9)
    assert plain.high - plain.center == pytest.approx(stats.t.ppf(0.95, 2) * math.sqrt(v_sim), rel=1e-9)


def test_the_fitted_model_error_is_the_90th_percentile_of_a_known_lognormal_one() -> None:
    # The simulator's runs agree within each cell (no spread of their own), the machine's are theirs times a
    # lognormal factor of σ0 = 0.2: the least σ whose bands hold 90% of the measured runs is the 90th percentile of
    # |log factor| over z, σ0 within its sampling error (the quantile's se: √(p(1-p)/n) over the density of |Y|
    # there, 2φ(z)/σ0) and the grid's step. τ̄ runs measured as simulated need no model error.
    rng = np.random.default_rng(11)
    sigma0, cells, runs = 0.2, 1000, 3
    centers = rng.uniform(100, 5000, size=cells)
    cases = [pb.Case({"updates_per_s": [c] * runs, "mean_staleness": [1.5, 1.6, 1.7]},
                     {"updates_per_s": list(c * np.exp(rng.normal(0, sigma0, runs))),
                      "mean_staleness": [1.55, 1.6, 1.65]})
             for c in centers]
    fitted = pb.fit_model_error(cases, "constructed")
    se = math.sqrt(0.9 * 0.1 / (cells * runs)) / (2 * stats.norm.pdf(Z90) / sigma0) / Z90
    assert abs(fitted.of("updates_per_s") - sigma0) <= 3 * se + pb.MODEL_STEP, (fitted.sigma, se)
    assert fitted.of("mean_staleness") == 0.0 and "time_to_eps" not in fitted.sigma
    assert fitted.cells == cells and fitted.source == "constructed"
    # the bands it gives hold 90% of the runs it was fitted on, and one step less does not
    def share(s: float) -> float:
        model = pb.ModelError({"updates_per_s": s}, "")
        inside, total = pb.coverage(b for k in cases
                                    if (b := pb.check(k.predicted, k.measured, None, model=model).get("updates_per_s")))
        return inside / total
    assert share(fitted.of("updates_per_s")) >= 0.9 > share(fitted.of("updates_per_s") - pb.MODEL_STEP)
    back = pb.ModelError.from_json(json.loads(json.dumps(fitted.to_json())))
    assert back == pb.ModelError(dict(fitted.sigma), fitted.source, fitted.cells)


def test_each_machine_takes_the_model_error_of_the_others_cells() -> None:
    from simasgd.corpus.score import CellScore, MachineScore, band_table, held_out_model_error

    rng = np.random.default_rng(5)

    def machine(name: str, factor_sigma: float) -> MachineScore:
        cells = []
        for i in range(60):
            sim = list(1000.0 * np.exp(rng.normal(0, 0.01, 3)))
            measured = list(1000.0 * np.exp(rng.normal(0, 0.01, 3) + rng.normal(0, factor_sigma)))
            cells.append(CellScore(f"{name}{i}", runs={"sim": {"updates_per_s": sim},
                                                        "measured": {"updates_per_s": measured}}))
        return MachineScore(name, cells)

    exact, off = machine("exact", 0.0), machine("off", 0.3)
    before = exact.band_coverage
    held_out_model_error([exact, off])
    assert exact.model is not None and off.model is not None
    assert exact.model.source == "fitted on off" and off.model.source == "fitted on exact"
    # the exact machine's bands learn the other's misses (σ near 0.3), the other's nothing (its σ from the exact)
    assert exact.model.of("updates_per_s") > 0.15 and off.model.of("updates_per_s") < 0.05
    assert exact.band_coverage[0] >= before[0] and exact.band_sharpness > 3
    assert band_table([exact])[0][2].split(" / ")[1] == f"{exact.model.of('updates_per_s'):.3f}"
    assert exact.to_json()["bands"]["model_error"]["sigma_log"]["updates_per_s"] == exact.model.of("updates_per_s")
    lone = machine("lone", 0.3)
    held_out_model_error([lone])
    assert lone.model is None
    # scored alone, a machine takes the corpus's written fit where that fit did not see it (a machine just added),
    # and none where it did: its bands would learn from the runs they are judged on
    written = pb.ModelError({"updates_per_s": 0.2}, "fitted on the corpus's 2 machines (exact, off)", 120)
    held_out_model_error([lone], (written, ("exact", "off")))
    assert lone.model is written and lone.band_coverage[0] > 0
    seen = machine("lone", 0.3)
    held_out_model_error([seen], (written, ("exact", "lone")))
    assert seen.model is None
    held_out_model_error(two := [machine("a", 0.0), machine("b", 0.3)], (written, ("exact",)))
    assert all(m.model is not None and m.model.source.startswith("fitted on ") and m.model is not written for m in two)


def test_the_model_error_file_round_trips_and_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "model_error.json"
    doc = files.ModelErrorDoc(level=0.9, sigma_log={"mean_staleness": 0.05, "time_to_eps": 0.1}, machines=["a", "b"],
                              cells=97, simulator_commit=None)
    files.write(path, doc)
    assert files.read(path) == doc
    assert pb.corpus_model_error(tmp_path) == pb.ModelError({"mean_staleness": 0.05, "time_to_eps": 0.1},
                                                            "fitted on the corpus's 2 machines (a, b)", 97)
    assert pb.corpus_model_error(tmp_path / "elsewhere") is None
    fit = pb.corpus_fit(tmp_path)
    assert fit is not None and fit[1] == ("a", "b") and fit[0] == pb.corpus_model_error(tmp_path)
    raw = json.loads(path.read_text())
    for change, said in (({"format": "other"}, "format 'other'"), ({"format_version": 9}, "newer than"),
                         ({"sigma_log": {"tau": 0.1}}, "sigma_log.tau"), ({"machines": []}, "machines"),
                         ({"level": 1.5}, "level")):
        path.write_text(json.dumps(raw | change))
        with pytest.raises(files.ModelErrorFileError, match=said) as e:
            files.read(path)
        assert str(path) in str(e.value)
        assert pb.corpus_model_error(tmp_path) is None  # a band without it, not a crash
    path.write_text("{")
    with pytest.raises(files.ModelErrorFileError, match="not a model error file"):
        files.read(path)


def test_each_algorithm_takes_its_own_model_error_where_it_had_cells_enough() -> None:
    # Two algorithms the simulator gets exactly and one it misses by a lognormal factor of σ0: the fit gives the
    # missed one about σ0 and the exact ones 0, where the pooled σ is in between; an algorithm with fewer than
    # MIN_ALGORITHM_CELLS cells (or none) takes the pooled σ.
    rng = np.random.default_rng(12)
    sigma0 = 0.3

    def cases(algorithm: str, n: int, factor: float) -> list[pb.Case]:
        return [pb.Case({"updates_per_s": [100.0] * 3},
                        {"updates_per_s": list(100.0 * np.exp(rng.normal(0, factor, 3)))}, algorithm=algorithm)
                for _ in range(n)]

    few = cases("rare", pb.MIN_ALGORITHM_CELLS - 1, sigma0)
    fitted = pb.fit_model_error(cases("exact", 300, 0.0) + cases("exact2", 300, 0.0) + cases("off", 300, sigma0)
                                + few, "constructed")
    assert set(fitted.by_algorithm) == {"exact", "exact2", "off"}
    se = math.sqrt(0.9 * 0.1 / 900) / (2 * stats.norm.pdf(Z90) / sigma0) / Z90
    assert abs(fitted.of("updates_per_s", "off") - sigma0) <= 3 * se + pb.MODEL_STEP
    assert fitted.of("updates_per_s", "exact") == 0.0 == fitted.of("updates_per_s", "exact2")
    pooled = fitted.of("updates_per_s")
    assert 0.0 < pooled < fitted.of("updates_per_s", "off")
    assert fitted.of("updates_per_s", "rare") == pooled == fitted.of("updates_per_s", None)
    assert fitted.of("mean_staleness", "off") == 0.0  # a metric nobody judged: no error
    assert "(off's)" in fitted.text("off") and "(" not in fitted.text("rare")
    # the bands a case takes are its algorithm's
    case = few[0]
    own = pb.check(case.predicted, case.measured, None, model=fitted, algorithm="off")["updates_per_s"]
    assert own.band.model == fitted.of("updates_per_s", "off")
    assert pb.ModelError.from_json(json.loads(json.dumps(fitted.to_json()))) == fitted


def test_an_algorithm_takes_its_regimes_model_error_where_each_regime_had_cells_enough() -> None:
    # One algorithm the simulator gets exactly where each thread has a CPU and misses by a lognormal factor of σ0
    # where the OS time-shares its threads: each regime's σ is that regime's (0, and σ0 within the 90th
    # percentile's sampling error), the algorithm's own over both in between; a case whose regime is not known
    # takes the algorithm's, and an algorithm whose regime had too few cells takes the algorithm's too.
    rng = np.random.default_rng(13)
    sigma0, n = 0.3, 400

    def cases(algorithm: str, shared: bool, count: int, factor: float) -> list[pb.Case]:
        return [pb.Case({"updates_per_s": [100.0] * 3},
                        {"updates_per_s": list(100.0 * np.exp(rng.normal(0, factor, 3)))},
                        algorithm=algorithm, shared=shared)
                for _ in range(count)]

    fitted = pb.fit_model_error(cases("mutex", False, n, 0.0) + cases("mutex", True, n, sigma0)
                                + cases("hogwild", False, n, 0.0)
                                + cases("hogwild", True, pb.MIN_ALGORITHM_CELLS - 1, sigma0), "constructed")
    se = math.sqrt(0.9 * 0.1 / (3 * n)) / (2 * stats.norm.pdf(Z90) / sigma0) / Z90
    assert abs(fitted.of("updates_per_s", "mutex", True) - sigma0) <= 3 * se + pb.MODEL_STEP
    assert fitted.of("updates_per_s", "mutex", False) == 0.0
    both = fitted.of("updates_per_s", "mutex")
    assert 0.0 < both < fitted.of("updates_per_s", "mutex", True)
    assert set(fitted.by_sharing) == {"mutex", "hogwild"} and set(fitted.by_sharing["hogwild"]) == {"cpu_each"}
    assert fitted.of("updates_per_s", "hogwild", True) == fitted.of("updates_per_s", "hogwild")
    assert "threads time-shared" in fitted.text("mutex", True) and "a CPU each" in fitted.text("mutex", False)
    assert "time-shared" not in fitted.text("hogwild", True)
    # a band takes its regime's σ, and the fit comes back from JSON and from the corpus's file as it was
    case = cases("mutex", True, 1, sigma0)[0]
    band = pb.check(case.predicted, case.measured, None, model=fitted, algorithm="mutex", shared=True)
    assert band["updates_per_s"].band.model == fitted.of("updates_per_s", "mutex", True)
    assert pb.ModelError.from_json(json.loads(json.dumps(fitted.to_json()))) == fitted


def test_a_simulated_result_says_whether_its_threads_outnumber_the_cpus() -> None:
    from simasgd.sim.backend import run_once
    from simasgd.spec import loader

    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.toml"

    def simulated(workers: int) -> RunResult:
        sc = loader.load(scenario, [f"workers.count={workers}", 'machine.preset="laptop-2core"', "sim.numerics=false",
                                    "stop.max_updates=20", "repeats=1"])
        return run_once(sc, 0)

    four, two = simulated(4), simulated(2)
    assert four.metadata["machine"]["cpus"] == 2
    assert pb.shared_of(four) is True and pb.shared_of(two) is False
    unknown = RunResult(scenario=four.scenario, backend="cpu", runs=four.runs, updates=four.updates,
                        curve=four.curve, metadata={"machine": {"name": "this"}})
    assert pb.shared_of(unknown) is None  # not recorded (a measured result): the algorithm's σ over both regimes


def test_a_model_error_file_of_format_1_reads_with_no_regimes(tmp_path: Path) -> None:
    # written before the regimes were fitted: every algorithm takes its σ over both
    (tmp_path / files.NAME).write_text(json.dumps({
        "format": files.FORMAT, "format_version": 1, "level": 0.9, "sigma_log": {"updates_per_s": 0.2},
        "by_algorithm": {"mutex": {"updates_per_s": 0.3}}, "machines": ["a"], "cells": 10}))
    model = pb.corpus_model_error(tmp_path)
    assert model is not None and model.by_sharing == {}
    assert model.of("updates_per_s", "mutex", True) == 0.3 == model.of("updates_per_s", "mutex", False)
