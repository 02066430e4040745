"""Hostile input to every command of the CLI: a refusal (exit 2, a clear line on stderr), never a traceback, and
never a half-written output folder.

The commands are enumerated from the CLI itself (``typer.main.get_command(app)``), and each parameter's values
are drawn from its declared type, so a command added later is covered without touching this file. The inputs:
paths that are files where a folder is expected and the reverse, missing, unwritable; counts out of range or past
what memory holds; scenario files, results folders, profiles and corpus entries cut at random offsets.

Work the commands would start for real but that this test has no use for (a calibration, the drift probe) is
replaced by :class:`Accepted`: the command got past its input checks with that input, which is an answer too."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import sys
import time
import traceback
import types
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simasgd.cli import app
from simasgd.runs.results import RunResult

REPO = Path(__file__).resolve().parents[1]
TRACEBACK = "Traceback (most recent call last)"
ROOT = os.geteuid() == 0  # root writes into a 0o500 folder: its unwritable case is a path /proc refuses to anyone

TINY = """\
name = "tiny"
seed = 3
repeats = 1

[workers]
count = 2

[workload]
model = "mlp"
layers = [64, 8, 10]
dataset = "digits"
batch_size = 8

[algorithm]
name = "hogwild"

[optimizer]
lr = 0.05

[stop]
epsilon = 0.0
max_updates = 20
max_time_s = 2
eval_every_updates = 10
"""


class Accepted(BaseException):  # an outcome, not an error: the command accepted its input
    """Raised where a command would start long measurements: it accepted its input."""


def _accepted(*_: Any, **__: Any) -> Any:
    raise Accepted


# -- the commands, from the CLI itself ------------------------------------------------------------------------
def leaves(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in sorted(subs.items()):
            yield from leaves(sub, (*path, name))
    else:
        yield path, cmd


COMMANDS = list(leaves(typer.main.get_command(app)))


def annotation(param: Any) -> Any:
    """The parameter's type without ``| None``."""
    ann = param.type_descriptor.annotation
    if isinstance(ann, types.UnionType) or (get_origin(ann) is not None and type(None) in get_args(ann)):
        ann = next(a for a in get_args(ann) if a is not type(None))
    return ann


def is_list(ann: Any) -> bool:
    return get_origin(ann) is list


def inner(ann: Any) -> Any:
    return get_args(ann)[0] if is_list(ann) else ann


def is_output(param: Any) -> bool:
    """A path the command writes (by its help text: "write", "folder (default", "where to")."""
    text = f"{param.name} {param.help or ''}".lower()
    return inner(annotation(param)) is Path and (param.name in ("out", "figures", "plots", "path")
                                                 or "write" in text or "where to" in text)


# -- the hostile world: files and folders, made once per test -------------------------------------------------
@dataclass
class World:
    root: Path
    paths: dict[str, Path] = field(default_factory=dict)  # label → path
    results: Path = Path()
    scenario: Path = Path()

    def fresh(self, label: str) -> Path:
        n = len(list(self.root.glob("fresh-*")))
        return self.root / f"fresh-{n}-{label}"


def cut(data: bytes, frac: float) -> bytes:
    return data[: max(0, min(len(data) - 1, int(len(data) * frac)))]


