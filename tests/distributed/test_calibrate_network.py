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
    assert loop["round_trip_s"] > 0 and loop["update_s"] > 0 and loop["cpu_per_message_s"] > 0
    assert net["handling_us"] == pytest.approx(max(0.0, loop["cpu_per_message_s"] - loop["update_s"]) * 1e6)
    fits = [n for n in (1, 2, 4, 7) if n + 1 <= cpus]  # the server loop under N senders: N + 1 ranks, a CPU each
    assert loop["by_senders"]["senders"] == fits and len(loop["by_senders"]["round_trip_s"]) == len(fits)
    gaps = loop["by_gap"]
    assert gaps["gap_s"] == [0.0, 250e-6, 550e-6, 1e-3]
    assert all(len(gaps[k]) == 4 for k in ("round_trip_s", "messages_per_s", "main_cpu_per_message_s"))
    wake = network.wake_from_gaps(gaps["round_trip_s"], gaps["messages_per_s"], gaps["main_cpu_per_message_s"])
    assert wake.after_s >= gaps["round_trip_s"][0] and wake.wake_s >= 0  # neither rank pays it back to back
    monkeypatch.setenv("SIMASGD_PROFILE", str(out))
    links = network.resolve(_scenario().network)  # type: ignore[attr-defined]
    assert links is not None and links.latency_s == pytest.approx(net["latency_us"] * 1e-6)
    assert links.handling_s == pytest.approx(net["handling_us"] * 1e-6)
    assert links.wake == wake
    assert net["store_round_trip_us"] > 0 and links.store_s == pytest.approx(net["store_round_trip_us"] * 1e-6)
    assert math.isnan(net["bandwidth_gbps"]) or links.bandwidth_Bps == pytest.approx(net["bandwidth_gbps"] * 1e9 / 8)


def test_the_store_round_trip_is_one_add_to_the_process_group_s_store() -> None:
    """Rank 0 adds to the default store (a TCPStore served by its own thread) as dist's keuper does; a median > 0."""
    from executors.dist.calibrate_network import _spawn, _store_round_trip

    rt = _spawn(2, _store_round_trip, (30,))
    assert 0 < rt < 1.0


def test_the_server_loop_is_timed_through_the_backend_s_own_server() -> None:
    """Two ranks, rank 0 in ``param_server.serve``: a round trip, the server process's CPU time per push (its
    receive, update and reply: more than the update alone, less than the whole round trip on a host with a CPU
    for each rank), the update step timed apart, a message's bytes (the header's 4 int64 words and the shard);
    the server leaves its loop when its last push is refused."""
    from executors.dist.calibrate_network import _server_loop, _spawn

    round_trip, cpu, step, nbytes = _spawn(2, _server_loop, (64, 10))
    assert round_trip > step > 0 and cpu > step and nbytes == 32 + 64 * 8


def test_the_server_loop_under_one_sender_is_measured_pinned_through_serve() -> None:
    """N = 1 of ``[network.server_loop.by_senders]`` (the only N a 2-CPU host fits): a row the profile takes; the
    server process's CPU time per push holds its main thread's."""
    from executors.dist.calibrate_network import server_queue

    row = server_queue(quick=True, senders=(1,))
    assert row is not None and row["senders"] == [1] and row["pinned"] and row["rounds"] == 25
    assert row["round_trip_s"][0] > 0 and row["messages_per_s"][0] > 0
    assert row["cpu_per_message_s"][0] >= row["main_cpu_per_message_s"][0] > 0
    assert profile.Profile.from_doc({"network": {"server_loop": {"by_senders": row}}}, "x.toml").network is not None


def test_the_server_loop_measures_only_the_senders_the_host_has_a_cpu_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from executors.dist import calibrate_network as cn

    monkeypatch.setattr(cn.os, "sched_getaffinity", lambda pid: {0})  # one CPU: no N + 1 ranks fit, nothing spawned
    assert cn.server_queue(quick=True) is None


