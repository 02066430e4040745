"""The preset catalogue: machines users do not have (with every number's source), the measured corpus machines
by name, the 1,024-node cluster, and the default preset's measured numbers."""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import simpy

from simasgd.corpus import score, store
from simasgd.machines import gpus, machine, networks
from simasgd.machines import profile as profile_format
from simasgd.machines.machine import PRESETS, MachineError, place, resolve
from simasgd.runs import backends
from simasgd.sim import network
from simasgd.spec import algorithms, loader
from simasgd.spec.scenario import MachineConfig

NEW = ("epyc-7763-2s", "xeon-8380-2s", "dgx-h100-host", "cluster-1024")
SHIPPED = Path(__file__).resolve().parents[1] / "corpus"


def _scenario(preset: str, algorithm: str = "hogwild", workers: int = 4, net: str | None = None,
              max_updates: int = 400) -> Any:
    doc: dict[str, Any] = {
        "name": f"preset-{preset}", "seed": 3, "repeats": 1,
        "workers": {"count": workers, "placement": "numa"},
        "machine": {"preset": preset},
        "workload": {"model": "mlp", "layers": [64, 16, 10], "dataset": "digits", "batch_size": 16},
        "algorithm": {"name": algorithm},
        "optimizer": {"lr": 0.05},
        "sim": {"numerics": False},
        "stop": {"max_updates": max_updates, "max_time_s": 60},
    }
    if net is not None:
        doc["network"] = {"preset": net}
    return loader.from_dict(doc)


# --- every number has its source --------------------------------------------------------------------------------

MACHINE_KEYS = [f.name for f in fields(machine.Machine) if f.name not in ("name", "profile")]


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_key_of_every_machine_preset_is_cited(name: str) -> None:
    cited = machine.CITATIONS[name]
    assert cited.what
    assert cited.uncited(MACHINE_KEYS) == [], f"{name}: cite these keys in machine.py"
    assert cited.keys() <= set(MACHINE_KEYS), f"{name}: citations name keys a Machine does not have"


def test_every_gpu_and_network_preset_is_cited() -> None:
    keys = [f.name for f in fields(gpus.Gpu) if f.name not in ("name", "profile")]
    assert set(gpus.SOURCES) == set(gpus.PRESETS)
    for name, cited in gpus.SOURCES.items():
        assert cited.uncited(keys) == [], name
    assert set(networks.SOURCES) == set(networks.PRESETS)
    for name, value in networks.PRESETS.items():
        if value is not None:
            assert networks.SOURCES[name].uncited(["bandwidth", "latency"]) == [], name


def test_the_new_network_presets_keep_the_format() -> None:
    assert networks.PRESETS["100gbe"] == (100.0, 20.0)
    gbps, us = networks.PRESETS["nvlink4"]  # type: ignore[misc]
    assert gbps / 8 == 450.0 and us > 0  # 450 GB/s each way: half of NVLink 4's 900 GB/s bidirectional


# --- the new machines run ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n in NEW if n != "cluster-1024"])
def test_each_new_preset_resolves_and_a_timing_only_run_finishes(name: str) -> None:
    m = resolve(MachineConfig(preset=name))
    assert m.name == name and m.cores == m.sockets * m.cores_per_socket and not m.nodes
    for algorithm in ("hogwild", "mutex"):
        res = backends.run(_scenario(name, algorithm, workers=8), "sim", repeats=1)
        assert res.runs[0].updates == 400 and res.metadata["machine"]["name"] == name


def test_the_cluster_puts_each_of_1024_workers_on_its_own_node() -> None:
    m = PRESETS["cluster-1024"]
    assert m.nodes and m.sockets == 1024 and m.cores == m.hw_threads == 1024
    for placement in ("uma", "numa"):
        cpus = place(m, 1024, placement)
        assert sorted(m.socket_of(c) for c in cpus if c is not None) == list(range(1024))
    from simasgd.sim.costs import Platform
    from simasgd.sim.nodes import NodeMemory

    sc = _scenario("cluster-1024", "param_server", workers=1024, net="100g_ib")
    sc = sc.model_copy(update={"workers": sc.workers.model_copy(update={"placement": "os"})})
    p = Platform(simpy.Environment(), sc, m, 0, dim=1000, itemsize=4, flops_per_sample=1e4)
    assert sorted(p.sockets) == list(range(1024))  # the OS's spread too: one worker a node
    assert isinstance(p.memory, NodeMemory) and len({id(x) for x in p.memory.of}) == 1024


def test_a_node_s_memory_is_its_own() -> None:
    """Two workers on two nodes each move their bytes at their own node's rate, at once: no shared link."""
    from simasgd.sim.nodes import NodeMemory

    m = dataclasses.replace(PRESETS["cluster-1024"], sockets=2, core_bandwidth_gbs=10.0)
    env = simpy.Environment()
    mem = NodeMemory(env, m, [0, 1])
    done = [mem.move(w, 1e9) for w in (0, 1)]
    env.run(simpy.AllOf(env, done))
    assert env.now == pytest.approx(0.1 + m.local_latency_ns * 1e-9, rel=1e-6)  # 1 GB at 10 GB/s, each alone


