"""Load scenario files: TOML, dotted overrides, and one clear line per problem."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from simasgd.spec.scenario import ALGORITHM_MODELS, REMOVED, Scenario, stray_params, unknown_algorithm


class ScenarioError(ValueError):
    """Every problem found in a scenario, one line each, naming file, key and what is allowed."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def parse_value(text: str) -> Any:
    """A TOML value (``16``, ``0.005``, ``inf``, ``[1,2]``, ``true``), else the text as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_override(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ScenarioError([f"-s {item}: expected KEY=VALUE with a dotted KEY, e.g. workers.count=16"])
    return key, parse_value(value.strip())


def apply_overrides(data: dict[str, Any], overrides: Iterable[str], origin: str = "-s") -> dict[str, Any]:
    """Set dotted keys in a nested dict (a copy), creating tables as needed."""
    out = _deep_copy(data)
    problems = []
    for item in overrides:
        try:
            key, value = parse_override(item)
        except ScenarioError as e:
            problems.extend(e.problems)
            continue
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                problems.append(f"{origin} {item}: {part} is a value, not a table")
                break
            node = child
        else:
            node[parts[-1]] = value
    if problems:
        raise ScenarioError(problems)
    return out


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def read_toml(path: Path) -> dict[str, Any]:
    label = str(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ScenarioError([f"{label}: no such file"]) from None
    except IsADirectoryError:
        raise ScenarioError([f"{label}: is a folder, not a scenario file"]) from None
    except NotADirectoryError:
        raise ScenarioError([f"{label}: no such file (a part of the path is a file, not a folder)"]) from None
    except OSError as e:  # permission, a device that cannot be read: the file, and why
        raise ScenarioError([f"{label}: cannot read the scenario file ({e.strerror or e})"]) from None
    except UnicodeDecodeError as e:
        raise ScenarioError([f"{label}: not UTF-8 text ({e.reason})"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError([f"{label}: not valid TOML: {e}"]) from None


def load(path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read, override and validate one scenario file."""
    path = Path(path)
    data = read_toml(path)
    data = apply_overrides(data, overrides)
    data.setdefault("name", path.stem)
    sc = from_dict(data, label=str(path), base_dir=path.parent)
    _check_fits(sc, str(path))
    return sc


def _check_fits(sc: Scenario, label: str) -> None:
    """Refuse a batch whose row indices alone (8 bytes a row, drawn by every backend for each batch) take more
    memory than this machine has available now: a valid number that no run could start with."""
    from simasgd.machines.capacity import available_memory, size

    avail = available_memory()
    need = 8 * sc.workload.batch_size
    if avail is not None and need > avail:
        raise ScenarioError([f"{label}: workload.batch_size = {sc.workload.batch_size}: a batch's row indices "
                             f"alone take {size(need)}, more than the {size(avail)} of memory available now"])


def from_dict(data: dict[str, Any], label: str = "<scenario>", base_dir: Path | None = None) -> Scenario:
    try:
        return Scenario.model_validate({**data, "base_dir": str(base_dir) if base_dir else None})
    except ValidationError as e:
        raise ScenarioError(format_errors(e, data, label)) from None


def without_removed(data: dict[str, Any]) -> dict[str, Any]:
    """A scenario as a result recorded it (every key, defaults included), less the keys the format has since
    removed (``scenario.REMOVED``): what a stored scenario needs to load again. A scenario file that sets
    one is refused instead, naming what replaced it."""
    out = _deep_copy(data)
    for key in REMOVED:
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def _stray_algorithm_params(data: dict[str, Any], label: str) -> list[str]:
    # Checked here too so that each stray key gets its own line with its own dotted name,
    # alongside the other problems (pydantic only runs model checks once the fields are valid).
    alg = data.get("algorithm")
    if not isinstance(alg, dict) or not isinstance(alg.get("name"), str):
        return []
    lines = []
    given = {k for k, v in alg.items() if v is not None}  # any key: each algorithm's model holds its own
    for msg in stray_params(alg["name"], given):
        key = msg.split("`")[1]
        lines.append(f"{label}: algorithm.{key} = {_fmt(alg[key])}: {msg}")
    return lines


