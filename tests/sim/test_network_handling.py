"""A message's cost to the rank that handles it (simasgd/sim/network.py ``Network.handle``, the profile's
``[network] handling_us``): closed forms of the cycles ``dist``'s ranks run, and a profile without the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simasgd.machines import profile
from simasgd.machines.profile import ProfileError
from simasgd.runs import backends
from simasgd.sim import network
from simasgd.spec import loader

L, C, U, GRAD = 20e-6, 30e-6, 5e-6, 100e-6  # one-way latency, handling, an update, a gradient
SERVER_BPS = 0.5e9                            # the server's link (4 Gb/s); a worker's is 8 Gb/s
M = 65 * 8                                    # least squares on the digits: 65 float64 parameters
HOP = L + M / SERVER_BPS                       # a model-sized message to or from a server


def _profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handling_us: float | None = C * 1e6,
             latency_us: float = L * 1e6, gbps: float = 8.0, server_gbps: float = 4.0,
             store_us: float | None = None, wake: tuple[float, float] | None = None) -> None:
    net: dict[str, Any] = {"latency_us": latency_us, "bandwidth_gbps": gbps, "server_bandwidth_gbps": server_gbps}
    if wake is not None:  # a loop whose round trip grew by 2 · wake (both ranks idle past it) past `after`
        w, after = wake
        net["server_loop"] = {"by_gap": {"gap_s": [0.0, 1e-3], "round_trip_s": [after, after + 2 * w],
                                         "messages_per_s": [1 / after, 1 / (after + 2 * w + 1e-3)],
                                         "main_cpu_per_message_s": [after / 2, after / 2]}}
    if handling_us is not None:
        net["handling_us"] = handling_us
    if store_us is not None:
        net["store_round_trip_us"] = store_us
    out = tmp_path / "this.toml"
    profile.write({"network": net}, out)
    monkeypatch.setenv("SIMASGD_PROFILE", str(out))


def _run(algorithm: str, workers: int, updates: int = 40, grad: float = GRAD, **params: Any) -> Any:
    sc = loader.from_dict({
        "name": "handling", "seed": 3, "workers": {"count": workers}, "machine": {"preset": "xeon-e5-2687w-v2"},
        "workload": {"model": "least_squares", "batch_size": 1}, "algorithm": {"name": algorithm, **params},
        "optimizer": {"lr": 1e-6}, "timing": {"gradient": {"dist": "deterministic", "mean_s": grad},
                                             "update": {"dist": "deterministic", "mean_s": U}},
        "network": {"preset": "this"}, "stop": {"max_updates": updates, "max_time_s": 10.0}})
    return backends.load("sim").run_once(sc, 0)


def _writes(r: Any, worker: int | None = None) -> np.ndarray:
    u = r.updates if worker is None else r.updates[r.updates["worker"] == worker]
    return np.sort(u["t_write"].to_numpy(float))


def test_one_worker_s_round_trip_is_two_transfers_two_handlings_and_the_update(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pull is a request (a push's size) and its reply, each handled; then each cycle is the reply,
    its handling, the gradient, the push, its handling and the server's update."""
    _profile(tmp_path, monkeypatch)
    t = _writes(_run("param_server", 1))
    assert t[0] == pytest.approx(HOP + C + HOP + C + GRAD + HOP + C + U, rel=1e-9)
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, 2 * HOP + 2 * C + GRAD + U), rel=1e-9)


@pytest.mark.parametrize("workers", [4, 8])
def test_a_busy_server_takes_one_push_per_handling_and_update(
        workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradients and transfers of next to nothing: the server's CPU is the bottleneck, one update every C + U."""
    _profile(tmp_path, monkeypatch, latency_us=0.1, gbps=8000.0, server_gbps=8000.0)
    r = _run("param_server", workers, updates=400, grad=1e-7)
    gaps = np.diff(_writes(r))[4 * workers:]
    assert gaps == pytest.approx(np.full(len(gaps), C + U), rel=1e-6)
    assert r.runs[0].updates_per_s == pytest.approx(1 / (C + U), rel=0.02)


def test_easgd_s_exchange_is_a_push_and_its_reply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The centre takes x_j, replies, then updates (beside the reply's transfer); the worker takes the reply
    and runs its local step (gradient and update)."""
    _profile(tmp_path, monkeypatch)
    t = _writes(_run("easgd", 1, tau=1))
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, 2 * HOP + 2 * C + GRAD + U), rel=1e-9)


def test_eawild_s_exchange_is_four_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pull request (a header), its reply, the push (header and state), its acknowledgement (a header):
    each handled where it arrives, the push with the centre's update; then the local step."""
    _profile(tmp_path, monkeypatch)
    t = _writes(_run("eawild", 1, tau=1))
    header = L + network.HEADER_BYTES / SERVER_BPS
    push = L + (network.HEADER_BYTES + M) / SERVER_BPS
    cycle = header + C + HOP + C + push + C + U + header + C + GRAD + U
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, cycle), rel=1e-9)


