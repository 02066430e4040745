"""The machine profile's format (simasgd/machines/profile.py), backend traits, and what results record about the host."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.machines import machine, profile, profile_model
from simasgd.machines.machine import MachineError
from simasgd.runs import backends
from simasgd.runs.results import RunResult
from simasgd.spec import loader
from simasgd.spec.scenario import WorkloadConfig

REPO = Path(__file__).resolve().parents[1]
MACHINE = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1, "local_latency_ns": 90.0,
           "remote_latency_ns": 90.0, "mem_bandwidth_gbs": 10.0, "link_bandwidth_gbs": 10.0,
           "gflops_per_core": 1.0, "quantum_s": 0.004, "context_switch_s": 2e-6}
KEY = "mlp-64-32-10-digits-b16-float64"


def _doc() -> dict[str, Any]:
    return {
        "machine": dict(MACHINE),
        "calibration": {"created": "2026-01-02T03:04:05Z", "quick": True, "loadavg": [0.5, 0.25, 0.125],
                        "remote_latency": "= local (one NUMA node)"},
        "gradient": {KEY: {"samples_s": [1e-3, 2e-3], "batch_size": 16, "dtype": "float64", "mean_s": 1.5e-3,
                           "concurrent": {"k2": [3e-3, 4e-3], "k2_n": 2, "cycle_k2": [5e-3]}}},
        "noise": {"min_gap_s": 2e-6, "k1": {"threads": 1, "rate_per_s": 10.0, "pauses_s": [1e-5, 2e-5]},
                  "k2": {"threads": 2, "rate_per_s": 12.5, "pauses_s": []}},
        "cache": {"levels": [1, 2], "sizes_bytes": [32768, 1048576], "source": "sysfs"},
        "scheduler": {"quantum_s": float("inf"), "kernel": "eevdf", "missing": None},
    }


def test_round_trip_keeps_every_table(tmp_path: Path) -> None:
    doc = _doc()
    path = profile.write(doc, tmp_path / "p" / "this.toml")
    back = profile.read(path).to_doc()
    assert back.pop("profile") == {"format": profile.FORMAT, "format_version": profile.FORMAT_VERSION}
    doc["scheduler"].pop("missing")  # None: left out (TOML has no null)
    assert back == doc
    assert back["gradient"][KEY]["concurrent"]["k2"] == [3e-3, 4e-3]
    assert back["noise"]["k1"]["pauses_s"] == [1e-5, 2e-5]
    assert not list(path.parent.glob(".*.tmp")), "the atomic write leaves no temporary file"


def test_calibrate_write_profile_is_profile_write(tmp_path: Path) -> None:
    from executors.calibration import calibrate

    a = calibrate.write_profile(_doc(), tmp_path / "a.toml")
    b = profile.write(_doc(), tmp_path / "b.toml")
    assert a.read_bytes() == b.read_bytes()
    assert calibrate.workload_key is profile.workload_key


def test_old_profile_without_profile_table_loads(tmp_path: Path) -> None:
    text = profile.to_toml(_doc())
    old = re.sub(r"\[profile\]\n[^\[]*", "", text)
    assert "[profile]" not in old and "format_version" not in old
    path = tmp_path / "old.toml"
    path.write_text(old)
    assert machine.machine_keys(profile.read(path)) == MACHINE
    m = machine.load_profile(path)
    assert m.name == "this" and m.cores_per_socket == 2


def test_a_profile_is_parsed_once_per_version_of_its_file(tmp_path: Path) -> None:
    path = profile.write(_doc(), tmp_path / "p.toml")
    first, again = machine.load_profile(path), machine.load_profile(path)
    assert again.profile is first.profile  # a sweep's hundreds of runs parse it once
    path.write_text(path.read_text().replace("cores_per_socket = 2", "cores_per_socket = 4"))
    assert machine.load_profile(path).cores_per_socket == 4  # the file changed: read again


def test_newer_format_version_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = profile.write(_doc(), tmp_path / "new.toml")
    path.write_text(path.read_text().replace(f"format_version = {profile.FORMAT_VERSION}", "format_version = 99"))
    assert tomllib.loads(path.read_text())["profile"]["format_version"] == 99
    with pytest.raises(profile.ProfileError, match=re.escape(str(path)) + r".*version 99"):
        profile.read(path)
    with pytest.raises(MachineError, match=re.escape(str(path))):
        machine.load_profile(path)


def test_older_format_version_than_read_is_refused_naming_file_versions_and_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the tables change past what the simulator can read, OLDEST_VERSION moves up: a profile before it
    is refused naming the file, its version, the versions read and the command that recalibrates it."""
    path = profile.write(_doc(), tmp_path / "old.toml")
    was = profile.FORMAT_VERSION  # the file's version
    monkeypatch.setattr(profile_model, "FORMAT_VERSION", was + 1)
    monkeypatch.setattr(profile_model, "OLDEST_VERSION", was + 1)
    with pytest.raises(profile.ProfileError) as e:
        profile.read(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: profile format version {was} is older than this simasgd reads "
                          f"(version {was + 1})")
    assert f"`simasgd calibrate --out {path}`" in msg
    with pytest.raises(profile.ProfileError, match=re.escape(f"newer than this simasgd reads ({was + 1})")):
        path.write_text(path.read_text().replace(f"format_version = {was}", f"format_version = {was + 2}"))
        profile.read(path)


