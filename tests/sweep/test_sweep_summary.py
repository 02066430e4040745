"""The Table 4.3 view and heatmaps, on frames built by hand (so every expected number is known)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from simasgd.sweep import analysis, summary


def frame(rows: list[tuple]) -> pd.DataFrame:
    """Rows of (algorithm, lr, batch, repeat, status, time_to_eps, crashed, not_reached), in load()'s column order."""
    cols = ["algorithm.name", "optimizer.lr", "workload.batch_size", "repeat", "status", "time_to_eps", "crashed",
            "not_reached"]
    df = pd.DataFrame(rows, columns=cols)
    df["error"] = None
    df["time_to_eps"] = df["time_to_eps"].astype("Float64")
    df["crashed"] = df["crashed"].astype("boolean")
    df["not_reached"] = df["not_reached"].astype("boolean")
    return df


def cell(alg: str, lr: float, batch: int, times: list[float | None], crashed: int = 0, not_reached: int = 0,
         failed: int = 0) -> list[tuple]:
    rows = [(alg, lr, batch, r, "ok", t, False, False) for r, t in enumerate(times)]
    n = len(rows)
    rows += [(alg, lr, batch, n + i, "ok", None, True, False) for i in range(crashed)]
    rows += [(alg, lr, batch, n + crashed + i, "ok", None, False, True) for i in range(not_reached)]
    rows += [(alg, lr, batch, n + crashed + not_reached + i, "failed", None, None, None) for i in range(failed)]
    return rows


MANIFEST = {"scenario": {"workers": {"count": 8}, "algorithm": {"name": "mutex"}}, "backend": "sim"}


def test_fastest_stable_setting_per_algorithm() -> None:
    df = frame(cell("mutex", 0.001, 16, [3.0] * 10)
               + cell("mutex", 0.005, 16, [1.0, 1.2, 0.8] + [1.0] * 6, crashed=1)       # fastest, 10% crashed: ok
               + cell("mutex", 0.009, 16, [0.5] * 8, crashed=2)                          # faster, 20% crashed: out
               + cell("mutex", 0.005, 32, [1.05] * 10)                                   # within 10% of the best
               + cell("mutex", 0.001, 32, [0.2] * 9, not_reached=1)                         # a repeat missed ε: out
               + cell("hogwild", 0.001, 16, [2.0] * 10) + cell("hogwild", 0.005, 16, [], crashed=10, failed=2))
    t = summary(df, manifest=MANIFEST)
    assert list(t["algorithm.name"]) == ["mutex", "hogwild"]
    m = t.iloc[0]
    assert (m["optimizer.lr"], m["workload.batch_size"]) == (0.005, 16)
    assert m["time_to_eps"] == pytest.approx(1.0) and (m["time_min"], m["time_max"]) == (0.8, 1.2)
    assert m["settings_within"] == 1 and m["stable_settings"] == 3 and m["settings"] == 5
    assert m["crashed"] == 3 and m["not_reached"] == 1 and m["workers.count"] == 8  # constant, from the manifest
    h = t.iloc[1]
    assert h["optimizer.lr"] == 0.001 and h["crashed"] == 10 and h["failed"] == 2 and h["runs"] == 20


def test_group_with_nothing_stable_says_so() -> None:
    df = frame(cell("mutex", 0.005, 16, [], crashed=3))
    t = summary(df)
    assert math.isnan(t.iloc[0]["time_to_eps"]) and t.iloc[0]["stable_settings"] == 0
    from rich.console import Console

    con = Console(record=True, width=200)
    analysis.print_table(t, con)
    assert "none stable" in con.export_text()


def test_max_crash_is_a_parameter() -> None:
    df = frame(cell("mutex", 0.009, 16, [0.5] * 8, crashed=2) + cell("mutex", 0.001, 16, [3.0] * 10))
    assert summary(df, max_crash=0.1).iloc[0]["optimizer.lr"] == 0.001
    assert summary(df, max_crash=0.2).iloc[0]["optimizer.lr"] == 0.009


def test_heatmaps_one_png_per_algorithm(tmp_path: Path) -> None:
    df = frame(cell("mutex", 0.001, 16, [3.0]) + cell("mutex", 0.005, 16, [1.0]) + cell("mutex", 0.001, 32, [2.0])
               + cell("mutex", 0.005, 32, [], crashed=1) + cell("hogwild", 0.001, 16, [1.0]))
    written = analysis.heatmaps(df, tmp_path, manifest=MANIFEST)
    assert sorted(p.name for p in written) == ["heatmap_algorithm.name=hogwild_workers.count=8.png",
                                               "heatmap_algorithm.name=mutex_workers.count=8.png"]
    for p in written:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_no_heatmap_without_two_setting_keys(tmp_path: Path) -> None:
    df = frame(cell("mutex", 0.001, 16, [3.0])).drop(columns="workload.batch_size")
    assert analysis.heatmaps(df, tmp_path) == []


def test_table_valued_axes_group_like_their_keys() -> None:
    # Ek's S2 grid: "algorithm" and "workers" axes whose values are tables (variant; threads x placement).
    rows = []
    for alg, t in (({"name": "mutex"}, 2.0), ({"name": "leashed", "persistence": 0}, 3.0),
                   ({"name": "leashed", "persistence": 1}, 1.0)):
        for workers, slow in (({"count": 8, "placement": "uma"}, 2.0), ({"count": 8, "placement": "numa"}, 1.0)):
            for lr, extra in ((0.001, 1.0), (0.002, 0.0)):
                for r in range(3):
                    rows.append({"algorithm": alg, "workers": workers, "optimizer.lr": lr, "repeat": r,
                                 "status": "ok", "time_to_eps": t * slow + extra, "crashed": False,
                                 "not_reached": False, "error": None})
    df = pd.DataFrame(rows)
    flat = analysis.flatten(df)
    assert list(flat.columns[:5]) == ["algorithm.name", "algorithm.persistence", "workers.count",
                                      "workers.placement", "optimizer.lr"]
    t = analysis.table(df)
    assert len(t) == 6  # 3 variants x 2 placements, the mutex (no persistence) included
    best = {(r["algorithm.name"], None if pd.isna(r["algorithm.persistence"]) else r["algorithm.persistence"],
             r["workers.placement"]): r["time_to_eps"] for _, r in t.iterrows()}
    assert best[("leashed", 1, "numa")] == 1.0 and best[("leashed", 0, "uma")] == 6.0
    assert best[("mutex", None, "uma")] == 4.0 and set(t["optimizer.lr"]) == {0.002}
