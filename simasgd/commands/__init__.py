"""CLI command groups. Shared helpers for turning library errors into clear exits."""

from __future__ import annotations

import contextlib
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import typer
from typer.core import TyperCommand

if TYPE_CHECKING:
    from rich.console import Console

EXIT_BAD_INPUT = 2


def version() -> str:
    """simasgd's version as installed (``pip install -e .`` from a clone records it from pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("simasgd")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class RegistryHelp(TyperCommand):
    """A command whose help names backends by the words of :func:`registry_words` (``{backends}``,
    ``{measuring}``, ``{not_measuring}``), filled in when the help is shown: the registry imports pandas and the
    backends numba or torch, too slow for every start of the CLI. The reference page fills them the same way
    (:func:`fill_help`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        fill_help(self)
        super().format_help(ctx, formatter)


def fill_help(cmd: Any) -> None:
    """Replace :func:`registry_words`' words in a click command's help and its parameters' help."""
    texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
    if not any(w in t for t in texts for w in REGISTRY_WORDS):
        return
    words = registry_words()

    def fill(text: str) -> str:
        for w, v in words.items():
            text = text.replace(w, v)
        return text
    if cmd.help:
        cmd.help = fill(cmd.help)
    for p in cmd.params:
        if getattr(p, "help", None):
            p.help = fill(p.help)


REGISTRY_WORDS = ("{backends}", "{measuring}", "{not_measuring}")


def registry_words() -> dict[str, str]:
    """``{backends}``: every registered backend (``simasgd.runs.backends.BACKENDS``), ``a | b | ...``;
    ``{measuring}``: those that time this host (``MEASURES_HOST``: their runs' repeats and a sweep's tasks one
    at a time), ``{not_measuring}``: the others, each ``a, b, ...``."""
    from simasgd.runs import backends

    measuring = measuring_backends()
    return {"{backends}": " | ".join(backends.BACKENDS),
            "{measuring}": ", ".join(b for b in backends.BACKENDS if measuring[b]),
            "{not_measuring}": ", ".join(b for b in backends.BACKENDS if measuring[b] is False)}


def measuring_backends() -> dict[str, bool | None]:
    """Each registered backend's ``MEASURES_HOST``, read from its module's own assignment without importing
    it (``backends.measures_host`` imports it: numba, torch); None where the module is absent. A module that
    computes the trait instead of stating it raises ``BackendError`` naming the file."""
    import ast
    import importlib.util
    from pathlib import Path

    from simasgd.runs import backends

    out: dict[str, bool | None] = {}
    for name, module in backends.BACKENDS.items():
        top, _, rest = module.partition(".")
        spec = importlib.util.find_spec(top)
        roots = list(spec.submodule_search_locations or []) if spec is not None else []
        found = [p for r in roots if (p := Path(r).joinpath(*rest.split(".")).with_suffix(".py")).is_file()]
        if not found:  # not in this build (backends.available): neither list names it
            out[name] = None
            continue
        value = None
        for node in ast.parse(found[0].read_text(encoding="utf-8")).body:
            target = node.targets[-1] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            if isinstance(target, ast.Name) and target.id == "MEASURES_HOST" and getattr(node, "value", None):
                value = node.value  # type: ignore[attr-defined]
        if not isinstance(value, ast.Constant) or not isinstance(value.value, bool):
            raise backends.BackendError(f"backend {name!r}: {found[0]} states no MEASURES_HOST = True | False")
        out[name] = value.value
    return out


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@contextmanager
def user_errors(source: object = None) -> Iterator[None]:
    """Bad input (scenario, results, backend, machine) exits 2 with its message, never a traceback.
    ``source``: the scenario file the command runs; a backend's refusal of its algorithm or of a parameter
    value (raised once the run starts, after the file loaded) then names it, as the loader's errors do."""
    from simasgd.machines.capacity import CapacityError
    from simasgd.machines.machine import MachineError
    from simasgd.runs.backends import BackendError
    from simasgd.runs.results import ResultsError
    from simasgd.spec.algorithms import UnsupportedAlgorithm
    from simasgd.spec.loader import ScenarioError

    try:
        with warnings.catch_warnings():
            warnings.showwarning = _plain(warnings.showwarning)
            yield
    except (ScenarioError, ResultsError, BackendError, CapacityError, MachineError, UnsupportedAlgorithm) as e:
        named = isinstance(e, (UnsupportedAlgorithm, CapacityError))  # raised by the run: the file is not in it
        msg = f"{source}: {e}" if source is not None and named else str(e)
        print(f"error: {msg}" if "\n" not in msg else msg, file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except MemoryError as e:
        # A size the checks up front let through (they bound what they can count) that numpy could not allocate
        # in the run: the user's numbers did it, so one line naming the file and the keys that size a run.
        where = f"{source}: " if source is not None else ""
        print(f"error: {where}the run ran out of memory ({e or 'an allocation failed'}); lower workers.count, "
              f"workload.batch_size or the model's size", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except ValueError as e:
        # Workload and data problems (bad layers for the dataset, missing IDX files) are input errors too.
        if type(e).__name__.endswith("Error") and type(e).__module__.startswith("simasgd"):
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        raise


def refuse(message: str) -> NoReturn:
    """Exit 2 with ``error: message`` on stderr: bad input, said in one line."""
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(EXIT_BAD_INPUT)


def output_folder(path: Path, option: str = "--out") -> None:
    """Refuse (exit 2) an output folder the command could not write, before it does any work: a file in its place,
    a file on its way, a place this user (or anyone: /proc) cannot create or write in. Leaves nothing behind."""
    made: list[Path] = []
    try:  # every call on the path may raise: a name too long, a loop of links, no permission to look
        if path.exists() and not path.is_dir():
            refuse(f"{option} {path}: is a file, not a folder; give a new path or a folder")
        blocked = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if blocked is not None:
            refuse(f"{option} {path}: {blocked} is a file, not a folder; give a new path or a folder")
        missing = [p for p in [path, *path.parents] if not p.is_dir()]
        for p in reversed(missing):
            p.mkdir()
            made.append(p)
        tempfile.TemporaryFile(dir=path).close()  # root passes every permission check: only a write tells
    except OSError as e:
        where = f" ({e.filename})" if e.filename and str(e.filename) != str(path) else ""
        refuse(f"{option} {path}: cannot write the folder{where}: {e.strerror or e}")
    finally:
        for p in reversed(made):
            with contextlib.suppress(OSError):
                p.rmdir()


def output_file(path: Path, option: str) -> None:
    """Refuse (exit 2) an output file the command could not write: a folder in its place, or a folder that
    cannot hold it (see :func:`output_folder`)."""
    try:
        folder = path.is_dir()
    except OSError as e:
        refuse(f"{option} {path}: cannot write the file: {e.strerror or e}")
    if folder:
        refuse(f"{option} {path}: is a folder; give a file name")
    output_folder(path.parent, f"{option} {path}: the folder")


def _plain(shown: Any) -> Any:
    """``warnings.showwarning`` printing simasgd's own warnings as ``warning: ...`` lines on stderr, as the
    CLI prints every other warning; others' (numpy, torch) as Python shows them."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if category.__module__.startswith("simasgd"):
            print(f"warning: {message}", file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)
    return show
