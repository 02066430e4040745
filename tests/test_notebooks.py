"""The notebooks are committed with their outputs (small figures, no errors), and still run top to
bottom (nbclient) with small parameters — in memory, from a copy with the stored outputs cleared, so
the committed files are never rewritten and a stale figure cannot pass for a fresh one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from simasgd.corpus import score, store
from simasgd.evaluation import fidelity, plots
from simasgd.machines import machine
from simasgd.runs import backends
from simasgd.runs.results import RunResult

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "simasgd-test"
MAX_BYTES = 300_000  # one notebook with its figures
MAX_TOTAL_BYTES = 1_000_000  # all of them: the docs site and the repository carry them
NAMES = ("01_quickstart.ipynb", "02_staleness_vs_threads.ipynb", "03_sim_vs_measured.ipynb",
         "04_sync_vs_async.ipynb", "05_your_model.ipynb")


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A kernelspec for *this* interpreter, so a fresh CI machine needs nothing installed by hand."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "simasgd (test)", "language": "python"}))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(root))
    mp.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    mp.delenv("SIMASGD_PROFILE", raising=False)  # each notebook test names its own profile
    yield
    mp.undo()


def execute(name: str, overrides: dict, timeout: int = 600) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    src = "\n".join(f"{k} = {v!r}" for k, v in overrides.items())
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(src))
    NotebookClient(nb, timeout=timeout, kernel_name=KERNEL,
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def outputs_text(nb: nbformat.NotebookNode) -> str:
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            parts.append(o.get("text", "") + json.dumps(o.get("data", {})))
    return "\n".join(parts)


def images(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def test_the_five_notebooks_exist():
    assert {p.name for p in NOTEBOOKS.glob("*.ipynb")} >= set(NAMES)


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_committed_with_outputs_small_and_with_a_parameters_cell(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    # run top to bottom in one kernel (bash scripts/notebooks.sh), not cell by cell by hand
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{path.name}: rerun it"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], f"{path.name} stored an error"
    assert images(nb) >= 1, f"{path.name} has no figure"
    assert not any("image/svg+xml" in o.get("data", {}) for o in outputs)  # PNG: small at any line count
    assert path.stat().st_size <= MAX_BYTES, f"{path.name}: {path.stat().st_size} bytes"
    # nothing that changes on every run or names the machine it ran on
    assert not any("execution" in c.metadata for c in code) and "widgets" not in nb.metadata
    text = path.read_text()
    assert str(ROOT) not in text and "shared" + "/" not in text  # split: the docs test greps for it


def test_all_notebooks_together_are_small():
    assert sum(p.stat().st_size for p in NOTEBOOKS.glob("*.ipynb")) <= MAX_TOTAL_BYTES


@pytest.mark.slow
def test_quickstart_notebook(kernel_env, tmp_path):
    nb = execute("01_quickstart.ipynb", {"ROOT": str(ROOT), "OUT": str(tmp_path / "r"), "BACKEND": "sim",
                                         "REPEATS": 2, "MAX_UPDATES": 60})
    assert (tmp_path / "r" / "summary.json").exists()
    assert images(nb) >= 2
    text = outputs_text(nb)
    assert "p99" in text
    # it says which machine it simulated: the one its result recorded, with that machine's numbers
    recorded = RunResult.load(tmp_path / "r").metadata["machine"]["name"]
    assert f"machine: {recorded} " in text
    # the fallback preset, or a profile the notebook's folder has: either way its numbers follow its name
    known = machine.PRESETS.get(recorded)
    assert (plots.machine_line(known) if known else f"{recorded}: ") in text and "GFLOP/s per core" in text


@pytest.mark.slow
def test_staleness_vs_threads_notebook(kernel_env, tmp_path):
    assert backends.available()["sim"], "the sim backend is missing: notebook 02 cannot run"
    nb = execute("02_staleness_vs_threads.ipynb", {
        "ROOT": str(ROOT), "OUT": str(tmp_path / "r"), "THREADS": [1, 2, 4],
        "ALGORITHMS": ["sync", "mutex", "hogwild", "leashed"], "MAX_UPDATES": 300, "REPEATS": 2,
        "EPS_THREADS": [1, 4], "EPS_LRS": [0.005, 0.1], "EPS_MAX_UPDATES": 100})
    assert len(list((tmp_path / "r").glob("*/summary.json"))) == 12
    eps = sorted(p.parent.name for p in (tmp_path / "r" / "eps").glob("*/summary.json"))
    assert eps == ["hogwild-1-lr0.005", "hogwild-1-lr0.1", "hogwild-4-lr0.005", "hogwild-4-lr0.1"]
    # each step size trained at its own lr: the folder's scenario says so
    assert RunResult.load(tmp_path / "r" / "eps" / "hogwild-4-lr0.1").scenario["optimizer"]["lr"] == 0.1
    assert images(nb) >= 3
    assert plots.machine_line(machine.PRESETS["xeon-e5-2687w-v2"]) in outputs_text(nb)


@pytest.mark.slow
def test_sim_vs_measured_notebook_on_a_corpus_machine(kernel_env, tmp_path):
    assert backends.available()["sim"], "the sim backend is missing: notebook 03 cannot run"
    nb = execute("03_sim_vs_measured.ipynb", {"ROOT": str(ROOT), "OUT": str(tmp_path / "r")})
    text = outputs_text(nb)
    assert images(nb) >= 2 and "LIVE = False" in text and not (tmp_path / "r" / "live").exists()
    # It simulated the corpus machine by name, and what it printed is the scorer's own judgement of that run.
    sim = RunResult.load(tmp_path / "r" / "sim")
    name = sim.metadata["machine"]["name"]
    entry = store.load(machine.corpus_path(name))
    cell = next(c for c in entry.cells if c.name == sim.scenario["name"])
    judged = score.judge(cell, sim)
    assert f"goals met: {sum(bool(v) for v in judged.verdicts.values())} of {len(fidelity.GOALS)}; " \
           f"cell met: {judged.met}" in text
    assert all(goal in text for goal in fidelity.GOALS)
    assert plots.machine_line(machine.corpus_machine(name)) in text


@pytest.mark.slow
def test_sim_vs_measured_notebook_live(kernel_env, tmp_path):
    assert backends.available()["sim"] and backends.available()["cpu"], \
        "notebook 03's live section needs the sim and cpu backends; at least one is missing"
    # A profile of its own (the notebook calibrates quickly), never the checkout's profiles/this.toml.
    profile = tmp_path / "this.toml"
    nb = execute("03_sim_vs_measured.ipynb", {
        "ROOT": str(ROOT), "OUT": str(tmp_path / "r"), "LIVE": True, "THREADS": 2, "MAX_UPDATES": 150,
        "REPEATS": 2, "QUICK_CALIBRATION": True, "PROFILE": str(profile)})
    fid = json.loads((tmp_path / "r" / "live" / "fidelity.json").read_text())
    assert fid["predicted"]["backend"] == "sim" and fid["reference"]["backend"] == "cpu"
    assert "ks" in outputs_text(nb) and (tmp_path / "r" / "live" / "report.md").exists()
    assert machine.load_profile(profile).name == "this"
    assert images(nb) >= 4  # the corpus comparison's two and the live one's two


@pytest.mark.slow
def test_your_model_notebook(kernel_env, tmp_path):
    assert backends.available()["sim"] and backends.available()["torch"], \
        "notebook 05 needs the sim and torch backends; at least one is missing"
    profile = tmp_path / "this.toml"  # its own profile, never the checkout's
    nb = execute("05_your_model.ipynb", {
        "ROOT": str(ROOT), "OUT": str(tmp_path / "r"), "WORKERS": 2, "MAX_UPDATES": 75, "REPEATS": 1,
        "QUICK_CALIBRATION": True, "PROFILE": str(profile)})
    fid = json.loads((tmp_path / "r" / "fidelity.json").read_text())
    assert fid["predicted"]["backend"] == "sim" and fid["reference"]["backend"] == "torch"
    assert "torch-torch_example.models:make" in profile.read_text()  # the model's own gradient times
    assert "mean_staleness_rel_err" in outputs_text(nb) and images(nb) >= 2


@pytest.mark.slow
def test_sync_vs_async_notebook(kernel_env):
    assert backends.available()["sim"], "the sim backend is missing: notebook 04 cannot run"
    nb = execute("04_sync_vs_async.ipynb", {"ROOT": str(ROOT), "RATIOS": [0.3, 100], "REPEATS": 1,
                                            "YOUR_RATIO": 50.0})
    text = outputs_text(nb)
    winners = json.loads(text.split("WINNERS ", 1)[1].split("\n", 1)[0].replace("'", '"'))
    # What the notebook teaches: communication-bound favours a synchronous round, compute-bound async.
    assert winners["0.3"] in ("sync", "backup") and winners["100"] == "mutex", winners
    assert "your ratio 50 (nearest simulated 100): mutex" in text
    assert images(nb) >= 2