def damaged(root: Path, results: Path) -> dict[str, Path]:
    """Scenario files, results folders, profiles and corpus entries cut at several offsets, or missing a file,
    made under ``root`` from the whole ``results`` folder; by label."""
    from simasgd.machines.profile import to_toml

    p: dict[str, Path] = {}
    text = TINY.encode()
    for frac in (0.1, 0.37, 0.5, 0.83):
        f = root / f"scenario-cut-{frac}.toml"
        f.write_bytes(cut(text, frac))
        p[f"scenario-cut-{frac}"] = f
    for name in ("summary.json", "updates.parquet", "curve.parquet"):
        for frac in (0.0, 0.5, 0.9):
            d = root / f"results-cut-{name}-{frac}"
            shutil.copytree(results, d)
            (d / name).write_bytes(cut((results / name).read_bytes(), frac))
            p[f"results-cut-{name}-{frac}"] = d
        d = root / f"results-without-{name}"
        shutil.copytree(results, d)
        (d / name).unlink()
        p[f"results-without-{name}"] = d
    entry = json.loads(gzip.decompress((REPO / "corpus" / "amd_epyc_2vcpu.json.gz").read_bytes()))
    profile = to_toml(entry["profile"]).encode()
    for frac in (0.05, 0.5, 0.97):
        f = root / f"profile-cut-{frac}.toml"
        f.write_bytes(cut(profile, frac))
        p[f"profile-cut-{frac}"] = f
    raw = (REPO / "corpus" / "amd_epyc_2vcpu.json.gz").read_bytes()
    for frac in (0.3, 0.99):
        d = root / f"corpus-cut-{frac}"
        d.mkdir()
        (d / "amd_epyc_2vcpu.json.gz").write_bytes(cut(raw, frac))
        p[f"corpus-cut-{frac}"] = d
    d = root / "corpus-not-json"
    d.mkdir()
    (d / "x.json.gz").write_bytes(gzip.compress(b"{not json"))
    p["corpus-not-json"] = d
    return p


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from simasgd.runs import backends
    from simasgd.spec import loader

    root = tmp_path_factory.mktemp("hostile")
    w = World(root)
    w.scenario = root / "tiny.toml"
    w.scenario.write_text(TINY)
    w.results = root / "results-ok"
    backends.run(loader.load(w.scenario), "serial", repeats=1, out=w.results, jobs=1)
    p = w.paths
    p["scenario"] = w.scenario
    p["results"] = w.results
    p["missing"] = root / "no-such-thing"
    p["missing-parent"] = root / "no-such-folder" / "deeper" / "x"
    p["folder"] = root / "empty-folder"
    p["folder"].mkdir()
    p["file"] = root / "plain-file.toml"
    p["file"].write_text("x = 1\n")
    p["under-file"] = p["file"] / "sub"  # a path through a regular file
    p["binary"] = root / "binary.toml"
    p["binary"].write_bytes(bytes(range(256)) * 4)
    if ROOT:
        p["unwritable"] = Path("/proc/simasgd-hostile-inputs")  # /proc refuses new entries, even to root
    else:
        p["unwritable"] = root / "read-only"
        p["unwritable"].mkdir()
        p["unwritable"].chmod(0o500)
    p.update(damaged(root, w.results))
    from simasgd.machines.profile import to_toml

    entry = json.loads(gzip.decompress((REPO / "corpus" / "amd_epyc_2vcpu.json.gz").read_bytes()))
    p["profile"] = root / "profile-whole.toml"
    p["profile"].write_text(to_toml(entry["profile"]))
    p["corpus-empty"] = root / "corpus-empty"
    p["corpus-empty"].mkdir()
    yield w
    if not ROOT:
        (root / "read-only").chmod(0o700)


# -- values by declared type ----------------------------------------------------------------------------------
INTS = ["-1", "0", "1", "2", "abc", "1.5", str(2**64), str(10**30)]
FLOATS = ["-1", "0", "0.5", "2", "nan", "inf", "abc"]
STRS = ["", "sim", "serial", "cpu", "nonesuch", "sim,serial", "x" * 300, "../../etc/passwd", "tcp://"]
OVERRIDES = [f"workers.count={10**11}", "workers.count=-1", "workers.count=0", "workers.count=1e400",
             f"workers.count={10**30}", "workers.count=abc", "workload.batch_size=0",
             f"workload.batch_size={10**12}", "workload.layers=[]", "workload.layers=[64,0,10]",
             "stop.eval_every_updates=0", "stop.max_updates=-5", "optimizer.lr=nan", "no.such.key=1", "=", "noequals",
             "workers.count=2", "machine.preset=this", "machine.preset=nonesuch", "repeats=0", "workload.dataset=mnist:"
             "/no/such", "workload.dataset=cifar10:" + "/proc/self", "workers.count=3"]
