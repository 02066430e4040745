"""The tutorials run as written: every ```bash block of a page in docs/tutorials/, in order, in one shell,
in a fresh folder that holds only the repository's `scenarios/` — then the files the page says its commands
write are there. The pages' sizes are small enough to run as they stand; none is overridden here.

The pages run in two test files (:data:`FILE_OF`), so that the suite's workers, one file each, run them two at
a time; a test that takes ``page`` gets that file's pages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "docs" / "tutorials"
BLOCK = re.compile(r"^```bash\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)

# What each page's commands write, as its text names them (relative to the folder the commands ran in).
WRITES: dict[str, list[str]] = {
    "your-machine.md": ["profiles/this.toml", "cmp/report.md", "cmp/fidelity.json", "cmp/sim/summary.json",
                        "cmp/sim/updates.parquet", "cmp/sim/curve.parquet", "cmp/cpu/summary.json",
                        "cmp/figures/staleness.png", "cmp/figures/phases.png"],
    "your-question.md": ["sweeps/lr-batch/sweep.json", "sweeps/lr-batch/tasks", "sweeps/lr-batch/heatmaps",
                         "sweeps/lr-batch/runs", "sweeps/lr-batch/runs/figures/staleness.png",
                         "sweeps/lr-batch/runs/figures/time_to_eps.png"],
    "your-model.md": ["mymodel/net.py", "mymodel/scenario.toml", "r-model/summary.json", "r-model/figures/loss.png",
                      "profiles/this.toml", "cmp-model/report.md", "cmp-model/torch/summary.json"],
    "other-machine.md": ["r-server/summary.json", "r-server-slow-memory/summary.json", "r-cluster/summary.json"],
}

# The test file that runs each page: the pages that measure this machine apart from those that simulate.
FILE_OF = {"other-machine.md": "test_tutorial_pages.py", "your-question.md": "test_tutorial_pages.py",
           "your-machine.md": "test_tutorial_pages_measured.py", "your-model.md": "test_tutorial_pages_measured.py"}


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def script(page: Path) -> str:
    return "set -euo pipefail\n" + "\n".join(blocks(page))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "page" in metafunc.fixturenames:
        here = metafunc.definition.path.name
        metafunc.parametrize("page", sorted(p for p, f in FILE_OF.items() if f == here))


@pytest.fixture
def tutorials() -> dict[str, list[str]]:
    """Each page with commands -> what its commands write."""
    return WRITES


@pytest.fixture
def page_script() -> Callable[[Path], str]:
    return script


@pytest.fixture
def page_blocks() -> Callable[[Path], list[str]]:
    return blocks


@pytest.fixture
def run_page(tmp_path: Path) -> Callable[[str], None]:
    """Run a page's commands in a fresh folder and check that they wrote what the page says."""
    def check(name: str) -> None:
        (tmp_path / "scenarios").symlink_to(ROOT / "scenarios", target_is_directory=True)
        env = {k: v for k, v in os.environ.items() if k not in ("SIMASGD_PROFILE", "NUMBA_ENABLE_CUDASIM")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["MPLBACKEND"] = "Agg"
        proc = subprocess.run(["bash", "-c", script(TUTORIALS / name)], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900, check=False)
        assert proc.returncode == 0, f"{name}: its commands failed\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        missing = [p for p in WRITES[name] if not (tmp_path / p).exists()]
        assert not missing, f"{name}: its commands did not write {missing}"
    return check
