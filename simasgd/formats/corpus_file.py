"""A corpus file's format and its reading, without the cells' machinery: what :mod:`simasgd.machines.machine` needs to
simulate a corpus machine by name (its entry's calibrated profile) without importing the results and analysis
modules :mod:`.store` builds cells with."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

FORMAT = "simasgd-corpus"
FORMAT_VERSION = 2
READS = (1, 2)  # version 1: no drift records
SUFFIX = ".json.gz"


def read(path: Path, error: type[Exception]) -> dict[str, Any]:
    """A machine's entry as its JSON document, checked for format and version (``error`` raised otherwise)."""
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
    except EOFError:  # gzip cut short (a copy or a download that stopped)
        raise error(f"{path}: not a corpus file (cut short: the compressed data ends early)") from None
    except (OSError, ValueError, zlib.error) as e:
        raise error(f"{path}: not a corpus file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise error(f"{path}: format {found!r}, expected {FORMAT!r}")
    if doc.get("format_version") not in READS:
        raise error(f"{path}: corpus format version {doc.get('format_version')}; this simasgd reads "
                    f"versions {', '.join(map(str, READS))} (upgrade simasgd, or re-add the machine's results)")
    return doc
