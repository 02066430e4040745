"""The fidelity corpus: compact cells that judge a prediction as `fidelity.compare` judges it."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.corpus import score, store
from simasgd.evaluation import analysis, fidelity, phases
from simasgd.machines import machine, profile
from simasgd.runs import backends
from simasgd.runs.results import RunResult
from simasgd.spec import loader

MACHINE = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1, "local_latency_ns": 90.0,
           "remote_latency_ns": 90.0, "mem_bandwidth_gbs": 10.0, "link_bandwidth_gbs": 10.0,
           "gflops_per_core": 1.0, "quantum_s": 0.004, "context_switch_s": 2e-6}
PROFILE = {"machine": MACHINE, "calibration": {"created": "2026-01-02T03:04:05Z", "quick": True}}
SCENARIO = {"name": "cell-hogwild", "seed": 5, "repeats": 3, "workers": {"count": 3},
            "algorithm": {"name": "hogwild"},
            "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3},
                       "read": {"dist": "deterministic", "mean_s": 2e-5},
                       "update": {"dist": "deterministic", "mean_s": 2e-5}},
            "sim": {"numerics": False}, "stop": {"max_updates": 600}}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path, Path]:
    """A 'measured' result (the simulator's, relabelled) on a small profile, saved as a results folder."""
    root = tmp_path_factory.mktemp("corpus")
    prof = profile.write(PROFILE, root / "this.toml")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(machine.PROFILE_ENV, str(prof))
        sc = loader.from_dict({**SCENARIO, "machine": {"preset": "this"}})
        result = backends.run(sc, "sim", repeats=3)
    result = dataclasses.replace(result, backend="cpu")
    result.save(root / "cells" / "hogwild" / "cpu")
    return result, prof, root


def test_pack_round_trips_integer_arrays() -> None:
    a = np.arange(3 * 700, dtype=np.uint16).reshape(3, 700) % 17
    b = store.unpack(json.loads(json.dumps(store.pack(a))))
    assert b.dtype == a.dtype and b.shape == a.shape and (b == a).all()


def test_rows_cut_counts_what_the_rows_say(measured: tuple[RunResult, Path, Path]) -> None:
    result, _, _ = measured
    u = analysis.applied(result)
    for run in (0, 1):
        rows = store.RunRows.of(result.updates, run, segments=16)
        mine = u[u["run"] == run]
        full, n, t = rows.cut(None)
        assert n == len(mine) and t == pytest.approx(mine["t_write"].max())
        assert (full == np.bincount(mine["staleness"], minlength=len(full))).all()
        v = int(rows.ends[5])  # a span's end: the cut is exact there
        part, n5, t5 = rows.cut(v)
        kept = mine[mine["version"] <= v]
        assert n5 == len(kept) and t5 == pytest.approx(kept["t_write"].max())
        assert (part == np.bincount(kept["staleness"], minlength=len(part))).all()
        assert sum(c.sum() for c in rows.per_worker.values()) == len(mine)


def test_a_prediction_judged_by_the_cell_as_compare_judges_it(measured: tuple[RunResult, Path, Path]) -> None:
    result, _, _ = measured
    cell = store.Cell.of(result)
    same = score.judge(cell, result)  # the reference against itself: no error at all
    assert all(same.values[k] == 0.0 for k in ("mean_staleness_rel_err", "ks", "updates_per_s_rel_err"))
    assert same.met and same.ceiling == fidelity.self_prediction(result, len(result.runs))
    v = int(min(r.ends[len(r.ends) // 2] for r in cell.rows))  # a prediction that stopped half-way
    short = dataclasses.replace(analysis.up_to_version(result, v), backend="sim")
    cut = min(int(r.ends[np.searchsorted(r.ends, v, side="right") - 1]) for r in cell.rows)
    judged = score.judge(cell, short)
    want = fidelity.compare(short, analysis.up_to_version(result, v), resamples=0, check=False)
    # the corpus cuts its runs at spans' ends at or before v: the same errors where those ends are v
    if cut == v:
        for k in fidelity.GOALS:
            a, b = judged.values[k], want.overall[k].value
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-6), k  # float32 times
    else:
        assert judged.values["ks"] == pytest.approx(want.overall["ks"].value, abs=0.05)


def test_entry_saves_loads_and_refuses_to_mix(measured: tuple[RunResult, Path, Path], tmp_path: Path) -> None:
    result, prof, _ = measured
    folder = tmp_path / "res"
    result.save(folder)
    entry = store.entry_from([folder], profile.read(prof), "m1")
    path = store.save(entry, tmp_path / "corpus")
    back = store.load(path)
    assert back.name == "m1" and back.profile == entry.profile and len(back.cells) == 1
    a, b = back.cells[0], entry.cells[0]
    assert [r.to_json() for r in a.runs] == [r.to_json() for r in b.runs]
    assert all((x.counts == y.counts).all() and (x.ends == y.ends).all() for x, y in zip(a.rows, b.rows, strict=True))
    other = dict(entry.profile, machine=dict(MACHINE, gflops_per_core=2.0))
    with pytest.raises(store.CorpusError, match="another profile"):
        store.merged(back, store.entry_from([folder], other, "m1"))
    with pytest.raises(store.CorpusError, match="machine name"):
        store.save(dataclasses.replace(entry, name="Bad Name"), tmp_path / "corpus")
    with pytest.raises(store.CorpusError, match="measured twice"):
        store.save(dataclasses.replace(entry, cells=entry.cells * 2), tmp_path / "corpus")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps(doc | {"format_version": store.FORMAT_VERSION + 1}).encode()))
    with pytest.raises(store.CorpusError, match="format version"):
        store.load(path)


def test_measured_folders_leave_the_simulator_out(measured: tuple[RunResult, Path, Path], tmp_path: Path) -> None:
    result, _, root = measured
    dataclasses.replace(result, backend="sim").save(root / "cells" / "hogwild" / "sim")
    assert store.measured_folders([root / "cells"]) == [root / "cells" / "hogwild" / "cpu"]
    with pytest.raises(store.CorpusError, match="no measured results"):
        store.measured_folders([root / "cells" / "hogwild" / "sim"])


def _added(root: Path, prof: Path, corpus: Path, name: str) -> Path:
    """The fixture's measured cells added to ``corpus`` as machine ``name`` through the CLI; the corpus folder."""
    res = CliRunner().invoke(app, ["corpus", "add", str(root / "cells"), "--profile", str(prof),
                                   "--machine", name, "--corpus", str(corpus)])
    assert res.exit_code == 0, res.output
    return corpus


@pytest.mark.slow
def test_cli_add_list_score(measured: tuple[RunResult, Path, Path], tmp_path: Path) -> None:
    """The simulator scored against its own runs meets every cell; the ceiling is their self-prediction."""
    result, prof, root = measured
    corpus = _added(root, prof, tmp_path / "corpus", "tiny")
    res = CliRunner().invoke(app, ["corpus", "list", "--corpus", str(corpus)])
    assert res.exit_code == 0 and "tiny" in res.output
    out = tmp_path / "s.json"
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "-j", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())["machines"][0]
    assert doc["met"] == doc["cells"] == 1
    assert doc["ceiling"] == pytest.approx(fidelity.self_prediction(result, 3))
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "--machine", "nope"])
    assert res.exit_code == 2 and "no machine named nope" in res.output
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "--write-fit"])
    assert res.exit_code == 2 and "fitted over two or more" in res.output


