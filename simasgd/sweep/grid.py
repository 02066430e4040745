"""Hyperparameter grids: parse ``KEY=VALUES``, expand ranges, take the product, name cells.

A grid maps dotted scenario keys to lists of values. Values come from the
command line (``--grid optimizer.lr=0.001:0.009:0.001``) or a ``[sweep.grid]``
table; the command line wins per key. A cell is one combination of values and
is named by a digest of its *content* (keys and values), never by its position
in the product, so adding a value to the grid leaves every other cell's name,
seed and stored result untouched.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from simasgd.spec.loader import ScenarioError, parse_value

Grid = dict[str, list[Any]]

# Keys a grid may not vary: they describe the sweep itself, not one run of it.
FORBIDDEN = {"name": "the sweep's name", "seed": "seeds are derived per cell (vary `repeats` instead)",
             "repeats": "repeats are their own axis (set `repeats`)"}
MAX_VALUES = 10_000  # a range longer than this is a typo (a step of 1e-6 instead of 1e-3), not a grid


@dataclass(frozen=True)
class Cell:
    """One point of the grid: dotted key -> value, in grid-key order."""

    index: int
    values: Mapping[str, Any]

    @property
    def id(self) -> str:
        return cell_id(self.values)

    def label(self) -> str:
        return ", ".join(f"{k}={toml_literal(v)}" for k, v in self.values.items()) or "(no grid keys)"

    def overrides(self) -> list[str]:
        """The cell as ``-s`` override strings, for :func:`simasgd.spec.loader.apply_overrides`."""
        return [f"{k}={toml_literal(v)}" for k, v in self.values.items()]


def cell_id(values: Mapping[str, Any]) -> str:
    """A 12-hex-digit digest of the cell's keys and values (order of keys irrelevant)."""
    canon = json.dumps({k: _canon(v) for k, v in sorted(values.items())}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:12]


def _canon(v: Any) -> Any:
    # inf/nan are not JSON; 1 and 1.0 stay distinct as they would in TOML.
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    return v


def toml_literal(v: Any) -> str:
    """``v`` as TOML value text that :func:`simasgd.spec.loader.parse_value` reads back unchanged."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else ("nan" if math.isnan(v) else repr(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_literal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_literal(x)}" for k, x in v.items()) + "}"
    return str(v)


def parse_values(key: str, text: str, origin: str = "--grid") -> list[Any]:
    """``16,32,64`` (TOML values; bare words are strings), ``a:b:step`` or ``a:b:*factor`` (inclusive)."""
    items = split_top_level(text)
    values: list[Any] = []
    for item in items:
        rng = parse_range(key, item, origin)
        values.extend(rng if rng is not None else [parse_value(item)])
    return values


def split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, braces and quotes (so ``[784,64,10],[784,32,10]`` is two items)."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote and text[i - 1] != "\\" else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return [s for s in items if s]


def parse_range(key: str, text: str, origin: str = "--grid") -> list[Any] | None:
    """The values of ``start:stop:step`` / ``start:stop:*factor``, or None if ``text`` is not a range.

    Arithmetic is decimal, on the text as written, so ``0.001:0.009:0.001``
    gives exactly the floats ``0.001, 0.002, ..., 0.009`` (end included),
    the same floats TOML reads from those literals.
    """
    parts = text.split(":")
    if len(parts) != 3:
        return None
    geometric = parts[2].strip().startswith("*")
    parsed = [_decimal(p.strip().lstrip("*") if i == 2 else p.strip()) for i, p in enumerate(parts)]
    nums = [n for n in parsed if n is not None]
    if len(nums) != len(parsed):
        return None  # e.g. "mnist:/data/x:y" is a plain string, not a range
    start, stop, step = nums
    where = f"{origin} {key}={text}"
    if stop < start:
        raise ScenarioError([f"{where}: the end {stop} is below the start {start}"])
    if (geometric and (step <= 1 or start <= 0)) or (not geometric and step <= 0):
        allowed = "a factor > 1 and a start > 0" if geometric else "a step > 0"
        raise ScenarioError([f"{where}: a range needs {allowed} (start:stop:step or start:stop:*factor)"])
    out: list[Decimal] = []
    x = start
    while x <= stop:
        out.append(x)
        if len(out) > MAX_VALUES:
            raise ScenarioError([f"{where}: more than {MAX_VALUES} values; is the step right?"])
        x = x * step if geometric else x + step
    integral = all(_is_int_text(p.strip().lstrip("*")) for p in parts)
    return [int(v) if integral else float(v) for v in out]


def _decimal(text: str) -> Decimal | None:
    try:
        d = Decimal(text)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def _is_int_text(text: str) -> bool:
    return text.lstrip("+-").isdigit()


def parse_grid_args(items: Iterable[str], origin: str = "--grid") -> Grid:
    """``["optimizer.lr=0.001:0.003:0.001", "algorithm.name=mutex,hogwild"]`` as a grid."""
    grid: Grid = {}
    problems: list[str] = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")) or not text.strip():
            problems.append(f"{origin} {item}: expected KEY=VALUES, e.g. optimizer.lr=0.001:0.009:0.001 "
                            f"or workload.batch_size=16,32,64")
            continue
        try:
            grid[key] = parse_values(key, text.strip(), origin)
        except ScenarioError as e:
            problems.extend(e.problems)
    _raise(problems)
    return grid


def from_table(table: Mapping[str, Any], origin: str = "[sweep.grid]") -> Grid:
    """A ``[sweep.grid]`` table: each key a list of values or a range string."""
    grid: Grid = {}
    problems: list[str] = []
    for key, spec in table.items():
        try:
            if isinstance(spec, str):
                rng = parse_range(key, spec, origin)
                grid[key] = rng if rng is not None else [spec]
            elif isinstance(spec, list):
                grid[key] = list(spec)
            else:
                problems.append(f"{origin} {key} = {toml_literal(spec)}: must be a list of values "
                                f"or a range string \"start:stop:step\"")
        except ScenarioError as e:
            problems.extend(e.problems)
    _raise(problems)
    return grid


def combine(file_grid: Grid, cli_grid: Grid) -> Grid:
    """The file's grid with the command line's keys replacing it key by key."""
    return {**file_grid, **cli_grid}


def check_keys(grid: Grid) -> None:
    """Grid-level problems (forbidden or empty keys), all at once."""
    problems = []
    for key, values in grid.items():
        top = key.split(".")[0]
        if key in FORBIDDEN:
            problems.append(f"grid key {key}: cannot be swept ({FORBIDDEN[key]})")
        elif top == "sweep":
            problems.append(f"grid key {key}: the sweep table cannot sweep itself")
        elif not values:
            problems.append(f"grid key {key}: has no values")
        elif len({json.dumps(_canon(v), sort_keys=True) for v in values}) != len(values):
            problems.append(f"grid key {key}: repeats a value ({', '.join(map(toml_literal, values))})")
    _raise(problems)


def cells(grid: Grid) -> list[Cell]:
    """The product of the grid's values, first key varying slowest; one empty cell for an empty grid."""
    keys = list(grid)
    return [Cell(i, dict(zip(keys, combo, strict=False))) for i, combo in enumerate(itertools.product(*grid.values()))]


def _raise(problems: list[str]) -> None:
    if problems:
        raise ScenarioError(problems)
