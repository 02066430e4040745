"""The model error file (``corpus/model_error.json``): the simulator's own error, fitted on every corpus machine.

``simasgd corpus score --write-fit`` fits it (:func:`simasgd.evaluation.prediction_band.fit_model_error`
over the cells of every machine scored) and writes it beside the corpus entries; the bands that ``run``,
``show`` and ``compare`` give a simulated calibrated machine take it from there. It holds the simulator commit
it was fitted with: a model that changed since is shown beside it, not refused (the error moves with the model,
and refitting takes a corpus score).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simasgd.formats import versioning
from simasgd.formats.atomicio import atomic_write_text

FORMAT: Literal["simasgd-model-error"] = "simasgd-model-error"
FORMAT_VERSION = 2  # a version 1 file has no by_sharing: its algorithms take their σ over both regimes
NAME = "model_error.json"

Metric = Literal["mean_staleness", "updates_per_s", "updates_to_eps", "time_to_eps"]
Sharing = Literal["time_shared", "cpu_each"]  # the algorithm's cells whose threads outnumber the CPUs, or not


class ModelErrorFileError(ValueError):
    pass


class ModelErrorDoc(BaseModel):
    """The file as written: per metric the σ on the log scale over every algorithm, each algorithm's own, and each
    algorithm's own in each regime (its threads time-shared or a CPU each) where it had cells enough, and what
    they were fitted on."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["simasgd-model-error"] = FORMAT
    format_version: int = FORMAT_VERSION
    level: float = Field(gt=0, lt=1)
    sigma_log: dict[Metric, float]
    by_algorithm: dict[str, dict[Metric, float]] = Field(default_factory=dict)
    by_sharing: dict[str, dict[Sharing, dict[Metric, float]]] = Field(default_factory=dict)
    machines: list[str] = Field(min_length=1)
    cells: int = Field(ge=1)
    simulator_commit: str | None = None


def path_in(corpus: Path) -> Path:
    return corpus / NAME


def write(path: Path, doc: ModelErrorDoc) -> None:
    atomic_write_text(path, json.dumps(doc.model_dump(), indent=2) + "\n")


def read(path: Path) -> ModelErrorDoc:
    """The file checked for format, version and fields; :class:`ModelErrorFileError` naming the file otherwise."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelErrorFileError(f"{path}: not a model error file ({e})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else None
        raise ModelErrorFileError(f"{path}: format {found!r}, expected {FORMAT!r}")
    versioning.check(path, raw.get("format_version"), FORMAT_VERSION, "model error", ModelErrorFileError)
    try:
        return ModelErrorDoc.model_validate(raw)
    except ValidationError as e:
        where = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ModelErrorFileError(f"{path}: {where}") from None
