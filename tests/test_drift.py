"""simasgd/evaluation/drift.py: the gradient and placement re-measured before a compare, the refreshed prediction, and
whether a miss is the model's or a stale calibration's — with a fake probe (closed forms), in-process through
run_and_compare and the CLI, and once with the real probe (slow)."""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from simasgd.evaluation import drift, fidelity
from simasgd.evaluation.fidelity import GOALS, Metric
from simasgd.machines import machine, profile
from simasgd.machines.profile import workload_key
from simasgd.sim import profile_tables
from simasgd.spec import loader
from simasgd.spec.scenario import WorkloadConfig

MACHINE = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1, "local_latency_ns": 90.0,
           "remote_latency_ns": 90.0, "mem_bandwidth_gbs": 10.0, "link_bandwidth_gbs": 10.0,
           "gflops_per_core": 1.0, "quantum_s": 0.004, "context_switch_s": 2e-6}
WL = WorkloadConfig(model="mlp", layers=[64, 32, 10], dataset="digits", batch_size=16)
OTHER = WL.model_copy(update={"layers": [64, 10]})
CREATED = "2026-01-01T10:00:00Z"


def _samples(seed: int, n: int = 200, scale: float = 150e-6) -> list[float]:
    return (scale * np.random.default_rng(seed).lognormal(0.0, 0.2, n)).tolist()


def _table(seed: int, batch: int = 16) -> dict[str, Any]:
    s = _samples(seed)
    return {"batch_size": batch, "samples_s": s, "median_s": float(np.median(s)), "mean_s": float(np.mean(s)),
            "cycle_snapshot_median_s": 3e-6, "gflops": 1.5,
            "concurrent": {"k2": _samples(seed + 2, scale=170e-6), "k2_median_s": 170e-6, "k2_n": 400}}


def _doc() -> dict[str, Any]:
    return {"machine": dict(MACHINE), "calibration": {"created": CREATED}, "c2c": {"latency_ns": 30.0},
            "gradient": {workload_key(WL): _table(1), workload_key(OTHER): _table(9)}}


