"""The simulator models the executor [sim] traits names, and records the model that ran
(simasgd/sim/executor.py, simasgd/sim/model_record.py).

Oracles: an elided read takes no time and a copied one the copy's; a profile's table is read only where its
mechanism is on; a mechanism whose table is missing warns once per process; the digest is the file's.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.machines import machine, profile
from simasgd.runs.results import RunResult
from simasgd.sim import backend, model_record
from simasgd.spec import loader

BASE: dict[str, Any] = {
    "name": "traits", "seed": 7, "machine": {"preset": "laptop-2core"}, "workers": {"count": 1, "placement": "uma"},
    "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8},
    "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-4}},
    "algorithm": {"name": "mutex"}, "stop": {"max_updates": 300, "max_time_s": 10}, "sim": {"numerics": False},
}


def _scenario(traits: str, **over: Any):
    return loader.from_dict({**BASE, **over, "sim": {**BASE["sim"], "traits": traits}})


def _reads(u: pd.DataFrame) -> np.ndarray:
    """Each cycle's read phase, in the order the worker ran them (one worker: no lock waits)."""
    u = u.sort_values("t_start")
    return (u["t_grad_start"] - u["t_start"]).to_numpy()


def test_cpu_traits_skip_the_reads_that_torch_traits_copy() -> None:
    """One mutex worker: θ is always at the version its own last update made, so the cpu executor reads
    once (its first cycle) and the torch executor copies θ every cycle, at the memory model's copy time."""
    cpu, torch = (backend.run_once(_scenario(t), 0) for t in ("cpu", "torch"))
    rc, rt = _reads(cpu.updates), _reads(torch.updates)
    assert len(rc) == len(rt) == 300
    assert rc[0] > 0 and (rc[1:] == 0).all()
    assert (rt > 0).all() and np.allclose(rt, rt[0], rtol=1e-9)
    assert rc[0] == pytest.approx(rt[0], rel=1e-9)  # the one read the cpu executor makes is the same copy
    assert cpu.metadata["model"]["traits"]["of"] == "cpu" and torch.metadata["model"]["traits"]["of"] == "torch"
    assert torch.metadata["model"]["traits"]["reads"] == "copy"
    assert "read_elision" in cpu.metadata["model"]["mechanisms"]
    assert "read_elision" not in torch.metadata["model"]["mechanisms"]


def test_a_preset_run_records_its_model_and_warns_of_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_record, "_warned", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error", model_record.ModelWarning)
        model = backend.run_once(_scenario("cpu"), 0).metadata["model"]
    assert model["profile_digest"] is None and model["tables"] == [] and model["missing"] == []
    assert model["traits"] == {"of": "cpu", "reads": "elided", "lock_waiters": "spin_pauses", "snapshots": True,
                               "bookkeeping": "nopython", "updates": "mirrored"}
    # the preset has no profile: none of the profile's mechanisms acted; the switches without a table did
    assert not {"cache_model", "coherence", "timer_tick", "bookkeeping", "spin_before_yield"} & \
        set(model["mechanisms"])
    assert "read_elision" in model["mechanisms"]


def _profile(tmp_path: Path) -> Path:
    """A profile with a cache model ([copy_by_size]) and nothing else the mechanisms read."""
    path = tmp_path / "this.toml"
    path.write_text("\n".join([
        "[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1", "local_latency_ns = 90.0",
        "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0", "link_bandwidth_gbs = 10.0",
        "gflops_per_core = 1.0", "quantum_s = 0.004", "context_switch_s = 2e-6", "",
        "[cache]", "line_bytes = 64", "levels = [1, 2, 3]", "sizes_bytes = [49152, 1048576, 33554432]",
        "shared_by = [1, 1, 2]", "",
        "[copy_by_size]", "sizes_bytes = [65536, 4194304]", "gbs = [100.0, 20.0]", "update_gbs = [300.0, 50.0]", ""]))
    return path