@pytest.mark.parametrize("text", ["[machine\nsockets = 1", 'format = "x"\n[profile]\nformat = "other"'])
def test_junk_is_an_error_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "junk.toml"
    path.write_text(text)
    with pytest.raises(profile.ProfileError, match=re.escape(str(path))):
        profile.read(path)


def test_digest_changes_with_the_file(tmp_path: Path) -> None:
    path = profile.write(_doc(), tmp_path / "p.toml")
    d1 = profile.digest(path)
    assert d1 == profile.digest(path) and len(d1) == 64
    doc = _doc()
    doc["machine"]["quantum_s"] = 0.003
    profile.write(doc, path)
    assert profile.digest(path) != d1


def test_workload_key() -> None:
    wl = WorkloadConfig(model="mlp", layers=[64, 32, 10], dataset="digits", batch_size=16)
    assert profile.workload_key(wl) == KEY
    assert profile.workload_key(WorkloadConfig(model="logreg", dataset="mnist:/x", batch_size=8)) \
        == "logreg-mnist-b8-float64"


# --- backend traits -------------------------------------------------------------------------------

def test_backend_traits() -> None:
    sim_this = loader.from_dict({"machine": {"preset": "this"}})
    sim_preset = loader.from_dict({})
    assert backends.measures_host("cpu") is True
    assert backends.measures_host("sim") is False
    assert backends.measures_host("serial") is False
    for sc in (sim_this, sim_preset):
        assert backends.needs_profile("cpu", sc) is False
        assert backends.needs_profile("serial", sc) is False
    assert backends.needs_profile("sim", sim_this) is True
    assert backends.needs_profile("sim", sim_preset) is False
    for name, present in backends.available().items():
        if present:
            impl = backends.load(name)
            assert isinstance(impl.MEASURES_HOST, bool), name
            assert callable(getattr(impl, "needs_profile", None)) or isinstance(impl.NEEDS_PROFILE, bool), name
    with pytest.raises(backends.BackendError):
        backends.measures_host("nope")


def test_sweep_tasks_take_real_from_the_trait() -> None:
    from simasgd.sweep import plan

    assert plan.measures_host("cpu") and not plan.measures_host("sim") and not plan.measures_host("serial")


# --- results metadata -----------------------------------------------------------------------------

def test_sim_result_records_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _doc()
    path = profile.write({"machine": doc["machine"], "calibration": doc["calibration"]}, tmp_path / "this.toml")
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    data = {"workers": {"count": 2}, "algorithm": {"name": "hogwild"},
            "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-3},
                       "read": {"dist": "deterministic", "mean_s": 1e-5},
                       "update": {"dist": "deterministic", "mean_s": 1e-5}},
            "sim": {"numerics": False}, "stop": {"max_updates": 50}}
    sc = loader.from_dict({**data, "machine": {"preset": "this"}})
    result = backends.run(sc, "sim", repeats=1, out=tmp_path / "out")
    rec = RunResult.load(tmp_path / "out").metadata["profile"]
    assert rec == result.metadata["profile"]
    assert rec == {"path": str(path.resolve()), "sha256": profile.digest(path), "created": "2026-01-02T03:04:05Z"}
    plain = backends.run(loader.from_dict({**data, "machine": {"preset": "laptop-2core"}}), "sim", repeats=1)
    assert "profile" not in plain.metadata
    # No [machine]: this machine's profile is what it simulates (simasgd.machines.machine.preset_of), so it is recorded.
    assert backends.run(loader.from_dict(data), "sim", repeats=1).metadata["profile"] == rec