def test_the_model_error_is_held_out_per_machine_and_written_over_all(measured: tuple[RunResult, Path, Path],
                                                                      tmp_path: Path) -> None:
    from simasgd.formats import model_error_file

    _, prof, root = measured
    corpus = tmp_path / "corpus"
    for name in ("tiny", "twin"):
        _added(root, prof, corpus, name)
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "-s", "coherence=false",
                                   "--write-fit"])
    assert res.exit_code == 2 and "an ablation's error is not the model's" in res.output
    out = tmp_path / "s.json"
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "-j", "1", "--json", str(out),
                                   "--write-fit"])
    assert res.exit_code == 0, res.output
    machines = json.loads(out.read_text())["machines"]
    assert [m["bands"]["model_error"]["source"] for m in machines] == ["fitted on twin", "fitted on tiny"]
    written = model_error_file.read(model_error_file.path_in(corpus))
    assert written.machines == ["tiny", "twin"] and written.cells == 2 and set(written.sigma_log) <= {
        "mean_staleness", "updates_per_s", "updates_to_eps", "time_to_eps"}
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "-j", "1", "--json", str(out),
                                   "--no-model-error", "--runs", "4", "-m", "tiny"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    bands = doc["machines"][0]["bands"]
    assert doc["runs"] == 4 and bands["model_error"] is None
    # the simulator's band from 4 runs, judged against the 3 measured
    assert {b["updates_per_s"]["band"]["runs"] for b in bands["per_cell"].values()} == {4}
    assert bands["per_metric"]["updates_per_s"]["runs"] == 3
    # scored alone: a machine the written fit has seen gets no model error, and is told; one added since takes the fit
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "-j", "1", "--json", str(out),
                                   "-m", "tiny"])
    assert res.exit_code == 0 and json.loads(out.read_text())["machines"][0]["bands"]["model_error"] is None
    assert "tiny: model error none" in res.output
    res = CliRunner().invoke(app, ["corpus", "add", str(root / "cells"), "-p", str(prof), "-m", "fresh", "--corpus",
                                   str(corpus)])
    assert res.exit_code == 0 and "corpus score -m fresh" in res.output, res.output
    res = CliRunner().invoke(app, ["corpus", "score", "--corpus", str(corpus), "-j", "1", "--json", str(out),
                                   "-m", "fresh"])
    assert res.exit_code == 0, res.output
    model = json.loads(out.read_text())["machines"][0]["bands"]["model_error"]
    assert model["source"].startswith("fitted on the corpus's 2 machines (tiny, twin") and model["cells"] == 2