@pytest.mark.parametrize(("algorithm", "net"), [("param_server", "100g_ib"), ("easgd", "25gbe")])
def test_1024_nodes_run_a_distributed_algorithm_to_the_end(algorithm: str, net: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from simasgd.cli import app

    path = tmp_path / "cluster.toml"
    path.write_text(f'''name = "cluster"
seed = 1
repeats = 1
[workers]
count = 1024
placement = "numa"
[machine]
preset = "cluster-1024"
[network]
preset = "{net}"
[workload]
model = "mlp"
layers = [64, 16, 10]
dataset = "digits"
batch_size = 16
[algorithm]
name = "{algorithm}"
[sim]
numerics = false
[optimizer]
lr = 0.05
[stop]
max_updates = 2048
''')
    res = CliRunner().invoke(app, ["run", str(path), "-b", "sim", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    frame = pd.read_parquet(tmp_path / "out" / "updates.parquet")
    assert frame["applied"].sum() == 2048 and frame["worker"].nunique() == 1024  # every node took part


def test_a_cluster_refuses_shared_memory() -> None:
    with pytest.raises(MachineError, match="shared-memory algorithm"):
        backends.run(_scenario("cluster-1024", "hogwild", workers=8, net="100g_ib"), "sim", repeats=1)
    with pytest.raises(MachineError, match="give the network"):
        backends.run(_scenario("cluster-1024", "param_server", workers=8), "sim", repeats=1)


def test_networked_names_the_algorithms_that_send_messages() -> None:
    for name in ("param_server", "easgd", "eawild", "sync", "backup", "keuper", "hogwild", "mutex", "lopez"):
        sc = _scenario("laptop-2core", name, workers=4, net="100g_ib")
        sends = network.row_bytes(sc, 1000, 4) > 0
        assert sends == (name in algorithms.NETWORKED), name
    assert "simuparallel" in algorithms.NETWORKED  # one average at the end: messages, none per row


# --- measured corpus machines by name ---------------------------------------------------------------------------

def test_the_corpus_machines_are_presets_by_name() -> None:
    names = machine.corpus_names()
    assert {"amd_epyc_2vcpu", "amd_epyc_2vcpu_b", "amd_epyc_zen3_firecracker_2vcpu"} <= set(names)
    assert not set(names) & {*PRESETS, "this", *gpus.names()}
    assert machine.CORPUS_SUFFIX == store.SUFFIX
    from simasgd.commands.corpus import default_corpus

    assert default_corpus() == machine.corpus_folder() == SHIPPED
    assert set(names) <= set(machine.preset_names())
    with pytest.raises(MachineError, match="amd_epyc_2vcpu_b") as err:
        resolve(MachineConfig(preset="epyc-9999"))
    assert "unknown preset" in str(err.value) and "cluster-1024" in str(err.value)


def _scorer_profile(entry: store.Entry, tmp_path: Path) -> Path:
    """The profile file the corpus scorer simulates an entry's cells on (``score.score``)."""
    path = tmp_path / "profile.toml"
    path.write_text(profile_format.to_toml(entry.profile))
    return path


@pytest.mark.parametrize("name", ["amd_epyc_2vcpu", "amd_epyc_2vcpu_b"])
def test_a_corpus_machine_by_name_is_the_machine_the_scorer_simulates(name: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    entry = store.load(SHIPPED / f"{name}.json.gz")
    path = _scorer_profile(entry, tmp_path)
    monkeypatch.setenv("SIMASGD_PROFILE", str(path))
    scorer = resolve(MachineConfig(preset="this"))
    by_name = resolve(MachineConfig(preset=name))
    assert by_name == dataclasses.replace(scorer, name=name)
    assert machine.profile_digest(MachineConfig(preset=name)) == profile_format.digest(path)
    rec = machine.simulated(MachineConfig(preset=name))
    assert rec["corpus"].endswith(f"{name}.json.gz") and "corpus entry" in machine.describe(rec)


def test_a_corpus_cell_simulates_alike_by_name_and_in_the_scorer(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    entry = store.load(SHIPPED / "amd_epyc_2vcpu.json.gz")
    cell = next(c for c in entry.cells if c.name == "fid-hogwild-n2-b16")
    doc = score.scenario_of(cell, {"numerics": False}).to_dict()
    doc["stop"] = {**doc["stop"], "max_updates": 1500}
    doc["repeats"] = 1
    monkeypatch.setenv("SIMASGD_PROFILE", str(_scorer_profile(entry, tmp_path)))
    scorer = backends.run(loader.from_dict(doc), "sim", repeats=1)
    monkeypatch.setenv("SIMASGD_PROFILE", str(tmp_path / "absent.toml"))
    named = backends.run(loader.from_dict({**doc, "machine": {"preset": "amd_epyc_2vcpu"}}), "sim", repeats=1)
    pd.testing.assert_frame_equal(scorer.updates, named.updates)
    assert named.metadata["model"]["profile_digest"] == scorer.metadata["model"]["profile_digest"]
    assert named.metadata["model"]["mechanisms"] == scorer.metadata["model"]["mechanisms"]


def test_a_renamed_corpus_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "other_name.json.gz").write_bytes((SHIPPED / "amd_epyc_2vcpu_b.json.gz").read_bytes())
    monkeypatch.setenv(machine.CORPUS_ENV, str(tmp_path))
    assert machine.corpus_names() == ["other_name"]
    with pytest.raises(MachineError, match="rename the file"):
        resolve(MachineConfig(preset="other_name"))


# --- the default preset is a measured machine's -----------------------------------------------------------------

def test_laptop_2core_is_the_measured_corpus_machine_rounded() -> None:
    laptop = PRESETS[machine.FALLBACK_PRESET]
    measured = store.load(SHIPPED / "amd_epyc_2vcpu.json.gz").profile
    table = measured["machine"]
    for key, value in table.items():
        assert getattr(laptop, key) == pytest.approx(value, rel=5e-3), key
    assert laptop.core_bandwidth_gbs == pytest.approx(measured["copy"]["gbs"][0], rel=5e-3)
    assert laptop.base_ghz == 0 and laptop.llc_mb == 0  # no sockets model: the guest does not see its clocks