def _tiny_cpu_run(monkeypatch: pytest.MonkeyPatch, workers: int, algorithm: str, repeats: int) -> RunResult:
    """20 updates of a constant 8-parameter workload on real threads (what the host records around them)."""
    from simasgd.numerics.workloads.constant import ConstWorkload

    wl = ConstWorkload(dim=8)
    monkeypatch.setattr("simasgd.numerics.workloads.build_workload", lambda cfg, seed, base_dir=None: wl)
    sc = loader.from_dict({"workers": {"count": workers, "placement": "os"}, "algorithm": {"name": algorithm},
                           "workload": {"model": "least_squares", "batch_size": 1},
                           "stop": {"max_updates": 20, "max_time_s": 30.0},
                           "cpu": {"pin": False, "join_timeout_s": 10.0}})
    return backends.run(sc, "cpu", repeats=repeats)


@pytest.mark.slow
def test_cpu_result_records_host_load_and_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    result = _tiny_cpu_run(monkeypatch, 1, "sequential", repeats=2)
    cpus = sorted(os.sched_getaffinity(0))
    runs = result.metadata["host_runs"]
    assert [h["run"] for h in runs] == [0, 1]
    for h in runs:
        assert set(h) == {"run", "loadavg_start", "loadavg_end", "affinity_start", "affinity_end"}
        assert len(h["loadavg_start"]) == 3 and len(h["loadavg_end"]) == 3
        assert all(x >= 0 for x in h["loadavg_start"] + h["loadavg_end"])
        assert h["affinity_start"] == cpus and h["affinity_end"] == cpus
    assert result.metadata["host"] == runs[0]


@pytest.mark.hardware
def test_a_real_run_of_two_workers_records_where_its_cpus_were(monkeypatch: pytest.MonkeyPatch) -> None:
    # Workers that move lines between CPUs: the core-to-core hand-off before and after (executors/c2c.py).
    import os

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two usable CPUs")
    h = _tiny_cpu_run(monkeypatch, 2, "hogwild", repeats=1).metadata["host"]
    assert 1 < h["c2c_ns_start"] < 1e6 and 1 < h["c2c_ns_end"] < 1e6


def _hosts(*ns: tuple[float, float]) -> dict:
    return {"host_runs": [{"run": i, "c2c_ns_start": a, "c2c_ns_end": b} for i, (a, b) in enumerate(ns)]}


def test_topology_warnings_name_runs_away_from_the_calibrated_placement() -> None:
    from simasgd.runs.metadata import topology_warnings

    meta = _hosts((45, 50), (170, 165), (45, 180))
    lines = topology_warnings(meta, 48.0)
    assert len(lines) == 2
    assert lines[0].startswith("run 1:") and "165-170 ns" in lines[0] and "calibrated at 48 ns" in lines[0]
    assert lines[1].startswith("run 2:") and "during the run" in lines[1]
    assert topology_warnings(meta, 170.0)[0].startswith("run 0:")  # the far placement calibrated: run 0 is away
    assert topology_warnings(_hosts((45, 50)), None) == []        # no profile figure: only moves mid-run
    assert topology_warnings({"host": {"run": 0}}, 45.0) == []    # a run without the probe (one worker)