def test_a_failed_n_ends_the_sweep_with_the_rows_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is read by nothing: a sender count whose ranks fail or hang costs its own row and the larger
    N's, never the [network] table the simulator reads."""
    from executors.dist import calibrate_network as cn

    row = {"senders": 1, "round_trip_s": 1e-3, "messages_per_s": 900.0, "cpu_per_message_s": 1e-4,
           "main_cpu_per_message_s": 9e-5}

    def spawn(world: int, *args: object, **kw: object) -> object:
        if world > 2:
            raise RuntimeError("calibrate --network: a rank of _queued_loop failed or hung")
        return row

    monkeypatch.setattr(cn.os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(cn, "_spawn", spawn)
    said: list[str] = []
    got = cn.server_queue(log=said.append)
    assert got is not None and got["senders"] == [1] and got["round_trip_s"] == [1e-3]
    assert said == ["the server loop under 2 senders not measured (calibrate --network: a rank of _queued_loop "
                    "failed or hung); kept N < 2"]


BY_SENDERS = {"senders": [1, 2, 4], "round_trip_s": [3e-4, 4e-4, 8e-4], "messages_per_s": [3300.0, 7000.0, 6500.0],
              "cpu_per_message_s": [1e-4, 1.2e-4, 1.3e-4], "main_cpu_per_message_s": [9e-5, 1e-4, 1.1e-4],
              "rounds": 100, "pinned": True, "seconds": 2.5}


def test_the_by_senders_table_round_trips_through_a_profile_file(tmp_path: Path) -> None:
    out = tmp_path / "this.toml"
    profile.write({"network": {"latency_us": 40.0, "server_loop": {"bytes": 38512, "by_senders": BY_SENDERS}}}, out)
    loop = profile.read(out).network.server_loop  # type: ignore[union-attr]
    assert loop is not None and loop.by_senders is not None and loop.by_senders.model_dump() == BY_SENDERS
    assert profile.read(out).to_doc()["network"]["server_loop"]["by_senders"] == BY_SENDERS


def test_a_profile_without_the_by_senders_table_keeps_loading(tmp_path: Path) -> None:
    out = tmp_path / "this.toml"
    profile.write({"network": {"latency_us": 40.0, "handling_us": 60.0,
                               "server_loop": {"bytes": 38512, "round_trip_s": 2.2e-4, "update_s": 3e-6}}}, out)
    net = profile.read(out).network
    assert net is not None and net.server_loop is not None and net.server_loop.by_senders is None
    assert net.server_loop.cpu_per_message_s is None and net.handling_us == 60.0
    loop = profile.Profile.from_doc({"network": {"server_loop": {"bytes": 8, "round_trip_s": 1e-3}}}, "x.toml")
    assert loop.network.server_loop.by_senders is None  # type: ignore[union-attr]


@pytest.mark.parametrize("change, refusal", [
    ({"round_trip_s": [3e-4, 4e-4]}, r"round_trip_s: .*2 values for the 3 of `senders`"),
    ({"cpu_per_message_s": [1e-4]}, r"cpu_per_message_s: .*1 values for the 3"),
    ({"messages_per_s": [3300.0, 0.0, 6500.0]}, r"messages_per_s\[1\]: .*greater than 0"),
    ({"round_trip_s": [3e-4, float("inf"), 8e-4]}, r"round_trip_s\[1\]: .*finite"),
    ({"main_cpu_per_message_s": [-1e-4, 1e-4, 1e-4]}, r"main_cpu_per_message_s\[0\]: .*greater than 0"),
    ({"senders": [1, 4, 2]}, r"senders: .*N must increase"),
    ({"senders": [0, 1, 2]}, r"senders\[0\]: .*greater than or equal to 1"),
    ({"senders": None}, r"senders: "),
    ({"messages_per_s": None}, r"messages_per_s: Field required"),
])
def test_the_by_senders_table_is_refused_by_file_and_key(change: dict[str, object], refusal: str) -> None:
    table = {k: v for k, v in {**BY_SENDERS, **change}.items() if v is not None}
    with pytest.raises(profile.ProfileError, match=r"^mine\.toml: \[network.server_loop.by_senders\] " + refusal):
        profile.Profile.from_doc({"network": {"server_loop": {"by_senders": table}}}, "mine.toml")


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


BY_GAP = {"gap_s": [0.0, 5.5e-4, 1e-3], "round_trip_s": [1.3e-4, 2.7e-4, 2.7e-4],
          "messages_per_s": [6500.0, 1100.0, 760.0], "main_cpu_per_message_s": [7e-5, 1.3e-4, 1.3e-4],
          "rounds": 200, "pinned": True}


def test_the_by_gap_table_round_trips_through_a_profile_file(tmp_path: Path) -> None:
    out = tmp_path / "p.toml"
    profile.write({"network": {"latency_us": 40.0, "server_loop": {"bytes": 38512, "by_gap": BY_GAP}}}, out)
    loop = profile.read(out).network.server_loop  # type: ignore[union-attr]
    assert loop is not None and loop.by_gap is not None and loop.by_gap.model_dump(exclude_none=True) == BY_GAP
    assert profile.read(out).to_doc()["network"]["server_loop"]["by_gap"] == BY_GAP


@pytest.mark.parametrize("change, refusal", [
    ({"gap_s": [1e-4, 1e-3, 2e-3]}, r"gap_s: .*the first 0"),
    ({"gap_s": [0.0]}, r"gap_s: .*two gaps at least"),
    ({"gap_s": [0.0, 1e-3, 5e-4]}, r"gap_s: .*increasing"),
    ({"round_trip_s": [1e-4, 2e-4]}, r"round_trip_s: .*2 values for the 3 of `gap_s`"),
    ({"main_cpu_per_message_s": None}, r"main_cpu_per_message_s: Field required"),
])
def test_the_by_gap_table_is_refused_by_file_and_key(change: dict[str, object], refusal: str) -> None:
    table = {k: v for k, v in {**BY_GAP, **change}.items() if v is not None}
    with pytest.raises(profile.ProfileError, match=r"^mine\.toml: \[network.server_loop.by_gap\] " + refusal):
        profile.Profile.from_doc({"network": {"server_loop": {"by_gap": table}}}, "mine.toml")