GRIDS = [f"workers.count=1,{10**11}", "workers.count=", "=1", "x", "workers.count=0,-1", "no.key=1,2",
         "workers.count=1,2"]
# Work of minutes, or none of these commands' input checks, that stands in for Accepted.
LONG_WORK = [("executors.calibration.calibrate", "calibrate"), ("executors.calibration.gpu", "calibrate"),
             ("executors.dist.calibrate_network", "calibrate"), ("executors.calibration.drift_probe", "probe"),
             ("simasgd.evaluation.plots", "libs"), ("simasgd.corpus.score", "score")]  # drawing: seconds a figure, after every input was read and checked
# Counts of what the test tried (printed at the end of each test that draws them).
TRIED = {"invocations": 0, "tracebacks": 0, "refused": 0, "accepted": 0}
SLOWEST: list[tuple[float, str]] = []  # the three slowest invocations (seconds, argv): where the time goes
# A count that runs the work for real where it is valid: only small ones (a huge --repeats is not a mistake).
RUN_LENGTH = {"repeats", "updates_per_epoch", "seed"}


def flagged(param: Any, vs: list[str]) -> list[str]:
    """``vs`` as arguments of ``param``: each after its flag for an option, bare for an argument."""
    flag = param.opts[0] if param.param_type_name == "option" else None
    return [x for v in vs for x in ([flag, v] if flag else [v])]


# The plain input a parameter of this name takes, where its type leaves it open.
PLAIN_PATHS = {"folder": "results", "paths": "results", "profile": "profile", "corpus": "corpus-empty"}


def plain(world: World, param: Any) -> list[str]:
    """A value the parameter accepts (a whole file, a new output path, 1, ``serial``): the hostile one next to
    it then meets the command's own checks, not an earlier refusal of its neighbour."""
    ann, base = annotation(param), inner(annotation(param))
    if base is bool or param.name in ("overrides", "grid"):
        return []
    if base is Path:
        label = "<fresh>" if is_output(param) else PLAIN_PATHS.get(param.name, "scenario")
        return flagged(param, [resolve(world, label, param.name)])
    if base is int:
        return flagged(param, ["1"])
    if base is float:
        return flagged(param, ["0.5"])
    value = "serial" if param.name == "backend" else "m"
    return flagged(param, [value, value] if is_list(ann) and param.name != "backend" else [value])


def hostile(world: World, param: Any) -> list[str]:
    """Every single hostile value of the parameter's type (for the exhaustive test)."""
    base = inner(annotation(param))
    if base is bool:
        return []
    if base is Path:
        return [str(path) for path in world.paths.values()]
    if param.name == "grid":
        return GRIDS
    if param.name == "overrides":
        return OVERRIDES
    if base is int:
        return [v for v in INTS if not (param.name in RUN_LENGTH and len(v) > 3 and v.isdigit())]
    if base is float:
        return FLOATS
    return STRS


def values(world: World, param: Any) -> st.SearchStrategy[list[str]]:
    """Argument strings for one parameter (an option with its flag): plain, or hostile (one or several)."""
    ann = annotation(param)
    base = inner(ann)
    if base is bool:
        return st.sampled_from([[], [param.opts[0]]] if param.param_type_name == "option" else [[]])
    if base is Path:
        labels = st.sampled_from(sorted(world.paths))
        one = st.one_of(labels, st.just("<fresh>")) if is_output(param) else labels
        many = st.lists(one, min_size=1, max_size=3) if is_list(ann) or param.nargs == -1 else one.map(lambda x: [x])
        bad = many.map(lambda xs: flagged(param, [resolve(world, x, param.name) for x in xs]))
    elif param.name in ("grid", "overrides"):
        bad = st.lists(st.sampled_from(hostile(world, param)), min_size=1, max_size=3).map(
            lambda vs: flagged(param, vs))
    elif is_list(ann):
        bad = st.lists(st.sampled_from(STRS), min_size=1, max_size=2).map(lambda vs: flagged(param, vs))
    else:
        bad = st.sampled_from(hostile(world, param)).map(lambda v: flagged(param, [v]))
    return st.one_of(st.just(plain(world, param)), bad)


