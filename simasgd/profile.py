"""The calibrated machine profile's file format (``machine.preset = "this"``; docs/profile.md).

simasgd owns the format: how a workload is keyed (:func:`workload_key`), how
the file is read (:func:`read`, which checks ``[profile] format`` and
``format_version``) and written (:func:`write`, atomically, with that table),
and its digest for results metadata. The measurements themselves come from
a calibrator (``executors/calibration/``), loaded by name like a backend so
that simasgd imports nothing from ``executors``.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import numbers
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from simasgd import versioning
from simasgd.atomicio import atomic_write_text

FORMAT = "simasgd-profile"
# The version moves with the tables: whenever a table or key the simulator reads is added, removed or changes
# meaning. OLDEST_VERSION moves up to it when the simulator cannot read profiles of the older versions.
FORMAT_VERSION = 2  # 2: no [passes], [noise], nor in-cycle gradient samples (cycle_samples_s, concurrent.cycle_k<k>)
OLDEST_VERSION = 1
# module with calibrate(workloads, quick, seed, base_dir) and DEFAULT_WORKLOADS
CALIBRATOR = "executors.calibration.calibrate"


class ProfileError(ValueError):
    pass


class WorkloadLike(Protocol):
    """What :func:`workload_key` reads of a workload (``WorkloadConfig`` has it, read-only)."""

    @property
    def model(self) -> str: ...
    @property
    def layers(self) -> Any: ...
    @property
    def dataset(self) -> str: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def dtype(self) -> str: ...


def workload_key(cfg: WorkloadLike) -> str:
    """``mlp-<layers joined by ->-<dataset>-b<batch>-<dtype>``, other models ``<model>-<dataset>-b<batch>-<dtype>``;
    ``torch-<module>-<data factory or dataset>-b<batch>-<dtype>`` for the user's own module."""
    layers = "-".join(str(x) for x in (cfg.layers or [])) or cfg.model
    name = cfg.model if cfg.model != "mlp" else f"mlp-{layers}"
    source = cfg.dataset.split(':')[0]
    if cfg.model == "torch":  # the module and its data factory name the workload (simasgd/workloads/torch_model.py)
        name, source = f"torch-{getattr(cfg, 'module', '')}", getattr(cfg, "data", None) or source
    return f"{name}-{source}-b{cfg.batch_size}-{cfg.dtype}"


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The profile as a dict. A file without ``[profile]`` (written before the table existed) is version 1."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{path}: not a machine profile (invalid TOML: {e})") from None
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: not a machine profile (not UTF-8 text: {e.reason})") from None
    except IsADirectoryError:
        raise ProfileError(f"{path}: is a folder; give the profile's file (e.g. profiles/this.toml)") from None
    except OSError as e:  # missing, a path through a file, unreadable
        raise ProfileError(f"{path}: cannot read the machine profile ({e.strerror or e})") from None
    return check(doc, path)


def loads(text: str, where: str | os.PathLike[str]) -> dict[str, Any]:
    """A profile's TOML text (``to_toml``'s) as :func:`read` reads its file: the same dict, the same checks;
    ``where`` names it in errors (a corpus entry's profile is kept inside the entry, not in a file)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{where}: not a machine profile (invalid TOML: {e})") from None
    return check(doc, where)


def check(doc: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """``doc`` if this simasgd reads its format and version, else ProfileError naming ``path``."""
    if not doc:
        raise ProfileError(f"{path}: empty; not a machine profile (`simasgd calibrate --out {path}` writes one)")
    loose = [k for k, v in doc.items() if not isinstance(v, dict)]
    if loose:  # a profile is tables only: a scenario file, or a cut one, given as a profile
        raise ProfileError(f"{path}: not a machine profile: {loose[0]!r} is not a table (a profile holds "
                           f"[profile], [machine], [gradient...] tables)")
    head = doc.get("profile", {})
    if not isinstance(head, dict):
        raise ProfileError(f"{path}: [profile] must be a table")
    fmt = head.get("format", FORMAT)
    if fmt != FORMAT:
        raise ProfileError(f"{path}: [profile] format = {fmt!r}; expected {FORMAT!r}")
    found = versioning.check(path, head.get("format_version", 1), FORMAT_VERSION, "profile", ProfileError,
                             f"upgrade simasgd or recalibrate (`simasgd calibrate --out {path}`)")
    if found < OLDEST_VERSION:
        raise ProfileError(f"{path}: profile format version {found} is older than this simasgd reads "
                           f"({_supported()}): its tables have changed since; recalibrate "
                           f"(`simasgd calibrate --out {path}`)")
    return doc


def _supported() -> str:
    """The profile format versions this simasgd reads, as words."""
    if OLDEST_VERSION == FORMAT_VERSION:
        return f"version {FORMAT_VERSION}"
    return f"versions {OLDEST_VERSION} to {FORMAT_VERSION}"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        f = float(v)
        return "nan" if math.isnan(f) else ("inf" if f == math.inf else "-inf" if f == -math.inf else repr(f))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _name(k: str) -> str:
    return k if k.replace("_", "").isalnum() and k.isascii() else '"' + k.replace('"', '\\"') + '"'


def to_toml(profile: dict[str, Any]) -> str:
    """The profile as TOML, ``[profile]`` (format, version) first; None values are left out (TOML has no null)."""
    lines = ["# simasgd machine profile, written by `simasgd calibrate` (format: docs/profile.md)", ""]

    def table(name: str, d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict) and v is not None}
        if scalars:
            lines.append(f"[{name}]")
            lines.extend(f"{_name(k)} = {_value(v)}" for k, v in scalars.items())
            lines.append("")
        for k, v in d.items():
            if isinstance(v, dict):
                table(f"{name}.{_name(k)}", v)

    head = {**profile.get("profile", {}), "format": FORMAT, "format_version": FORMAT_VERSION}
    table("profile", head)
    for name, d in profile.items():
        if name != "profile":
            table(_name(name), d)
    return "\n".join(lines)


def write(profile: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the profile atomically (a reader sees the old file or the whole new one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, to_toml(profile))


def digest(path: str | os.PathLike[str]) -> str:
    """sha256 (hex) of the file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What a result records about the profile it ran on: path, sha256, ``[calibration] created``."""
    path = Path(path)
    try:
        created = read(path).get("calibration", {}).get("created")
    except (OSError, ProfileError):
        created = None
    return {"path": str(path.resolve()), "sha256": digest(path) if path.exists() else None,
            "created": None if created is None else str(created)}


Calibrate = Callable[..., dict[str, Any]]


def calibrator() -> Any:
    """The calibration module (``CALIBRATOR``), imported by name; ProfileError when this build lacks it."""
    try:
        mod = importlib.import_module(CALIBRATOR)
    except ImportError:
        raise ProfileError(f"calibration ({CALIBRATOR}) is not in this build") from None
    if not hasattr(mod, "calibrate") or not hasattr(mod, "DEFAULT_WORKLOADS"):
        raise ProfileError(f"{CALIBRATOR} lacks calibrate()/DEFAULT_WORKLOADS")
    return mod
