"""benchmarks/record.py: records carry their schema, version, commit, machine and date, and a reader
refuses another benchmark's file, an unversioned one and a newer version."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def record(benchmark_script: Callable[[str], Any]) -> Any:
    return benchmark_script("record")


def test_a_written_record_reads_back_with_its_envelope(record: Any, tmp_path: Path) -> None:
    path = record.write(tmp_path / "sub" / "x.json", "bench", 2, {"rows": [1, 2]})
    doc = record.read(path, "bench", 2)
    assert doc["schema"] == "bench" and doc["schema_version"] == 2 and doc["rows"] == [1, 2]
    assert list(doc)[:5] == list(record.ENVELOPE)
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown", doc["commit"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["date"])
    assert doc["machine"]["cpu_model"] and doc["machine"]["cores"] >= 1
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]  # no temporary file left behind
    assert record.read(path, "bench", 3)["schema_version"] == 2  # an older version is the reader's to use


def test_the_reader_refuses_what_it_must_not_use(record: Any, tmp_path: Path) -> None:
    path = record.write(tmp_path / "x.json", "bench", 2, {})
    with pytest.raises(record.RecordError, match="newer than this reader's 1"):
        record.read(path, "bench", 1)
    with pytest.raises(record.RecordError, match="a 'bench' record, not 'other'"):
        record.read(path, "other", 2)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"meta": {}, "rows": []}))
    with pytest.raises(record.RecordError, match="no schema"):
        record.read(bare, "bench", 2)
    with pytest.raises(record.RecordError, match="record's own"):
        record.write(tmp_path / "y.json", "bench", 1, {"commit": "x"})


@pytest.mark.parametrize(("model", "kind"), [
    ("AMD EPYC 7B13", "amd_epyc"), ("AMD EPYC", "amd_epyc"),
    ("Intel(R) Xeon(R) CPU @ 2.20GHz", "intel_xeon"), ("Intel(R) Xeon(R) Processor", "intel_xeon"),
    ("Intel(R) Core(TM) i7-8650U CPU @ 1.90GHz", "intel_core"), ("", "unknown"),
])
def test_the_machine_kind_is_vendor_and_family(record: Any, model: str, kind: str) -> None:
    assert record.machine_kind(model) == kind
    assert record.current_path("cpu_throughput", record.machine_kind(model)).name == f"cpu_throughput_{kind}.json"


def test_every_committed_record_reads_at_its_schema(record: Any) -> None:
    """Each current result file is a record its benchmark's reader accepts, one per machine kind."""
    files = sorted((ROOT / "benchmarks" / "results").glob("cpu_throughput_*.json"))
    assert {p.stem.removeprefix("cpu_throughput_") for p in files} >= {"amd_epyc", "intel_xeon"}
    for path in files:
        doc = record.read(path, "cpu_throughput", 1)
        assert re.fullmatch(r"[0-9a-f]{40}", doc["commit"]), path  # the code the figures were measured with
        assert record.machine_kind(doc["machine"]["cpu_model"]) == path.stem.removeprefix("cpu_throughput_")
        assert doc["rows"] and doc["verdicts"]


def test_cpu_throughput_prints_its_tables_from_a_record_and_refuses_another(record: Any, tmp_path: Path) -> None:
    script = ROOT / "benchmarks" / "cpu_throughput.py"
    run = subprocess.run([sys.executable, str(script), "--table",
                          str(ROOT / "benchmarks" / "results" / "cpu_throughput_amd_epyc.json")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| goal | worst measured | target | met | where |" in run.stdout
    assert "| 64 | float32 | mutex | 2 |" in run.stdout
    other = record.write(tmp_path / "x.json", "cuda_streams", 1, {})
    run = subprocess.run([sys.executable, str(script), "--table", str(other)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode != 0 and "a 'cuda_streams' record, not 'cpu_throughput'" in run.stderr
