"""The tutorials run as written: every ```bash block of a page in docs/tutorials/, in order, in one shell,
in a fresh folder that holds only the repository's `scenarios/` — then the files the page says its commands
write are there. The pages' sizes are small enough to run as they stand; none is overridden here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def script(page: Path) -> str:
    return "set -euo pipefail\n" + "\n".join(blocks(page))


def run_page(page: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    (folder / "scenarios").symlink_to(ROOT / "scenarios", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k not in ("SIMASGD_PROFILE", "NUMBA_ENABLE_CUDASIM")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    return subprocess.run(["bash", "-c", script(page)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=900, check=False)


def test_every_tutorial_is_checked() -> None:
    pages = sorted(p.name for p in TUTORIALS.glob("*.md") if blocks(p))
    assert pages == sorted(WRITES), "a tutorial with commands needs its entry in WRITES (and WRITES no stale one)"


def test_the_extraction_finds_a_pages_blocks_in_order(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# t\n\n```bash\necho one > a\n```\n\ntext\n\n```text\nnot run\n```\n\n```bash\ncat a > b\n```\n",
                    encoding="utf-8")
    assert blocks(page) == ["echo one > a\n", "cat a > b\n"]
    subprocess.run(["bash", "-c", script(page)], cwd=tmp_path, check=True)
    assert (tmp_path / "b").read_text(encoding="utf-8") == "one\n"


def test_a_failing_command_fails_the_page(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("```bash\nfalse\ntouch after\n```\n", encoding="utf-8")
    assert subprocess.run(["bash", "-c", script(page)], cwd=tmp_path, check=False).returncode != 0
    assert not (tmp_path / "after").exists()


# The pages run in two test files, so that the suite's workers (one file each) run them two at a time.
HERE = ("other-machine.md", "your-question.md")


def check_page(name: str, folder: Path) -> None:
    proc = run_page(TUTORIALS / name, folder)
    assert proc.returncode == 0, f"{name}: its commands failed\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    missing = [p for p in WRITES[name] if not (folder / p).exists()]
    assert not missing, f"{name}: its commands did not write {missing}"


@pytest.mark.slow
@pytest.mark.timeout(900)  # a page runs minutes of measured runs; on a loaded 2-CPU machine up to ~5
@pytest.mark.parametrize("name", HERE)
def test_the_tutorial_runs_as_written(name: str, tmp_path: Path) -> None:
    check_page(name, tmp_path)
