"""Machine presets and placement; addressed seed streams."""

from __future__ import annotations

import numpy as np
import pytest

from simasgd.machines.machine import PRESETS, MachineError, place, resolve
from simasgd.spec import seeds
from simasgd.spec.scenario import MachineConfig


def test_preset_with_overrides() -> None:
    m = resolve(MachineConfig(preset="xeon-e5-2687w-v2", remote_latency_ns=200))
    assert (m.sockets, m.cores_per_socket, m.threads_per_core, m.remote_latency_ns) == (2, 8, 2, 200)
    with pytest.raises(MachineError, match="unknown preset"):
        resolve(MachineConfig(preset="cray"))


def test_placement_uma_fills_socket0_numa_alternates() -> None:
    m = PRESETS["xeon-e5-2687w-v2"]
    uma, numa = place(m, 8, "uma"), place(m, 8, "numa")
    assert {m.socket_of(c) for c in uma} == {0}
    assert [m.socket_of(c) for c in numa] == [0, 1] * 4
    assert len(set(place(m, 32, "uma"))) == 32  # SMT siblings used after the physical cores
    assert place(m, 3, "os") == [None] * 3
    assert place(m, 4, [1, 3]) == [1, 3, 1, 3]
    with pytest.raises(MachineError, match="do not exist"):
        place(m, 2, [99])


def test_streams_are_addressed_and_independent() -> None:
    a = seeds.rng(7, 0, seeds.Role.BATCH, 1).random(4)
    b = seeds.rng(7, 0, seeds.Role.BATCH, 1).random(4)
    c = seeds.rng(7, 0, seeds.Role.BATCH, 2).random(4)
    d = seeds.rng(7, 1, seeds.Role.BATCH, 1).random(4)
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(a, d)
    assert seeds.int_seed(7, 0, seeds.Role.SWEEP) == seeds.int_seed(7, 0, seeds.Role.SWEEP) >= 0
