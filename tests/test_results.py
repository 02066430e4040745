"""The results folder: round trip, atomic writes, format versions, refusing to mix."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simasgd import loader, metadata
from simasgd.results import (FORMAT_VERSION, UPDATE_COLUMNS, ResultsError, RunResult, RunSummary, curve_frame,
                             merge, updates_frame)


def make_result(run: int = 0, lr: float = 0.005, backend: str = "serial") -> RunResult:
    sc = loader.from_dict({"optimizer": {"lr": lr}, "workers": {"count": 2}, "algorithm": {"name": "mutex"}})
    v = np.arange(1, 6)
    ups = updates_frame(run, [0, 1, 0, 1, 0], v, [0, 0, 1, 2, 3], np.linspace(0, 1, 5), np.linspace(0.1, 1.1, 5),
                        lock_wait_s=0.01, retries=[0, 1, 0, 0, 2], applied=[True, True, False, True, True])
    summary = RunSummary(run=run, updates=4, time_s=1.1, updates_to_eps=None, time_to_eps=math.nan,
                         crashed=False, diverged=True, initial_loss=2.3, final_loss=math.inf,
                         mean_staleness=0.5, attempts=5, updates_per_s=3.6, extra={"lost_updates": 1})
    return RunResult(sc.to_dict(), backend, [summary], ups, curve_frame(run, [0.0, 1.1], [0, 4], [2.3, 1.0]),
                     metadata.collect(backend, sc.hash))


def test_staleness_is_derived_once() -> None:
    r = make_result()
    assert list(r.updates["staleness"]) == [0, 1, 1, 1, 1]
    assert list(r.updates.dtypes.astype(str)) == list(UPDATE_COLUMNS.values())


def test_round_trip_every_field(tmp_path: Path) -> None:
    r = make_result()
    r.save(tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["curve.parquet", "summary.json", "updates.parquet"]
    back = RunResult.load(tmp_path / "r")
    pd.testing.assert_frame_equal(back.updates, r.updates)
    pd.testing.assert_frame_equal(back.curve, r.curve)
    assert back.scenario == r.scenario and back.backend == r.backend and back.metadata == r.metadata
    a, b = back.runs[0], r.runs[0]
    assert math.isnan(a.time_to_eps) and a.final_loss == math.inf
    for f in ("run", "updates", "time_s", "updates_to_eps", "crashed", "diverged", "initial_loss",
              "mean_staleness", "attempts", "updates_per_s", "extra"):
        assert getattr(a, f) == getattr(b, f), f
    # The scenario stored can be loaded back as a scenario with the same hash.
    assert loader.from_dict(back.scenario).hash == back.scenario_hash


def test_a_diverged_runs_non_finite_metadata_is_saved_not_lost(tmp_path: Path) -> None:
    """A run whose θ went to NaN (the cpu executor's `final_theta_norm`) is saved: the value as the string
    the summary's own non-finite fields use, nested in lists and tables too."""
    r = make_result()
    r.metadata.update({"final_theta_norm": math.nan, "probes": [1.0, math.inf, {"x": -math.inf}]})
    r.save(tmp_path / "r")
    back = RunResult.load(tmp_path / "r")
    assert back.metadata["final_theta_norm"] == "nan" and back.metadata["probes"] == [1.0, "inf", {"x": "-inf"}]
    assert len(back.updates) == len(r.updates)


def test_metadata_carries_provenance() -> None:
    md = make_result().metadata
    for key in ("scenario_hash", "git_commit", "cpu_model", "cpu_count", "versions", "backend", "created"):
        assert key in md
    assert "numpy" in md["versions"] and md["cpu_count"] >= 1


def test_newer_format_is_refused(tmp_path: Path) -> None:
    make_result().save(tmp_path)
    doc = json.loads((tmp_path / "summary.json").read_text())
    doc["format_version"] = FORMAT_VERSION + 1
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="newer than this simasgd reads"):
        RunResult.load(tmp_path)


def test_unfinished_or_torn_folder_does_not_load(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no summary.json"):
        RunResult.load(tmp_path)
    make_result().save(tmp_path)
    # A table replaced behind the summary's back (e.g. a run killed mid-rewrite) is detected.
    updates_frame(0, 0, [1], [0], 0.0, 0.0).to_parquet(tmp_path / "updates.parquet")
    with pytest.raises(ResultsError, match="do not match"):
        RunResult.load(tmp_path)


def test_failed_write_leaves_previous_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = make_result()
    r.save(tmp_path)
    before = (tmp_path / "summary.json").read_text()

    def boom(*a, **k):
        raise KeyboardInterrupt  # a kill in the middle of writing the table

    monkeypatch.setattr(pd.DataFrame, "to_parquet", boom)
    with pytest.raises(KeyboardInterrupt):
        make_result(run=0, lr=0.01).save(tmp_path)
    assert (tmp_path / "summary.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    RunResult.load(tmp_path)


def test_merge_refuses_to_mix() -> None:
    m = merge([make_result(0), make_result(1)])
    assert [r.run for r in m.runs] == [0, 1] and len(m.updates) == 10
    with pytest.raises(ResultsError, match="different scenarios"):
        merge([make_result(0), make_result(1, lr=0.5)])
    with pytest.raises(ResultsError, match="backends"):
        merge([make_result(0), make_result(1, backend="sim")])
    with pytest.raises(ResultsError, match="repeat"):
        merge([make_result(0), make_result(0)])


@pytest.mark.parametrize("text, match", [("[1, 2]", "not a simasgd results file"), ("{not json", "not valid JSON"),
                                         ('{"format": "simasgd-results", "format_version": "1"}',
                                          "unknown results format version")])
def test_junk_summary_is_a_clear_error(tmp_path: Path, text: str, match: str) -> None:
    make_result().save(tmp_path)
    (tmp_path / "summary.json").write_text(text)
    with pytest.raises(ResultsError, match=match):
        RunResult.load(tmp_path)