def test_a_cell_beside_its_simulation(measured: tuple[RunResult, Path, Path], tmp_path: Path) -> None:
    """The simulator's own runs as the 'measured' cell: simulated again with the same seeds, every run and every
    phase statistic is the same on both sides; another draw of its timing (a seed offset) moves the simulated
    side while the measured one stays the cell's stored statistics."""
    from simasgd.corpus import cell_view

    _, prof, root = measured
    entry = store.entry_from([root / "cells" / "hogwild" / "cpu"], profile.read(prof).to_doc(), "tiny")
    cell = entry.cells[0]
    same = cell_view.view(entry, cell)
    assert same.score.met and all(v == 0.0 for k, v in same.score.values.items() if k != "updates_to_eps_rel_err")
    np.testing.assert_equal(same.runs["sim"], same.runs["measured"])  # ε never reached: NaN on both sides
    assert [r.phase for r in same.phases] == list(phases.ALL_PHASES)
    for r in same.phases:
        assert r.measured == pytest.approx(r.simulated, rel=1e-6), r.phase  # stored as floats of the same rows
        assert r.measured == {k: pytest.approx(float(s[k])) for s in cell.phases if s["phase"] == r.phase
                              for k in cell_view.STATS}
    moved = cell_view.view(entry, cell, seed_offset=1)
    assert [r.measured for r in moved.phases] == [r.measured for r in same.phases]
    gradient = next(r for r in moved.phases if r.phase == "gradient")
    assert gradient.mean_rel_err != 0.0 and moved.runs["sim"]["updates_per_s"] != same.runs["sim"]["updates_per_s"]
    widest = moved.widest()
    assert widest is not None and widest.phase in phases.PHASES
    assert abs(widest.mean_delta_s) == max(abs(r.mean_delta_s) for r in moved.phases if r.phase in phases.PHASES)
    doc = json.loads(json.dumps(moved.to_json(), allow_nan=False))
    assert doc["cell"] == cell.name and doc["widest_phase"] == widest.phase
    # the staleness judged: every applied update of the measured runs, once
    assert same.staleness["measured"].sum() == sum(r.cut(None)[1] for r in cell.rows)
    np.testing.assert_array_equal(same.staleness["measured"], same.staleness["simulated"])
    drawn = cell_view.figures(moved)
    assert set(drawn) == {"staleness", "cycle"}
    cycle = drawn["cycle"].axes[0]
    measured_sum = sum(p.get_width() for p in cycle.patches if p.get_y() + p.get_height() / 2 < 0.5)
    assert measured_sum == pytest.approx(sum(r.measured["mean"] for r in moved.phases if r.phase in phases.PHASES) * 1e6)
    with pytest.raises(cell_view.CellNotFound, match=cell.name):
        cell_view.find(entry, "fid-nope")