def test_a_keuper_node_waits_for_its_send(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step: gradient, update, then the state to the other node: the sender waits for the transfer and for
    the receiver's thread to take it (its handling, on its receiving thread, beside its gradient), as ``dist``'s
    send returns."""
    _profile(tmp_path, monkeypatch)
    t = _writes(_run("keuper", 2, exchange_every=1), worker=0)
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, GRAD + U + L + M / 1e9 + C), rel=1e-9)


S = 70e-6  # a round trip to the process group's store (dist's version counter)


def test_a_keuper_step_waits_for_the_version_counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``store_round_trip_us``: between its gradient and its step a node waits one round trip to rank 0's store
    (dist takes the step's global version there), then updates and sends."""
    _profile(tmp_path, monkeypatch, store_us=S * 1e6)
    r = _run("keuper", 2, exchange_every=1)
    t = _writes(r, worker=0)
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, GRAD + S + U + L + M / 1e9 + C), rel=1e-9)
    assert np.sort(r.updates["version"].to_numpy()) == pytest.approx(np.arange(1, 41))


def test_simuparallel_waits_for_the_version_counter_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No messages, the same counter: a step is the gradient, the round trip and the update; without the key,
    the gradient and the update."""
    _profile(tmp_path, monkeypatch, store_us=S * 1e6)
    t = _writes(_run("simuparallel", 2), worker=0)
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, GRAD + S + U), rel=1e-9)
    _profile(tmp_path, monkeypatch)
    t = _writes(_run("simuparallel", 2), worker=0)
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, GRAD + U), rel=1e-9)


def test_the_store_round_trip_is_the_measured_network_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept with the measured transport, dropped under a latency of the scenario's own (another network)."""
    _profile(tmp_path, monkeypatch, store_us=S * 1e6)
    measured = network.resolve(loader.from_dict({"network": {"preset": "this"}}).network)
    own = network.resolve(loader.from_dict({"network": {"preset": "this", "latency_us": 1.0}}).network)
    assert measured is not None and measured.store_s == pytest.approx(S)
    assert own is not None and own.store_s is None


def test_a_profile_without_handling_simulates_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``handling_us``: messages cost no rank's CPU and the server's update is free — a cycle is the
    gradient, the pull and the push."""
    _profile(tmp_path, monkeypatch, handling_us=None)
    sc = loader.from_dict({"algorithm": {"name": "param_server"}, "workers": {"count": 2},
                           "network": {"preset": "this"}})
    links = network.resolve(sc.network)
    assert links is not None and links.handling_s is None
    t = _writes(_run("param_server", 1))
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, GRAD + 2 * HOP), rel=1e-9)


def test_handling_holds_under_a_latency_of_the_scenario_s_own(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, monkeypatch)
    sc = loader.from_dict({"algorithm": {"name": "param_server"}, "workers": {"count": 2},
                           "network": {"preset": "this", "latency_us": 1.0}})
    links = network.resolve(sc.network)
    assert links is not None and links.handling_s == pytest.approx(C) and links.latency_s == pytest.approx(1e-6)


def test_handling_is_the_server_s_cpu_per_push_less_its_update() -> None:
    """The CPU time a push cost the server's process, less the update the simulator prices apart; never below 0."""
    assert network.handling_from_cpu(179e-6, 3e-6) == pytest.approx(176e-6)
    assert network.handling_from_cpu(2e-6, 3e-6) == 0.0


def test_the_server_s_update_is_priced_as_the_machine_prices_an_update(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A given ``[timing] update``: its mean; else the preset's memory model (this workload has no cache
    footprint): one core streaming the update's 3·d·8 bytes after the local latency."""
    import simpy

    from simasgd.machines.machine import resolve
    from simasgd.sim.costs import Platform

    _profile(tmp_path, monkeypatch)
    base = {"algorithm": {"name": "param_server"}, "workers": {"count": 2},
            "machine": {"preset": "xeon-e5-2687w-v2"}, "workload": {"model": "least_squares", "batch_size": 1},
            "timing": {"gradient": {"dist": "deterministic", "mean_s": GRAD}}}
    sc = loader.from_dict(base)
    m = resolve(sc.machine)
    p = Platform(simpy.Environment(), sc, m, 0, dim=65)
    assert p.server_update_s(0.5) == pytest.approx(m.local_latency_ns * 1e-9 + 3 * M * 0.5 / 10e9)
    given = loader.from_dict(base | {"timing": {"gradient": {"dist": "deterministic", "mean_s": GRAD},
                                                "update": {"dist": "exponential", "mean_s": 7e-6}}})
    assert Platform(simpy.Environment(), given, m, 0, dim=65).server_update_s(0.5) == pytest.approx(3.5e-6)


@pytest.mark.parametrize(("value", "why"), [("-1.0", "greater than or equal to 0"), ("nan", "finite"),
                                            ('"fast"', "valid number")])
