"""The CLI end to end on the serial backend: run, show, validate, list."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.runs.results import RunResult

REPO = Path(__file__).resolve().parents[1]
QUICK = str(REPO / "scenarios" / "quickstart.toml")
runner = CliRunner()


def squeeze(text: str) -> str:
    """The text without whitespace: rich wraps a long line (a tmp path) wherever the terminal ends."""
    return "".join(text.split())


def test_run_serial_writes_three_files_and_show_reads_them(tmp_path: Path) -> None:
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", QUICK, "--backend", "serial", "--out", str(out), "-s", "stop.max_updates=300",
                              "--repeats", "2"])
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} == {"updates.parquet", "curve.parquet", "summary.json"}
    r = RunResult.load(out)
    assert [x.run for x in r.runs] == [0, 1] and r.backend == "serial"
    assert (r.updates["staleness"] == 0).all() and r.updates["applied"].all()
    assert r.runs[0].final_loss < r.runs[0].initial_loss  # it trained
    # Repeats differ (own seeds) yet share the data, so their initial losses are close but not equal.
    assert r.runs[0].initial_loss != r.runs[1].initial_loss
    shown = runner.invoke(app, ["show", str(out)])
    assert shown.exit_code == 0 and "quickstart" in shown.output and "serial" in shown.output


def test_serial_reaches_epsilon_and_is_reproducible(tmp_path: Path) -> None:
    args = ["run", QUICK, "--backend", "serial", "-n", "1", "-s", "stop.epsilon=0.3", "-s", "stop.max_updates=3000"]
    a = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    b = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    ra, rb = RunResult.load(tmp_path / "a"), RunResult.load(tmp_path / "b")
    assert ra.runs[0].updates_to_eps is not None and not ra.runs[0].not_reached
    assert ra.runs[0].updates_to_eps == rb.runs[0].updates_to_eps
    assert ra.curve["loss"].tolist() == rb.curve["loss"].tolist()  # same seed, same numbers


def test_validate_reports_every_problem_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[workers]\ncount = 0\n[optimizer]\nlr = -1\n")
    res = runner.invoke(app, ["validate", QUICK, str(bad)])
    assert res.exit_code == 2
    assert f"{bad}: workers.count = 0: must be an integer >= 1" in res.output
    assert f"{bad}: optimizer.lr = -1: must be a number > 0" in res.output


def test_run_bad_input_exits_2_without_traceback(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", QUICK, "-s", "workers.count=zero", "--backend", "serial"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = runner.invoke(app, ["run", QUICK, "--backend", "gpu9000"])
    assert res.exit_code == 2 and "unknown backend" in res.output


def test_a_backends_refusal_names_the_scenario_file(tmp_path: Path) -> None:
    """Refused once the run starts (the file loaded): the message still names the file, the key, the allowed."""
    res = runner.invoke(app, ["run", QUICK, "--backend", "cpu", "-s", "algorithm.name=k_sync", "-s", "workers.count=2",
                              "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"error: {QUICK}: backend 'cpu' does not implement algorithm 'k_sync'; it has: " in res.output


def test_a_parameter_value_the_backend_does_not_run_is_refused_naming_the_file_and_key(tmp_path: Path) -> None:
    """torch's sync has no 1-bit quantisation: refused (exit 2, one line), never run unquantised."""
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", QUICK, "-b", "torch", "-s", "algorithm.name=sync", "-s", "algorithm.onebit=true",
                              "-s", "workers.count=2", "--out", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert errors == [(f"error: {QUICK}: backend 'torch': algorithm.onebit = true is not implemented for 'sync'; "
                       f"allowed: false (the worker processes send their gradients unquantised)")], res.output
    assert not out.exists() or not any(out.iterdir())  # nothing ran: no results


def test_list_names_every_algorithm() -> None:
    from simasgd.spec.algorithms import names

    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0 and all(n in res.output for n in names())


