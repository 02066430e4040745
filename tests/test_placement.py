"""The host's placement of the CPUs as calibrated noise (simasgd.evaluation.placement), and the corpus score's
bands that mix it in: probes to a share and a factor, the profile moved, and a cell measured in the far
placement simulated there."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from simasgd.corpus import score, store
from simasgd.evaluation import placement
from simasgd.machines import machine, profile
from simasgd.runs import backends
from simasgd.spec import loader

MACHINE = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1, "local_latency_ns": 90.0,
           "remote_latency_ns": 90.0, "mem_bandwidth_gbs": 10.0, "link_bandwidth_gbs": 10.0,
           "gflops_per_core": 1.0, "quantum_s": 0.004, "context_switch_s": 2e-6}
NEAR_NS, FAR_NS = 40.0, 400.0


def test_the_far_placement_is_the_probes_beyond_twice_the_calibrated_hand_off() -> None:
    got = placement.of_probes(NEAR_NS, [38.0, 41.0, 16.0, 300.0, 500.0, None, math.nan, 40.0, 79.0, 81.0], "t")
    # 8 probes; beyond 80 ns: 300, 500, 81; the 16 ns one (one core's two hardware threads) is not the far one
    assert got is not None and got.probes == 8
    assert got.share == pytest.approx(3 / 8) and got.factor == pytest.approx(300.0 / NEAR_NS)
    none_far = placement.of_probes(NEAR_NS, [NEAR_NS] * 5, "t")
    assert none_far is not None and (none_far.share, none_far.factor) == (0.0, 1.0)
    assert placement.of_probes(None, [NEAR_NS], "t") is None and placement.of_probes(NEAR_NS, [], "t") is None
    assert placement.Placement.from_json(got.to_json()) == got


def test_an_entrys_placement_counts_the_calibration_and_the_drift_probes() -> None:
    prof = profile.typed({"c2c": {"latency_ns": NEAR_NS, "samples_ns": [NEAR_NS] * 6 + [FAR_NS] * 2}})
    drifts: list[dict[str, Any] | None] = [{"c2c_ns": FAR_NS}, {"c2c_ns": NEAR_NS}, None, {"ratio": 1.0}]
    got = placement.of_entry(prof, drifts)
    assert got is not None and got.probes == 10 and got.share == pytest.approx(3 / 10)
    assert "8 calibration probes and 2 drift probes" in got.source
    assert placement.of_entry(profile.typed({}), drifts) is None


def test_moved_scales_what_crosses_cores_and_nothing_within_one() -> None:
    doc = {"machine": MACHINE, "locks": {"handoff_s": 4e-8, "uncontended_s": 3e-9},
           "cas": {"latency_s": 3e-9, "contended_s": 2e-8, "failure_cost_s": 5e-8},
           "coherence": {"sizes_bytes": [65536, 131072], "read_gbs": [50.0, 60.0], "update_gbs": [70.0, 80.0],
                         "fresh_gbs": [75.0, 85.0], "held_read_gbs": [55.0, 65.0], "held_update_gbs": [30.0, 40.0],
                         "held_mirrored_gbs": [9.0, 12.0]},
           "copy_by_size": {"sizes_bytes": [65536, 131072], "read_gbs": [90.0, 95.0]},
           "c2c": {"latency_ns": NEAR_NS}}
    p = profile.typed(doc)
    m = placement.moved(p, 5.0)
    assert m.locks is not None and m.cas is not None and m.coherence is not None and m.c2c is not None
    assert m.locks.handoff_s == pytest.approx(2e-7) and m.locks.uncontended_s == 3e-9
    assert (m.cas.contended_s, m.cas.failure_cost_s, m.cas.latency_s) == pytest.approx((1e-7, 2.5e-7, 3e-9))
    for k in placement.COHERENCE_RATES:
        assert getattr(m.coherence, k) == pytest.approx([v / 5.0 for v in getattr(p.coherence, k)]), k
    assert m.copy_by_size == p.copy_by_size and m.machine == p.machine and m.c2c.latency_ns == 5 * NEAR_NS
    assert profile.typed(p.to_doc()) == p  # the original is untouched
    assert placement.moved(profile.typed({"c2c": {"latency_ns": NEAR_NS}}), 2.0).locks is None


# --- the corpus score: a cell measured in the far placement ------------------------------------------------

WL_DOC = {"model": "mlp", "layers": [64, 32, 10], "dataset": "digits", "batch_size": 16}
FAR_SHARE = 0.4


def _profile() -> dict[str, Any]:
    from simasgd.machines.profile import workload_key
    from simasgd.spec.scenario import WorkloadConfig

    s = (150e-6 * np.random.default_rng(1).lognormal(0.0, 0.2, 200)).tolist()
    grad = {"batch_size": 16, "samples_s": s, "median_s": float(np.median(s)), "mean_s": float(np.mean(s))}
    return {"machine": MACHINE, "calibration": {"created": "2026-01-02T03:04:05Z", "quick": True},
            "gradient": {workload_key(WorkloadConfig(**WL_DOC)): grad},
            "locks": {"handoff_s": 2e-5},  # × 10 in the far placement: a hand-off longer than a gradient
            "c2c": {"latency_ns": NEAR_NS, "samples_ns": [NEAR_NS] * 6 + [FAR_NS] * 4}}


@pytest.fixture(scope="module")
def far_cell(tmp_path_factory: pytest.TempPathFactory) -> store.Entry:
    """A mutex cell of two workers whose three runs all found the CPUs in the far placement (simulated on the
    moved profile, relabelled as measured), and a one-worker cell; the entry keeps the calibrated profile."""
    root = tmp_path_factory.mktemp("placed")
    doc = _profile()
    moved = profile.write(placement.moved(profile.typed(doc), FAR_NS / NEAR_NS), root / "far.toml")
    for workers in (1, 2):
        sc = loader.from_dict({"name": f"cell-mutex-n{workers}", "seed": 4, "repeats": 3,
                               "workers": {"count": workers}, "workload": WL_DOC, "algorithm": {"name": "mutex"},
                               "sim": {"numerics": False}, "stop": {"max_updates": 400},
                               "machine": {"preset": "this"}})
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(machine.PROFILE_ENV, str(moved))
            result = dataclasses.replace(backends.run(sc, "sim", repeats=3), backend="cpu")
        result.save(root / f"cell-mutex-n{workers}" / "cpu")
    entry = store.entry_from(store.measured_folders([root]), doc, "placed")
    return store.load(store.save(entry, root / "corpus"))


def test_a_cell_of_two_workers_is_simulated_in_the_far_placement_for_its_bands(far_cell: store.Entry) -> None:
    s = score.score(far_cell)
    assert s.placement is not None and s.placement.share == pytest.approx(FAR_SHARE)
    assert s.placement.factor == pytest.approx(FAR_NS / NEAR_NS)
    lone, pair = sorted(s.cells, key=lambda c: c.cell)
    assert lone.runs is not None and "other" not in lone.runs  # one worker: no line moves between cores
    assert pair.runs is not None and pair.error is None
    # the far placement's simulation is the measured runs' own: same scenario, seeds and moved profile
    for m, measured in pair.runs["measured"].items():
        assert pair.runs["other"][m] == pytest.approx(measured, rel=1e-9, nan_ok=True), m  # NaN: no ε without numerics
    # the goals judge the calibrated placement: its hand-offs are ten times shorter, its updates/s higher
    assert pair.values["updates_per_s_rel_err"] > 0.1 and not pair.met
    one = pair.band_checks(s.host)["updates_per_s"]
    mixed = pair.band_checks(s.host, s.placement)["updates_per_s"]
    assert one.inside == 0 and mixed.inside == 3 and mixed.band.other == pytest.approx(FAR_SHARE)
    assert s.bands_json()["placement"]["share"] == pytest.approx(FAR_SHARE)


def test_one_placement_simulates_nothing_more(far_cell: store.Entry) -> None:
    s = score.score(far_cell, placements=False)
    assert s.placement is None
    assert all(c.runs is not None and "other" not in c.runs for c in s.cells)
    near = dataclasses.replace(far_cell, profile=dict(far_cell.profile, c2c={"latency_ns": NEAR_NS,
                                                                             "samples_ns": [NEAR_NS] * 5}))
    t = score.score(near)  # no probe in a far placement: nothing to mix
    assert t.placement is not None and t.placement.share == 0.0
    assert all(c.runs is not None and "other" not in c.runs for c in t.cells)


# --- run, show and compare: a simulated result's bands with the far placement -------------------------------

def _scenario(tmp: Any, workers: int) -> Any:
    path = tmp / f"mutex-n{workers}.toml"
    path.write_text(f'name = "mutex-n{workers}"\nseed = 4\nrepeats = 3\n[workers]\ncount = {workers}\n'
                    '[workload]\nmodel = "mlp"\nlayers = [64, 32, 10]\ndataset = "digits"\nbatch_size = 16\n'
                    '[algorithm]\nname = "mutex"\n[sim]\nnumerics = false\n[stop]\nmax_updates = 400\n'
                    '[machine]\npreset = "this"\n')
    return path


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`simasgd run` of two workers on the calibrated profile (probes: 40% far), and with --one-placement; the
    same scenario simulated on the moved profile directly, saved as a measured result (runs in the far
    placement)."""
    from typer.testing import CliRunner

    from simasgd.cli import app

    root = tmp_path_factory.mktemp("run-placed")
    prof = profile.write(profile.typed(_profile()), root / "this.toml")
    moved = profile.write(placement.moved(profile.typed(_profile()), FAR_NS / NEAR_NS), root / "far.toml")
    runner = CliRunner()
    out: dict[str, Any] = {"root": root}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(machine.PROFILE_ENV, str(prof))
        mp.setenv("COLUMNS", "250")
        for name, extra in (("both", []), ("one", ["--one-placement"])):
            res = runner.invoke(app, ["run", str(_scenario(root, 2)), "-j", "1", "--out", str(root / name), *extra])
            assert res.exit_code == 0, res.output
            out[name] = res.output
        res = runner.invoke(app, ["run", str(_scenario(root, 1)), "-j", "1", "--out", str(root / "lone")])
        assert res.exit_code == 0, res.output
        mp.setenv(machine.PROFILE_ENV, str(moved))
        far = backends.run(loader.load(_scenario(root, 2)), "sim", repeats=3, jobs=1)
        dataclasses.replace(far, backend="cpu").save(root / "measured")
        out["far"] = far
        mp.setenv(machine.PROFILE_ENV, str(prof))
        res = runner.invoke(app, ["compare", "--results", str(root / "both"), str(root / "measured"),
                                  "--out", str(root / "cmp")])
        assert res.exit_code == 0, res.output
        out["compare"] = res.output
        out["show"] = runner.invoke(app, ["show", str(root / "both")]).output
    return out


