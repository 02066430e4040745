"""A sweep's plan: the base scenario, the grid, every cell validated up front, and its tasks.

Seeds. With ``[sweep] seeding = "cell"`` (the default) every cell gets its
own seed, ``seeds.int_seed(scenario.seed, <cell digest>, Role.SWEEP)``, and
repeat r of the cell is run ``r`` of that seeded scenario — exactly what
``simasgd run -s <cell keys> -s seed=<cell seed>`` would compute for repeat r.
The digest is of the cell's content (its keys and values), not its position,
so adding a value to the grid reseeds nothing else. Since the scenario seed
also draws the data (synthetic samples, train/test split), each cell then
trains on its own draw. ``seeding = "shared"`` gives every cell the
scenario's own seed (common random numbers: the same data, initial
parameters and minibatch streams per repeat in every cell), which lowers the
variance of comparisons between cells; ``scenarios/ek2021/s2_grid.toml``
uses it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simasgd.sweep.grid as gridmod
from simasgd.spec import algorithms, loader, seeds
from simasgd.spec.loader import ScenarioError
from simasgd.spec.scenario import Scenario
from simasgd.sweep.grid import Cell, Grid


def measures_host(backend: str) -> bool:
    """The backend's ``MEASURES_HOST`` trait: it measures the machine, so never two tasks at once on one host."""
    from simasgd.runs import backends

    return backends.measures_host(backend)


@dataclass(frozen=True)
class Task:
    """One cell x one repeat: everything a worker process needs, picklable."""

    task_id: str
    cell_id: str
    cell_index: int
    repeat: int
    seed: int
    backend: str
    scenario: Scenario
    keep_run: bool = False

    @property
    def real(self) -> bool:
        return measures_host(self.backend)


@dataclass
class Plan:
    base: Scenario
    grid: Grid
    cells: list[Cell]
    backend: str
    repeats: int
    scenarios: dict[str, Scenario] = field(default_factory=dict)  # cell id -> seeded cell scenario

    @property
    def seeding(self) -> str:
        return self.base.sweep.seeding

    def tasks(self, keep_runs: bool = False) -> list[Task]:
        """Every task, cell by cell (grid order), repeats innermost."""
        return [Task(task_id(c.id, r), c.id, c.index, r, self.scenarios[c.id].seed, self.backend,
                     self.scenarios[c.id], keep_runs)
                for c in self.cells for r in range(self.repeats)]

    def identity(self) -> dict[str, Any]:
        """What a results folder must match to be resumed: same scenario, grid, backend, repeats, seeding."""
        return {"scenario_hash": base_hash(self.base), "grid": self.grid, "backend": self.backend,
                "repeats": self.repeats, "seeding": self.seeding}


def task_id(cid: str, repeat: int) -> str:
    return f"{cid}-r{repeat:04d}"


def base_hash(sc: Scenario) -> str:
    """The base scenario's digest without name, repeats and the sweep table (compared separately)."""
    d = sc.to_dict()
    for key in ("name", "repeats", "sweep"):
        d.pop(key, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def cell_seed(base_seed: int, cell: Cell, seeding: str) -> int:
    if seeding == "shared":
        return base_seed
    return seeds.int_seed(base_seed, int(cell.id, 16), seeds.Role.SWEEP)


def build(path: str | Path, grid_args: Iterable[str] = (), overrides: Iterable[str] = (),
          backend: str = "sim", repeats: int | None = None) -> Plan:
    """Load the scenario, merge file and command-line grids, validate every cell (all problems at once)."""
    path = Path(path)
    data = loader.apply_overrides(loader.read_toml(path), overrides)
    data.setdefault("name", path.stem)
    return from_data(data, grid_args, label=str(path), base_dir=path.parent, backend=backend, repeats=repeats)


def from_data(data: dict[str, Any], grid_args: Iterable[str] = (), label: str = "<scenario>",
              base_dir: Path | None = None, backend: str = "sim", repeats: int | None = None) -> Plan:
    """The plan for a scenario's data. The file alone need not be a valid scenario, only every cell of it
    (e.g. ``workers.count = 16`` with the default sequential algorithm, when the grid sets the algorithm)."""
    sweep_cfg = loader.from_dict({"sweep": data.get("sweep", {})}, label=label).sweep
    cli = gridmod.parse_grid_args(grid_args)
    g = gridmod.combine(gridmod.from_table(sweep_cfg.grid), cli)
    gridmod.check_keys(g)
    cells = gridmod.cells(g)
    data = {k: v for k, v in data.items() if k != "sweep"}  # the grid table is not part of any cell
    scenarios = _validate_cells(data, cells, label, base_dir)
    _check_backend(backend, cells, scenarios)
    # The first cell stands for the sweep in the manifest; keys outside the grid are the same in every cell.
    base = scenarios[cells[0].id].model_copy(update={"sweep": sweep_cfg})
    seeded = {c.id: scenarios[c.id].model_copy(update={"seed": cell_seed(base.seed, c, sweep_cfg.seeding)})
              for c in cells}
    return Plan(base, g, cells, backend, repeats or base.repeats, seeded)


def _validate_cells(data: dict[str, Any], cells: list[Cell], label: str,
                    base_dir: Path | None) -> dict[str, Scenario]:
    """Each cell's scenario; every distinct problem reported once with how many cells share it."""
    out: dict[str, Scenario] = {}
    problems: dict[str, list[Cell]] = {}
    for c in cells:
        try:
            out[c.id] = loader.from_dict(loader.apply_overrides(data, c.overrides(), origin="--grid"),
                                         label=label, base_dir=base_dir)
        except ScenarioError as e:
            for p in e.problems:
                problems.setdefault(p, []).append(c)
    if problems:
        raise ScenarioError([_cell_problem(p, cs, len(cells)) for p, cs in problems.items()])
    return out


def _cell_problem(problem: str, bad: list[Cell], total: int) -> str:
    more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
    return f"{problem} (in {len(bad)} of {total} grid cells: {bad[0].label()}{more})"


def _check_backend(backend: str, cells: list[Cell], scenarios: dict[str, Scenario]) -> None:
    from simasgd.runs import backends

    impl = backends.load(backend)
    by_name: dict[str, list[Cell]] = {}
    for c in cells:
        by_name.setdefault(scenarios[c.id].algorithm.name, []).append(c)
    problems = []
    for name, cs in by_name.items():
        try:
            algorithms.require(backend, name, impl.ALGORITHMS)
        except algorithms.UnsupportedAlgorithm as e:
            problems.append(_cell_problem(f"algorithm.name = \"{name}\": {e}", cs, len(cells)))
    if problems:
        raise ScenarioError(problems)