def test_list_shows_each_algorithm_with_the_backends_that_implement_it() -> None:
    from simasgd.runs import backends
    from simasgd.spec import algorithms

    res = runner.invoke(app, ["list"], env={"COLUMNS": "400"})
    rows = {cells[0]: cells[-1] for line in res.output.splitlines()
            if line.startswith("│") and (cells := [c.strip() for c in line.strip("│").split("│")])[0]}
    for name in ("ssp", "backup", "keuper", "simuparallel", "mutex"):
        want = {b for b, ok in backends.available().items() if ok and b != "serial"
                and name in backends.load(b).ALGORITHMS}
        assert set(rows[name].split(", ")) == want, (name, rows[name])
        assert {"sim", "cpu"} <= want
    assert set(rows) >= set(algorithms.names())


def test_cli_starts_without_heavy_imports() -> None:
    code = ("import sys; import simasgd.cli; "
            "print(sorted(m for m in ('numba', 'simpy', 'seaborn', 'torch', 'dask', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_plain_install_does_not_pull_torch() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("torch") for d in project["dependencies"])
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["test"])


# --- the machine a run simulated ------------------------------------------------------------------

def _profile(path: Path, gflops_per_core: float) -> Path:
    """A calibrated profile with only its [machine] table (the simulator derives gradient times from it)."""
    from simasgd.machines import profile

    machine = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "local_latency_ns": 90.0,
               "remote_latency_ns": 90.0, "mem_bandwidth_gbs": 20.0, "link_bandwidth_gbs": 20.0,
               "gflops_per_core": gflops_per_core, "quantum_s": 0.004, "context_switch_s": 3e-6}
    return profile.write({"machine": machine}, path)


SMALL_SIM = ["-b", "sim", "-n", "1", "-s", "stop.max_updates=200", "-s", "stop.epsilon=0"]


