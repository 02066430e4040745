"""The results format's page: :mod:`simasgd.runs.results`' summary fields, table columns and row contracts."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from simasgd.reference.common import HEADER, cell

SUMMARY_FIELDS: dict[str, str] = {
    "run": "the repeat's index (0, 1, …); its random streams derive from the scenario's `seed` and this index",
    "updates": "applied updates (versions made)",
    "time_s": "the run's length: simulated seconds (`sim`), wall-clock seconds (measuring backends)",
    "updates_to_eps": "updates when the loss first reached ε × the initial loss; null when it did not",
    "time_to_eps": "seconds when the loss first reached ε × the initial loss; null when it did not",
    "crashed": "the loss became NaN or infinite, or exceeded `stop.explode_factor` × the initial loss",
    "not_reached": "ε was set (`stop.epsilon` > 0) and not reached within the budget "
                   "(`max_updates`, `max_time_s`) without crashing",
    "initial_loss": "the loss at θ₀, on the workload's evaluation rows",
    "final_loss": "the loss at the end of the run",
    "mean_staleness": "mean staleness of the applied updates",
    "attempts": "rows of updates.parquet: update attempts (or gradients, where an update combines several), "
                "dropped ones included",
    "updates_per_s": "applied updates per second (`updates / time_s`)",
    "extra": "backend-specific figures (e.g. `bytes_per_row`, `bytes_total` of distributed algorithms)",
}
UPDATE_COLUMNS: dict[str, str] = {
    "run": "the repeat",
    "worker": "the worker that made the attempt (0 … count − 1)",
    "version": "the algorithm's version of this row (see the row contract below): for one-gradient updates, "
               "the global version after the update (1, 2, …)",
    "read_version": "the global version when the worker read θ",
    "staleness": "`version − 1 − read_version`: updates by others between the read and the write",
    "t_read": "when the worker's read of θ was taken (seconds from the run's start)",
    "t_write": "when the update was written (or dropped)",
    "lock_wait_s": "time spent waiting for a lock or barrier in this attempt",
    "retries": "failed CAS attempts before this one succeeded or was dropped",
    "applied": "false for a dropped attempt (Leashed-SGD past its persistence, a discarded backup gradient, …); "
               "it carries the version it would have had",
    "t_start": "the cycle's start, before any read-side wait (NaN where a backend does not know it)",
    "t_grad_start": "the read's end and the gradient's start",
    "t_grad_end": "the gradient's end; the update phase runs from here to `t_write`",
    "distance": "elastic and decentralised algorithms: ‖x_j − x̃‖ (or ‖θ_i − θ_j‖) at the exchange this row "
                "records; NaN otherwise",
}
CURVE_COLUMNS: dict[str, str] = {
    "run": "the repeat",
    "t": "seconds from the run's start",
    "updates": "applied updates at this point",
    "loss": "the loss on the workload's evaluation rows",
    "spread": "sqrt(mean over workers of their latest row's `distance`²): how far apart the workers' states are; "
              "NaN where no row has a distance",
    "accuracy": "the fraction of held-out rows classified right (NaN for regression workloads)",
}


def _described(kind: str, names: list[str], docs: dict[str, str]) -> None:
    missing = [n for n in names if n not in docs]
    if missing:
        raise KeyError(f"{kind}: no description for {missing}; add it in simasgd/reference.py")


def results_page() -> str:
    from simasgd.runs import results

    summary = [f.name for f in dataclasses.fields(results.RunSummary)]
    _described("RunSummary", summary, SUMMARY_FIELDS)
    _described("UPDATE_COLUMNS", list(results.UPDATE_COLUMNS), UPDATE_COLUMNS)
    _described("CURVE_COLUMNS", list(results.CURVE_COLUMNS), CURVE_COLUMNS)
    hints = typing.get_type_hints(results.RunSummary)
    out = [HEADER + "# Results format", "",
           (f"`simasgd run SCENARIO --backend B --out DIR` writes three files into `DIR`. "
            f"`summary.json` carries `\"format\": \"{results.FORMAT}\"` and "
            f"`\"format_version\": {results.FORMAT_VERSION}`; a reader refuses a newer version. "
            "It is written last, with the row counts of both tables: a folder without it is not a result. "
            "See [Reading results](../results.md) for what the figures mean."), "",
           "## `summary.json`", "",
           "| key | content |", "|---|---|",
           "| `format`, `format_version` | the format's name and version |",
           "| `backend` | the backend that ran it |",
           "| `scenario` | the scenario as run, every default filled in |",
           ("| `metadata` | versions, the scenario's hash, the machine (and calibrated profile) it ran on or "
            "simulated, host state around measured runs; a simulated result's `model`: the executor traits, "
            "the mechanisms that acted, the profile's tables read and its digest "
            "([the model on the record](../model.md#the-model-on-the-record)) |"),
           "| `rows` | row counts of `updates.parquet` and `curve.parquet` |",
           "| `runs` | one object per repeat, the fields below |", "",
           "### `runs[]`", "", "| field | type | meaning |", "|---|---|---|"]
    for name in summary:
        out.append(f"| `{name}` | {cell(_pytype(hints[name]))} | {cell(SUMMARY_FIELDS[name])} |")
    for title, cols, docs, optional in (
            ("updates.parquet", results.UPDATE_COLUMNS, UPDATE_COLUMNS, results.OPTIONAL_UPDATE_COLUMNS),
            ("curve.parquet", results.CURVE_COLUMNS, CURVE_COLUMNS, results.OPTIONAL_CURVE_COLUMNS)):
        out += ["", f"## `{title}`", "", "| column | dtype | meaning |", "|---|---|---|"]
        for c, dtype in cols.items():
            note = " (older files without it load with NaN)" if c in optional else ""
            out.append(f"| `{c}` | {dtype} | {cell(docs[c] + note)} |")
    out += ["", "## Row contract by algorithm", "",
            "What one row of `updates.parquet` is, and what `version` means, per algorithm:", "",
            "| algorithm | one row per | `version` | `read_version` | drops |", "|---|---|---|---|---|"]
    from simasgd.spec import algorithms

    for d in algorithms.ALGORITHMS.values():
        r = d.rows
        out.append(f"| `{d.name}` | {r.per} | {cell(r.version)} | {cell(r.read_version)} | "
                   f"{'yes' if r.drops else 'no'} |")
    return "\n".join(out) + "\n"


def _pytype(t: Any) -> str:
    args = [a for a in typing.get_args(t) if a is not type(None)]
    if typing.get_origin(t) in (typing.Union, types.UnionType) and len(args) == 1:
        return f"{_pytype(args[0])} or null"
    if typing.get_origin(t) is dict:
        return "object"
    return {int: "integer", float: "number", bool: "boolean", str: "string"}.get(t, str(t))


