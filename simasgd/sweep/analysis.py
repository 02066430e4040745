"""What a sweep found: the fastest stable setting per algorithm x threads (Ek 2021, Table 4.3), and heatmaps.

A *setting* is one combination of the grid keys other than the grouping keys
(``algorithm.name``, ``workers.count``). A setting is *stable* when at most
``max_crash`` of its repeats crashed and every repeat that did not crash
reached ε — so its mean time to ε is over all of its surviving repeats, not
a flattering subset. Tasks that failed (raised) are counted apart and left
out of both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

# Table 4.3's rows: the algorithm variant (Leashed's persistence too) x threads x memory model.
GROUP_KEYS = ("algorithm.name", "algorithm.persistence", "workers.count", "workers.placement")
AXES = ("workload.batch_size", "optimizer.lr")  # heatmap x, y (Ek figures 4.5-4.12)


def grid_keys(df: pd.DataFrame) -> list[str]:
    """The dotted grid columns: :func:`simasgd.sweep.load` puts them before ``repeat``."""
    cols = list(df.columns)
    return cols[: cols.index("repeat")] if "repeat" in cols else []


def flatten(df: pd.DataFrame) -> pd.DataFrame:
    """Table-valued grid axes (``"workers" = [{count = 8, placement = "uma"}, ...]``) as dotted columns.

    Each sub-key becomes ``<axis>.<key>`` in the axis' place (absent in a value: None), so a table
    axis groups and labels like the scalar keys it sets."""
    out = df
    for key in grid_keys(df):
        if not out[key].map(lambda v: isinstance(v, dict)).any():
            continue
        subs = list(dict.fromkeys(k for v in out[key] if isinstance(v, dict) for k in v))
        at = list(out.columns).index(key)
        expanded = {f"{key}.{k}": out[key].map(lambda v, k=k: v.get(k) if isinstance(v, dict) else None)
                    for k in subs}
        out = out.drop(columns=[key])
        for i, (name, col) in enumerate(expanded.items()):
            out.insert(at + i, name, col)
    return out


def with_constants(df: pd.DataFrame, manifest: dict[str, Any] | None, keys: Sequence[str]) -> pd.DataFrame:
    """Add ``keys`` not swept as constant columns taken from the manifest's scenario."""
    out = df.copy()
    for key in keys:
        if key in out.columns or manifest is None:
            continue
        node: Any = manifest.get("scenario", {})
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out.insert(0, key, [node] * len(out))
    return out


def settings(df: pd.DataFrame, manifest: dict[str, Any] | None = None, max_crash: float = 0.1) -> pd.DataFrame:
    """One row per grid cell: repeats, crashes, runs short of ε, failures, time to ε (mean/min/max), stability."""
    df = with_constants(flatten(df), manifest, GROUP_KEYS)
    keys = [k for k in GROUP_KEYS if k in df.columns] + [k for k in grid_keys(df) if k not in GROUP_KEYS]
    d = df.assign(ok=df["status"] == "ok", failed=df["status"] != "ok",
                  t=df["time_to_eps"].astype("Float64").where(df["status"] == "ok").astype(float),
                  crash=(df["crashed"].fillna(False) & (df["status"] == "ok")).astype(int),
                  div=(df["not_reached"].fillna(False) & (df["status"] == "ok")).astype(int))
    g = d.groupby(_hashable(d, keys), sort=False, dropna=False) if keys else d.groupby(lambda _: 0)
    out = g.agg(repeats=("ok", "sum"), failed=("failed", "sum"), crashed=("crash", "sum"), not_reached=("div", "sum"),
                time_to_eps=("t", "mean"), time_min=("t", "min"), time_max=("t", "max"))
    out = out.reset_index(drop=not keys)
    if keys:  # restore the original (possibly list-valued) key values from the first row of each group
        firsts = d.groupby(_hashable(d, keys), sort=False, dropna=False)[keys].first().reset_index(drop=True)
        out[keys] = firsts[keys]
    out["stable"] = ((out["repeats"] > 0) & (out["crashed"] <= max_crash * out["repeats"])
                     & (out["not_reached"] == 0) & out["time_to_eps"].notna())
    return out