def test_no_machine_and_no_profile_simulates_the_fallback_preset_and_says_so(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.machines import machine

    absent = tmp_path / "none.toml"
    monkeypatch.setenv(machine.PROFILE_ENV, str(absent))
    res = runner.invoke(app, ["run", QUICK, *SMALL_SIM, "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    said = [line for line in res.output.splitlines() if line.startswith("machine: ")]
    # Once before the run (stderr), once with its result.
    assert len(said) == 2 and all(line.startswith(f"machine: {machine.FALLBACK_PRESET} (preset") for line in said)
    assert str(absent) in said[0]
    r = RunResult.load(tmp_path / "r")
    cpus = machine.PRESETS[machine.FALLBACK_PRESET].hw_threads  # the CPUs it simulated: the bands' regime
    assert r.metadata["machine"] == {"name": machine.FALLBACK_PRESET, "source": "preset", "profile": str(absent),
                                     "cpus": cpus}
    shown = runner.invoke(app, ["show", str(tmp_path / "r")])
    assert said[1] in shown.output
    assert r.metadata["model"]["profile_digest"] is None and "no profile (a preset)" in shown.output


def test_no_machine_simulates_this_machines_profile_when_there_is_one(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.machines import machine

    fast, slow = _profile(tmp_path / "fast.toml", 15.0), _profile(tmp_path / "slow.toml", 0.015)
    rates = {}
    for path in (fast, slow):
        monkeypatch.setenv(machine.PROFILE_ENV, str(path))
        out = tmp_path / path.stem
        res = runner.invoke(app, ["run", QUICK, *SMALL_SIM, "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert squeeze(f"machine: this (calibrated profile {path}") in squeeze(res.output)
        r = RunResult.load(out)
        assert r.metadata["machine"] == {"name": "this", "source": "profile", "profile": str(path),
                                         "cpus": machine.load_profile(path).hw_threads}
        assert r.metadata["profile"]["path"] == str(path.resolve())  # recorded as for preset = "this"
        rates[path.stem] = r.runs[0].updates_per_s
        assert f"machine: this (calibrated profile {path}" in runner.invoke(app, ["show", str(out)]).output
    # The profile is what was simulated: a core 1000x slower makes the gradient-bound run far slower.
    assert rates["fast"] > 50 * rates["slow"], rates


def test_a_scenarios_machine_wins_over_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.machines import machine
    from simasgd.spec import loader

    monkeypatch.setenv(machine.PROFILE_ENV, str(_profile(tmp_path / "p.toml", 1.0)))
    named = loader.from_dict({"machine": {"preset": "xeon-e5-2698-v4"}}).machine
    assert machine.simulated(named) == {"name": "xeon-e5-2698-v4", "source": "scenario"}
    # Keys without a preset override the fallback preset, never the profile's measured tables.
    keyed = loader.from_dict({"machine": {"sockets": 2}}).machine
    assert machine.simulated(keyed) == {"name": machine.FALLBACK_PRESET, "source": "scenario", "keys": ["sockets"]}
    assert machine.resolve(keyed).sockets == 2 and machine.resolve(keyed).profile is None
    this = loader.from_dict({"machine": {"preset": "this"}}).machine
    assert machine.simulated(this)["source"] == "scenario" and "calibrated profile" in machine.describe(
        machine.simulated(this))


# --- --version, config, init --------------------------------------------------------------------

def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"simasgd {version('simasgd')}"


def test_config_prints_every_default_and_reads_back_as_the_same_scenario(tmp_path: Path) -> None:
    from simasgd.spec import loader
    from simasgd.spec.scenario import StopConfig

    res = runner.invoke(app, ["config", QUICK, "-s", "algorithm.name=leashed", "-s", "workers.count=3"])
    assert res.exit_code == 0, res.output
    doc = tomllib.loads(res.output)  # valid TOML
    # What the file sets, the override, a default it leaves out, and the algorithm's own default.
    assert doc["workers"]["count"] == 3 and doc["workload"]["layers"] == [64, 32, 10]
    assert doc["stop"]["explode_factor"] == StopConfig().explode_factor and "explode_factor" not in Path(QUICK).read_text()
    assert doc["algorithm"] == {"name": "leashed", "persistence": float("inf"),
                                "backoff": {"kind": "none", "initial_s": 1e-06, "max_s": 0.0001, "start": "random"}}
    assert "# preset: not set; the simulator takes" in res.output  # what is derived at run time is said
    path = tmp_path / "resolved.toml"
    path.write_text(res.output)
    again = runner.invoke(app, ["config", str(path)])
    assert again.exit_code == 0 and again.output == res.output  # nothing left to resolve
    a = loader.load(Path(QUICK), ["algorithm.name=leashed", "workers.count=3", "algorithm.persistence=inf",
                                  "algorithm.backoff=none"])
    assert loader.load(path).model_dump() == a.model_dump()


def test_config_of_a_bad_file_is_one_error_line_exit_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["config", QUICK, "-s", "workers.count=0"])
    assert res.exit_code == 2 and "workers.count = 0" in res.output and "Traceback" not in res.output


def test_init_writes_a_valid_example_that_runs_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    res = runner.invoke(app, ["init", str(path)])
    assert res.exit_code == 0 and path.is_file(), res.output
    assert path.read_text().startswith("#") and path.read_text().count("#") > 10  # commented
    ok = runner.invoke(app, ["validate", str(path)])
    assert ok.exit_code == 0 and squeeze(f"{path}: ok") in squeeze(ok.output), ok.output
    run = runner.invoke(app, ["run", str(path), *SMALL_SIM, "--out", str(tmp_path / "r")])
    assert run.exit_code == 0, run.output
    assert RunResult.load(tmp_path / "r").runs[0].updates == 200
    before = path.read_text()
    path.write_text(before + "# mine\n")
    again = runner.invoke(app, ["init", str(path)])
    assert again.exit_code == 2 and "exists" in again.output and path.read_text().endswith("# mine\n")
    assert runner.invoke(app, ["init", str(path), "--force"]).exit_code == 0 and path.read_text() == before


# --- one meaning for -b, one name for the figure folder, --svg wherever figures are written ----------

def test_b_is_the_backend_in_every_command_that_takes_one() -> None:
    import typer.main

    group = typer.main.get_command(app)
    takes = {}
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        for p in cmd.params:
            if "-b" in p.opts:
                takes[name] = p.opts
    assert set(takes) == {"run", "sweep", "compare"}
    assert all("--backend" in opts for opts in takes.values()), takes


@pytest.mark.slow
def test_compare_takes_its_two_backends_as_b_twice(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compare", QUICK, "-b", "serial", "-b", "sim", "--out", str(tmp_path / "c"), "-n", "1",
                              "-s", "stop.max_updates=100", "-s", "stop.eval_every_updates=50"])
    assert res.exit_code == 0, res.output
    doc = __import__("json").loads((tmp_path / "c" / "fidelity.json").read_text())
    assert doc["predicted"]["backend"] == "sim" and doc["reference"]["backend"] == "serial"
    assert "sim: machine: laptop-2core (preset" in res.output  # the simulated side's machine
    assert "sim: executor traits: cpu's" in res.output  # serial declares no traits: the default's, said so
    one = runner.invoke(app, ["compare", QUICK, "-b", "sim", "--out", str(tmp_path / "d")])
    assert one.exit_code == 2 and "two different backends" in one.output


@pytest.mark.slow
def test_figure_folder_option_is_figures_and_svg_goes_with_it(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert runner.invoke(app, ["run", QUICK, "-b", "serial", "-n", "1", "-s", "stop.max_updates=100",
                               "--out", str(out)]).exit_code == 0
    res = runner.invoke(app, ["plot", str(out), "--figures", str(tmp_path / "figs"), "--svg"])
    assert res.exit_code == 0, res.output
    pngs = {p.stem for p in (tmp_path / "figs").glob("*.png")}
    assert pngs and pngs == {p.stem for p in (tmp_path / "figs").glob("*.svg")}
    # The old name still works, hidden from --help.
    assert runner.invoke(app, ["plot", str(out), "-o", str(tmp_path / "old")]).exit_code == 0
    assert list((tmp_path / "old").glob("*.png"))
    assert "--out" not in runner.invoke(app, ["plot", "--help"]).output


@pytest.mark.slow
def test_sweep_summary_writes_figures_and_svg(tmp_path: Path) -> None:
    grid = str(REPO / "tests" / "sweep" / "small_grid.toml")
    res = runner.invoke(app, ["sweep", grid, "-b", "serial", "-j", "0", "-n", "1", "-s", "stop.max_updates=40",
                              "-o", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sweep-summary", str(tmp_path / "s"), "--figures", str(tmp_path / "f"), "--svg"])
    assert res.exit_code == 0, res.output
    pngs = {p.stem for p in (tmp_path / "f").glob("*.png")}
    assert len(pngs) == 2 and pngs == {p.stem for p in (tmp_path / "f").glob("*.svg")}


def test_every_command_that_writes_figures_takes_svg() -> None:
    import typer.main

    group = typer.main.get_command(app)
    for name in ("plot", "compare", "sweep-summary"):
        assert any("--svg" in p.opts for p in group.commands[name].params), name  # type: ignore[attr-defined]


# --- list ----------------------------------------------------------------------------------------

def test_list_shows_every_workload_dataset_preset_and_shipped_scenario() -> None:
    from simasgd.machines import networks
    from simasgd.machines.machine import PRESETS
    from simasgd.sim import gpu
    from simasgd.spec.scenario import WorkloadConfig

    res = runner.invoke(app, ["list"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    models = WorkloadConfig.model_fields["model"].annotation.__args__  # type: ignore[union-attr]
    names = [*models, "digits", "synthetic", "mnist:PATH", "cifar10:PATH", *PRESETS, "this", *gpu.names(),
             *networks.PRESETS]
    missing = [n for n in names if n not in res.output]
    assert not missing, missing
    shipped = sorted(str(p.relative_to(REPO)) for p in (REPO / "scenarios").rglob("*.toml"))
    assert shipped and [s for s in shipped if s not in res.output] == []
    assert "A small scenario that runs in seconds on any backend" in res.output  # quickstart's own comment


def _scenario_cells(output: str) -> dict[str, str]:
    """The shipped-scenarios table of ``list``: file -> its description, the wrapped cell's lines joined."""
    rows: dict[str, str] = {}
    current = None
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if not line.startswith("│") or len(cells) != 2:
            continue
        if cells[0]:
            current = cells[0]
            rows[current] = cells[1]
        elif current is not None:
            rows[current] += " " + cells[1]
    return rows


def test_list_wraps_each_scenario_description_whole_at_80_columns() -> None:
    from simasgd.commands.inspect import shipped_scenarios

    res = runner.invoke(app, ["list"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    rows = _scenario_cells(res.output)
    described = shipped_scenarios()
    assert max(len(what) for _, what in described) > 200  # some take several lines of the table's column
    for path, what in described:
        assert squeeze(rows[path]) == squeeze(what), path
    assert "…" not in res.output  # no cell of any table is cut


def test_a_scenarios_description_is_its_first_sentence_whole(tmp_path: Path) -> None:
    from simasgd.commands.inspect import shipped_scenarios

    (tmp_path / "scenarios").mkdir()
    long = "Lopez et al. (2020) §IV-B, Fig. 4.2: " + "one more clause, " * 20 + "the end of it."
    cut = long.index(" ", 60)  # two comment lines, joined at a space
    (tmp_path / "scenarios" / "a.toml").write_text(f"# {long[:cut]}\n#{long[cut:]} A second one.\n#\n#   run it\n")
    (tmp_path / "scenarios" / "b.toml").write_text('name = "b"\n')
    assert shipped_scenarios(tmp_path / "scenarios") == [("scenarios/a.toml", long), ("scenarios/b.toml", "b")]


def _presets_sections(output: str) -> list[dict[str, str]]:
    """``list --presets``: its sections (machines, GPUs, networks), each name -> the text of its lines."""
    sections: list[dict[str, str]] = []
    name = ""
    for line in output.splitlines():
        if line.endswith("presets (machine.preset; every number's source:") or line.startswith(
                ("GPU presets", "network presets")):
            sections.append({})
        elif (named := re.match(r"([\w.-]+): ", line)) and sections:
            name = named.group(1)
            sections[-1][name] = line
        elif line.startswith(" ") and sections and name:
            sections[-1][name] += "\n" + line
    return sections


def _numbers(text: str) -> dict[str, str]:
    """``key = value`` items of a preset's number lines (indented 2; its description's are indented 4), a
    tuple's commas inside its parentheses."""
    lines = [line for line in text.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    return dict(re.findall(r"(\w+) = (\([^)]*\)|[^,\n]+)", "\n".join(lines)))


def _same(shown: str, value: object) -> bool:
    """A shown number (with its unit; "—" for 0 or ()) against the preset's own value."""
    if isinstance(value, bool):
        return shown == str(value).lower()
    if isinstance(value, str):
        return shown == value
    if not value:
        return shown == "—"
    if isinstance(value, tuple):
        return [float(x) for x in shown.strip("()").split(",")] == pytest.approx(list(value), rel=1e-5)
    return float(shown.split()[0]) == pytest.approx(value, rel=1e-5)


def test_list_presets_shows_each_presets_numbers_and_the_calibrated_ones(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import fields

    from simasgd.machines import gpus, machine, networks, profile

    path = profile.write({"machine": {**tomllib.loads(_profile(tmp_path / "m.toml", 3.5).read_text())["machine"]},
                          "network": {"bandwidth_gbps": 12.5, "latency_us": 33.0, "server_bandwidth_gbps": 7.0}},
                         tmp_path / "this.toml")
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    res = runner.invoke(app, ["list", "--presets"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    machines, gpu_presets, network_rows = _presets_sections(res.output)
    this = machine.load_profile(path)
    for section, presets in ((machines, {**machine.PRESETS, "this": this}), (gpu_presets, gpus.PRESETS)):
        for name, obj in presets.items():
            shown = _numbers(section[name])
            keys = [f.name for f in fields(obj) if f.name not in ("name", "profile")]
            assert set(shown) == set(keys), name
            assert all(_same(shown[k], getattr(obj, k)) for k in keys), (name, shown)
    assert set(network_rows) == set(networks.PRESETS)
    for name, v in networks.PRESETS.items():
        if v is not None:
            assert _numbers(network_rows[name]) == {"bandwidth_gbps": f"{v[0]:g} Gb/s", "latency_us": f"{v[1]:g} µs"}
    # `this` is the profile's measured transport, not shared memory (that is `none`).
    assert _numbers(network_rows["this"]) == {"bandwidth_gbps": "12.5 Gb/s", "latency_us": "33 µs",
                                          "server_bandwidth_gbps": "7 Gb/s"}
    assert "shared memory" not in network_rows["this"].lower() and "shared memory" in network_rows["none"].lower()
    listed = runner.invoke(app, ["list"], env={"COLUMNS": "400"}).output
    line = next(x for x in listed.splitlines() if x.startswith("network presets"))
    assert "this: the [network] table of this machine's calibrated profile" in line
    assert "shared memory" not in line.lower()


# --- help ----------------------------------------------------------------------------------------

def _every_command() -> list[list[str]]:
    from simasgd.reference.cli_page import commands

    return [[], *(name.split()[1:] for name, _ in commands())]


@pytest.mark.parametrize("command", _every_command(), ids=lambda c: " ".join(c) or "simasgd")
def test_every_commands_help_fits_80_columns(command: list[str]) -> None:
    res = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) > 5 and "Usage:" in res.output
    assert [line for line in lines if len(line) > 80] == []


CUT_AT_80: dict[tuple[str, ...], str] = {}  # a command whose help cannot avoid a cut word, with why


@pytest.mark.parametrize("command", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=CUT_AT_80[tuple(c)]))
                                     if tuple(c) in CUT_AT_80 else c for c in _every_command()],
                         ids=lambda c: " ".join(c) or "simasgd")
def test_no_word_of_any_commands_help_is_cut_at_80_columns(command: list[str]) -> None:
    """A word wider than its column is cut with "…": the help then hides what it says."""
    res = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert [line for line in res.output.splitlines() if "…" in line] == []


def test_show_of_a_simulated_result_without_a_machine_record_says_so(tmp_path: Path) -> None:
    """Results written before the machine was recorded load, and show says the machine is not known."""
    import json

    out = tmp_path / "r"
    assert runner.invoke(app, ["run", QUICK, *SMALL_SIM, "--out", str(out)]).exit_code == 0
    doc = json.loads((out / "summary.json").read_text())
    del doc["metadata"]["machine"]
    (out / "summary.json").write_text(json.dumps(doc))
    shown = runner.invoke(app, ["show", str(out)])
    assert shown.exit_code == 0 and "machine: not recorded" in shown.output


def test_a_sweep_says_which_machine_it_simulates(tmp_path: Path) -> None:
    grid = str(REPO / "tests" / "sweep" / "small_grid.toml")
    res = runner.invoke(app, ["sweep", grid, "-b", "sim", "-j", "0", "-n", "1", "-s", "stop.max_updates=20",
                              "-g", "optimizer.lr=0.05", "-g", "workload.batch_size=16", "-g", "algorithm.name=mutex",
                              "-o", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert sum(line.startswith("machine: laptop-2core (preset") for line in res.output.splitlines()) == 1
