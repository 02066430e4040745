"""``benchmarks/device_check.sh``, the lent GPU machine's prepared script, rehearsed whole on this machine.

``DEVICE_CHECK_TINY=1`` runs each part as the machine would, shrunk: the gpu part under numba's CUDA simulator
(every section of ``gpu_check.py --tiny``: this is that script's rehearsal, so that its first run on a GPU needs
no fix), the PyTorch anchor on the CPU; the cores part at 1-2 threads (mutex), 2 processes, 1 run, Ek's cell
forced (``DEVICE_CHECK_EK=1``) on one NUMA node. Each part must end within its deadline (the lent machine's, and
each section's cap, times ``DEVICE_CHECK_SLOW``: here the kernels compile and other jobs share the CPUs), say how
every section ended (``[status] NAME: ok|failed|skipped (...)``), write at most 8 files, the largest under 16 MiB,
and records the readers read. Only torch's sections may say ``skipped (no torch)``, and only where torch is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "device_check.sh"
# The section caps and the part's deadline are the lent machine's budget; on this host (a loaded CI machine, the
# numba kernels compiling) the rehearsal runs under SLOW times each (DEVICE_CHECK_SLOW), every section still ok.
SLOW = 4
DEADLINE_S = 330 * SLOW + 30  # the part's deadline (DEVICE_CHECK_DEADLINE's default) and its record
MAX_FILES, MAX_BYTES = 8, 16 * 2**20
STATUS = re.compile(r"^\[status\] (?P<section>[\w.-]+): (?P<word>ok|failed|skipped) \((?P<detail>.*)\)$")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
TORCH_SECTIONS = {"torch_anchor", "calibrate_network", "idle_gap", "dist_fidelity"}
GPU_CHECK = ("gradients", "constant", "hogwild_mlp", "to_eps", "to_eps_cpu", "streams", "hogwild_cnn",
             "algorithms_mlp", "lopez_table")
GPU_SECTIONS = {"env", "gpu_check_a", "calibrate_gpu", "torch_anchor", "gpu_check_b", "record",
                *(f"gpu_check.{s}" for s in GPU_CHECK)}
CORES_SECTIONS = {"topology", "many_cores", "contention", "ek_numa", "calibrate_network", "idle_gap",
                  "dist_fidelity"}


def run_part(part: str, out: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float, dict[str, Any]]:
    """The part's exit, wall time and status lines (section → (word, detail)); every status line parsed."""
    t = time.perf_counter()
    p = subprocess.run(["bash", str(SCRIPT), str(out), part], cwd=REPO, capture_output=True, text=True,
                       timeout=DEADLINE_S + 60,
                       env={**os.environ, "PYTHON": sys.executable, "DEVICE_CHECK_TINY": "1",
                            "DEVICE_CHECK_SLOW": str(SLOW), **env})
    wall = time.perf_counter() - t
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[status]")]
    found = {m["section"]: (m["word"], m["detail"]) for ln in lines if (m := STATUS.match(ln))}
    assert len(found) == len(lines), lines  # one well-formed line a section, none twice
    return p, wall, found


def assert_every_section_ran(statuses: dict[str, Any], expected: set[str], p: subprocess.CompletedProcess[str]):
    assert set(statuses) == expected, (sorted(statuses), p.stdout[-3000:])
    for name, (word, detail) in statuses.items():
        if name in TORCH_SECTIONS and not HAVE_TORCH:
            assert (word, detail) == ("skipped", "no torch"), name
        else:
            assert word == "ok", (name, word, detail, p.stdout[-3000:])


