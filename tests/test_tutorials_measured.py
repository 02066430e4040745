"""The tutorials that measure this machine (calibrate, then compare with real threads or processes), run as
written: the other half of tests/test_tutorials.py's pages, in a file of their own so that they run beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_tutorials import HERE, WRITES, check_page

PAGES = tuple(sorted(set(WRITES) - set(HERE)))


@pytest.mark.slow
@pytest.mark.timeout(900)  # a page runs minutes of measured runs; on a loaded 2-CPU machine up to ~5
@pytest.mark.parametrize("name", PAGES)
def test_the_tutorial_runs_as_written(name: str, tmp_path: Path) -> None:
    if name == "your-model.md":
        pytest.importorskip("torch")
    check_page(name, tmp_path)
