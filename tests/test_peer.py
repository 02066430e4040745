"""Importing the C++ reference framework's JSON (dcs-chalmers/shared-memory-sgd) as a RunResult."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.evaluation import analysis
from simasgd.runs import peer
from simasgd.runs.results import RunResult
from simasgd.spec.loader import from_dict

HERE = Path(__file__).resolve()
# The JSON of one run of the C++ framework, kept with the tests.
SAMPLE = HERE.parent / "data" / "peer" / "lsh_b1_n4_b16.json"


def sample_path() -> Path:
    assert SAMPLE.exists(), f"peer sample missing: {SAMPLE}"
    return SAMPLE


def small_doc(leashed: bool = True) -> dict:
    hist = [5, 3, 2] + [0] * 197
    return {"epoch_loss": [2.0, 1.0, 0.5], "epoch_time": [1.5, 3.0] if leashed else [1.5, 3.0, 4.5],
            "staleness_dist": hist, "numtriesdist": [6, 2], "numfailedcas": 7, "train_time_s": 4.0}


def test_small_json_is_reconstructed_update_by_update(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(small_doc()))
    r = peer.import_file(f, out=tmp_path / "res")
    assert r.backend == "peer"
    assert analysis.counts(analysis.staleness(r)).tolist() == [5, 3, 2]
    assert (r.updates["worker"] == -1).all() and r.updates["t_read"].isna().all()
    # numtriesdist: 6 with 0 failures, 2 with 1; the other 2 succeeded after B = 2 failures (upstream drops past B).
    assert sorted(r.updates["retries"].tolist()) == [0] * 6 + [1] * 2 + [2] * 2
    s = r.runs[0]
    assert s.updates == 10 and s.time_s == 4.0 and s.updates_per_s == pytest.approx(2.5)
    assert s.mean_staleness == pytest.approx((3 + 4) / 10)
    assert s.updates_to_eps is None and math.isnan(s.initial_loss) and s.final_loss == 0.5
    assert s.extra["numfailedcas"] == 7
    # Leashed omits the last epoch time: taken from train_time_s. 10 updates / 3 epochs → 3 per epoch.
    assert r.curve["t"].tolist() == [1.5, 3.0, 4.0]
    assert r.curve["updates"].tolist() == [3, 6, 9]
    back = RunResult.load(tmp_path / "res")
    assert back.backend == "peer" and len(back.updates) == 10


def test_updates_per_epoch_from_the_scenario_and_given(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(small_doc(leashed=False)))
    sc = from_dict({"workers": {"count": 4}, "algorithm": {"name": "leashed", "persistence": 2},
                    "stop": {"max_updates": 12}})
    r = peer.import_file(f, sc)
    assert r.curve["updates"].tolist() == [4, 8, 12]
    assert r.curve["t"].tolist() == [1.5, 3.0, 4.5]
    assert r.scenario_hash == sc.hash and r.scenario["algorithm"]["name"] == "leashed"
    assert peer.import_file(f, per_epoch=5).curve["updates"].tolist() == [5, 10, 15]


def test_nonfinite_losses_from_cpp_mean_a_crash(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps(small_doc()).replace("0.5", "-nan"))
    r = peer.import_file(f)
    assert r.runs[0].crashed and math.isnan(r.curve["loss"].iloc[-1])


@pytest.mark.parametrize("doc, message", [
    ({"epoch_loss": [1.0]}, "staleness_dist: required"),
    ({"staleness_dist": [1, -2]}, "staleness_dist: must be a list of integer counts"),
    ({"staleness_dist": [1], "epoch_loss": [1.0, 2.0, 3.0], "epoch_time": [1.0]}, "epoch_time: has 1 entries"),
])
def test_bad_files_say_which_key_is_wrong(tmp_path, doc, message):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(peer.PeerError, match=message) as e:
        peer.read(f)
    assert str(f) in str(e.value)


def test_the_real_sample(tmp_path):
    path = sample_path()
    raw = json.loads(path.read_text())
    r = peer.import_file(path, out=tmp_path / "lsh")
    hist = np.asarray(raw["staleness_dist"])
    assert len(r.updates) == hist.sum() == r.runs[0].updates
    assert analysis.counts(analysis.staleness(r), len(hist)).tolist() == hist.tolist()
    assert r.runs[0].mean_staleness == pytest.approx(np.dot(np.arange(len(hist)), hist) / hist.sum())
    # 4 epochs of 3750 updates (README); upstream never counts the very last update.
    assert r.curve["updates"].tolist() == [3750, 7500, 11250, 15000]
    assert r.curve["t"].tolist()[:3] == raw["epoch_time"] and r.curve["t"].iloc[-1] == raw["train_time_s"]
    assert (r.updates["retries"] == 0).sum() == raw["numtriesdist"][0]
    assert r.runs[0].updates_per_s == pytest.approx(hist.sum() / raw["train_time_s"])


def test_cli_import_peer(tmp_path):
    out = tmp_path / "p"
    res = CliRunner().invoke(app, ["import-peer", str(sample_path()), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "summary.json").exists()
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    res = CliRunner().invoke(app, ["import-peer", str(bad), "--out", str(out)])
    assert res.exit_code == 2 and "not valid JSON" in res.output
