"""Grid parsing: lists, ranges, file tables, the product and content-named cells."""

from __future__ import annotations

import pytest

from simasgd.spec.loader import ScenarioError
from simasgd.sweep import grid


def test_list_items_are_toml_values_and_bare_words_strings() -> None:
    g = grid.parse_grid_args(["workload.batch_size=16,32,64", "algorithm.name=mutex,hogwild",
                              "sim.numerics=true,false"])
    assert g == {"workload.batch_size": [16, 32, 64], "algorithm.name": ["mutex", "hogwild"],
                 "sim.numerics": [True, False]}
    assert all(type(v) is int for v in g["workload.batch_size"])


def test_float_range_is_inclusive_and_exactly_the_literals() -> None:
    values = grid.parse_values("optimizer.lr", "0.001:0.009:0.001")
    assert values == [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009]
    # Naive float accumulation gives 0.0030000000000000005 and may drop the end; decimal does not.
    assert values[2] == float("0.003") and values[-1] == 0.009


def test_integer_and_geometric_ranges() -> None:
    assert grid.parse_values("workers.count", "2:10:4") == [2, 6, 10]
    assert grid.parse_values("workload.batch_size", "16:512:*2") == [16, 32, 64, 128, 256, 512]
    assert grid.parse_values("x", "1:2:0.5") == [1.0, 1.5, 2.0]


def test_ranges_mix_with_items_and_lists_split_only_at_top_level() -> None:
    assert grid.parse_values("optimizer.lr", "0.1:0.3:0.1,0.5") == [0.1, 0.2, 0.3, 0.5]
    assert grid.parse_values("workload.layers", "[64,32,10],[64,10]") == [[64, 32, 10], [64, 10]]
    assert grid.parse_values("workload.dataset", "digits,mnist:/data/x") == ["digits", "mnist:/data/x"]


@pytest.mark.parametrize("item, needle", [
    ("optimizer.lr=0.009:0.001:0.001", "below the start"),
    ("optimizer.lr=0.001:0.009:0", "step > 0"),
    ("workload.batch_size=16:512:*1", "factor > 1"),
    ("optimizer.lr=0:1:0.00000001", "more than"),
    ("optimizer.lr", "expected KEY=VALUES"),
    ("=1,2", "expected KEY=VALUES"),
])
def test_bad_grid_arguments_name_the_key(item: str, needle: str) -> None:
    with pytest.raises(ScenarioError) as e:
        grid.parse_grid_args([item])
    assert needle in str(e.value) and item.split("=")[0] in str(e.value)


def test_all_bad_arguments_reported_at_once() -> None:
    with pytest.raises(ScenarioError) as e:
        grid.parse_grid_args(["a.b=3:1:1", "c.d", "e.f=1,2"])
    assert len(e.value.problems) == 2


def test_file_table_and_command_line_wins_per_key() -> None:
    table = grid.from_table({"optimizer.lr": "0.001:0.003:0.001", "workers.count": [2, 4]})
    cli = grid.parse_grid_args(["workers.count=8"])
    assert grid.combine(table, cli) == {"optimizer.lr": [0.001, 0.002, 0.003], "workers.count": [8]}
    with pytest.raises(ScenarioError, match="workers.count"):
        grid.from_table({"workers.count": 4})


@pytest.mark.parametrize("g, needle", [
    ({"seed": [1, 2]}, "seed"), ({"repeats": [1]}, "repeats"), ({"sweep.seeding": ["cell"]}, "sweep"),
    ({"optimizer.lr": []}, "no values"), ({"optimizer.lr": [0.1, 0.1]}, "repeats a value"),
])
def test_check_keys(g: grid.Grid, needle: str) -> None:
    with pytest.raises(ScenarioError, match=needle):
        grid.check_keys(g)


def test_product_order_and_content_ids() -> None:
    cells = grid.cells({"a.x": [1, 2], "b.y": ["p", "q", "r"]})
    assert [dict(c.values) for c in cells[:3]] == [{"a.x": 1, "b.y": "p"}, {"a.x": 1, "b.y": "q"},
                                                    {"a.x": 1, "b.y": "r"}]
    assert len({c.id for c in cells}) == 6
    # A cell's id depends on its content only: adding a value elsewhere, or reordering keys, keeps it.
    bigger = grid.cells({"b.y": ["p", "q", "r", "s"], "a.x": [0, 1, 2]})
    assert {c.id for c in cells} <= {c.id for c in bigger}
    # 1 and 1.0 are different TOML values, so different cells.
    assert grid.cell_id({"a.x": 1}) != grid.cell_id({"a.x": 1.0})
    assert len(grid.cells({})) == 1


@pytest.mark.parametrize("value", [0.001, 3, "mutex", 'we"ird\\', True, float("inf"), [784, 10], 1e-300])
def test_toml_literal_round_trips(value: object) -> None:
    from simasgd.spec.loader import parse_value

    assert parse_value(grid.toml_literal(value)) == value