def _scenario(batch: int = 16, **over: Any) -> Any:
    return loader.from_dict({
        "name": "drift", "seed": 3, "repeats": 2, "workers": {"count": 2, "placement": "os"},
        "workload": {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": batch},
        "algorithm": {"name": "mutex"}, "stop": {"max_updates": 200, "eval_every_updates": 50},
        "sim": {"numerics": False}, **over})


def _probe(gradient_s: float | None, c2c_ns: float | None = 31.0, calls: list[str] | None = None) -> drift.Probe:
    def probe(workload: Any, seed: int, base_dir: str | None, seconds: float) -> dict[str, Any]:
        if calls is not None:
            calls.append("probe")
        return {"gradient_median_s": gradient_s, "c2c_ns": c2c_ns}
    return probe


# --- the Drift record, closed forms -----------------------------------------------------------------------


@pytest.mark.parametrize("factor", [0.8, 1.05, 1.24])
@pytest.mark.parametrize("batch", [16, 32])
def test_a_gradient_scaled_by_a_known_factor_gives_exactly_that_ratio(tmp_path: Path, factor: float,
                                                                       batch: int) -> None:
    path = profile.write(_doc(), tmp_path / "this.toml")
    # the simulator reads batch 32 from the batch-16 table × 2: the probe's median is compared with that
    now = float(np.median(np.asarray(_table(1)["samples_s"]) * (batch / 16) * factor))
    d = drift.measure(_scenario(batch), path, _probe(now, 31.0))
    assert d.ratio == pytest.approx(factor, rel=1e-12)
    assert d.drifted is (abs(factor - 1) > drift.THRESHOLD)
    assert d.calibrated_gradient_s == pytest.approx(float(np.median(_table(1)["samples_s"])) * batch / 16, rel=1e-12)
    assert d.calibrated_c2c_ns == 30.0 and d.c2c_ns == 31.0 and not d.moved
    assert d.calibrated_at == CREATED and d.workload == workload_key(_scenario(batch).workload)
    back = drift.Drift.from_json(d.to_json())
    assert back == d and back.to_json()["ratio"] == pytest.approx(factor, rel=1e-12)


def test_placement_age_and_the_gradient_line() -> None:
    d = drift.Drift(workload="w", gradient_s=124e-6, calibrated_gradient_s=100e-6, c2c_ns=170.0,
                    calibrated_c2c_ns=30.0, calibrated_at=CREATED, measured_at="2026-01-01T12:00:00+00:00")
    assert d.moved and d.age_s == 7200.0
    assert d.gradient_line().startswith("gradient 24% slower than at calibration 2 h ago")
    assert "another placement" in d.placement_line()
    assert not replace(d, c2c_ns=59.0).moved and replace(d, c2c_ns=61.0).moved  # the 2× of executors.c2c
    assert replace(d, gradient_s=80e-6).gradient_line().startswith("gradient 20% faster")
    assert replace(d, c2c_ns=None).moved is False
    assert math.isnan(replace(d, gradient_s=None).ratio) and not replace(d, gradient_s=None).drifted
    assert drift.ago(None) == "(date unknown)" and drift.ago(35 * 60) == "35 min ago"
    assert drift.ago(3 * 86400) == "3 days ago"


def test_a_failing_probe_leaves_the_figures_unknown_and_says_why(tmp_path: Path) -> None:
    path = profile.write(_doc(), tmp_path / "this.toml")

    def broken(*_: Any) -> dict[str, Any]:
        raise RuntimeError("no CPU today")

    d = drift.measure(_scenario(), path, broken)
    assert d.gradient_s is None and math.isnan(d.ratio) and "no CPU today" in (d.note or "")


# --- refreshing: the simulator's gradient distribution × the ratio ----------------------------------------


def _slowdown(table: Any) -> float:
    """Two gradients at once against one alone: the medians of a table's k = 2 and one-thread samples."""
    return float(np.median(table.concurrent.samples(2)) / np.median(table.samples_s))


@pytest.mark.parametrize("at_once", [1, 2])
def test_refresh_rescales_the_sims_gradient_mean_by_exactly_the_ratio(at_once: int) -> None:
    doc, r = profile.typed(_doc()), 1.24
    fresh = drift.refreshed_profile(doc, WL, r)
    before = profile_tables.profile_gradient(doc, WL, at_once)
    after = profile_tables.profile_gradient(fresh, WL, at_once)
    assert before is not None and after is not None
    assert after.mean == pytest.approx(r * before.mean, rel=1e-12)
    assert after.variance == pytest.approx(r * r * before.variance, rel=1e-12)
    # the slowdown of k gradients at once is a ratio of gradient times: unchanged
    a, b = (_slowdown(profile_tables.workload_table(d, WL)[1]) for d in (doc, fresh))
    assert b == pytest.approx(a, rel=1e-12)


def test_refresh_touches_only_this_workloads_gradient_times_and_copies() -> None:
    given = profile.typed(_doc())
    doc = given.to_doc()
    fresh = drift.refreshed_profile(given, WL, 1.5).to_doc()
    assert given.to_doc() == doc, "the profile given is left as it was"
    t, t0 = fresh["gradient"][workload_key(WL)], doc["gradient"][workload_key(WL)]
    assert t["median_s"] == pytest.approx(1.5 * t0["median_s"]) and t["gflops"] == pytest.approx(1.0)
    assert t["concurrent"]["k2_median_s"] == pytest.approx(1.5 * 170e-6)
    assert t["cycle_snapshot_median_s"] == t0["cycle_snapshot_median_s"]  # a model step, not the gradient
    assert t["concurrent"]["k2_n"] == 400  # a count of calls, not a time
    assert fresh["gradient"][workload_key(OTHER)] == doc["gradient"][workload_key(OTHER)]
    assert {k: v for k, v in fresh.items() if k != "gradient"} == {k: v for k, v in doc.items() if k != "gradient"}


def test_using_profile_sets_and_restores_the_profile_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(machine.PROFILE_ENV, "/elsewhere.toml")
    with drift.using_profile(tmp_path / "p.toml"):
        assert machine.profile_path() == (tmp_path / "p.toml").resolve()
    assert machine.profile_path() == Path("/elsewhere.toml")
    with drift.using_profile(None):
        assert machine.profile_path() == Path("/elsewhere.toml")


# --- the verdict: model error or a stale calibration ------------------------------------------------------


@dataclass
class Fid:
    """What drift.verdict reads of a comparison."""

    overall: dict[str, Metric]
    info: dict[str, Any] = field(default_factory=dict)
    phases: Any = None

    @property
    def verdicts(self) -> dict[str, bool | None]:
        return {k: self.overall[k].ok for k in GOALS if k in self.overall}


def _fid(updates: float, ks: float = 0.02) -> Fid:
    values = {"mean_staleness_rel_err": 0.01, "ks": ks, "updates_per_s_rel_err": updates,
              "updates_to_eps_rel_err": 0.02}
    return Fid({k: Metric(v, goal=GOALS[k]) for k, v in values.items()})


D = drift.Drift(workload="w", gradient_s=124e-6, calibrated_gradient_s=100e-6, c2c_ns=31.0,
                calibrated_c2c_ns=30.0, calibrated_at=CREATED, measured_at="2026-01-01T12:00:00+00:00")


def test_an_updates_miss_within_the_drift_is_the_calibrations() -> None:
    f = _fid(0.22)  # the stale samples 24% too fast: (1 + 0.22) / 1.24 − 1 = −1.6%, within 10%
    v = drift.verdict(f, D)
    assert v is not None and v.kind == "stale" and "within the drift" in v.line and "24% slower" in v.line
    assert drift.at_speed(0.22, 1.24) == pytest.approx(1.22 / 1.24 - 1)
    f.info["drift"] = D.to_json()
    assert drift.within_drift(f)


def test_an_updates_miss_beyond_the_drift_is_the_models() -> None:
    v = drift.verdict(_fid(0.50), D)  # 1.5 / 1.24 − 1 = +21%
    assert v is not None and v.kind == "model" and v.line.startswith("model error: updates/s +50%")
    f = _fid(0.22, ks=0.3)  # updates/s within the drift, but KS is no gradient speed's
    v = drift.verdict(f, D)
    assert v is not None and v.kind == "model" and "KS 0.300" in v.line and "within the drift" in v.line
    f.info["drift"] = D.to_json()
    assert not drift.within_drift(f)


def test_a_refreshed_prediction_that_meets_the_goals_names_the_stale_calibration() -> None:
    v = drift.verdict(_fid(0.02), replace(D, refreshed=True))
    assert v is not None and v.kind == "stale" and "prediction refreshed" in v.line
    assert "would miss (by up to +26%)" in v.line  # 1.02 × 1.24 − 1
    v = drift.verdict(_fid(-0.18), replace(D, refreshed=True))
    assert v is not None and v.kind == "model" and v.line.startswith("model error: updates/s -18%")


def test_a_current_calibration_leaves_the_misses_to_the_model() -> None:
    now = replace(D, gradient_s=103e-6)
    v = drift.verdict(_fid(-0.18), now)
    assert v is not None and v.kind == "model" and "calibration current" in v.line and "+3%" in v.line
    v = drift.verdict(_fid(0.02), now)
    assert v is not None and v.kind == "current"
    assert drift.verdict(_fid(0.02)) is None  # nothing recorded, nothing said


def test_cpus_in_another_placement_cannot_be_told_from_model_error() -> None:
    v = drift.verdict(_fid(-0.18), replace(D, c2c_ns=170.0, gradient_s=101e-6))
    assert v is not None and v.kind == "stale" and "cannot be told from model error" in v.line
    v = drift.verdict(_fid(0.02), replace(D, gradient_s=None))
    assert v is not None and v.kind == "unchecked"


# --- in-process: run_and_compare and the CLI with a fake probe and a fake measuring backend ---------------


@pytest.fixture(name="host")
def host_fixture(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Backends ``host``, which measures this host, and ``quiet``, which measures nothing here — each the
    simulator on a preset machine, standing in for real threads — and the order in which the probe, ``host``
    and the simulator on the profile ran."""
    from simasgd.runs import backends
    from simasgd.sim import backend as sim

    calls: list[str] = []

    def backend(name: str, measures: bool) -> types.ModuleType:
        def run_once(sc: Any, run: int, advance: Any = None) -> Any:
            calls.append(name)
            preset = sc.machine.model_copy(update={"preset": "laptop-2core"})
            r = sim.run_once(sc.model_copy(update={"machine": preset}), run, advance)
            r.backend = name
            return r

        mod = types.ModuleType(f"fake_{name}_backend")
        mod.NAME, mod.ALGORITHMS, mod.MEASURES_HOST, mod.NEEDS_PROFILE = name, sim.ALGORITHMS, measures, False
        mod.run_once = run_once
        return mod

    for mod in (backend("host", True), backend("quiet", False)):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        monkeypatch.setitem(backends.BACKENDS, mod.NAME, mod.__name__)
    real = sim.run_once

    def sim_once(sc: Any, run: int, advance: Any = None) -> Any:
        if sc.machine.preset == "this":
            calls.append("sim")
        return real(sc, run, advance)

    monkeypatch.setattr(sim, "run_once", sim_once)
    return calls


@pytest.fixture(name="this_profile")
def this_profile_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = profile.write(_doc(), tmp_path / "this.toml")
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    return path


def _median() -> float:
    return float(np.median(_table(1)["samples_s"]))


@pytest.mark.slow
def test_compare_refreshes_the_prediction_in_a_copy_and_records_the_drift(host: list[str], this_profile: Path,
                                                                         tmp_path: Path) -> None:
    before = this_profile.read_bytes()
    fid, res = fidelity.run_and_compare(_scenario(), ["sim", "host"], tmp_path / "c", refresh=True,
                                        probe=_probe(1.3 * _median(), calls=host))
    assert host[0] == "probe" and host[1] == "host" and "sim" in host[2:], "probe, the measured side, the sim"
    assert list(res) == ["sim", "host"]
    assert this_profile.read_bytes() == before, "the user's profile is never rewritten"
    copy = tmp_path / "c" / drift.REFRESHED_PROFILE
    doc = profile.read(copy).workload_tables()[workload_key(WL)]
    ours = profile.read(this_profile).workload_tables()[workload_key(WL)]
    assert doc.samples_s == pytest.approx([1.3 * x for x in ours.samples_s or []])
    assert res["sim"].metadata["profile"]["path"] == str(copy.resolve())
    assert machine.profile_path() == this_profile  # restored after the simulator's runs
    saved = fidelity.load_json(tmp_path / "c" / "fidelity.json")["metadata"]["drift"]
    assert saved["refreshed"] is True and saved["ratio"] == pytest.approx(1.3) and saved["drifted"] is True
    assert saved["verdict"]["kind"] in ("stale", "model") and saved["verdict"]["line"]
    assert drift.recorded(fid) == drift.Drift.from_json(saved)


@pytest.mark.slow
def test_no_refresh_keeps_the_calibrated_samples(host: list[str], this_profile: Path, tmp_path: Path) -> None:
    """The default: the drift is measured and recorded, the simulator runs on the calibrated samples."""
    fid, res = fidelity.run_and_compare(_scenario(), ["sim", "host"], tmp_path / "c",
                                        probe=_probe(1.3 * _median()))
    assert not (tmp_path / "c" / drift.REFRESHED_PROFILE).exists()
    assert res["sim"].metadata["profile"]["path"] == str(this_profile.resolve())
    d = drift.recorded(fid)
    assert d is not None and d.drifted and not d.refreshed
    # within the threshold nothing is refreshed either
    fid, _ = fidelity.run_and_compare(_scenario(), ["sim", "host"], tmp_path / "d", refresh=True,
                                      probe=_probe(1.05 * _median()))
    assert not (tmp_path / "d" / drift.REFRESHED_PROFILE).exists()
    assert drift.recorded(fid) is not None and not drift.recorded(fid).refreshed


@pytest.mark.slow
def test_against_a_backend_that_measures_nothing_there_is_no_drift_check(host: list[str], this_profile: Path,
                                                                       tmp_path: Path) -> None:
    sc = _scenario(machine={"preset": "this"})
    fid, _ = fidelity.run_and_compare(sc, ["sim", "quiet"], tmp_path / "c", probe=_probe(2 * _median()))
    assert "drift" not in fid.info and not (tmp_path / "c" / drift.REFRESHED_PROFILE).exists()


@pytest.mark.slow
def test_the_compare_command_prints_the_drift_and_its_verdict(host: list[str], this_profile: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.cli import app
    from simasgd.commands import compare as command

    monkeypatch.setattr(command, "_probe", _probe(1.3 * _median()))
    sc = tmp_path / "s.toml"
    sc.write_text('name = "drift"\nseed = 3\nrepeats = 2\n[workers]\ncount = 2\n[workload]\nmodel = "mlp"\n'
                  'layers = [64, 32, 10]\ndataset = "digits"\nbatch_size = 16\n[algorithm]\nname = "mutex"\n'
                  '[stop]\nmax_updates = 200\neval_every_updates = 50\n[sim]\nnumerics = false\n')
    res = CliRunner().invoke(app, ["compare", str(sc), "-b", "sim,host", "--out", str(tmp_path / "c"),
                                   "--no-refresh"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "drift since calibration: gradient 30% slower than at calibration" in out
    assert "calibration stale" in out or "model error" in out
    assert not (tmp_path / "c" / drift.REFRESHED_PROFILE).exists()
    saved = fidelity.load_json(tmp_path / "c" / "fidelity.json")["metadata"]["drift"]
    assert saved["refreshed"] is False and saved["verdict"]["line"].split(":")[0] in out


# --- the real probe ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_real_probe_times_a_gradient_and_the_hand_off() -> None:
    from executors.calibration.drift_probe import probe

    got = probe(WL, 0, None, 0.05)
    g = got["gradient_median_s"]
    assert isinstance(g, float) and 1e-7 < g < 0.1  # a 64-32-10 MLP on 16 rows: microseconds
    assert got["c2c_ns"] is None or 0 < got["c2c_ns"] < 1e6
    assert drift.load_probe() is probe
