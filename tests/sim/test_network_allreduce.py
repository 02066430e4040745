"""The measured all-reduce (simasgd/sim/network.py ``AllreduceTable``): what ``preset = "this"`` charges a
``sync`` round, against its closed form, and where the ring formula still holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy

from simasgd.machines import profile
from simasgd.sim import network
from simasgd.sim.network import AllreduceTable, Links, Network
from simasgd.spec import loader

B = 1e9  # bytes/s
# t = a + b·2(p−1), exactly, at two sizes: a = 40 µs, b = 90 µs (4 KiB); a = 20 µs, b = 100 µs (64 KiB)
A4, B4, A64, B64 = 40e-6, 90e-6, 20e-6, 100e-6
TABLE = {"bytes": [4096, 65536], "ranks": [2, 3, 4],
         "seconds": [[A4 + B4 * 2 * (p - 1), A64 + B64 * 2 * (p - 1)] for p in (2, 3, 4)]}


def _t(p: int, size: str) -> float:
    return (A4 + B4 * 2 * (p - 1)) if size == "4k" else (A64 + B64 * 2 * (p - 1))


def test_a_measured_rank_count_costs_what_was_measured() -> None:
    t = AllreduceTable.of(TABLE)
    assert t is not None
    for i, p in enumerate((2, 3, 4)):
        assert t.seconds_for(4096, p, B) == TABLE["seconds"][i][0]
        assert t.seconds_for(65536, p, B) == TABLE["seconds"][i][1]


@pytest.mark.parametrize("p", [5, 8, 16])
def test_more_ranks_follow_the_ring_s_steps(p: int) -> None:
    """Beyond the measured ranks, the least-squares line over them in 2(p−1): exact for a linear table."""
    t = AllreduceTable.of(TABLE)
    assert t is not None
    assert t.seconds_for(4096, p, B) == pytest.approx(_t(p, "4k"))
    assert t.seconds_for(65536, p, B) == pytest.approx(_t(p, "64k"))


def test_sizes_between_interpolate_below_clamp_above_add_the_ring_s_bytes() -> None:
    t = AllreduceTable.of(TABLE)
    assert t is not None
    m = 4096 + 0.25 * (65536 - 4096)
    assert t.seconds_for(m, 8, B) == pytest.approx(0.75 * _t(8, "4k") + 0.25 * _t(8, "64k"))
    assert t.seconds_for(8, 2, B) == t.seconds_for(4096, 2, B)  # latency-bound: the smallest size's time
    big = 65536 + 1e6
    assert t.seconds_for(big, 4, B) == pytest.approx(_t(4, "64k") + 2 * 3 / 4 * 1e6 / B)
    assert t.seconds_for(4096, 1, B) == 0.0


def test_one_measured_rank_count_is_a_line_through_the_origin() -> None:
    t = AllreduceTable.of({"bytes": [4096], "ranks": [2], "seconds": [[2e-4]]})
    assert t is not None
    assert t.seconds_for(4096, 2, B) == 2e-4 and t.seconds_for(4096, 4, B) == pytest.approx(3 * 2e-4)


@pytest.mark.parametrize("bad", [None, {}, {"bytes": [4096], "ranks": [2, 3], "seconds": [[1e-4]]},
                                 {"bytes": [4096, 8192], "ranks": [2], "seconds": [[1e-4]]}])
def test_a_missing_or_ragged_table_is_none(bad: object) -> None:
    assert AllreduceTable.of(bad) is None


def test_the_network_charges_the_table_where_the_links_carry_it_else_the_ring() -> None:
    t = AllreduceTable.of(TABLE)
    with_table = Network(simpy.Environment(), Links(B, B, 2e-6, t), workers=8)
    ring = Network(simpy.Environment(), Links(B, B, 2e-6), workers=8)
    assert with_table.allreduce_s(4096, 8) == pytest.approx(_t(8, "4k"))
    assert ring.allreduce_s(4096, 8) == pytest.approx(2 * 7 * (2e-6 + 4096 / (8 * B)))


def _scenario(**net: object) -> object:
    return loader.from_dict({"algorithm": {"name": "sync"}, "workers": {"count": 4},
                             "network": {"preset": "this", **net}, "stop": {"max_updates": 10}})


def test_preset_this_reads_the_profile_s_all_reduce_unless_the_scenario_sets_its_own_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "this.toml"
    profile.write({"network": {"latency_us": 25.0, "bandwidth_gbps": 8.0, "server_bandwidth_gbps": 4.0,
                               "allreduce": TABLE}}, out)
    monkeypatch.setenv("SIMASGD_PROFILE", str(out))
    links = network.resolve(_scenario().network)  # type: ignore[attr-defined]
    assert links is not None and links.allreduce == AllreduceTable.of(TABLE)
    for own in ({"latency_us": 3.0}, {"bandwidth_gbps": 1.0}):
        links = network.resolve(_scenario(**own).network)  # type: ignore[attr-defined]
        assert links is not None and links.allreduce is None
    profile.write({"network": {"latency_us": 25.0, "bandwidth_gbps": 8.0}}, out)  # calibrated before it was kept
    links = network.resolve(_scenario().network)  # type: ignore[attr-defined]
    assert links is not None and links.allreduce is None


def test_a_simulated_sync_round_is_the_gradient_and_the_measured_all_reduce(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four workers, a deterministic 1 ms gradient: a round is 1 ms plus the table's time at 4 ranks and the
    gradient's bytes (the update itself costs the machine model's few µs)."""
    from simasgd.runs import backends

    out = tmp_path / "this.toml"
    profile.write({"network": {"latency_us": 25.0, "bandwidth_gbps": 8.0, "server_bandwidth_gbps": 4.0,
                               "allreduce": TABLE}}, out)
    monkeypatch.setenv("SIMASGD_PROFILE", str(out))
    sc = loader.from_dict({"name": "ar", "seed": 1, "workers": {"count": 4},
                           "machine": {"preset": "xeon-e5-2687w-v2"},
                           "workload": {"model": "least_squares", "batch_size": 1},
                           "algorithm": {"name": "sync"}, "optimizer": {"lr": 1e-6},
                           "timing": {"gradient": {"dist": "deterministic", "mean_s": 1e-3}},
                           "network": {"preset": "this"}, "stop": {"max_updates": 50}})
    r = backends.load("sim").run_once(sc, 0).runs[0]
    grad_bytes = r.extra["bytes_per_row"] * 4 / (2 * 2 * 3)  # a row's ring share, 2·2(p−1)/p of a gradient
    per_round = 1e-3 + AllreduceTable.of(TABLE).seconds_for(grad_bytes, 4, 1e9)  # type: ignore[union-attr]
    assert r.time_s / r.updates == pytest.approx(per_round, rel=0.02)