def _hashable(d: pd.DataFrame, keys: list[str]) -> list[pd.Series]:
    # Grid values may be lists (workload.layers); group by their text.
    return [d[k].map(lambda v: repr(v) if isinstance(v, (list, tuple)) else v) for k in keys]


def table(df: pd.DataFrame, manifest: dict[str, Any] | None = None, max_crash: float = 0.1,
          within: float = 0.1) -> pd.DataFrame:
    """Per algorithm x threads: the fastest stable setting, its time range, how many come within ``within``."""
    if df.empty:
        return pd.DataFrame()
    s = settings(df, manifest, max_crash)
    groups = [k for k in GROUP_KEYS if k in s.columns]
    knobs = [k for k in s.columns[: list(s.columns).index("repeats")] if k not in groups]
    rows = []
    for _, part in (s.groupby(_hashable(s, groups), sort=False, dropna=False) if groups else [(0, s)]):
        rows.append(_best(part, groups, knobs, within))
    out = pd.DataFrame(rows)
    out.attrs.update(max_crash=max_crash, within=within)
    return out


def _best(part: pd.DataFrame, groups: list[str], knobs: list[str], within: float) -> dict[str, Any]:
    row: dict[str, Any] = {k: part[k].iloc[0] for k in groups}
    stable = part[part["stable"]]
    best = stable.loc[stable["time_to_eps"].idxmin()] if len(stable) else None
    for k in knobs:
        row[k] = best[k] if best is not None else None
    t = best["time_to_eps"] if best is not None else math.nan
    row.update(time_to_eps=t, time_min=best["time_min"] if best is not None else math.nan,
               time_max=best["time_max"] if best is not None else math.nan,
               settings_within=int((stable["time_to_eps"] <= (1 + within) * t).sum()) - 1 if best is not None else 0,
               stable_settings=len(stable), settings=len(part), runs=int(part["repeats"].sum()),
               crashed=int(part["crashed"].sum()), not_reached=int(part["not_reached"].sum()),
               failed=int(part["failed"].sum()))
    return row


def print_table(t: pd.DataFrame, console: Any, title: str = "") -> None:
    """The summary as a rich table: one line per algorithm x threads."""
    from rich.markup import escape
    from rich.table import Table

    if t.empty:
        console.print(f"{title}: no finished tasks yet", markup=False)
        return
    within = round(100 * t.attrs.get("within", 0.1))
    crash = round(100 * t.attrs.get("max_crash", 0.1))
    rt = Table(title=escape(f"{title}\nfastest setting to ε with ≤ {crash}% crashed runs; "
                            f"time to ε: mean [min–max] over repeats"))
    keys = list(t.columns[: list(t.columns).index("time_to_eps")])
    heads = [*keys, "time to ε [s]", f"within {within}%", "stable settings", "runs", "crashed", "not reached", "failed"]
    for h in heads:
        rt.add_column(escape(h), justify="right")
    for _, r in t.iterrows():
        cells = [_fmt(r[k]) for k in keys] + [
            _time(r), str(r["settings_within"]), f"{r['stable_settings']} of {r['settings']}", str(r["runs"]),
            str(r["crashed"]), str(r["not_reached"]), str(r["failed"])]
        rt.add_row(*map(escape, cells))
    console.print(rt)


