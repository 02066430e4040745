"""The table of scenarios/hattendorf2024/README.md from a sweep of stragglers.toml.

    python scenarios/hattendorf2024/summarize.py SWEEP_DIR

Per algorithm (mean ± standard deviation over repeats): time per iteration (time_s / updates; an
iteration is one update of θ), time to ε, updates to ε, mean staleness, and the share of gradients
computed but never applied (backup's discarded ones)."""

from __future__ import annotations

import json
import sys

import pandas as pd

from simasgd.sweep import store


def label(a: dict) -> str:
    extra = {k: v for k, v in a.items() if k != "name"}
    return a["name"] + ("" if not extra else " " + ", ".join(f"{k}={v}" for k, v in extra.items()))


def table(root: str) -> pd.DataFrame:
    df = store.load(root)
    df = df[df["status"] == "ok"].copy()
    df["setting"] = df["algorithm"].map(label)
    if "optimizer.lr" in df.columns:
        df["setting"] += "; lr " + df["optimizer.lr"].map("{:g}".format)
    df["ms_per_iteration"] = 1e3 * df["time_s"] / df["updates"]
    df["dropped_share"] = [json.loads(e).get("dropped", 0) / a
                           for e, a in zip(df["extra"], df["attempts"], strict=True)]
    g = df.groupby("setting", sort=False)

    def pm(col: str, fmt: str) -> pd.Series:
        return g[col].mean().map(fmt.format) + " ± " + g[col].std().map(fmt.format)

    return pd.DataFrame({"runs": g.size(), "reached ε": g["updates_to_eps"].count(), "crashed": g["crashed"].sum(),
                         "ms / iteration": pm("ms_per_iteration", "{:.3f}"),
                         "time to ε (s)": pm("time_to_eps", "{:.3f}"),
                         "updates to ε": pm("updates_to_eps", "{:.0f}"),
                         "mean staleness": g["mean_staleness"].mean().round(2),
                         "discarded": (100 * g["dropped_share"].mean()).round(1).astype(str) + "%"})


def markdown(t: pd.DataFrame) -> str:
    cols = ["setting", *t.columns]
    rows = [[str(i), *map(str, r)] for i, r in zip(t.index, t.itertuples(index=False), strict=False)]
    return "\n".join("| " + " | ".join(r) + " |" for r in [cols, ["---"] * len(cols), *rows])


def best(t: pd.DataFrame) -> pd.DataFrame:
    """Each algorithm at the step size that reached ε soonest (every repeat reaching it)."""
    t = t[t["reached ε"] == t["runs"]].copy()
    t["_t"] = t["time to ε (s)"].str.split(" ").str[0].astype(float)
    t["_alg"] = t.index.str.split(";").str[0]
    return t.sort_values("_t").groupby("_alg", sort=False).head(1).drop(columns=["_t", "_alg"])


if __name__ == "__main__":
    t = table(sys.argv[1])
    print("Each at its best step size:\n")
    print(markdown(best(t)))
    print("\nEvery setting:\n")
    print(markdown(t))
