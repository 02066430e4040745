"""The tutorials that measure this machine (calibrate, then compare with real threads or processes) run as
written, in a file of their own so that they run beside the others (tests/tutorials/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.mark.slow
@pytest.mark.timeout(900)  # a page runs minutes of measured runs; on a loaded 2-CPU machine up to ~5
def test_the_tutorial_runs_as_written(page: str, run_page: Callable[[str], None]) -> None:
    if page == "your-model.md":
        pytest.importorskip("torch")
    run_page(page)
