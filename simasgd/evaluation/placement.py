"""The CPUs' placement as host noise: where a virtual machine's host puts the vCPUs, run by run.

A VM's vCPUs are threads of the host, which moves them between physical cores: one that shares a cache
with the other vCPU's, or one on another die, where every line one worker writes and another reads costs
several times more. The calibration's core-to-core probes see it (``[c2c] samples_ns``: most near the
calibrated hand-off, some beyond :data:`simasgd.evaluation.drift.PLACEMENT_RATIO` of it), and so do the
drift probes taken before measured runs. A run of one worker does not care; a run of two or more runs at
the placement's speed, so its measured runs can fall into two modes (the corpus's cells:
benchmarks/fidelity.md, "The host's placement in the bands").

:class:`Placement` is that noise, calibrated from the probes and never from measured runs: the share of
probes in the far placement, and how much slower than the calibrated one its hand-off is. :func:`moved` is
the profile in that placement: every cost of a line moving between cores scaled by that factor (a
hand-off's latency up, a transfer's rate down: a core keeps a fixed number of lines in flight, so its
rate goes as one over the latency), every cost within one core left as it was. A prediction band
(:mod:`simasgd.evaluation.prediction_band`) then mixes the simulator's runs in both placements, weighted by
the share.

Only the slower placement is modelled: the faster probes (two vCPUs on one core's two hardware threads)
make lines cheaper but share the core's units, which the profile has no figure for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from simasgd.evaluation.drift import PLACEMENT_RATIO

if TYPE_CHECKING:
    from simasgd.machines.profile_model import Profile

# [coherence] rates of lines another core wrote last: they move between cores (the own_* rates do not)
COHERENCE_RATES = ("read_gbs", "update_gbs", "fresh_gbs", "held_read_gbs", "held_update_gbs", "held_mirrored_gbs")


@dataclass(frozen=True)
class Placement:
    """``share``: the probability that a run finds its CPUs in the far placement; ``factor``: that placement's
    core-to-core hand-off over the calibrated one's; ``probes``: the probes both are taken from."""

    share: float
    factor: float
    probes: int
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"share": self.share, "factor": self.factor, "probes": self.probes, "source": self.source}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Placement:
        return cls(float(d["share"]), float(d["factor"]), int(d["probes"]), str(d.get("source", "")))

    def text(self) -> str:
        return (f"{self.share:.0%} of {self.probes} core-to-core probes in a placement {self.factor:.1f}× slower "
                f"than the calibrated one ({self.source})")


def of_probes(calibrated_ns: float | None, probes_ns: Iterable[float | None], source: str) -> Placement | None:
    """The far placement seen by ``probes_ns`` around the calibrated hand-off ``calibrated_ns``: the probes
    beyond :data:`PLACEMENT_RATIO` × it; their median over it is the factor. None without a calibrated
    hand-off or probes; a share of 0 (factor 1) where no probe was far."""
    p = np.asarray([x for x in probes_ns if x is not None and math.isfinite(x) and x > 0], dtype=float)
    if calibrated_ns is None or not calibrated_ns > 0 or len(p) == 0:
        return None
    far = p[p > PLACEMENT_RATIO * calibrated_ns]
    if len(far) == 0:
        return Placement(0.0, 1.0, len(p), source)
    return Placement(len(far) / len(p), float(np.median(far)) / calibrated_ns, len(p), source)


def of_entry(profile: Profile, drifts: Iterable[Mapping[str, Any] | None]) -> Placement | None:
    """A corpus machine's placement: the calibration's probes (``[c2c] samples_ns``) and its cells' drift
    probes (``c2c_ns``), around the calibrated hand-off (``[c2c] latency_ns``)."""
    c2c = profile.c2c
    if c2c is None:
        return None
    calibration = list(c2c.samples_ns or [])
    drift = [d.get("c2c_ns") for d in drifts if d]
    source = f"{len(calibration)} calibration probes" + (f" and {sum(x is not None for x in drift)} drift probes"
                                                         if any(x is not None for x in drift) else "")
    return of_probes(c2c.latency_ns, calibration + drift, source)


def moved(profile: Profile, factor: float) -> Profile:
    """``profile`` in a placement whose core-to-core hand-off is ``factor`` × the calibrated one: a lock's
    hand-off, a contended and a failed CAS × factor; the ``[coherence]`` rates of lines another core wrote
    ÷ factor; the core-to-core hand-off (``[c2c] latency_ns``) × factor. Tables it lacks stay absent."""
    update: dict[str, Any] = {}
    if profile.coherence is not None:
        co = profile.coherence
        update["coherence"] = co.model_copy(update={k: [v / factor for v in getattr(co, k)]
                                                    for k in COHERENCE_RATES if getattr(co, k) is not None})
    if profile.locks is not None and profile.locks.handoff_s is not None:
        update["locks"] = profile.locks.model_copy(update={"handoff_s": profile.locks.handoff_s * factor})
    if profile.cas is not None:
        cas = profile.cas
        update["cas"] = cas.model_copy(update={k: getattr(cas, k) * factor for k in ("contended_s", "failure_cost_s")
                                               if getattr(cas, k) is not None})
    if profile.c2c is not None and profile.c2c.latency_ns is not None:
        update["c2c"] = profile.c2c.model_copy(update={"latency_ns": profile.c2c.latency_ns * factor})
    return profile.model_copy(update=update)
