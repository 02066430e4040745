"""``simasgd calibrate --network``: the transport measured into the profile's ``[network]``, which the
simulator's network reads for ``[network] preset = "this"``."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.machines import profile
from simasgd.sim import network
from simasgd.spec import loader


def _scenario(**net: object) -> object:
    return loader.from_dict({"algorithm": {"name": "param_server"}, "workers": {"count": 2},
                             "network": {"preset": "this", **net}, "stop": {"max_updates": 10}})


@pytest.mark.slow
def test_calibrate_network_writes_a_table_the_simulator_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "this.toml"
    profile.write({"machine": {"sockets": 1}}, out)  # an existing profile keeps its other tables
    res = CliRunner().invoke(app, ["calibrate", "--network", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = profile.read(out).to_doc()
    net = doc["network"]
    assert doc["machine"] == {"sockets": 1}
    assert net["latency_us"] > 0 and len(net["p2p"]["one_way_s"]) == len(net["p2p"]["bytes"])
    assert all(t > 0 for t in net["p2p"]["one_way_s"])
    assert net["server"]["senders"] == [1, 2, 3] and all(b > 0 for b in net["server"]["bytes_per_s"])
    cpus = len(os.sched_getaffinity(0))  # the all-reduce goes to 8 ranks where there are CPUs for them
    assert net["allreduce"]["ranks"] == list(range(2, max(4, min(8, cpus)) + 1))
    assert all(len(r) == 3 for r in net["allreduce"]["seconds"])
    loop = net["server_loop"]
    assert loop["round_trip_s"] > 0 and loop["update_s"] > 0 and net["handling_us"] >= 0
    monkeypatch.setenv("SIMASGD_PROFILE", str(out))
    links = network.resolve(_scenario().network)  # type: ignore[attr-defined]
    assert links is not None and links.latency_s == pytest.approx(net["latency_us"] * 1e-6)
    assert links.handling_s == pytest.approx(net["handling_us"] * 1e-6)
    assert math.isnan(net["bandwidth_gbps"]) or links.bandwidth_Bps == pytest.approx(net["bandwidth_gbps"] * 1e9 / 8)


def test_the_server_loop_is_timed_through_the_backend_s_own_server() -> None:
    """Two ranks, rank 0 in ``param_server.serve``: a round trip, the update step timed apart, a message's bytes
    (the header's 4 int64 words and the shard); the server leaves its loop when its last push is refused."""
    from executors.dist.calibrate_network import _server_loop, _spawn

    round_trip, step, nbytes = _spawn(2, _server_loop, (64, 10))
    assert round_trip > step > 0 and nbytes == 32 + 64 * 8


def test_preset_this_takes_the_measured_numbers_and_the_scenario_overrides_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "this.toml"
    profile.write({"network": {"latency_us": 25.0, "bandwidth_gbps": 8.0, "server_bandwidth_gbps": 4.0}}, out)
    monkeypatch.setenv("SIMASGD_PROFILE", str(out))
    links = network.resolve(_scenario().network)  # type: ignore[attr-defined]
    assert (links.bandwidth_Bps, links.server_bandwidth_Bps) == (1e9, 5e8) and links.latency_s == pytest.approx(25e-6)
    links = network.resolve(_scenario(latency_us=3.0).network)  # type: ignore[attr-defined]
    assert links.latency_s == pytest.approx(3e-6) and links.bandwidth_Bps == 1e9


def test_preset_this_without_a_measured_table_says_how_to_measure(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "this.toml"
    profile.write({"machine": {"sockets": 1}}, out)
    monkeypatch.setenv("SIMASGD_PROFILE", str(out))
    with pytest.raises(ValueError, match=r"no measured \[network\] table; run `simasgd calibrate --network"):
        network.resolve(_scenario().network)  # type: ignore[attr-defined]
    monkeypatch.setenv("SIMASGD_PROFILE", str(tmp_path / "absent.toml"))
    with pytest.raises(ValueError, match="no calibrated profile at"):
        network.resolve(_scenario().network)  # type: ignore[attr-defined]


@pytest.mark.parametrize("env", [None, "elsewhere/mine.toml"])
def test_the_network_reads_the_profile_the_machine_reads(env: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.machines import machine

    if env is None:
        monkeypatch.delenv(machine.PROFILE_ENV, raising=False)
    else:
        monkeypatch.setenv(machine.PROFILE_ENV, env)
    assert network.profile_path() == machine.profile_path()
