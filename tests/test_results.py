"""The results folder: round trip, atomic writes, format versions, refusing to mix."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simasgd.runs import metadata
from simasgd.runs.results import (
    FORMAT_VERSION,
    UPDATE_COLUMNS,
    ResultsError,
    RunResult,
    RunSummary,
    curve_frame,
    merge,
    updates_frame,
)
from simasgd.spec import loader


def make_result(run: int = 0, lr: float = 0.005, backend: str = "serial") -> RunResult:
    sc = loader.from_dict({"optimizer": {"lr": lr}, "workers": {"count": 2}, "algorithm": {"name": "mutex"}})
    v = np.arange(1, 6)
    ups = updates_frame(run, [0, 1, 0, 1, 0], v, [0, 0, 1, 2, 3], np.linspace(0, 1, 5), np.linspace(0.1, 1.1, 5),
                        lock_wait_s=0.01, retries=[0, 1, 0, 0, 2], applied=[True, True, False, True, True])
    summary = RunSummary(run=run, updates=4, time_s=1.1, updates_to_eps=None, time_to_eps=math.nan,
                         crashed=False, not_reached=True, initial_loss=2.3, final_loss=math.inf,
                         mean_staleness=0.5, attempts=5, updates_per_s=3.6, extra={"lost_updates": 1})
    return RunResult(sc.to_dict(), backend, [summary], ups, curve_frame(run, [0.0, 1.1], [0, 4], [2.3, 1.0]),
                     metadata.collect(backend, sc.hash))


def test_staleness_is_derived_once() -> None:
    r = make_result()
    assert list(r.updates["staleness"]) == [0, 1, 1, 1, 1]
    assert list(r.updates.dtypes.astype(str)) == list(UPDATE_COLUMNS.values())


def test_tables_take_their_columns_dtypes_copied_and_refuse_what_does_not_convert() -> None:
    version = np.arange(1, 4)
    ups = updates_frame(2, np.int64(1), version, [0.0, 1.0, 1.0], [0, 1, 2], [1, 2, 3], applied=np.array([1, 0, 1]))
    assert list(ups.dtypes.astype(str)) == list(UPDATE_COLUMNS.values())
    assert list(ups["worker"]) == [1, 1, 1] and list(ups["run"]) == [2, 2, 2]  # scalars fill the column
    assert list(ups["applied"]) == [True, False, True] and list(ups["staleness"]) == [0, 0, 1]
    ups.loc[0, "t_read"] = 9.0  # its own arrays: writable, and the caller's untouched
    assert ups.loc[0, "t_read"] == 9.0 and list(version) == [1, 2, 3]
    curve = curve_frame(0, [0.0, 1.0], [0, 3], [2.0, 1.0])
    assert list(curve.columns) == ["run", "t", "updates", "loss", "spread", "accuracy"]
    assert curve["accuracy"].isna().all() and curve.index.equals(pd.RangeIndex(2))
    with pytest.raises(ValueError, match="non-finite"):  # a missing worker is not an integer
        updates_frame(0, [0.0, math.nan], [1, 2], [0, 1], [0, 1], [1, 2])


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
    for f in ("run", "updates", "time_s", "updates_to_eps", "crashed", "not_reached", "initial_loss",
              "mean_staleness", "attempts", "updates_per_s", "extra"):
        assert getattr(a, f) == getattr(b, f), f
    # The scenario stored can be loaded back as a scenario with the same hash.
    assert loader.from_dict(back.scenario).hash == back.scenario_hash


def test_a_crashed_runs_non_finite_metadata_is_saved_not_lost(tmp_path: Path) -> None:
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


def _version1_folder(folder: Path, runs: list[dict]) -> None:
    """A results folder as format version 1 wrote it, by hand: the summary field was ``diverged``."""
    sc = loader.from_dict({"workers": {"count": 1}})
    updates_frame(0, 0, [1, 2], [0, 1], [0.0, 0.1], [0.1, 0.2]).to_parquet(folder / "updates.parquet")
    curve_frame(0, [0.0, 0.2], [0, 2], [2.0, 1.5]).to_parquet(folder / "curve.parquet")
    doc = {"format": "simasgd-results", "format_version": 1, "backend": "sim",
           "metadata": {"scenario_hash": sc.hash}, "scenario": sc.to_dict(),
           "rows": {"updates": 2, "curve": 2}, "runs": runs}
    (folder / "summary.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("old", [True, False])
def test_a_version_1_folder_loads_with_diverged_as_not_reached(tmp_path: Path, old: bool) -> None:
    assert FORMAT_VERSION >= 2
    run = {"run": 0, "updates": 2, "time_s": 0.2, "updates_to_eps": None, "time_to_eps": None,
           "crashed": False, "diverged": old, "initial_loss": 2.0, "final_loss": 1.5, "mean_staleness": 0.0,
           "attempts": 2, "updates_per_s": 10.0, "extra": {}}
    _version1_folder(tmp_path, [run])
    back = RunResult.load(tmp_path)
    assert back.runs[0].not_reached is old and not back.runs[0].crashed
    # Saved again, it is a current folder: the new name, the current version.
    back.save(tmp_path / "again")
    doc = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert doc["format_version"] == FORMAT_VERSION and doc["runs"][0]["not_reached"] is old
    assert "diverged" not in doc["runs"][0]


def test_the_old_name_in_a_current_folder_is_an_unknown_field(tmp_path: Path) -> None:
    """Only folders of version 1 say ``diverged``: in a current one it is junk, refused by name."""
    make_result().save(tmp_path)
    doc = json.loads((tmp_path / "summary.json").read_text())
    doc["runs"][0]["diverged"] = doc["runs"][0].pop("not_reached")
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="diverged"):
        RunResult.load(tmp_path)


def test_sweep_task_rows_of_format_1_read_with_the_new_name(tmp_path: Path) -> None:
    """A sweep folder resumed across the rename holds rows of both versions: one table, one column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from simasgd.sweep import store

    row = {"task_id": "c-r0", "cell_id": "c", "repeat": 0, "seed": 1, "status": "ok", "crashed": False}
    pq.write_table(store.arrow_row({**row, "not_reached": True}), tmp_path / "c-r0.parquet")
    old = store.arrow_row({**row, "task_id": "c-r1", "repeat": 1}).drop(["not_reached"])
    pq.write_table(old.append_column("diverged", pa.array([False])), tmp_path / "c-r1.parquet")
    frame = store._read_tasks(tmp_path)
    assert list(frame.columns) == list(store.ROW_TYPES)
    assert dict(zip(frame["task_id"], frame["not_reached"], strict=False)) == {"c-r0": True, "c-r1": False}
