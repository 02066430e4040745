"""The command line's page: every command of the typer app, its arguments and options."""

from __future__ import annotations

import enum
import inspect
import types
import typing
from pathlib import Path
from typing import Any

from simasgd.reference.common import HEADER, cell


def cli_page() -> str:
    """Every command of the typer app (click underneath: duck-typed, typer may vendor its own click)."""
    import typer.main

    from simasgd.cli import app

    group: Any = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="simasgd")
    out = [HEADER + "# Command line", "", f"`simasgd`: {_help(group)}", ""]
    if group.params:
        out += [*_params(group.params), ""]
    out += _commands(group, ctx, "simasgd", "##")
    return "\n".join(out).rstrip() + "\n"


def commands(group: Any = None) -> list[tuple[str, Any]]:
    """Every visible command of the typer app as (``simasgd NAME [SUBNAME]``, click command), groups' commands
    after their group (``simasgd corpus``, then ``simasgd corpus add``, ...)."""
    import typer.main

    from simasgd.cli import app

    group = group or typer.main.get_command(app)
    out = []

    def walk(g: Any, path: str) -> None:
        ctx = g.context_class(g, info_name=path.split()[-1])
        for name in g.list_commands(ctx):
            cmd = g.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            out.append((f"{path} {name}", cmd))
            if hasattr(cmd, "list_commands"):
                walk(cmd, f"{path} {name}")
    walk(group, "simasgd")
    return out


def _commands(group: Any, ctx: Any, path: str, level: str) -> list[str]:
    """A section per command; a group's commands are subsections of its own."""
    from simasgd.commands import fill_help

    out: list[str] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        fill_help(cmd)  # the backends the registry names, as `--help` shows them
        args = " ".join(_usage(p) for p in cmd.params if _is_argument(p))
        sub = hasattr(cmd, "list_commands")
        usage = f"{path} {name} [OPTIONS] {'COMMAND [ARGS]...' if sub else args}".rstrip()
        out += [f"{level} `{path} {name}`", "", _help(cmd), "", "```", usage, "```", ""]
        params = _params(cmd.params)
        out += [*params, ""] if params else []
        if sub:
            out += _commands(cmd, cmd.context_class(cmd, info_name=name, parent=ctx), f"{path} {name}", level + "#")
    return out


def _is_argument(p: Any) -> bool:
    return getattr(p, "param_type_name", "") == "argument"


def _help(cmd: Any) -> str:
    text = inspect.cleandoc(cmd.help or "")
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip() and not p.startswith("\b"))


def _usage(p: Any) -> str:
    name = (p.name or "").upper()
    name = f"{name}..." if p.nargs == -1 else name
    return name if p.required else f"[{name}]"


def _param_type(p: Any) -> str:
    descriptor = getattr(p, "type_descriptor", None)
    ann = descriptor.annotation if descriptor is not None else None
    if ann is None:
        return str(getattr(getattr(p, "type", None), "name", ""))
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 1:
        ann = args[0]
    if typing.get_origin(ann) in (list, tuple):
        return f"{_param_type_of(typing.get_args(ann)[0])}, repeatable"
    return _param_type_of(ann)


def _param_type_of(ann: Any) -> str:
    if typing.get_origin(ann) is typing.Literal:
        return " | ".join(str(a) for a in typing.get_args(ann))
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return " | ".join(str(m.value) for m in ann)
    names = {int: "integer", float: "number", bool: "flag", str: "text", Path: "path"}
    return names.get(ann, getattr(ann, "__name__", str(ann)))


def _params(params: list[Any]) -> list[str]:
    rows = ["| argument or option | type | default | help |", "|---|---|---|---|"]
    for p in params:
        if getattr(p, "hidden", False) or p.name == "help":
            continue
        names = f"`{(p.name or '').upper()}`" if _is_argument(p) else \
            " / ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        kind = "flag" if getattr(p, "is_flag", False) else _param_type(p)
        default = p.default
        if isinstance(default, (list, tuple)):
            default = ", ".join(str(x) for x in default) or None
        shown = "" if default is None or callable(default) else f"`{default}`"
        if isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        if p.required:
            shown = "required"
        text = " ".join((getattr(p, "help", "") or "").split())
        rows.append(f"| {names} | {cell(str(kind))} | {cell(shown)} | {cell(text)} |")
    return rows if len(rows) > 2 else []