def test_a_bad_handling_us_is_refused_by_name(value: str, why: str, tmp_path: Path) -> None:
    """A hand-edited profile's value (``profile.write`` refuses to write one)."""
    out = tmp_path / "p.toml"
    profile.write({"network": {"latency_us": 25.0, "bandwidth_gbps": 8.0, "handling_us": 1.0}}, out)
    out.write_text(out.read_text().replace("handling_us = 1.0", f"handling_us = {value}"))
    with pytest.raises(ProfileError, match=rf"{out}: \[network\] handling_us: .*{why}"):
        profile.read(out)
    with pytest.raises(ProfileError, match=r"\[network\] handling_us"):
        profile.write({"network": {"latency_us": 25.0, "bandwidth_gbps": 8.0, "handling_us": -1.0}},
                      tmp_path / "q.toml")


def test_the_profile_keeps_handling_us_and_its_measurement(tmp_path: Path) -> None:
    loop = {"bytes": 38512, "round_trip_s": 2.9e-4, "update_s": 3e-6, "rounds": 400}
    out = tmp_path / "p.toml"
    profile.write({"network": {"latency_us": 48.0, "bandwidth_gbps": 25.0, "handling_us": 76.0,
                               "server_loop": loop}}, out)
    again = tmp_path / "q.toml"
    profile.write(profile.read(out).to_doc(), again)
    net = profile.read(again).network
    assert net is not None and net.handling_us == 76.0
    assert profile.read(again).to_doc()["network"]["server_loop"] == loop


W = 15e-6  # what waking from idle adds to a message


@pytest.mark.parametrize(("after", "woken"), [
    (10e-6, 2),    # both ranks idle past it: the server through the gradient, the worker through its round trip
    (120e-6, 1),   # the worker's wait (2 hops, a handling, a wake, the update: ~92 µs) is short of it: the server
    (1.0, 0),      # neither: as without the keys
])
def test_a_rank_idle_past_wake_after_adds_wake_to_the_message_it_takes(
        after: float, woken: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker: the server idles 2 hops, a handling and the gradient between pushes (~172 µs), the worker
    from its push to the reply; each rank idle past ``wake_after`` adds ``wake`` to the message it takes."""
    _profile(tmp_path, monkeypatch, wake=(W, after))
    t = _writes(_run("param_server", 1))
    assert np.diff(t) == pytest.approx(np.full(len(t) - 1, 2 * HOP + 2 * C + woken * W + GRAD + U), rel=1e-9)


def test_a_busy_server_does_not_wake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server with a push always waiting never idles: one update every C + U, as without the keys, though
    every worker waits (and wakes) for its reply."""
    _profile(tmp_path, monkeypatch, latency_us=0.1, gbps=8000.0, server_gbps=8000.0, wake=(W, 1e-6))
    r = _run("param_server", 8, updates=400, grad=1e-7)
    gaps = np.diff(_writes(r))[32:]
    assert gaps == pytest.approx(np.full(len(gaps), C + U), rel=1e-6)


def test_wake_holds_under_a_network_of_the_scenario_s_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path, monkeypatch, wake=(W, 1e-4))
    own = loader.from_dict({"algorithm": {"name": "param_server"}, "workers": {"count": 2},
                            "network": {"preset": "this", "latency_us": 1.0}})
    links = network.resolve(own.network)
    assert links is not None and links.wake == network.Wake(pytest.approx(1e-4), pytest.approx(W))
    _profile(tmp_path, monkeypatch)
    links = network.resolve(own.network)
    assert links is not None and links.wake is None


@pytest.mark.parametrize(("rows", "expected"), [
    # the worker's round trip (100 µs) the longest idle at gap 0; both idle past it at the longer gap: 200 / 2
    (([100e-6, 300e-6], [1 / 150e-6, 1 / 1400e-6], [60e-6, 100e-6]), (100e-6, 100e-6)),
    # the server's idle (200 µs) the longest at gap 0; the worker's 180 µs round trip short of it: 80 to one rank
    (([100e-6, 180e-6], [1 / 260e-6, 1 / 1300e-6], [60e-6, 100e-6]), (200e-6, 80e-6)),
    # a round trip that did not grow: no wake
    (([250e-6, 240e-6], [1 / 300e-6, 1 / 1300e-6], [60e-6, 100e-6]), (250e-6, 0.0)),
    # three gaps, each rank's share 40, 70, 300 µs: the median, not the one deep idle
    (([100e-6, 180e-6, 240e-6, 700e-6], [1 / 150e-6, 1 / 500e-6, 1 / 900e-6, 1 / 1800e-6],
      [60e-6, 80e-6, 80e-6, 80e-6]), (100e-6, 70e-6)),
])
def test_wake_is_the_median_share_of_the_round_trip_s_growth_past_gap_zero_s_longest_idle(
        rows: tuple[list[float], list[float], list[float]], expected: tuple[float, float]) -> None:
    w = network.wake_from_gaps(*rows)
    assert (w.after_s, w.wake_s) == pytest.approx(expected)
    assert w.at(w.after_s) == 0.0 and w.at(w.after_s * 1.001) == pytest.approx(expected[1])