def assert_files_fit(out: Path) -> list[Path]:
    files = sorted(f for f in out.rglob("*") if f.is_file())
    assert 0 < len(files) <= MAX_FILES, files
    assert max(f.stat().st_size for f in files) < MAX_BYTES
    assert not [d for d in out.iterdir() if d.is_dir()]  # the work folder bundled and gone
    return files


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE_S + 120)
def test_gpu_part_runs_every_section_under_the_simulator(tmp_path: Path,
                                                         benchmark_script: Callable[[str], Any]) -> None:
    record = benchmark_script("record")
    p, wall, statuses = run_part("gpu", tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert wall < DEADLINE_S
    assert_every_section_ran(statuses, GPU_SECTIONS, p)
    assert re.search(r"^\[device_check\] gpu: \d+ ok, 0 failed", p.stdout, re.M)
    files = assert_files_fit(tmp_path)
    (path,) = [f for f in files if f.name.startswith("gpu_check_")]
    kind = path.stem.removeprefix("gpu_check_")
    assert {f.name for f in files} == {"gpu.log", f"gpu_check_{kind}.json", f"gpu_profile_{kind}.toml",
                                       *([f"torch_anchor_{kind}.json"] if HAVE_TORCH else [])}

    # gpu_check.py's sections, at tiny shapes, in one record
    doc = record.read(path, "gpu_check", 1)
    assert doc["tiny"] is True and doc["skipped"] == [], doc["skipped"]
    checks = {c["check"] for c in doc["checks"] if c["ok"]}
    assert len(checks) == len(doc["checks"]) == 7, doc["checks"]  # two gradients, five algorithms' θ
    assert [c for c in doc["cells"] if "error" in c] == []
    assert {"hogwild-mlp", "streams-mlp", "hogwild-cnn", "streams-cnn", "algorithms-mlp", "lopez-table", "to-eps",
            "to-eps-cpu"} == {c["section"] for c in doc["cells"]}
    assert all(c["updates"] > 0 for c in doc["cells"])
    assert {s: v["status"] for s, v in doc["sections"].items()} == dict.fromkeys(GPU_CHECK, "ok")
    assert doc["parts"] == ["gradients,constant,hogwild_mlp,to_eps,to_eps_cpu",
                            "streams,hogwild_cnn,algorithms_mlp,lopez_table"]
    # the gradient's spread a cell, and HOGWILD! to ε on the GPU against the host's cores, same scenario
    assert all("gradient_cv" in c and "p50" in c["gradient_quantiles_s"] for c in doc["cells"])
    assert any(math.isfinite(c["gradient_cv"]) for c in doc["cells"])
    gpu_eps = [c for c in doc["cells"] if c["section"] == "to-eps"]
    (cpu_eps,) = [c for c in doc["cells"] if c["section"] == "to-eps-cpu"]
    assert cpu_eps["backend"] == "cpu" and cpu_eps["algorithm"] == "hogwild" and cpu_eps["workers"] == 2
    assert {(c["model"], c["batch"]) for c in gpu_eps} == {(cpu_eps["model"], cpu_eps["batch"])}
    assert cpu_eps["updates_to_eps"] is not None and all(c["updates_to_eps"] is not None for c in gpu_eps)
    # the part's own status lines, in the record
    dc = doc["device_check"]
    assert dc["part"] == "gpu" and dc["gpu"] == kind
    assert {s["section"] for s in dc["statuses"]} == GPU_SECTIONS - {"record"}

    from simasgd.machines import profile

    assert profile.read(tmp_path / f"gpu_profile_{kind}.toml").gpu is not None
    if HAVE_TORCH:
        anchor = record.read(tmp_path / f"torch_anchor_{kind}.json", "torch_anchor", 1)
        assert [r["workers"] for r in anchor["rows"]] == [2] and anchor["rows"][0]["updates_per_s"] > 0


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE_S + 120)
def test_cores_part_measures_the_corpus_entry_ek_and_pinned_dist(tmp_path: Path,
                                                                 benchmark_script: Callable[[str], Any]) -> None:
    record = benchmark_script("record")
    p, wall, statuses = run_part("cores", tmp_path, DEVICE_CHECK_EK="1")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert wall < DEADLINE_S
    assert_every_section_ran(statuses, CORES_SECTIONS, p)
    files = assert_files_fit(tmp_path)
    machine = benchmark_script("many_cores").machine_name()
    assert {f.name for f in files} == {"cores.log", "topology.txt", f"{machine}.json.gz", "cores-files.tar.gz",
                                       f"ek_numa_{machine}.json", f"contention_{machine}.json",
                                       *([f"idle_gap_{machine}.json"] if HAVE_TORCH else [])}
    contention = record.read(tmp_path / f"contention_{machine}.json", "contention", 3)
    assert contention["threads"] == [1, 2] and contention["bytes"] == 8 * 4096
    for key in ("update", "locked_hold"):
        assert all(0 < m <= p for m, p in zip(contention[f"{key}_s"], contention[f"{key}_p90_s"], strict=True))
    assert all(0 < b <= 1.05 for b in contention["locked_busy"]) and min(contention["locked_per_s"]) > 0
    beside = contention["beside"]  # the steps in turn beside gradients (tests/test_contention_beside.py)
    assert beside["threads"] == [1, 2] and beside["layers"] == [64, 8, 10]
    for key in ("update", "hold", "gradient"):
        assert all(0 < m <= p for m, p in zip(beside[f"{key}_s"], beside[f"{key}_p90_s"], strict=True))
    cyc = contention["cycle"]  # the mutex cycle, its holds timed apart (tests/test_contention_cycle.py)
    assert cyc["threads"] == [1, 2] and cyc["cycles"] == 12 and min(cyc["update_hold_s"]) > 0
    (share,) = contention["timeshare"]  # threads sharing one CPU (tests/test_timeshare.py)
    assert share["threads"] == [1, 2] and share["batch"] == 16 and share["ratio"][0] == 1.0
    assert min(share["cpu_per_gradient_s"]) > 0
    sharers = contention["sharers"]  # θ's lines in k − 1 other caches (tests/test_contention_beside.py)
    assert sharers["threads"] == [1, 2] and min(sharers["update_s"]) > 0 and min(sharers["mirrored_s"]) > 0
    if HAVE_TORCH:
        gap = record.read(tmp_path / f"idle_gap_{machine}.json", "idle_gap", 1)
        assert [(r["senders"], r["gap_us"]) for r in gap["rows"]] == [(1, 0.0), (1, 250.0)]
        assert all(r["round_trip_us"] > 0 and r["cpu_per_message_us"] > 0 for r in gap["rows"])

    topology = (tmp_path / "topology.txt").read_text()
    assert "## lscpu" in topology and "## numactl --hardware" in topology and "node0: cpus" in topology

    from simasgd.corpus import store

    entry = store.load(tmp_path / f"{machine}.json.gz")
    assert entry.name == machine
    assert sorted(c.name for c in entry.cells) == ["fid-mutex-n1-b16", "fid-mutex-n2-b16"]
    assert all(len(c.runs) == 2 for c in entry.cells) and "machine" in entry.profile

    ek = record.read(tmp_path / f"ek_numa_{machine}.json", "ek_numa_measured", 1)
    (cell,) = ek["cells"]
    assert cell["algorithm"] == "hogwild" and cell["threads"] == 2
    assert cell["uma_per_s"] > 0 and cell["numa_per_s"] > 0 and math.isfinite(cell["simulated_ratio"])

    with tarfile.open(tmp_path / "cores-files.tar.gz") as tar:
        names = tar.getnames()
        assert "./many_cores/table.md" in names and "./many_cores/this.toml" in names
        assert any(n.endswith("/cpu/summary.json") for n in names)
        prof = tar.extractfile("./many_cores/this.toml")
        assert prof is not None
        profile_text = prof.read().decode()
    if HAVE_TORCH:
        assert "[network]" in profile_text  # calibrate --network added it to many_cores' profile
        log = (tmp_path / "cores.log").read_text()
        rows = re.findall(r"^\| (\w+) \| 2 \| 0 \| [^|]+\| [^|]+\| [^|]+\| [^|]+\| [^|]+\| ([\d,-]+) \|$", log, re.M)
        assert sorted(a for a, _ in rows) == ["easgd", "param_server", "sync"], log[-3000:]
        for _, cpus in rows:  # pinned: each rank on a CPU of its own
            ids = [int(c) for c in cpus.split(",")]
            assert len(ids) == 2 and len(set(ids)) == 2 and min(ids) >= 0