def resolve(world: World, label: str, name: str) -> str:
    return str(world.fresh(name) if label == "<fresh>" else world.paths[label])


def keeps(param: Any) -> bool:
    """Given in every invocation: a required parameter, and a path option with a default of its own
    (calibrate's profiles/this.toml): the test never writes into the checkout."""
    return bool(param.required) or (inner(annotation(param)) is Path and param.default not in (None, [], ()))


def argv_for(world: World, path: tuple[str, ...], cmd: Any) -> st.SearchStrategy[list[str]]:
    """The command's name, then each parameter: required ones always, optional ones or not."""
    parts = []
    for p in cmd.params:
        if p.name in ("help",):
            continue
        v = values(world, p)
        parts.append(v if keeps(p) else st.one_of(st.just([]), v))
    return st.tuples(*parts).map(lambda xs: [*path, *[a for x in xs for a in x]])


# -- one invocation, in process -------------------------------------------------------------------------------
@dataclass
class Outcome:
    argv: list[str]
    code: int | str
    out: str
    err: str


CLI = typer.main.get_command(app)


def invoke(argv: list[str]) -> Outcome:
    """``simasgd ARGV`` as the console script runs it (click's standalone mode: usage errors exit 2)."""
    out, err = io.StringIO(), io.StringIO()
    code: int | str
    with redirect_stdout(out), redirect_stderr(err):
        try:
            CLI.main(args=argv, prog_name="simasgd", standalone_mode=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Accepted:
            code = "accepted"
        except Exception:  # what the console script would show the user: a traceback
            traceback.print_exc(file=sys.stderr)
            code = "traceback"
    return Outcome(argv, code, out.getvalue(), err.getvalue())


def snapshot(paths: list[Path]) -> dict[Path, Any]:
    """What each output path held before the command (None: nothing)."""
    def state(p: Path) -> Any:
        try:
            return sorted(x.name for x in p.iterdir()) if p.is_dir() else p.read_bytes() if p.exists() else None
        except OSError:
            return "unreadable"
    return {p: state(p) for p in paths}


def check(world: World, argv: list[str], outputs: list[Path]) -> Outcome:
    before = snapshot(outputs)
    start = time.monotonic()
    o = invoke(argv)
    SLOWEST.append((time.monotonic() - start, " ".join(argv)))
    SLOWEST.sort(reverse=True)
    del SLOWEST[3:]
    TRIED["invocations"] += 1
    shown = o.out + o.err
    if o.code == "traceback" or TRACEBACK in shown:
        TRIED["tracebacks"] += 1
    assert o.code != "traceback" and TRACEBACK not in shown, f"simasgd {' '.join(argv)}\n{shown[-3000:]}"
    if o.code == "accepted":
        TRIED["accepted"] += 1
        return o
    assert o.code in (0, 2), f"simasgd {' '.join(argv)}: exit {o.code}\n{shown[-2000:]}"
    if o.code == 2:
        TRIED["refused"] += 1
        lines = [x for x in o.err.splitlines() if x.strip()]
        assert lines, f"simasgd {' '.join(argv)}: exit 2 with nothing on stderr"
        assert not any(x.startswith('  File "') for x in lines), o.err
        for p in outputs:  # a refused run leaves its output as it was, or a whole results folder
            if before[p] is None and p.is_dir() and (p / "summary.json").exists():
                RunResult.load(p)
            elif before[p] is None and p.is_dir():
                assert not any(p.iterdir()), f"simasgd {' '.join(argv)} left a partial {p}: {list(p.iterdir())}"
    leftovers = [x for x in world.root.rglob(".*.tmp")] if world.root.exists() else []
    assert not leftovers, f"simasgd {' '.join(argv)} left temporary files {leftovers}"
    return o


def output_paths(cmd: Any, argv: list[str]) -> list[Path]:
    outs = []
    for p in cmd.params:
        if is_output(p) and p.param_type_name == "option":
            for i, a in enumerate(argv[:-1]):
                if a in p.opts:
                    outs.append(Path(argv[i + 1]))
    return outs


@pytest.fixture()
def isolated(world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> World:
    """Default output paths (results/..., scenario.toml) land in a temporary folder; no profile, no corpus but
    an empty one, one process per run; long measurements stand in for :class:`Accepted`."""
    import importlib

    # each test starts from the tiny scenario as written: an earlier one may have drawn `init PATH --force` onto it
    world.scenario.write_text(TINY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIMASGD_JOBS", "1")
    monkeypatch.setenv("SIMASGD_PROFILE", str(tmp_path / "no-profile.toml"))
    monkeypatch.setenv("SIMASGD_CORPUS", str(world.root / "corpus-empty"))
    for module, name in LONG_WORK:
        with contextlib.suppress(ModuleNotFoundError):  # torch absent: the command says so itself
            monkeypatch.setattr(importlib.import_module(module), name, _accepted)
    from simasgd.sweep import runner

    pool = runner.make_pool

    def sweep_pool(jobs: int | None, dask: str | None, real: bool) -> Any:
        """The sweep's process pool (spawned workers: seconds each) stands in for Accepted; a Dask address is
        still checked for real (its probe is an input check)."""
        if not dask:
            raise Accepted
        return pool(jobs, dask, real)
    monkeypatch.setattr(runner, "make_pool", sweep_pool)
    return world


def report(label: str) -> None:
    print(f"\n{label}: {TRIED['invocations']} invocations, {TRIED['refused']} refused (exit 2), "
          f"{TRIED['accepted']} accepted before long work, {TRIED['tracebacks']} tracebacks; slowest: "
          + "; ".join(f"{s:.1f} s simasgd {a}" for s, a in SLOWEST))


# -- the generated test ---------------------------------------------------------------------------------------
def test_every_command_is_enumerated() -> None:
    """The enumeration sees every command the CLI registers (a group's subcommands too)."""
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"run", "validate", "show", "sweep", "corpus add", "corpus score", "calibrate"} <= names
    assert all(p for p, _ in COMMANDS)


def test_hostile_arguments_never_show_a_traceback(isolated: World) -> None:
    SLOWEST.clear()
    for k in TRIED:
        TRIED[k] = 0

    @settings(max_examples=int(os.environ.get("SIMASGD_HOSTILE_EXAMPLES", "400")), deadline=None,
              suppress_health_check=list(HealthCheck), database=None)
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        path, cmd = data.draw(st.sampled_from(COMMANDS), label="command")
        argv = data.draw(argv_for(isolated, path, cmd), label="argv")
        check(isolated, argv, output_paths(cmd, argv))

    one()
    report("hostile arguments")
    assert TRIED["tracebacks"] == 0 and TRIED["invocations"] >= 100


@pytest.mark.slow
def test_each_hostile_value_on_each_parameter(isolated: World) -> None:
    """Every parameter of every command given each of its hostile values in turn, the others plain: no
    sampling gaps, and each refusal is the hostile value's own (its neighbours are accepted)."""
    SLOWEST.clear()
    for k in TRIED:
        TRIED[k] = 0
    for path, cmd in COMMANDS:
        for target in cmd.params:
            for value in hostile(isolated, target):
                argv = list(path)
                for p in cmd.params:
                    if p is target:
                        argv += flagged(p, [value])
                    elif keeps(p):
                        argv += plain(isolated, p)
                check(isolated, argv, output_paths(cmd, argv))
    report("each hostile value")
    assert TRIED["tracebacks"] == 0


# -- the cases found by hand, each with what it must say --------------------------------------------------------
def test_run_out_onto_a_file_is_refused_before_the_run(isolated: World) -> None:
    """``run --out FILE``: refused in one line naming the option and the file, before any simulation; the file
    is left as it was."""
    target = isolated.paths["file"]
    before = target.read_bytes()
    o = check(isolated, ["run", str(isolated.scenario), "-b", "sim", "--out", str(target)], [target])
    assert o.code == 2 and o.err.strip().splitlines()[-1] == f"error: --out {target}: is a file, not a folder; " \
                                                             "give a new path or a folder", o.err
    assert target.read_bytes() == before
    through = isolated.paths["under-file"]
    o = check(isolated, ["run", str(isolated.scenario), "-b", "serial", "--out", str(through)], [through])
    assert o.code == 2 and f"--out {through}: {target} is a file, not a folder" in o.err and target.is_file()


def test_an_unwritable_out_is_refused_and_left_absent(isolated: World) -> None:
    """Unwritable: a 0o500 folder for a user, a path under /proc for root (which passes permission checks)."""
    target = isolated.paths["unwritable"] / "r"
    o = check(isolated, ["run", str(isolated.scenario), "-b", "serial", "--out", str(target)], [target])
    assert o.code == 2 and f"--out {target}: cannot write the folder" in o.err
    assert not target.exists()


def test_cpu_workers_past_the_thread_limit_are_refused_naming_the_key(isolated: World) -> None:
    """More cpu workers than this process may start threads: refused before any thread, naming the key, the file
    and the limit (derived from the machine's limits, so it holds on any machine)."""
    from simasgd.machines import capacity

    room = capacity.thread_room()
    if room is None:
        pytest.skip("this machine states no thread limit")
    out = isolated.fresh("cpu")
    o = check(isolated, ["run", str(isolated.scenario), "-b", "cpu", "-s", f"workers.count={room + 1}",
                         "--out", str(out)], [out])
    assert o.code == 2, o.err
    assert o.err.startswith(f"error: {isolated.scenario}: workers.count = {room + 1}: more than backend 'cpu' can "
                            f"run on this machine (at most "), o.err
    assert len(o.err.strip().splitlines()) == 1 and not out.exists()


def test_cpu_workers_past_what_memory_holds_are_refused_naming_the_limit(isolated: World,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers whose gradient rows alone take twice the memory available now: refused naming workers.count, the
    memory and the most workers that fit, which must be fewer than asked and at most memory / gradient row."""
    from simasgd.machines import capacity

    avail, room = capacity.available_memory(), capacity.thread_room()
    if avail is None:
        pytest.skip("this machine's available memory cannot be read")
    # the command reads the memory this test sized it by: other tests running beside it free and take memory
    # between two readings (a limit of 1,002 workers against 999 by a reading a moment earlier)
    monkeypatch.setattr(capacity, "available_memory", lambda: avail)
    workers = min(2000, room // 2 if room else 2000)
    hidden = 2 * avail // (workers * 75 * 8) + 1  # [64, hidden, 10] in float64: ~75 * hidden parameters
    dim = 64 * hidden + hidden + hidden * 10 + 10
    out = isolated.fresh("cpu")
    o = check(isolated, ["run", str(isolated.scenario), "-b", "cpu", "-s", f"workers.count={workers}",
                         "-s", f"workload.layers=[64,{hidden},10]", "--out", str(out)], [out])
    assert o.code == 2 and f"workers.count = {workers}: more than backend 'cpu'" in o.err, o.err
    assert "of memory available now" in o.err and not out.exists()
    most = int(o.err.split("(at most ")[1].split(":")[0])
    assert most < workers and most <= avail // (dim * 8)


def test_a_failed_save_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world: World) -> None:
    """A results folder is complete or absent: a write that fails half-way (the disk fills on the second table)
    leaves neither the folder nor a temporary file, and says which folder in one ResultsError."""
    from simasgd.runs import results

    r = RunResult.load(world.results)
    real, calls = results.atomic_write, []

    def fail_second(path: Any, write: Any) -> Any:
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(path, write)
    monkeypatch.setattr(results, "atomic_write", fail_second)
    out = tmp_path / "r"
    with pytest.raises(results.ResultsError, match="cannot write the results folder"):
        r.save(out)
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []


def test_cut_results_profile_and_corpus_files_are_refused_by_their_readers(world: World, tmp_path: Path) -> None:
    """The readers themselves name the file and what is wrong (commands only print it). Fresh copies: the
    generated tests may have written over the shared ones (a run into a damaged results folder replaces it)."""
    from simasgd.formats import corpus_file as files
    from simasgd.machines import profile
    from simasgd.runs.results import ResultsError

    cut_copies = damaged(tmp_path, world.results)
    # An empty file is a valid scenario (every key has a default: a full default run), so only here.
    cut_copies["empty"] = tmp_path / "empty.toml"
    cut_copies["empty"].write_bytes(b"")
    for label, path in {**world.paths, **cut_copies}.items():
        if label.startswith(("results", "profile-cut", "corpus-cut")) and label not in cut_copies:
            continue
        if label.startswith("results-cut") or label.startswith("results-without"):
            with pytest.raises(ResultsError, match=str(path)):
                RunResult.load(path)
        if label.startswith("profile-cut") or label in ("empty", "binary", "folder", "missing", "scenario",
                                                        "under-file"):
            with pytest.raises(profile.ProfileError, match=str(path)):
                profile.read(path)
        if label.startswith("corpus-cut"):
            for f in path.iterdir():
                with pytest.raises(ResultsError, match="not a corpus file"):
                    files.read(f, ResultsError)


def test_the_console_script_shows_no_traceback(world: World, tmp_path: Path) -> None:
    """Two cases through the installed entry point, as a user runs it (the rest run in process)."""
    import subprocess

    exe = Path(sys.executable).with_name("simasgd")
    cut_copies = damaged(tmp_path, world.results)
    for argv in (["validate", str(cut_copies["scenario-cut-0.5"])],
                 ["show", str(cut_copies["results-cut-updates.parquet-0.5"])]):
        p = subprocess.run([str(exe), *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert p.returncode == 2 and TRACEBACK not in p.stderr and p.stderr.strip(), p.stderr


# -- progress of a long simulation ----------------------------------------------------------------------------
def test_a_long_simulation_shows_its_progress_when_asked(isolated: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal, ``SIMASGD_PROGRESS=1`` prints plain lines on stderr (counts rising to the budget, a share
    and an ETA); unset, stderr stays free of them; ``0`` silences a terminal too."""
    from simasgd.runs import progress

    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    base = ["run", str(isolated.scenario), "-b", "sim", "-n", "1", "-s", "stop.max_updates=200",
            "-s", "stop.max_time_s=1000"]
    monkeypatch.setenv(progress.ENV, "1")
    o = check(isolated, [*base, "--out", str(isolated.fresh("progress"))], [])
    assert o.code == 0, o.err
    lines = [x for x in o.err.splitlines() if x.startswith("progress: tiny on sim: ")]
    counts = [int(x.split(": ")[2].split("/")[0]) for x in lines]
    assert len(lines) >= 3 and counts == sorted(counts) and counts[-1] == 200, o.err
    assert "/200 updates" in lines[0] and "s left" in lines[1]
    monkeypatch.delenv(progress.ENV)
    o = check(isolated, [*base, "--out", str(isolated.fresh("quiet"))], [])
    assert o.code == 0 and "progress:" not in o.err
    monkeypatch.setenv(progress.ENV, "0")
    monkeypatch.setattr(progress, "interactive", lambda: True)
    assert progress.wanted() is False


@pytest.mark.slow
def test_torch_workers_past_the_process_limit_are_refused_before_any_fork(isolated: World) -> None:
    """The torch backend forks a process per worker: past what this process may start, refused in one line."""
    pytest.importorskip("torch")
    from simasgd.machines import capacity

    room = capacity.thread_room(processes=True)
    if room is None:
        pytest.skip("this machine states no process limit")
    out = isolated.fresh("torch")
    o = check(isolated, ["run", str(isolated.scenario), "-b", "torch", "-s", f"workers.count={room + 1}",
                         "-s", "algorithm.name=hogwild", "--out", str(out)], [out])
    assert o.code == 2 and f"workers.count = {room + 1}: more than backend 'torch'" in o.err, o.err
    assert "one process per worker" in o.err and not out.exists()