def _time(r: pd.Series) -> str:
    v = r["time_to_eps"]
    return "none stable" if v is None or pd.isna(v) else f"{v:.4g} [{r['time_min']:.3g}–{r['time_max']:.3g}]"


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def heatmaps(df: pd.DataFrame, out: str | Path, manifest: dict[str, Any] | None = None,
             axes: tuple[str, str] = AXES, max_crash: float = 0.1, svg: bool = False) -> list[Path]:
    """Mean time to ε over (x, y) = (batch, lr) per algorithm x threads, each cell annotated with crashes (C)
    and runs that did not reach ε (N). Returns the PNGs written, and with ``svg`` an SVG beside each (none if
    the grid has fewer than two setting keys)."""
    if df.empty:
        return []
    s = settings(df, manifest, max_crash)
    groups = [k for k in GROUP_KEYS if k in s.columns]
    knobs = [k for k in s.columns[: list(s.columns).index("repeats")] if k not in groups]
    x, y = axes if set(axes) <= set(knobs) else ([*knobs[:2], None, None])[:2]
    if x is None or y is None:
        return []
    facets = groups + [k for k in knobs if k not in (x, y)]
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    unit = "simulated s" if (manifest or {}).get("backend") == "sim" else "s"
    written = []
    for key, part in (s.groupby(_hashable(s, facets), sort=False, dropna=False) if facets else [((), s)]):
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{k}={v}" for k, v in zip(facets, key, strict=False) if not pd.isna(v))  # unset: no label
        path = folder / f"heatmap_{_slug(label) or 'all'}.png"
        _heatmap(part, x, y, label, unit, path, svg)
        written += [path, path.with_suffix(".svg")] if svg else [path]
    return written


def _heatmap(part: pd.DataFrame, x: str, y: str, label: str, unit: str, path: Path, svg: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    mean = part.pivot_table(index=y, columns=x, values="time_to_eps", aggfunc="mean", dropna=False)
    crashed = part.pivot_table(index=y, columns=x, values="crashed", aggfunc="sum", dropna=False)
    not_reached = part.pivot_table(index=y, columns=x, values="not_reached", aggfunc="sum", dropna=False)
    mean = mean.sort_index(ascending=False)  # larger step sizes on top
    fig, ax = plt.subplots(figsize=(1.1 * len(mean.columns) + 2.5, 0.6 * len(mean.index) + 1.8))
    sns.heatmap(mean.astype(float), ax=ax, cmap="viridis_r", cbar_kws={"label": f"mean time to ε [{unit}]"})
    # Annotate every cell, also those with no time (all crashed or short of ε), which seaborn would leave blank.
    lo, hi = float(mean.min().min()), float(mean.max().max())
    for i, yv in enumerate(mean.index):
        for j, xv in enumerate(mean.columns):
            t = mean.loc[yv, xv]
            counts = f"\nC{int(crashed.loc[yv, xv])} N{int(not_reached.loc[yv, xv])}"
            text = ("—" if pd.isna(t) else f"{t:.3g}") + counts
            # Dark text on the light (fast, yellow) end of viridis_r, light text on the dark end.
            light = pd.isna(t) or hi == lo or (t - lo) / (hi - lo) < 0.5
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=7,
                    color="black" if light else "white")
    _mark_best(ax, part, mean, x, y)
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(_axis_label(y))
    ax.set_title(f"{label}\nC = crashed runs, N = runs that did not reach ε, box = fastest stable", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    if svg:
        fig.savefig(path.with_suffix(".svg"))
    plt.close(fig)


def _mark_best(ax: Any, part: pd.DataFrame, mean: pd.DataFrame, x: str, y: str) -> None:
    """Outline the fastest stable setting (the one :func:`table` reports)."""
    from matplotlib.patches import Rectangle

    stable = part[part["stable"]]
    if not len(stable):
        return
    best = stable.loc[stable["time_to_eps"].idxmin()]
    i, j = list(mean.index).index(best[y]), list(mean.columns).index(best[x])
    ax.add_patch(Rectangle((j, i), 1, 1, fill=False, edgecolor="red", linewidth=2.5))


def _axis_label(key: str) -> str:
    return {"optimizer.lr": "step size η (optimizer.lr)", "workload.batch_size": "batch size (workload.batch_size)",
            "workers.count": "threads (workers.count)"}.get(key, key)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")