def format_errors(err: ValidationError, data: dict[str, Any], label: str) -> list[str]:
    stray = _stray_algorithm_params(data, label)
    by_key: dict[str, list[str]] = {}
    for e in err.errors(include_url=False):
        loc = [str(p) for p in _without_algorithm_tag(e["loc"]) if not _is_union_tag(p)]
        key = ".".join(loc) or "(top level)"
        if key == "algorithm" and e["type"] in ("union_tag_invalid", "union_tag_not_found"):
            line = _algorithm_name_line(data, label)
            if line not in by_key.setdefault("algorithm.name", []):
                by_key["algorithm.name"].append(line)
            continue
        if stray and key == "algorithm" and "is not a parameter of" in str(e["msg"]):
            continue
        line = _one_line(e, key, data, label)
        if line not in by_key.setdefault(key, []):
            by_key[key].append(line)
    lines = list(stray)
    for _key, group in by_key.items():
        # A union (e.g. placement: a name or a list of cores) fails once per member: say it once.
        head, _, first = group[0].rpartition(": ")
        lines.append(group[0] if len(group) == 1 else
                     head + ": " + "; or ".join([first] + [g.rpartition(": ")[2] for g in group[1:]]))
    return lines


def _without_algorithm_tag(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # [algorithm] is a union discriminated on its name: pydantic puts the name after "algorithm" in the path.
    if len(loc) > 1 and loc[0] == "algorithm" and loc[1] in ALGORITHM_MODELS:
        return loc[:1] + loc[2:]
    return loc


def _algorithm_name_line(data: dict[str, Any], label: str) -> str:
    """An [algorithm] table whose name chooses no algorithm: missing, or not one of the registry's."""
    found, name = _lookup(data, "algorithm.name")
    if not found:
        return f"{label}: algorithm.name: required"
    return f"{label}: algorithm.name = {_fmt(name)}: {unknown_algorithm()}"


def _is_union_tag(part: Any) -> bool:
    # pydantic names the union member it tried ("list[...]", "literal[...]"): not a user key.
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool"))


def _lookup(data: Any, key: str) -> tuple[bool, Any]:
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


_TYPE_WORDS = {
    "int_type": "must be an integer", "int_parsing": "must be an integer", "int_from_float": "must be an integer",
    "float_type": "must be a number", "float_parsing": "must be a number", "bool_type": "must be true or false",
    "bool_parsing": "must be true or false", "string_type": "must be a string", "list_type": "must be a list",
    "dict_type": "must be a table", "model_type": "must be a table", "finite_number": "must be a finite number",
    "model_attributes_type": "must be a table",
}


def _one_line(e: ErrorDetails, key: str, data: dict[str, Any], label: str) -> str:
    kind, ctx = e["type"], e.get("ctx") or {}
    found, value = _lookup(data, key)
    where = f"{label}: {key}" + (f" = {_fmt(value)}" if found and kind != "extra_forbidden" else "")
    if kind == "extra_forbidden":
        if key in REMOVED:
            return f"{where}: {REMOVED[key]}"
        return f"{where}: unknown key (allowed: {_allowed_keys(key)})"
    if kind == "missing":
        return f"{where}: required"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()))
        noun = "an integer" if isinstance(bound, int) and not isinstance(value, float) else "a number"
        return f"{where}: must be {noun} {op} {_fmt(bound)}"
    if kind == "literal_error":
        return f"{where}: must be one of {ctx.get('expected', '')}"
    if kind in _TYPE_WORDS:
        return f"{where}: {_TYPE_WORDS[kind]}"
    msg = str(e["msg"]).removeprefix("Value error, ")
    return f"{where}: {msg}"


def _allowed_keys(key: str) -> str:
    """The keys the table holding ``key`` accepts."""
    model: Any = Scenario
    for part in key.split(".")[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return "see docs/reference/scenario.md"
        ann = field.annotation
        model = next((a for a in getattr(ann, "__args__", (ann,)) if hasattr(a, "model_fields")), None)
        if model is None:
            return "see docs/reference/scenario.md"
    return ", ".join(k for k in model.model_fields if k != "base_dir")
