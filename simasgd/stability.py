"""Warnings when a measurement is too unstable to trust one number (pyperf-style)."""

from __future__ import annotations

import numpy as np

UNSTABLE_CV = 0.10


def stability_warnings(result) -> list[str]:
    """pyperf-style warnings: repeats that disagree too much to trust one number."""
    out = []
    rates = np.array([r.updates_per_s for r in result.runs if r.updates_per_s > 0])
    if len(rates) >= 2:
        cv = float(np.std(rates, ddof=1) / np.mean(rates))
        if cv > UNSTABLE_CV:
            out.append(f"updates/s varies by {cv:.0%} (std/mean) across {len(rates)} repeats: "
                       f"the measurement is unstable (other load on the machine? too short a run?)")
    crashed = sum(r.crashed for r in result.runs)
    if crashed:
        out.append(f"{crashed} of {len(result.runs)} runs crashed (loss NaN/inf or exploded)")
    return out
