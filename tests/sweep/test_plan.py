"""Plans: every cell validated up front, seeds derived from cell content."""

from __future__ import annotations

from pathlib import Path

import pytest

from simasgd.spec.loader import ScenarioError
from simasgd.sweep import plan

HERE = Path(__file__).resolve().parent
SMALL = HERE / "small_grid.toml"


def test_small_grid_plan() -> None:
    p = plan.build(SMALL, backend="serial")
    assert len(p.cells) == 8 and len(p.tasks()) == 16
    tasks = p.tasks()
    assert len({t.task_id for t in tasks}) == 16
    # The cell's values are in its scenario; its seed is its own, shared by its repeats.
    for t in tasks:
        values = next(c.values for c in p.cells if c.id == t.cell_id)
        assert t.scenario.optimizer.lr == values["optimizer.lr"]
        assert t.scenario.algorithm.name == values["algorithm.name"]
        assert t.scenario.seed == t.seed
    assert len({t.seed for t in tasks}) == 8


def test_command_line_grid_wins_and_seeds_depend_on_content_only() -> None:
    p = plan.build(SMALL, ["workload.batch_size=16,32,64"], backend="serial")
    assert p.grid["workload.batch_size"] == [16, 32, 64] and len(p.cells) == 12
    small = plan.build(SMALL, backend="serial")
    seeds_small = {c.id: small.scenarios[c.id].seed for c in small.cells}
    # Growing the grid keeps every old cell's id and seed.
    assert all(p.scenarios[cid].seed == s for cid, s in seeds_small.items())


def test_shared_seeding_uses_the_scenario_seed() -> None:
    p = plan.build(SMALL, overrides=["sweep.seeding=shared"], backend="serial")
    assert {sc.seed for sc in p.scenarios.values()} == {2021}


def test_every_bad_cell_reported_at_once_naming_the_key() -> None:
    with pytest.raises(ScenarioError) as e:
        plan.build(SMALL, ["workers.count=0,1,2", "optimizer.momentum=0.5,1.5"], backend="serial")
    text = str(e.value)
    assert "workers.count" in text and "optimizer.momentum" in text
    # One line per distinct problem, with how many cells share it.
    assert len(e.value.problems) == 2
    # 2 lr x 2 batch x 2 algorithms x 3 counts x 2 momenta = 48 cells; count 0 in 16, momentum 1.5 in 24.
    assert "in 16 of 48 grid cells" in text and "in 24 of 48 grid cells" in text


def test_cross_field_problems_name_the_cell() -> None:
    with pytest.raises(ScenarioError) as e:
        plan.build(SMALL, ["algorithm.name=sequential,mutex"], backend="serial")
    assert "sequential" in str(e.value) and "algorithm.name=\"sequential\"" in str(e.value)


def test_unknown_grid_key_is_named() -> None:
    with pytest.raises(ScenarioError, match="optimizer.lrr"):
        plan.build(SMALL, ["optimizer.lrr=0.1,0.2"], backend="serial")


def test_unknown_backend_is_a_clear_error() -> None:
    from simasgd.runs.backends import BackendError

    with pytest.raises(BackendError, match="allowed"):
        plan.build(SMALL, backend="nope")


def test_nested_grid_tables_mean_dotted_keys(tmp_path: Path) -> None:
    text = SMALL.read_text().split("[sweep.grid]")[0] + """
[sweep.grid.optimizer]
lr = [0.05, 0.1]
[sweep.grid]
"algorithm.name" = ["mutex"]
"""
    f = tmp_path / "nested.toml"
    f.write_text(text)
    p = plan.build(f, backend="serial")
    assert p.grid == {"algorithm.name": ["mutex"], "optimizer.lr": [0.05, 0.1]}


def test_bad_grid_table_value_names_the_key(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(SMALL.read_text().split("[sweep.grid]")[0] + '[sweep.grid]\n"optimizer.lr" = 0.1\n')
    with pytest.raises(ScenarioError, match="optimizer.lr"):
        plan.build(f, backend="serial")


@pytest.mark.slow
def test_ek2021_s2_grid_is_the_thesis_grid() -> None:
    p = plan.build(HERE.parents[1] / "scenarios" / "ek2021" / "s2_grid.toml", backend="sim")
    assert p.grid["optimizer.lr"] == [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009]
    assert p.grid["workload.batch_size"] == [16, 32, 64, 128, 256, 512]
    # UMA and NUMA at 2-8 threads, the OS scheduler at 16 and 32 (Table 4.2)
    workers = {(sc.workers.count, sc.workers.placement) for sc in p.scenarios.values()}
    assert workers == {(m, pl) for m in (2, 4, 8) for pl in ("uma", "numa")} | {(16, "os"), (32, "os")}
    # six variants: mutex, rw-lock, Leashed-SGD with persistence inf, 1, 0, HOGWILD!
    variants = {(sc.algorithm.name, sc.algorithm.persistence) for sc in p.scenarios.values()}
    assert variants == {("mutex", None), ("rwlock", None), ("hogwild", None),
                        ("leashed", float("inf")), ("leashed", 1), ("leashed", 0)}
    assert len(p.cells) == 9 * 6 * 8 * 6 and p.repeats == 10 and len(p.tasks()) == 25920
    b = p.base
    assert b.machine.preset == "xeon-e5-2687w-v2" and b.sim.numerics and b.stop.epsilon == 0.05
    assert b.workload.layers == [784, 128, 128, 128, 10] and b.workload.features == 784


def test_file_need_only_be_valid_in_every_cell(tmp_path: Path) -> None:
    # 8 workers with the default (sequential) algorithm is invalid on its own; the grid makes it valid.
    f = tmp_path / "s.toml"
    f.write_text('seed = 1\n[workers]\ncount = 8\n[sweep.grid]\n"algorithm.name" = ["mutex", "hogwild"]\n')
    p = plan.build(f, backend="serial")
    assert {sc.algorithm.name for sc in p.scenarios.values()} == {"mutex", "hogwild"}
    assert p.base.workers.count == 8
    with pytest.raises(ScenarioError, match="in 1 of 2 grid cells"):
        plan.build(f, ["algorithm.name=mutex,sequential"], backend="serial")


def test_bad_sweep_table_is_reported_with_its_key(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nseeding = "sometimes"\n')
    with pytest.raises(ScenarioError, match="sweep.seeding"):
        plan.build(f, backend="serial")
