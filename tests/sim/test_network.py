"""The network model (simasgd/sim/network.py): transfer times, the server's link as the bottleneck, presets."""

from __future__ import annotations

import pytest
import simpy

from simasgd.numerics import compression
from simasgd.sim import network
from simasgd.sim.network import Links, Network
from simasgd.spec import loader
from simasgd.spec.loader import ScenarioError

LINKS = Links(bandwidth_Bps=1e9, server_bandwidth_Bps=1e9, latency_s=2e-6)


def test_one_message_takes_latency_plus_bytes_over_bandwidth() -> None:
    env = simpy.Environment()
    net = Network(env, LINKS, workers=2)
    done: list[float] = []

    def go() -> network.Proc:
        yield from net.send(0, net.server, 4e6)
        done.append(env.now)

    env.process(go())
    env.run()
    assert done == [pytest.approx(2e-6 + 4e-3)]
    assert net.transfer_s(0, net.server, 4e6) == pytest.approx(done[0])


@pytest.mark.parametrize("workers", [1, 3, 8])
def test_pushes_queue_on_the_server_link(workers: int) -> None:
    # n workers push m bytes at t = 0: the server's incoming side serialises them (FIFO), so the k-th
    # finishes at latency + k·m/B; peer messages between distinct pairs do not queue.
    env = simpy.Environment()
    net = Network(env, LINKS, workers=workers)
    done: list[float] = []

    def push(w: int) -> network.Proc:
        yield from net.send(w, net.server, 1e6)
        done.append(env.now)

    for w in range(workers):
        env.process(push(w))
    env.run()
    assert sorted(done) == pytest.approx([2e-6 + k * 1e-3 for k in range(1, workers + 1)])


def test_peer_messages_between_distinct_pairs_overlap_and_a_slow_nic_limits() -> None:
    env = simpy.Environment()
    net = Network(env, Links(1e9, 0.25e9, 0.0), workers=4)
    done: dict[str, float] = {}

    def send(name: str, a: int, b: int, n: float) -> network.Proc:
        yield from net.send(a, b, n)
        done[name] = env.now

    env.process(send("01", 0, 1, 1e6))
    env.process(send("23", 2, 3, 1e6))
    env.process(send("server", net.server, 0, 1e6))  # 0's incoming side is free; the server's NIC is slower
    env.run()
    assert done["01"] == pytest.approx(1e-3) and done["23"] == pytest.approx(1e-3)
    assert done["server"] == pytest.approx(4e-3)
    assert net.bytes_sent[0] == 1e6 and net.bytes_sent[net.server] == 1e6


def test_ring_allreduce_closed_form() -> None:
    net = Network(simpy.Environment(), LINKS, workers=4)
    p, m = 4, 8e6
    assert net.allreduce_s(m, p) == pytest.approx(2 * (p - 1) * (2e-6 + m / (p * 1e9)))
    assert net.allreduce_s(m, 1) == 0.0
    assert Network(simpy.Environment(), None, 4).allreduce_s(m, p) == 0.0


def test_shared_memory_sends_cost_nothing_but_count_bytes() -> None:
    env = simpy.Environment()
    net = Network(env, None, workers=2)
    env.process(net.send(0, net.server, 123))
    env.run()
    assert env.now == 0.0 and net.bytes_sent[0] == 123 and not net.enabled


def test_presets_and_overrides() -> None:
    sc = loader.from_dict({"network": {"preset": "100g_ib"}})
    links = network.resolve(sc.network)
    assert links is not None and links.bandwidth_Bps == pytest.approx(100e9 / 8)
    assert links.latency_s == pytest.approx(1e-6)
    sc = loader.from_dict({"network": {"preset": "10gbe", "latency_us": 5, "server_bandwidth_gbps": 40}})
    links = network.resolve(sc.network)
    assert links.bandwidth_Bps == pytest.approx(10e9 / 8) and links.server_bandwidth_Bps == pytest.approx(5e9)
    assert links.latency_s == pytest.approx(5e-6)
    assert network.resolve(loader.from_dict({"network": {"preset": "none"}}).network) is None
    custom = network.resolve(loader.from_dict({"network": {"bandwidth_gbps": 8}}).network)
    assert custom is not None and custom.bandwidth_Bps == pytest.approx(1e9) and custom.latency_s == 0.0


def test_bad_network_tables_are_refused_clearly() -> None:
    with pytest.raises(ScenarioError, match=r"network.preset.*unknown network preset 'wifi'; allowed: none, 1gbe"):
        loader.from_dict({"network": {"preset": "wifi"}})
    with pytest.raises(ScenarioError, match="network.bandwidth_gbps"):
        loader.from_dict({"network": {"preset": "10gbe", "bandwidth_gbps": 0}})
    with pytest.raises(ScenarioError, match="shared memory: give bandwidth_gbps"):
        loader.from_dict({"network": {"latency_us": 3}})
    with pytest.raises(ScenarioError, match="network.mtu"):
        loader.from_dict({"network": {"preset": "10gbe", "mtu": 9000}})


def test_leaving_network_out_keeps_the_scenario_hash() -> None:
    # [network] is optional: scenarios written before it hash (and so store) as they did.
    assert "network" not in loader.from_dict({}).to_dict()


def test_row_bytes_follow_the_model_and_compression() -> None:
    d = 1000
    ps = loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "param_server"}})
    ps1 = loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "param_server", "onebit": True}})
    assert network.row_bytes(ps, d, 8) == 2 * d * 8
    assert network.row_bytes(ps1, d, 8) == d * 8 + compression.message_bytes(d)
    ea = loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "easgd"}})
    assert network.row_bytes(ea, d, 8) == 2 * d * 8
    sy = loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "sync"}})
    assert network.row_bytes(sy, d, 8) == round(4 * 3 / 4 * d * 8)
    hw = loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "hogwild"}})
    assert network.row_bytes(hw, d, 8) == 0 and network.traffic(hw, d, 8, 10) == {}
    assert network.traffic(ps, d, 8, 10) == {"bytes_per_row": 16000, "bytes_total": 160000}
