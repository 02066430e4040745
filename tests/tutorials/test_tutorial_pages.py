"""The tutorials that simulate (a question swept, a machine you do not have) run as written; and the way the
pages are run is itself checked (tests/tutorials/conftest.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[2] / "docs" / "tutorials"


def test_every_tutorial_is_checked(tutorials: dict[str, list[str]],
                                   page_blocks: Callable[[Path], list[str]]) -> None:
    pages = sorted(p.name for p in TUTORIALS.glob("*.md") if page_blocks(p))
    assert pages == sorted(tutorials), "a tutorial with commands needs its entry in WRITES and FILE_OF"


def test_the_extraction_finds_a_pages_blocks_in_order(tmp_path: Path, page_blocks: Callable[[Path], list[str]],
                                                       page_script: Callable[[Path], str]) -> None:
    page = tmp_path / "p.md"
    page.write_text("# t\n\n```bash\necho one > a\n```\n\ntext\n\n```text\nnot run\n```\n\n```bash\ncat a > b\n```\n",
                    encoding="utf-8")
    assert page_blocks(page) == ["echo one > a\n", "cat a > b\n"]
    subprocess.run(["bash", "-c", page_script(page)], cwd=tmp_path, check=True)
    assert (tmp_path / "b").read_text(encoding="utf-8") == "one\n"


def test_a_failing_command_fails_the_page(tmp_path: Path, page_script: Callable[[Path], str]) -> None:
    page = tmp_path / "p.md"
    page.write_text("```bash\nfalse\ntouch after\n```\n", encoding="utf-8")
    assert subprocess.run(["bash", "-c", page_script(page)], cwd=tmp_path, check=False).returncode != 0
    assert not (tmp_path / "after").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)  # a page runs minutes of simulated runs; on a loaded 2-CPU machine up to ~5
def test_the_tutorial_runs_as_written(page: str, run_page: Callable[[str], None]) -> None:
    run_page(page)
