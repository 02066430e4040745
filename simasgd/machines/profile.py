"""The calibrated machine profile's file (``machine.preset = "this"``; docs/profile.md).

simasgd owns the format: its tables are the typed models of :mod:`simasgd.machines.profile_model`; this module keys a
workload (:func:`workload_key`), reads the file (:func:`read`: ``[profile] format`` and ``format_version``
checked, older keys migrated, the typed :class:`~simasgd.machines.profile_model.Profile` returned), writes it
(:func:`write`: atomically, by tomli-w, this version's keys) and digests it for results metadata. The
measurements themselves come from a calibrator (``executors/calibration/``), loaded by name like a backend so
that simasgd imports nothing from ``executors``."""

from __future__ import annotations

import hashlib
import importlib
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import tomli_w

from simasgd.formats.atomicio import atomic_write_text
from simasgd.machines.profile_model import (  # noqa: F401 - the format's constants and errors, re-exported
    FORMAT,
    FORMAT_VERSION,
    OLDEST_VERSION,
    RENAMED,
    Profile,
    ProfileError,
)

# module with calibrate(workloads, quick, seed, base_dir) and DEFAULT_WORKLOADS
CALIBRATOR = "executors.calibration.calibrate"
HEADER = "# simasgd machine profile, written by `simasgd calibrate` (format: docs/profile.md)\n\n"


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
    if cfg.model == "torch":  # the module and its data factory name the workload (see workloads.torch_model)
        name, source = f"torch-{getattr(cfg, 'module', '')}", getattr(cfg, "data", None) or source
    return f"{name}-{source}-b{cfg.batch_size}-{cfg.dtype}"


def read(path: str | os.PathLike[str]) -> Profile:
    """The profile in the file (:meth:`Profile.from_doc`: its version checked, older keys migrated)."""
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
    return Profile.from_doc(_tables_only(doc, path), path)


def loads(text: str, where: str | os.PathLike[str]) -> Profile:
    """A profile's TOML text (``to_toml``'s) as :func:`read` reads its file: the same profile, the same checks;
    ``where`` names it in errors (a corpus entry's profile is kept inside the entry, not in a file)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{where}: not a machine profile (invalid TOML: {e})") from None
    return Profile.from_doc(_tables_only(doc, where), where)


def typed(profile: Profile | dict[str, Any], where: str | os.PathLike[str] = "the profile") -> Profile:
    """``profile`` as the typed model (a document as a calibrator or a corpus entry holds it, checked)."""
    return profile if isinstance(profile, Profile) else Profile.from_doc(profile, where)


def _tables_only(doc: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """``doc`` if it can be a profile at all: not empty, and tables only (a scenario file, or a cut one, given as a
    profile is refused by name before the tables are read)."""
    if not doc:
        raise ProfileError(f"{path}: empty; not a machine profile (`simasgd calibrate --out {path}` writes one)")
    loose = [k for k, v in doc.items() if not isinstance(v, dict)]
    if loose:
        raise ProfileError(f"{path}: not a machine profile: {loose[0]!r} is not a table (a profile holds "
                           f"[profile], [machine], [gradient...] tables)")
    return doc


def to_toml(profile: Profile | dict[str, Any]) -> str:
    """The profile as TOML in this version's keys, ``[profile]`` (format, version) first; None values left out
    (TOML has no null). A document is checked and its older keys migrated first (:func:`typed`)."""
    return HEADER + tomli_w.dumps(typed(profile).to_doc())


def write(profile: Profile | dict[str, Any], path: str | os.PathLike[str]) -> Path:
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
        calibration = read(path).calibration
        created = None if calibration is None else calibration.created
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
