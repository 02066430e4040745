"""The import contracts of pyproject.toml's ``[tool.importlinter]``: simasgd's layers, no way from simasgd into the
executors but through its commands, and no import cycle among the modules or packages of any one package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports is missing: the test extra installs import-linter (bash scripts/setup.sh test)")
    proc = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 kept, 0 broken" in proc.stdout  # every contract was read and checked