def test_run_simulates_the_far_placement_too_and_its_bands_mix_both(placed: dict[str, Any]) -> None:
    import json

    from simasgd.evaluation import prediction_band as pb
    from simasgd.runs.results import RunResult

    root = placed["root"]
    meta = json.loads((root / "both" / "summary.json").read_text())["metadata"]
    where = meta["placement"]
    assert where["share"] == pytest.approx(FAR_SHARE) and where["factor"] == pytest.approx(FAR_NS / NEAR_NS)
    # the runs recorded for the far placement are the scenario's own on the moved profile
    share, runs = pb.other_placement(RunResult.load(root / "both"))
    assert share == pytest.approx(FAR_SHARE) and runs is not None
    for m, values in pb.per_run_of(placed["far"]).items():
        assert runs[m] == pytest.approx(values, rel=1e-9, nan_ok=True), m  # NaN: no ε without numerics
    mixed = meta["bands"]["updates_per_s"]
    one = json.loads((root / "one" / "summary.json").read_text())["metadata"]
    assert "placement" not in one and "other_placement" not in one["bands"]["updates_per_s"]
    assert mixed["other_placement"] == pytest.approx(FAR_SHARE)
    # a hand-off ten times longer: the far runs are slower, below the calibrated placement's band alone
    far_rates = where["runs"]["updates_per_s"]
    assert max(far_rates) < one["bands"]["updates_per_s"]["low"]
    assert mixed["low"] < min(far_rates) and mixed["high"] == pytest.approx(one["bands"]["updates_per_s"]["high"],
                                                                            rel=0.2)
    assert "slower placement" in placed["both"] and "slower placement" not in placed["one"]
    lone = json.loads((root / "lone" / "summary.json").read_text())["metadata"]
    assert "placement" not in lone  # one worker: no line moves between cores


def test_show_and_compare_mix_the_far_placement_recorded_with_the_result(placed: dict[str, Any]) -> None:
    import re

    show = "".join(placed["show"].split())
    assert "mixedwiththesamerunssimulatedinthefarplacement:40%of10core-to-coreprobes" in show
    # compare: the measured runs, all in the far placement, fall inside the mixed updates/s band
    text = "".join(placed["compare"].split())
    assert "farplacement" in text
    row = re.search(r"updates/s[^│|]*[│|][^│|]*[│|][^│|]*[│|]\s*(\d)/(\d)", placed["compare"])
    assert row is not None and row.groups() == ("3", "3"), placed["compare"]