def test_a_profile_run_records_the_tables_it_read_and_warns_once_of_each_missing_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _profile(tmp_path)
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    monkeypatch.setattr(model_record, "_warned", set())
    sc = _scenario("cpu", machine={"preset": "this"}, workers={"count": 2, "placement": "uma"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = backend.run_once(sc, 0).metadata["model"]
        again = backend.run_once(sc, 1).metadata["model"]
    assert first == again
    assert first["profile_digest"] == profile.digest(path)
    assert {"machine", "copy_by_size", "cache"} <= set(first["tables"])
    # the keys read: every one is the profile's, each table read has one, [machine]'s all (the machine's figures)
    keys = first["keys"]
    # the file's [copy_by_size] gbs (format version 1) is read as this version's read_gbs
    assert {"copy_by_size.read_gbs", "copy_by_size.sizes_bytes", "machine.quantum_s"} <= set(keys)
    assert {k.split(".")[0] for k in keys} == set(first["tables"])
    doc = profile.read(path).to_doc()
    assert all(k.split(".", 1)[1] in doc[k.split(".")[0]] for k in keys if not k.startswith("gradient."))
    assert {f"machine.{k}" for k in doc["machine"]} <= set(keys)
    assert "cache_model" in first["mechanisms"]
    # switched on (or asked for by the cpu executor's traits), their tables absent from this profile
    assert {"coherence", "bookkeeping", "spin_before_yield"} <= set(first["missing"])
    assert not set(first["missing"]) & set(first["mechanisms"])
    (said,) = [str(w.message) for w in caught if issubclass(w.category, model_record.ModelWarning)]  # once
    assert said.startswith(f"the profile {path} lacks") and f"`simasgd calibrate --out {path}`" in said
    # each named with what the profile lacks: a whole table, as docs/profile.md heads it
    assert "the cpu executor's bookkeeping ([executor])" in said and "coherence ([coherence])" in said
    assert all(name in said for name in first["missing"])
    off = backend.run_once(sc.model_copy(update={"sim": sc.sim.model_copy(update={"cache_model": False})}), 0)
    assert "copy_by_size" not in off.metadata["model"]["tables"]  # read only where its mechanism is on
    assert not any(k.startswith("copy_by_size.") for k in off.metadata["model"]["keys"])
    assert "cache_model" not in off.metadata["model"]["mechanisms"]


def test_every_table_a_switch_needs_is_a_switch_of_sim() -> None:
    from simasgd.spec.scenario import SimConfig

    bools = {n for n, f in SimConfig.model_fields.items() if f.annotation is bool}
    assert set(model_record.NEEDS) <= bools
    assert not set(model_record.TRAIT_MECHANISMS) & set(SimConfig.model_fields)


@pytest.mark.slow
def test_show_and_compare_print_the_model(tmp_path: Path) -> None:
    runner = CliRunner()
    doc = BASE
    for traits in ("cpu", "torch"):
        scenario = tmp_path / f"{traits}.toml"
        sim = {**BASE["sim"], "traits": traits}
        lines = [f'name = "{doc["name"]}"', f"seed = {doc['seed']}", "[machine]", 'preset = "laptop-2core"',
                 "[workers]", "count = 1", 'placement = "uma"', "[workload]", 'model = "least_squares"',
                 'dataset = "synthetic"', "batch_size = 8", "[timing]",
                 'gradient = { dist = "exponential", mean_s = 1e-4 }', "[algorithm]", 'name = "mutex"', "[stop]",
                 "max_updates = 300", "max_time_s = 10", "[sim]", "numerics = false", f'traits = "{sim["traits"]}"']
        scenario.write_text("\n".join(lines) + "\n")
        ran = runner.invoke(app, ["run", str(scenario), "-n", "1", "--out", str(tmp_path / traits)])
        assert ran.exit_code == 0, ran.output
        assert f"executor traits: {traits}'s" in ran.output  # said before the run, and with its result
        shown = runner.invoke(app, ["show", str(tmp_path / traits)])
        assert f"executor traits: {traits}'s" in shown.output and "mechanisms: " in shown.output
        assert "no profile (a preset)" in shown.output
        assert RunResult.load(tmp_path / traits).metadata["model"]["traits"]["of"] == traits
    res = runner.invoke(app, ["compare", "--results", str(tmp_path / "torch"), str(tmp_path / "cpu"),
                              "--out", str(tmp_path / "c")], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert "torch: executor traits: torch's" in res.output and "cpu: executor traits: cpu's" in res.output


def test_the_socket_model_acts_and_is_recorded_exactly_where_the_preset_gives_its_figures() -> None:
    """No switch: the socket's turbo clock and shared L3 act where the preset has base_ghz/llc_mb (the Ek 2021
    machine), and the record names them there and nowhere else."""
    ek = backend.run_once(_scenario("cpu", machine={"preset": "xeon-e5-2687w-v2"}), 0).metadata["model"]
    laptop = backend.run_once(_scenario("cpu"), 0).metadata["model"]
    assert machine.PRESETS["xeon-e5-2687w-v2"].base_ghz > 0 and machine.PRESETS["laptop-2core"].base_ghz == 0
    assert "socket_model" in ek["mechanisms"] and "socket_model" not in laptop["mechanisms"]


def test_keys_are_recorded_with_alike_tables_made_generic() -> None:
    g = model_record.generic
    assert g("gradient.mlp-64-32-10-digits-b16-float64.concurrent.k2") == \
        "gradient.<workload>.concurrent.k<k>"
    assert g("noise.k2.pauses_s") == "noise.k<k>.pauses_s"
    assert [g(k) for k in ("cas.latency_s", "c2c.latency_ns", "executor.bookkeeping_s")] == \
        ["cas.latency_s", "c2c.latency_ns", "executor.bookkeeping_s"]