@pytest.mark.slow
def test_compare_warns_when_the_reference_ran_with_its_cpus_elsewhere(tmp_path: Path, as_result: Callable[..., RunResult],
                                                                      cycles: Callable[..., Any],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prof = tmp_path / "this.toml"
    prof.write_text("[c2c]\nlatency_ns = 45.0\nsamples_ns = [44.0, 46.0]\n")
    monkeypatch.setenv("SIMASGD_PROFILE", str(prof))
    as_result(cycles(), "sim").save(tmp_path / "sim")
    cpu = as_result(cycles(), "cpu")
    cpu.metadata["host_runs"] = _hosts((44, 47), (171, 168))["host_runs"]
    cpu.save(tmp_path / "cpu")
    res = CliRunner().invoke(app, ["compare", "--results", str(tmp_path / "sim"), str(tmp_path / "cpu"),
                                   "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    moved = [l for l in res.output.splitlines() if "core-to-core" in l]
    assert len(moved) == 1 and "(cpu)" in moved[0] and "run 1" in moved[0]


@pytest.fixture
def busy_folder(tmp_path: Path, as_result: Callable[..., RunResult],
                cycles: Callable[..., Any]) -> Callable[[float], Path]:
    def make(load: float) -> Path:
        r = as_result(cycles(n=20, workers=2, runs=1), "cpu", workers=2)
        r.metadata["host"] = {"run": 0, "loadavg_start": [load, 1.0, 1.0], "loadavg_end": [0.1, 0.1, 0.1],
                              "affinity_start": [0, 1], "affinity_end": [0, 1]}
        out = tmp_path / f"load-{load}"
        r.save(out)
        return out

    return make


def test_show_warns_when_the_host_was_busy(busy_folder: Callable[[float], Path]) -> None:
    busy = CliRunner().invoke(app, ["show", str(busy_folder(9.0))])
    assert busy.exit_code == 0, busy.output
    line = next(l for l in busy.output.splitlines() if "busy" in l)
    assert "warning" in line and "run 0" in line and "9.00" in line
    # 2 CPUs - 2 workers + 0.5 = 0.5: a load of 0.4 is the run itself
    quiet = CliRunner().invoke(app, ["show", str(busy_folder(0.4))])
    assert quiet.exit_code == 0 and "busy" not in quiet.output


@pytest.mark.slow
def test_compare_warns_when_the_reference_ran_on_a_busy_host(tmp_path: Path, as_result: Callable[..., RunResult],
                                                              cycles: Callable[..., Any]) -> None:
    as_result(cycles(), "sim").save(tmp_path / "sim")
    cpu = as_result(cycles(), "cpu")
    cpu.metadata["host_runs"] = [
        {"run": 0, "loadavg_start": [0.1] * 3, "loadavg_end": [0.2] * 3, "affinity_start": [0, 1], "affinity_end": [0, 1]},
        {"run": 1, "loadavg_start": [0.1] * 3, "loadavg_end": [9.0] * 3, "affinity_start": [0, 1], "affinity_end": [0, 1]}]
    cpu.save(tmp_path / "cpu")
    res = CliRunner().invoke(app, ["compare", "--results", str(tmp_path / "sim"), str(tmp_path / "cpu"),
                                   "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    busy = [l for l in res.output.splitlines() if "busy" in l]
    assert len(busy) == 1 and "(cpu)" in busy[0] and "run 1" in busy[0] and "at its end" in busy[0]


# --- the typed tables (simasgd/machines/profile_model.py) ----------------------------------------------------------

def _v2_profile(tmp_path: Path) -> Path:
    """A version-2 profile in that version's names: [copy_by_size] gbs, [coherence] write_gbs, held_write_gbs."""
    lines = ["[profile]", 'format = "simasgd-profile"', "format_version = 2", "", "[machine]",
             *(f"{k} = {v!r}" for k, v in MACHINE.items()), "",
             "[copy_by_size]", "sizes_bytes = [65536, 4194304]", "gbs = [100.0, 20.0]", "update_gbs = [300.0, 50.0]",
             "", "[coherence]", "sizes_bytes = [65536, 4194304]", "read_gbs = [40.0, 15.0]",
             "write_gbs = [60.0, 30.0]", "held_read_gbs = [50.0, 18.0]", "held_write_gbs = [45.0, 25.0]",
             "own_write_gbs = [1.0, 2.0]", ""]
    path = tmp_path / "v2.toml"
    path.write_text("\n".join(lines))
    return path


def test_an_older_version_reads_under_this_versions_names_and_times_the_same(tmp_path: Path) -> None:
    from simasgd.sim.caches import CacheModel

    old = profile.read(_v2_profile(tmp_path))
    assert old.copy_by_size is not None and old.coherence is not None
    assert old.copy_by_size.read_gbs == [100.0, 20.0]
    assert old.coherence.update_gbs == [60.0, 30.0] and old.coherence.held_update_gbs == [45.0, 25.0]
    doc = old.to_doc()  # written back: this version, this version's names, an undeclared key kept as it was
    assert doc["profile"]["format_version"] == profile.FORMAT_VERSION
    assert "write_gbs" not in doc["coherence"] and doc["coherence"]["own_write_gbs"] == [1.0, 2.0]
    new = profile.read(profile.write(doc, tmp_path / "v3.toml"))
    assert new.to_doc() == doc
    a, b = CacheModel.from_profile(old), CacheModel.from_profile(new)
    assert a is not None and b is not None and a.held_update_gbs is not None
    for size in (1e4, 65536, 1e6, 4194304, 1e8):  # read, update, fresh and held steps: the same figures
        assert a.read_s(size, True) == b.read_s(size, True) == 2 * size / (a._rate(a.shared_read_gbs, size,
                                                                                  a.shared_sizes))
        assert a.update_s(size) == b.update_s(size) and a.update_into_s(size, True) == b.update_into_s(size, True)
        assert a.held_s(size, True) == b.held_s(size, True) and a.held_s(size, False) == b.held_s(size, False)
    # a version-3 file with the old names is not renamed: those keys are undeclared, read by nothing
    stale = tmp_path / "stale.toml"
    stale.write_text(_v2_profile(tmp_path).read_text().replace("format_version = 2", "format_version = 3"))
    assert profile.read(stale).coherence.update_gbs is None  # type: ignore[union-attr]


@pytest.mark.parametrize(("line", "where", "got"), [('line_bytes = "sixty-four"', "[cache] line_bytes", "'sixty-four'"),
                                                 ('shared_by = [1, "all"]', "[cache] shared_by[1]", "'all'")])
def test_a_value_of_the_wrong_type_is_an_error_naming_file_table_and_key(tmp_path: Path, line: str, where: str,
                                                                         got: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(profile.to_toml(_doc()).replace("[cache]\n", f"[cache]\n{line}\n"))
    with pytest.raises(profile.ProfileError) as e:
        profile.read(path)
    assert str(e.value).startswith(f"{path}: {where}: ") and got in str(e.value)


@pytest.mark.parametrize("entry", sorted((REPO / "corpus").glob("*.json.gz")), ids=lambda p: p.name)
def test_every_corpus_profile_loads_and_writes_back_the_same_figures(entry: Path) -> None:
    from simasgd.corpus import store

    doc = store.load(entry).profile
    typed = profile.typed(doc, entry)
    version = doc.get("profile", {}).get("format_version", 1)
    renamed = {old: new for v, names in profile.RENAMED.items() if v > version for old, new in names.items()}
    back = profile.loads(profile.to_toml(doc), entry).to_doc()
    assert back == typed.to_doc()
    for table, keys in doc.items():
        if table == "profile":
            continue
        for key, value in keys.items():
            new_table, new_key = renamed.get(f"{table}.{key}", f"{table}.{key}").split(".", 1)
            assert back[new_table][new_key] == value, f"{table}.{key}"
    m = machine.from_profile(typed, entry.name, entry)
    assert m.cores_per_socket == doc["machine"]["cores_per_socket"] and m.profile is typed


def test_reads_are_noted_only_inside_recording_and_only_of_figures_present() -> None:
    from simasgd.machines.profile_model import recording

    p = profile.typed(_doc())
    assert p.cache is not None and p.cache.sizes_bytes  # outside: nothing noted anywhere
    with recording() as reads:
        assert p.cache.line_bytes is None  # absent: not noted
        assert p.cache.levels == [1, 2]
        assert p.coherence is None  # an absent table: not noted
        table = p.workload_tables()[KEY]
        assert table.samples_s == [1e-3, 2e-3] and table.concurrent is not None
        assert table.concurrent.samples(2) == [3e-3, 4e-3] and table.concurrent.samples(3) is None
    assert reads.tables == {"cache", "gradient"}
    assert reads.keys == {"cache.levels", f"gradient.{KEY}.samples_s", f"gradient.{KEY}.concurrent.k2"}
    assert p.scheduler is not None and p.scheduler.quantum_s == float("inf")  # after: nothing more noted
    assert reads.tables == {"cache", "gradient"}


def test_a_mechanism_whose_fields_are_missing_is_warned_of_by_those_fields(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    from simasgd.sim import backend, model_record

    path = _v2_profile(tmp_path)
    path.write_text(path.read_text().replace("held_read_gbs = [50.0, 18.0]\n", ""))
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    monkeypatch.setattr(model_record, "_warned", set())
    sc = loader.from_dict({"machine": {"preset": "this"}, "workers": {"count": 2, "placement": "uma"},
                           "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8},
                           "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-4}},
                           "algorithm": {"name": "mutex"}, "stop": {"max_updates": 50}, "sim": {"numerics": False}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = backend.run_once(sc, 0).metadata["model"]
    (said,) = [str(w.message) for w in caught if issubclass(w.category, model_record.ModelWarning)]
    assert "held_lines ([coherence] held_read_gbs)" in said  # the table is there, the key is not
    assert "timer_tick" not in said  # replaced by the given [timing] gradient: not missing
    assert "coherence (" not in said and "coherence" in model["mechanisms"]
    assert "held_lines" in model["missing"] and "held_lines" not in model["mechanisms"]
    assert {"coherence.read_gbs", "coherence.update_gbs"} <= set(model["keys"])
