"""Rank 0's part: every rank's report into one :class:`~simasgd.runs.results.RunResult` (the shared format).

The rows come from the workers' reports, in version order. θ at a curve point is the holder's
snapshot (the centre's, sync's rank 0's, or the shards' concatenated at the same count); the loss is
evaluated here, after the run (``stop_reason`` says when ε was found there), then at the last
version. The messages and bytes every rank sent and received go into the summary (``messages``,
``bytes_sent``, ``bytes_per_message``) and, per rank, into ``metadata["ranks"]``; the bytes a row
would carry by the network model (``simasgd.sim.network.traffic``) beside them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from simasgd.runs.convergence import Monitor
from simasgd.runs.results import RunResult, updates_frame
from simasgd.spec.scenario import Scenario
from simasgd.sim import network


def result(sc: Scenario, run: int, wl: Any, theta0: np.ndarray, reports: list[dict[str, Any]], backend: str,
           how: str) -> RunResult:
    holders = [r for r in reports if r["final"] is not None]  # θ's holders, by rank: the shards in order
    frames = [_frame(run, r["rows"]) for r in reports if len(r["rows"]["version"])]
    df = (pd.concat(frames, ignore_index=True) if frames else _frame(run, {k: np.zeros(0) for k in
                                                                          reports[0]["rows"]}))
    df = df.sort_values(["version", "t_write"], kind="stable").reset_index(drop=True)
    applied = df["applied"].to_numpy()
    updates = int(df["version"][applied].max()) if applied.any() else 0
    mon = Monitor(sc.stop, run)
    mon.observe(0.0, 0, wl.eval_loss(theta0))
    mean = bool(holders) and holders[0]["combine"] == "mean"
    for t, v, theta in _snapshots(holders, mean):
        if v <= updates:
            mon.observe(t, v, wl.eval_loss(theta), theta)
    final = _join([r["final"] for r in holders], mean)
    time_s = float(df["t_write"].max()) if len(df) else 0.0
    if mon.updates[-1] != updates:
        mon.observe(time_s, updates, wl.eval_loss(final), final)
    reason = "max_updates" if updates >= sc.stop.max_updates else "max_time"
    live = [r["extra"].get("stopped_by") for r in reports if r["extra"].get("stopped_by")]
    if live:
        reason = live[0]
    elif mon.reached:
        reason = "epsilon (found after the run)"
    elif mon.crashed:
        reason = "crashed"
    sent = sum(r["sent"][0] for r in reports)
    sent_b = sum(r["sent"][1] for r in reports)
    extra: dict[str, Any] = {"stop_reason": reason, "processes": len(reports), "transport": "gloo", "launch": how,
                             "messages": sent, "bytes_sent": sent_b,
                             "bytes_per_message": sent_b / sent if sent else 0.0,
                             **network.traffic(sc, int(theta0.shape[0]), theta0.dtype.itemsize, len(df))}
    for r in reports:
        extra.update({k: v for k, v in r["extra"].items() if isinstance(v, (int, float, str))} if r["rank"] == 0
                     else {})
    summary = mon.summary(updates, time_s, df["staleness"].to_numpy()[applied], attempts=len(df), **extra)
    if not math.isfinite(summary.final_loss):
        summary.crashed = True
    ranks = [{"rank": r["rank"], "role": r["role"], "host": r["host"], "affinity": r["affinity"],
              "threads": r.get("threads", {}),
              "messages_sent": r["sent"][0],
              "bytes_sent": r["sent"][1], "messages_received": r["received"][0],
              "bytes_received": r["received"][1], **r["extra"]}
             for r in reports]
    return RunResult(scenario=sc.to_dict(), backend=backend, runs=[summary], updates=df, curve=mon.curve(),
                     metadata={"ranks": ranks, "final_theta_norm": float(np.linalg.norm(final))})


def _frame(run: int, rows: dict[str, np.ndarray]) -> pd.DataFrame:
    return updates_frame(run, rows["worker"].astype(np.int64), rows["version"], rows["read_version"],
                         rows["t_read"], rows["t_write"], rows["lock_wait_s"], 0, rows["applied"].astype(bool),
                         rows["t_start"], rows["t_grad_start"], rows["t_grad_end"], rows["distance"])


def _join(parts: list[np.ndarray], mean: bool) -> np.ndarray:
    """θ from its holders' parts: the shards in rank order, or (simuparallel) the mean of the states."""
    if not mean:
        return np.concatenate(parts)
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out / len(parts)


def _snapshots(holders: list[dict[str, Any]], mean: bool) -> list[tuple[float, int, np.ndarray]]:
    """θ at each version every holder kept (joined by :func:`_join`; the latest of their times)."""
    by: list[dict[int, tuple[float, np.ndarray]]] = [{v: (t, x) for t, v, x in r["snaps"]} for r in holders]
    common = sorted(set.intersection(*(set(b) for b in by))) if by else []
    return [(max(b[v][0] for b in by), v, _join([b[v][1] for b in by], mean)) for v in common]
