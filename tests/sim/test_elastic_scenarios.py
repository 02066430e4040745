"""scenarios/wongpanich2020: the seven solvers share one workload, worker count and network, and run."""

from __future__ import annotations

from pathlib import Path

import pytest

from simasgd.runs import backends
from simasgd.spec import loader

HERE = Path(__file__).resolve().parents[2] / "scenarios" / "wongpanich2020"
FILES = sorted(HERE.glob("*.toml"))


def test_seven_solvers_on_one_workload() -> None:
    scs = {f.stem: loader.load(f) for f in FILES}
    assert set(scs) == {"sync", "eawild", "easgd", "hogwild", "param_server", "async_msgd", "ea_msgd"}
    base = scs["sync"]
    for name, sc in scs.items():
        assert (sc.workers, sc.workload, sc.network, sc.timing, sc.stop, sc.machine) == \
            (base.workers, base.workload, base.network, base.timing, base.stop, base.machine), name
    assert scs["async_msgd"].optimizer.momentum > 0 and scs["ea_msgd"].optimizer.momentum > 0
    assert scs["eawild"].algorithm.name == "eawild" and scs["ea_msgd"].algorithm.name == "easgd"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_each_runs_on_the_simulator(path: Path) -> None:
    sc = loader.load(path, ["stop.max_updates=60", "stop.epsilon=0", "sim.numerics=false"])
    run = backends.load("sim").run_once(sc, 0).runs[0]
    assert run.updates == 60