@pytest.mark.slow
def test_sections_left_out_or_past_the_deadline_say_so(tmp_path: Path) -> None:
    """DEVICE_CHECK_ONLY runs the sections named; the others each say skipped, and the part still exits 0."""
    p, _, statuses = run_part("cores", tmp_path / "only", DEVICE_CHECK_ONLY="topology")
    assert p.returncode == 0, p.stdout + p.stderr
    assert statuses.pop("topology")[0] == "ok"
    assert set(statuses) == CORES_SECTIONS - {"topology"}
    for name, (word, detail) in statuses.items():
        assert word == "skipped", name
        assert detail in ("not in DEVICE_CHECK_ONLY", "no torch") or detail.endswith("Ek's cell needs two"), detail
    assert {f.name for f in (tmp_path / "only").iterdir()} == {"cores.log", "topology.txt"}
    p, _, statuses = run_part("cores", tmp_path / "late", DEVICE_CHECK_DEADLINE="5")
    assert p.returncode == 0, p.stdout + p.stderr
    assert statuses["many_cores"][0] == "skipped" and statuses["many_cores"][1].startswith("deadline: ")


def test_unknown_part_is_refused() -> None:
    p = subprocess.run(["bash", str(SCRIPT), "/tmp/never-written", "both"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "usage: device_check.sh OUT [gpu|cores]" in p.stderr
    p = subprocess.run(["bash", str(SCRIPT), "/tmp/never-written", "gpu"], cwd=REPO, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "DEVICE_CHECK_TINY": "1", "DEVICE_CHECK_SLOW": "1.5"})
    assert p.returncode == 2 and "DEVICE_CHECK_SLOW=1.5: a positive integer" in p.stderr
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


# --------------------------------------------------------------------------- benchmarks/device_check.py

def test_gpu_kind_is_the_first_word_with_a_digit(benchmark_script: Callable[[str], Any]) -> None:
    dc = benchmark_script("device_check")
    assert dc.gpu_kind("NVIDIA H200") == "h200"
    assert dc.gpu_kind("NVIDIA H100 80GB HBM3") == "h100"
    assert dc.gpu_kind("Tesla V100-SXM2-16GB") == "v100"
    assert dc.gpu_kind(None) == "none"


def test_the_due_part_is_the_first_whose_record_is_not_in_the_repository(
        tmp_path: Path, benchmark_script: Callable[[str], Any]) -> None:
    dc, record = benchmark_script("device_check"), benchmark_script("record")
    results, corpus = tmp_path / "results", tmp_path / "corpus"
    corpus.mkdir()

    def due(kind: str = "h200") -> str:
        return str(dc.pending(results, corpus, kind, "amd_epyc_16cpu")[0])

    assert due() == "gpu"  # no record of this GPU
    record.write(results / "gpu_check_h200.json", "gpu_check", 1, {"tiny": False, "cells": []})
    assert due() == "gpu"  # one that predates device_check.sh
    record.write(results / "gpu_check_h200.json", "gpu_check", 1, {"tiny": True, "device_check": {}})
    assert due() == "gpu"  # a rehearsal's
    record.write(results / "gpu_check_h200.json", "gpu_check", 1, {"tiny": False, "device_check": {"part": "gpu"}})
    assert due() == "cores"
    assert due("h100") == "gpu"  # another GPU kind has its own record
    assert due("none") == "cores"  # no GPU here: the gpu part cannot be due
    (corpus / "amd_epyc_16cpu.json.gz").write_bytes(b"")
    assert due() == "cores"  # the entry without the contention record of the same machine
    part, why = dc.pending(results, corpus, "h200", "amd_epyc_16cpu")
    assert any("contention_amd_epyc_16cpu.json is absent" in w for w in why)
    record.write(results / "contention_amd_epyc_16cpu.json", "contention", 2, {"threads": []})
    assert due() == "cores"  # a record from before the beside table (schema 2)
    record.write(results / "contention_amd_epyc_16cpu.json", "contention", 3, {"threads": [], "beside": {}})
    assert due() == "cores"  # one from before the mutex cycle's table
    assert dc.only_sections("cores", results, corpus, "amd_epyc_16cpu") == (
        "contention,idle_gap,calibrate_network,dist_fidelity")
    record.write(results / "contention_amd_epyc_16cpu.json", "contention", 3,
                 {"threads": [], "beside": {}, "cycle": {}})
    part, why = dc.pending(results, corpus, "h200", "amd_epyc_16cpu")
    assert part == "cores" and any("has no timeshare table" in w for w in why)  # one from before the time-sharing
    record.write(results / "contention_amd_epyc_16cpu.json", "contention", 3,
                 {"threads": [], "beside": {}, "cycle": {}, "timeshare": []})
    part, why = dc.pending(results, corpus, "h200", "amd_epyc_16cpu")
    assert part == "cores" and any("has no held table" in w for w in why)  # one from before the held rows
    record.write(results / "contention_amd_epyc_16cpu.json", "contention", 3,
                 {"threads": [], "beside": {}, "cycle": {}, "timeshare": [], "held": {}})
    part, why = dc.pending(results, corpus, "h200", "amd_epyc_16cpu")
    assert part == "cores" and any("has no sharers table" in w for w in why)  # one from before the sharers
    record.write(results / "contention_amd_epyc_16cpu.json", "contention", 3,
                 {"threads": [], "beside": {}, "cycle": {}, "timeshare": [], "held": {}, "sharers": {}})
    part, why = dc.pending(results, corpus, "h200", "amd_epyc_16cpu")
    assert part == "cores" and any("idle_gap_amd_epyc_16cpu.json is absent" in w for w in why)
    assert dc.only_sections("cores", results, corpus, "amd_epyc_16cpu") == "idle_gap,calibrate_network,dist_fidelity"
    record.write(results / "idle_gap_amd_epyc_16cpu.json", "idle_gap", 1, {"rows": []})
    part, why = dc.pending(results, corpus, "h200", "amd_epyc_16cpu")
    assert part == "cores" and any("priced waking timed at three gaps" in w for w in why)
    assert dc.only_sections("cores", results, corpus, "amd_epyc_16cpu") == "calibrate_network,dist_fidelity"
    header = ("[network]: latency 27 us, 42.9 Gb/s, server 28.14 Gb/s, all-reduce measured at ranks [2, 3], "
              "handling 76.6 us, {}sim model 4810 parameters, loadavg 2.0, 16 CPUs\n")
    (results / "dist_fidelity_amd_epyc_16cpu_b.md").write_text(header.format(""))
    assert due() == "cores"  # cells simulated without the wake
    (results / "dist_fidelity_amd_epyc_16cpu_c.md").write_text("# a lending\n\n" + header.format(
        "wake 320.1 us past 113.5 us idle, "))
    assert due() == "cores"  # a wake timed at one gap
    (results / "dist_fidelity_amd_epyc_16cpu_d.md").write_text("# a lending\n\n" + header.format(
        "wake 70.7 us past 131.9 us idle over 3 gaps, "))
    assert due() == "none" and due("none") == "none"
    part, why = dc.pending(results, corpus, "h200", "amd_epyc_16cpu")
    assert part == "none"
    assert any("device_check.sh" in w for w in why) and any("amd_epyc_16cpu's corpus entry" in w for w in why)
    # the one on disk was written by device_check.sh's gpu part on a lent H200: its cores part is due there
    assert dc.pending(record.RESULTS, REPO / "corpus", "h200", "amd_epyc_16cpu")[0] == "cores"


def test_a_gpu_check_process_cut_short_leaves_no_section_unsaid(
        tmp_path: Path, benchmark_script: Callable[[str], Any]) -> None:
    dc, record = benchmark_script("device_check"), benchmark_script("record")
    record.write(tmp_path / "gpu_check.json", "gpu_check", 1, {"sections": {
        "gradients": {"status": "ok", "seconds": 3.0},
        "constant": {"status": "failed: 1 checks wrong", "seconds": 2.0},
        "hogwild_mlp": {"status": "skipped: 10 s left, needs ~40", "seconds": 0.0},
        "to_eps": {"status": "running", "seconds": 0.0}}})
    lines = dc.gpu_status(tmp_path / "gpu_check.json", ["gradients", "constant", "hogwild_mlp", "to_eps",
                                                        "to_eps_cpu"], 124)
    words = [dc.STATUS.match(ln).group("section", "word") for ln in lines]
    assert words == [("gpu_check.gradients", "ok"), ("gpu_check.constant", "failed"),
                     ("gpu_check.hogwild_mlp", "skipped"), ("gpu_check.to_eps", "failed"),
                     ("gpu_check.to_eps_cpu", "skipped")]
    assert "rc 124" in lines[3] and "not reached" in lines[4]
    # merged: both processes' cells, checks and sections in one record, the statuses beside them
    (tmp_path / "b").mkdir()
    record.write(tmp_path / "b" / "gpu_check.json", "gpu_check", 1, {
        "cells": [{"section": "streams-mlp"}], "checks": [], "skipped": [],
        "sections": {"streams": {"status": "ok", "seconds": 1.0}}, "resident_max_hogwild_cnn": 4})
    (tmp_path / "status.txt").write_text("\n".join(lines) + "\n")
    out = dc.merge_gpu(tmp_path / "merged.json", [tmp_path, tmp_path / "b", tmp_path / "absent"],
                       tmp_path / "status.txt", False, "h200", 330.0)
    doc = record.read(out, "gpu_check", 1)
    assert doc["parts"] == ["gradients,constant,hogwild_mlp,to_eps", "streams"]
    assert doc["cells"] == [{"section": "streams-mlp"}] and doc["resident_max_hogwild_cnn"] == 4
    assert doc["device_check"]["gpu"] == "h200" and len(doc["device_check"]["statuses"]) == 5
    assert json.loads(out.read_text())["schema"] == "gpu_check"
    # a rerun of one section, merged with the earlier record: its rows replace the earlier run's of that section
    record.write(tmp_path / "rerun.json", "gpu_check", 1, {
        "cells": [{"section": "streams-mlp", "check_section": "streams", "workers": 2}], "checks": [],
        "skipped": [], "sections": {"streams": {"status": "ok", "seconds": 2.0},
                                    "hogwild_cnn": {"status": "skipped: 3 s left, needs ~40", "seconds": 0.0}},
        "device_check": {"statuses": [{"section": "gpu_check_b", "word": "ok", "detail": "9 s"}]},
        "parts": ["streams,hogwild_cnn"]})
    payload = {k: v for k, v in doc.items() if k not in record.ENVELOPE}
    record.write(tmp_path / "merged.json", "gpu_check", 1, {**payload, "cells": [
        {"section": "streams-mlp", "check_section": "streams", "workers": 1}, {"section": "hogwild-mlp"}]})
    both = record.read(dc.merge_gpu(tmp_path / "both.json", [tmp_path / "merged.json", tmp_path / "rerun.json"],
                                    Path(os.devnull), False, "h200", 330.0), "gpu_check", 1)
    assert both["cells"] == [{"section": "hogwild-mlp"},
                             {"section": "streams-mlp", "check_section": "streams", "workers": 2}]
    assert both["parts"] == ["gradients,constant,hogwild_mlp,to_eps", "streams", "streams,hogwild_cnn"]
    assert both["sections"]["streams"]["seconds"] == 2.0 and "hogwild_cnn" in both["sections"]
    assert len(both["device_check"]["statuses"]) == 6