def test_a_cell_shows_the_attempts_each_side_dropped(measured: tuple[RunResult, Path, Path], tmp_path: Path) -> None:
    """Leashed-SGD at persistence 0 gives up an attempt at its first failed CAS: the share of each run's attempts
    it dropped stands beside both sides' runs (the same seeds: the same shares), in the table and the JSON; a
    cell that drops nothing shows no such column."""
    from simasgd.corpus import cell_view

    _, prof, root = measured
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(machine.PROFILE_ENV, str(prof))
        sc = loader.from_dict({**SCENARIO, "name": "cell-leashed", "machine": {"preset": "this"},
                               "algorithm": {"name": "leashed", "persistence": 0}})
        result = dataclasses.replace(backends.run(sc, "sim", repeats=3), backend="cpu")
    result.save(tmp_path / "cells" / "leashed" / "cpu")
    entry = store.entry_from([tmp_path / "cells" / "leashed" / "cpu"], profile.read(prof).to_doc(), "tiny")
    v = cell_view.view(entry, entry.cells[0])
    shares = [(r.attempts - r.updates) / r.attempts for r in result.runs]
    assert all(0 < s < 1 for s in shares)  # three workers, one CAS each: some attempts lost, most applied
    assert v.dropped["measured"] == pytest.approx(shares) and v.dropped["sim"] == pytest.approx(shares)
    assert json.loads(json.dumps(v.to_json(), allow_nan=False))["dropped"]["sim"] == pytest.approx(shares)
    corpus = tmp_path / "corpus"
    res = CliRunner().invoke(app, ["corpus", "add", str(tmp_path / "cells"), "--profile", str(prof),
                                   "--machine", "tiny", "--corpus", str(corpus)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["corpus", "cell", "tiny", "cell-leashed", "--corpus", str(corpus)])
    assert res.exit_code == 0 and "| dropped |" in res.output and f"{shares[0]:.1%}" in res.output, res.output
    hogwild = store.entry_from([root / "cells" / "hogwild" / "cpu"], profile.read(prof).to_doc(), "tiny")
    assert all(s == 0.0 for vs in cell_view.view(hogwild, hogwild.cells[0]).dropped.values() for s in vs)


def test_cli_cell_names_what_there_is(measured: tuple[RunResult, Path, Path], tmp_path: Path) -> None:
    _, prof, root = measured
    corpus = _added(root, prof, tmp_path / "corpus", "tiny")
    out = tmp_path / "cell.json"
    res = CliRunner().invoke(app, ["corpus", "cell", "tiny", "cell-hogwild", "--corpus", str(corpus),
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "meets every goal" in res.output and "| gradient |" in res.output
    assert json.loads(out.read_text())["met"] is True
    res = CliRunner().invoke(app, ["corpus", "cell", "tiny", "cell-hogwild", "--corpus", str(corpus),
                                   "--plot", str(tmp_path / "fig" / "c")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == ["c-cycle.png", "c-staleness.png"]
    res = CliRunner().invoke(app, ["corpus", "cell", "tiny", "fid-nope", "--corpus", str(corpus)])
    assert res.exit_code == 2 and "no cell 'fid-nope'" in res.output and "cell-hogwild" in res.output
    res = CliRunner().invoke(app, ["corpus", "cell", "huge", "cell-hogwild", "--corpus", str(corpus)])
    assert res.exit_code == 2 and "no machine named huge" in res.output and "tiny" in res.output
    # a name is looked up among the corpus's machines, never made into a path
    res = CliRunner().invoke(app, ["corpus", "cell", f"../{corpus.name}/tiny", "cell-hogwild", "--corpus", str(corpus)])
    assert res.exit_code == 2 and "no machine named" in res.output
    for bad, why in (("", "give a path"), (str(out / "x"), "not a folder")):  # out is a file
        res = CliRunner().invoke(app, ["corpus", "cell", "tiny", "cell-hogwild", "--corpus", str(corpus),
                                       "--plot", bad])
        assert res.exit_code == 2 and why in res.output, res.output


# --- a cell whose gradient drifted before its runs: predicted as compare predicts it --------------------

WL_DOC = {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16}
SLOWER = 1.5  # the host ran the gradient this much slower than at calibration, during and right before the runs


def _drifted_profile() -> dict[str, Any]:
    from simasgd.machines.profile import workload_key
    from simasgd.spec.scenario import WorkloadConfig

    s = (150e-6 * np.random.default_rng(1).lognormal(0.0, 0.2, 200)).tolist()
    table = {"batch_size": 16, "samples_s": s, "median_s": float(np.median(s)), "mean_s": float(np.mean(s))}
    return dict(PROFILE, gradient={workload_key(WorkloadConfig(**WL_DOC)): table})


@pytest.fixture(scope="module")
def drifted(tmp_path_factory: pytest.TempPathFactory) -> tuple[store.Entry, float]:
    """One worker's runs on a host whose gradient ran ×SLOWER (simulated on the profile so rescaled, as
    `drift.refreshed_profile` rescales it), stored as a sweep stores a cell: ``<cell>/cpu/`` beside the
    ``fidelity.json`` whose drift record holds the probe's re-timed gradient; the entry keeps the profile as
    calibrated."""
    from simasgd.evaluation import drift
    from simasgd.machines.profile import workload_key

    root = tmp_path_factory.mktemp("drifted")
    doc = _drifted_profile()
    sc_doc = {"name": "cell-drift", "seed": 4, "repeats": 3, "workers": {"count": 1}, "workload": WL_DOC,
              "algorithm": {"name": "mutex"}, "sim": {"numerics": False}, "stop": {"max_updates": 400}}
    sc = loader.from_dict({**sc_doc, "machine": {"preset": "this"}})
    slow = profile.write(drift.refreshed_profile(doc, sc.workload, SLOWER), root / "slow.toml")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(machine.PROFILE_ENV, str(slow))
        result = dataclasses.replace(backends.run(sc, "sim", repeats=3), backend="cpu")
    result.save(root / "cell-drift" / "cpu")
    calibrated = drift.calibrated_gradient_s(doc, sc.workload)
    assert calibrated is not None
    d = drift.Drift(workload=workload_key(sc.workload), gradient_s=calibrated * SLOWER,
                    calibrated_gradient_s=calibrated, c2c_ns=None, calibrated_c2c_ns=None,
                    calibrated_at=PROFILE["calibration"]["created"], measured_at="2026-01-02T04:00:00+00:00")
    (root / "cell-drift" / "fidelity.json").write_text(json.dumps({
        "format": fidelity.FORMAT, "format_version": fidelity.FORMAT_VERSION, "metadata": {"drift": d.to_json()}}))
    entry = store.entry_from(store.measured_folders([root]), doc, "drifted")
    return store.load(store.save(entry, root / "corpus")), calibrated


def test_the_drift_measured_before_the_runs_goes_into_the_cell(drifted: tuple[store.Entry, float]) -> None:
    entry, calibrated = drifted
    cell = entry.cells[0]
    assert cell.drift is not None and cell.drift["gradient_s"] == pytest.approx(calibrated * SLOWER)
    assert score.drift_ratio(cell) == pytest.approx(SLOWER)
    near = dict(cell.drift, gradient_s=calibrated * 1.05)  # within drift.THRESHOLD: the calibration stands
    assert score.drift_ratio(dataclasses.replace(cell, drift=near)) is None
    assert score.drift_ratio(dataclasses.replace(cell, drift=None)) is None


def test_a_drifted_cell_is_simulated_at_the_retimed_speed(drifted: tuple[store.Entry, float]) -> None:
    """Refreshed, the prediction is the measured runs' own simulation (no error at all); on the calibrated
    samples its updates/s are too fast by at most the drift (the cycle is not all gradient)."""
    entry, _ = drifted
    fresh = score.score(entry, refresh=True).cells[0]
    assert fresh.error is None and fresh.refreshed == pytest.approx(SLOWER)
    assert fresh.values["updates_per_s_rel_err"] == pytest.approx(0.0, abs=1e-9) and fresh.met
    stale = score.score(entry).cells[0]  # the default: the calibrated samples
    assert stale.refreshed is None
    assert 0.1 < stale.values["updates_per_s_rel_err"] <= SLOWER - 1 + 1e-9 and not stale.met


def test_a_version_1_corpus_file_still_loads_without_drift(drifted: tuple[store.Entry, float],
                                                           tmp_path: Path) -> None:
    entry, _ = drifted
    doc = entry.to_json() | {"format_version": 1}
    for c in doc["cells"]:
        del c["drift"]
    path = tmp_path / "old.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    old = store.load(path)
    assert old.cells[0].drift is None and score.drift_ratio(old.cells[0]) is None


def test_a_cell_that_cannot_be_simulated_is_a_row_with_its_error(drifted: tuple[store.Entry, float]) -> None:
    entry, _ = drifted
    cell = entry.cells[0]
    bad = score.score(entry, {"no_such_mechanism": True}).cells[0]
    assert bad.error is not None and "no_such_mechanism" in bad.error and not bad.met
    assert bad.algorithm == cell.scenario["algorithm"]["name"] and bad.shared is None and bad.runs is None
    good = score.score(entry).cells[0]
    m = entry.profile["machine"]  # the machine the entry's profile describes: its hardware threads
    cpus = m["sockets"] * m["cores_per_socket"] * m.get("threads_per_core", 1)
    assert good.error is None and good.shared is (cell.scenario["workers"]["count"] > cpus)
