"""``benchmarks/torch_gpu_anchor.py`` (PyTorch's HOGWILD! anchor) on the CPU, at tiny shapes.

Its ``main`` runs in this process (the script's entry point is ``sys.exit(main())``): one import of torch for
the four runs, not one a run. ``--mode processes`` still spawns its workers, each importing torch (seconds
apiece on a small machine), hence ``slow``.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
TINY = ["--device", "cpu", "--workers", "2", "--layers", "20,8,3", "--batch", "4", "--seconds", "0.5",
        "--warmup", "2", "--samples", "500", "--setup-timeout", "120", "--stop-timeout", "30"]


@pytest.fixture(scope="module")
def anchor_main() -> Iterator[Callable[[list[str]], int]]:
    """The script's ``main``, imported by its module name: spawned workers unpickle ``torch_gpu_anchor._proc_worker``
    by that name (they inherit this process's ``sys.path``). What it changes here is put back after."""
    torch = pytest.importorskip("torch")
    path, threads = list(sys.path), torch.get_num_threads()
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("torch_gpu_anchor").main
    finally:
        sys.path[:] = path
        torch.set_num_threads(threads)  # main sets one thread
        for name in ("torch_gpu_anchor", "record"):
            sys.modules.pop(name, None)


def anchor(main: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The script's exit status, stdout and stderr."""
    code = main([*TINY, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_anchor_writes_its_rates_and_moves_the_shared_model(mode: str, tmp_path: Path, anchor_main: Callable[..., int],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = anchor(anchor_main, capsys, "--mode", mode, "--out", str(tmp_path))
    assert code == 0, err
    doc = json.loads((tmp_path / "torch_anchor.json").read_text())
    assert doc["schema"] == "torch_anchor" and doc["schema_version"] == 1 and doc["commit"]
    assert doc["device"] == "cpu" and doc["mode"] == mode
    assert doc["batch"] == 4 and doc["layers"] == [20, 8, 3] and doc["torch"] and doc["date"].endswith("Z")
    assert [r["workers"] for r in doc["rows"]] == [2]
    for r in doc["rows"]:
        assert len(r["per_worker"]) == r["workers"] and all(n > 0 for n in r["per_worker"])
        assert r["seconds"] >= 0.5
        assert r["updates_per_s"] > 0
        assert r["updates_per_s"] == pytest.approx(sum(r["per_worker"]) / r["seconds"], rel=1e-4)
        assert r["param_change"] > 0  # the workers' steps reached the parameters the parent holds
    assert "| workers | updates/s |" in out


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_a_failing_worker_fails_the_run_with_its_message(mode: str, tmp_path: Path, anchor_main: Callable[..., int],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = anchor(anchor_main, capsys, "--mode", mode, "--workers", "1", "--fail-worker", "0",
                          "--out", str(tmp_path))
    assert code == 1
    assert "injected failure" in err and "Traceback" in err
    assert not (tmp_path / "torch_anchor.json").exists()
