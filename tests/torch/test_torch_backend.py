"""Backend ``torch``: worker processes training the user's module; rows, errors, calibration, compare.

The rows contract and θ against the update rule are held by ``tests/conformance`` (the backend's
algorithms are discovered there); these tests run the user's own module through it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from executors.cpu.runner import ExecutorError
from simasgd.cli import app
from simasgd.machines.profile import workload_key
from simasgd.machines.profile_model import Profile
from simasgd.runs import backends
from simasgd.sim.profile_tables import profile_gradient, representative

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scenarios" / "torch" / "cnn.toml"
FEW = ["-s", "stop.max_updates=150", "-s", "stop.eval_every_updates=50", "-s", "repeats=1"]


@pytest.fixture(scope="module")
def runs(torch_scenario):
    """One run per algorithm of the torch module on 2 worker processes (shared by the tests that read them)."""
    out = {}
    for name in ("hogwild", "mutex", "sync"):
        sc = torch_scenario(algorithm={"name": name}, stop={"max_updates": 100, "eval_every_updates": 25})
        out[name] = (sc, backends.load("torch").run_once(sc, 0))
    return out


@pytest.mark.hardware
@pytest.mark.parametrize("name", ["hogwild", "mutex", "sync"])
def test_processes_train_the_users_module_with_the_row_contract(runs, name) -> None:
    sc, res = runs[name]
    run, u = res.runs[0], res.updates
    assert res.backend == "torch" and run.extra["processes"] == 2 and run.extra["intra_op_threads"] == 1
    assert set(u["worker"]) == {0, 1}                     # both processes recorded rows
    assert (u["staleness"] >= 0).all() and (u["t_write"] >= u["t_read"]).all()
    n = run.updates
    if name == "sync":                                    # one row per gradient, two gradients a version
        assert (u.groupby("version").size() == 2).all() and (u["staleness"] == 0).all()
    else:                                                 # one row per update, each version once
        np.testing.assert_array_equal(np.sort(u["version"]), np.arange(1, n + 1))
    if name == "mutex":
        assert (u["lock_wait_s"] >= 0).all()
    assert n >= sc.stop.max_updates and run.final_loss < run.initial_loss   # the module learned


@pytest.mark.hardware
def test_a_worker_that_fails_is_named(torch_scenario) -> None:
    sc = torch_scenario({"module": "torch_factories:fails_in_workers"})
    with pytest.raises(ExecutorError, match="worker [01] failed: RuntimeError: forward failed in a worker"):
        backends.load("torch").run_once(sc, 0)


def test_calibrated_gradient_times_feed_the_simulator(torch_scenario) -> None:
    """``calibrate --scenario`` measures a torch workload; the simulator finds it under its key."""
    from executors.calibration.gradient import gradient_times

    sc = torch_scenario()
    table = gradient_times(sc.workload, 0, sc.base_dir, 0.05)
    assert table["batch_size"] == 8 and table["dim"] == 650 and table["median_s"] > 0
    assert len(table["samples_s"]) >= 20 and "cycle_samples_s" not in table
    conc = table.get("concurrent", {})
    if len(__import__("os").sched_getaffinity(0)) >= 2:
        assert len(conc["k2"]) >= 20 and conc["k2_median_s"] > 0
    profile = Profile.from_doc({"gradient": {workload_key(sc.workload): table}}, "test")
    d = profile_gradient(profile, sc.workload)
    # the kept calls, an interrupted one among them at the share the mean over all the timed calls gives it
    whole = (table["mean_s"], table["median_s"], table["p90_s"])
    assert d is not None and np.isclose(d.mean, representative(np.asarray(table["samples_s"]), *whole).mean())
    assert workload_key(sc.workload) == "torch-torch_factories:tiny-digits-b8-float32"


@pytest.mark.slow
@pytest.mark.hardware
def test_the_readme_example_runs_on_sim_and_torch_and_compare_prints_the_table(tmp_path) -> None:
    """README: `simasgd run scenarios/torch/cnn.toml --backend sim|torch`, then `simasgd compare` of the two
    (the folders form; the calibrated form is notebook 05's, tests/test_notebooks.py)."""
    runner = CliRunner()
    for backend in ("sim", "torch"):
        res = runner.invoke(app, ["run", str(EXAMPLE), "--backend", backend, "--out", str(tmp_path / backend), *FEW])
        assert res.exit_code == 0, res.output
        summary = json.loads((tmp_path / backend / "summary.json").read_text())
        assert summary["backend"] == backend and summary["runs"][0]["updates"] >= 150
    res = runner.invoke(app, ["compare", "--results", str(tmp_path / "sim"), str(tmp_path / "torch"),
                              "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert "sim (1 runs) against torch (1 runs)" in res.output
    assert all(m in res.output for m in ("mean_staleness_rel_err", "ks", "updates_per_s_rel_err"))
    fid = json.loads((tmp_path / "cmp" / "fidelity.json").read_text())
    assert fid["predicted"]["backend"] == "sim" and fid["reference"]["backend"] == "torch"


@pytest.mark.hardware
def test_compare_adds_the_modules_gradient_times_to_an_existing_profile(torch_scenario, tmp_path,
                                                                         monkeypatch) -> None:
    """A machine calibrated before (no table for this module): compare measures the module and keeps the rest."""
    from simasgd.evaluation import fidelity
    from simasgd.machines import profile

    path = tmp_path / "this.toml"
    profile.write({"machine": {"sockets": 1}, "gradient": {"mlp-64-32-10-digits-b16-float64": {"median_s": 1e-5}}},
                  path)
    monkeypatch.setenv("SIMASGD_PROFILE", str(path))
    sc = torch_scenario()
    assert fidelity.ensure_profile(sc, quick=True) == path
    tables = profile.read(path).to_doc()["gradient"]
    assert tables["mlp-64-32-10-digits-b16-float64"] == {"median_s": 1e-5}
    assert tables[workload_key(sc.workload)]["median_s"] > 0 and tables[workload_key(sc.workload)]["batch_size"] == 8
