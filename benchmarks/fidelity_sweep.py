"""Fidelity of the simulator against this machine, for every algorithm the cpu backend has.

For mutex, rwlock, hogwild, leashed (persistence 0, 1, inf) and lopez at 1, 2, 4 and 8 threads,
batch 16 and 64: run the scenario on `cpu` and on `sim` with the calibrated profile
(`machine.preset = "this"`, calibrating first if there is none), compare, and write one table
row per cell into benchmarks/fidelity.md plus the results folders. The table is this machine kind's
results section of the file (``record.machine_kind``: one per CPU family), replaced by each rerun on the
same kind; a sweep of only some cells gets a section of its own beside it. Earlier tables live in git.

    .venv/bin/python benchmarks/fidelity_sweep.py --recalibrate [--repeats 3] [--out results/fidelity]

Each cell is independent: a failing cell becomes a row saying why, and the sweep goes on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simasgd.evaluation import analysis, fidelity, phases, stability
from simasgd.evaluation.drift import THRESHOLD, phase_gradient_err, within_drift
from simasgd.evaluation.plots import fmt_value, verdict_mark
from simasgd.runs import metadata
from simasgd.spec import algorithms, loader

sys.path.insert(0, str(Path(__file__).resolve().parent))  # record.py, also when this file is imported by path
import record

ROOT = Path(__file__).resolve().parents[1]
TITLE = "# Fidelity: the simulator (calibrated `this` profile) against real threads"
ALGORITHMS: list[tuple[str, dict[str, Any]]] = [
    ("mutex", {}), ("rwlock", {"priority": "writer"}), ("hogwild", {}),
    ("leashed", {"persistence": 0}), ("leashed", {"persistence": 1}), ("leashed", {"persistence": "inf"}),
    ("lopez", {}),
]
THREADS = (1, 2, 4, 8)
# Big enough that a run lasts long past thread start-up (a 64-32-10 MLP reaches ε in ~1 ms, which
# measures how threads start, not how they share the model), small enough for 56 cells in minutes.
LAYERS = [64, 256, 256, 10]
BATCHES = (16, 64)
LOPEZ_STEPS_PER_GRADIENT = 25  # master steps per worker gradient at 2 threads (simulated τ̄ ≈ 25)
COLUMNS = ("algorithm", "threads", "B", "τ̄ sim", "τ̄ cpu", "τ̄ err", "KS", "upd/s sim", "upd/s cpu",
           "upd/s err", "upd→ε err", "verdict", "cycle err: main phase", "grad median err", "grad. at once sim / cpu",
           "absent sim / cpu", "c2c ns", "cpu floor τ̄ / KS / upd/s", "cpu as prediction", "tries")
DRIFT = THRESHOLD  # a gradient this far from calibration: the host, not the model (simasgd.evaluation.drift)


def budget(name: str, args: argparse.Namespace) -> int:
    """Updates a cell runs for. Lopez's updates are the master's steps, ~25 to a worker's gradient
    (it never waits for them): 2000 steps were ~20 gradients a worker, ~70 ms, all start-up."""
    return args.max_updates * (LOPEZ_STEPS_PER_GRADIENT if name == "lopez" else 1)


def scenario(name: str, params: dict[str, Any], threads: int, batch: int, args: argparse.Namespace):
    return loader.from_dict({
        "name": f"fid-{name}{''.join(f'-{k}{v}' for k, v in params.items())}-n{threads}-b{batch}",
        "seed": 11, "repeats": args.repeats,
        "workers": {"count": threads, "placement": "os"},
        "workload": {"model": "mlp", "layers": LAYERS, "dataset": "digits", "batch_size": batch},
        "algorithm": {"name": name, **params},
        "optimizer": {"lr": args.lr},
        "stop": {"epsilon": args.epsilon, "max_updates": budget(name, args), "max_time_s": args.max_time_s,
                 "eval_every_updates": max(1, budget(name, args) // 100)},
        "sim": {"numerics": not args.timing_only},
        # Real runs check the loss on a wall-clock period: keep it short, or updates to ε is
        # rounded up to whatever was done by the first check after ε.
        # Losses evaluated after the run: a live evaluation on the spare CPU of a 1-thread run took
        # caches and memory bandwidth from the worker (gradient p90 230 us against 191 us).
        "cpu": {"monitor": "after"},
    }, base_dir=ROOT)


def row(fid: fidelity.Fidelity, results: dict, label: str, threads: int, batch: int) -> list[str]:
    o = fid.overall
    sim, cpu = results["sim"], results["cpu"]
    if fid.info.get("up_to_version"):  # the versions both sides made, as the errors are computed over
        sim, cpu = (analysis.up_to_version(r, fid.info["up_to_version"]) for r in (sim, cpu))

    def mean(r, attr: str) -> float:
        vals = [getattr(x, attr) for x in r.runs if getattr(x, attr) is not None]
        return sum(vals) / len(vals) if vals else math.nan

    bad = [k for k, ok in fid.verdicts.items() if ok is False]
    verdict = ("✓" if not bad and any(fid.verdicts.values())
               else ("✗ " + ", ".join(_short(k) for k in bad) if bad else "·"))
    verdict += " (within drift)" if within_drift(fid) else ""  # every miss explained by the host's drift
    return [label, str(threads), str(batch), f"{mean(sim, 'mean_staleness'):.3g}",
            f"{mean(cpu, 'mean_staleness'):.3g}",
            fmt_value("mean_staleness_rel_err", o["mean_staleness_rel_err"].value) + _ci(o["mean_staleness_rel_err"]),
            fmt_value("ks", o["ks"].value) + " " + verdict_mark(o["ks"].ok),
            f"{mean(sim, 'updates_per_s'):.4g}", f"{mean(cpu, 'updates_per_s'):.4g}",
            fmt_value("updates_per_s_rel_err", o["updates_per_s_rel_err"].value) + _ci(o["updates_per_s_rel_err"]),
            fmt_value("updates_to_eps_rel_err", o["updates_to_eps_rel_err"].value), verdict,
            *_phase_cols(fid, _master_step(label, results)),
            f"{_concurrency(sim):.2f} / {_concurrency(cpu):.2f}",
            absent_cell(sim, cpu, threads, len(os.sched_getaffinity(0))), _c2c(cpu), _floor(fid), _self(fid)]


def _self(fid: fidelity.Fidelity) -> str:
    """The share of the measured runs that, each taken as the prediction of the others, meet all four goals
    (fidelity.self_prediction, as compare computed it): what a simulator that ran exactly like the machine
    would score here."""
    return "·" if fid.self_share is None else f"{fid.self_share:.2f}"


def _floor(fid: fidelity.Fidelity) -> str:
    """The measured side's repeatability (fidelity.repeatability): τ̄, KS and updates/s; ⚠ unstable where its
    own runs miss a goal among themselves (a simulator that ran exactly like the machine would miss it too)."""
    f = fid.floor
    if not f:
        return "·"
    cells = [f"±{f['mean_staleness_rel_err']:.1%}", f"{f['ks']:.3f}", f"±{f['updates_per_s_rel_err']:.1%}"]
    return " / ".join(cells) + (" ⚠ unstable" if any(ok is False for ok in fid.reproducible.values()) else "")


def _c2c(r: Any) -> str:
    """The measured runs' core-to-core hand-off (executors/c2c.py), ⚠ where not the profile's placement."""
    ns = [float(v) for h in metadata.host_records(r.metadata) for k in ("c2c_ns_start", "c2c_ns_end")
          if isinstance(v := h.get(k), (int, float))]
    if not ns:
        return "·"
    moved = metadata.topology_warnings(r.metadata, metadata.calibrated_c2c_ns())
    return f"{min(ns):.0f}-{max(ns):.0f}" + (" ⚠ CPUs moved" if moved else "")


def _concurrency(r: Any) -> float:
    """Workers inside a gradient at once, mean over runs (simasgd.evaluation.phases.gradient_concurrency)."""
    vals = list(phases.gradient_concurrency(r.updates).values())
    return sum(vals) / len(vals) if vals else math.nan


def host_took_cpus(sim: Any, cpu: Any, threads: int, cpus: int) -> bool:
    """The measured workers were away ``phases.HOST_AWAY`` more of the time than the simulated ones, or a
    measured run's workers took turns (``phases.took_turns``), with no more workers than CPUs: the host
    took CPUs more than the simulated workers lost theirs."""
    return (phases.host_away(sim.updates, cpu.updates, threads, cpus) is not None
            or phases.took_turns(sim.updates, cpu.updates, threads, cpus) is not None)


def absent_cell(sim: Any, cpu: Any, threads: int, cpus: int) -> str:
    """Both sides' share of the time a worker was away (simasgd.evaluation.phases.absence), ⚠ where the host took
    CPUs."""
    a, b = phases.mean_absence(sim.updates), phases.mean_absence(cpu.updates)
    if not (math.isfinite(a) and math.isfinite(b)):
        return "·"
    return f"{a:.0%} / {b:.0%}" + (" ⚠ host took CPUs" if host_took_cpus(sim, cpu, threads, cpus) else "")


def gradient_drift(fid: fidelity.Fidelity) -> float:
    """Median gradient phase, simulated (the calibrated samples) against measured, relative."""
    return phase_gradient_err(fid)


def _master_step(label: str, results: dict) -> tuple[float, float] | None:
    """A Lopez master's mean step (s), simulated and measured: a run's time over its versions, each one step;
    None for other cells."""
    if label.split()[0] != "lopez":
        return None

    def one(r: Any) -> float:
        vals = [x.time_s / x.updates for x in r.runs if x.updates]
        return sum(vals) / len(vals) if vals else math.nan
    return one(results["sim"]), one(results["cpu"])


def _step_err(step: tuple[float, float] | None) -> float:
    """A master step, simulated (calibrated) against measured, relative; NaN without both."""
    if step is None or not all(math.isfinite(v) and v > 0 for v in step):
        return math.nan
    return step[0] / step[1] - 1


def master_drift(label: str, results: dict) -> float:
    """A Lopez cell's master step, simulated against measured, relative; NaN for other cells."""
    return _step_err(_master_step(label, results))


def _phase_cols(fid: fidelity.Fidelity, master: tuple[float, float] | None = None) -> list[str]:
    """The phase that explains most of the cycle-time error, and the gradient's median error
    (simulated from the calibrated samples, against measured): a host that ran slower or faster
    than at calibration shows there, whatever the model. A Lopez cell's staleness counts the master's
    steps in a worker's cycle, so its first column gives the master's mean step, simulated / measured,
    instead (⚠ memory drift beyond ``DRIFT``: the memory-bound step moves with the host as gradients do)."""
    ph = fid.phases
    if ph is None or not ph.available or ph.explanation is None:
        return ["·", "·"]
    e = ph.explanation
    main = f"{e.phase} {e.delta_s * 1e6:+.1f} µs of {e.cycle_delta_s * 1e6:+.1f}"
    err = _step_err(master)
    if master is not None and math.isfinite(err):
        main = (f"master step {master[0] * 1e6:.1f} / {master[1] * 1e6:.1f} µs ({err:+.0%})"
                + (" ⚠ memory drift" if abs(err) > DRIFT else ""))
    g = gradient_drift(fid)
    drift = f"{g:+.1%}" + (" ⚠ host drift" if math.isfinite(g) and abs(g) > DRIFT else "")
    return [main, drift]


def _ci(m: fidelity.Metric) -> str:
    if not math.isfinite(m.ci_low):
        return ""
    return f" [{m.ci_low:+.0%}, {m.ci_high:+.0%}]"


def _short(k: str) -> str:
    return {"mean_staleness_rel_err": "τ̄", "ks": "KS", "updates_per_s_rel_err": "upd/s",
            "updates_to_eps_rel_err": "upd→ε"}.get(k, k)


def _calibrated_at(path: object) -> str:
    """", calibrated <when>" from the profile's ``[calibration] created`` (nothing where it has none)."""
    try:
        from simasgd.machines import machine

        doc = machine.load_profile(Path(str(path))).profile
    except Exception:  # a header note only: an unreadable profile fails elsewhere, loudly
        return ""
    created = None if doc is None or doc.calibration is None else doc.calibration.created
    return f", calibrated {created}" if created else ""


def heading(partial: bool = False) -> str:
    """The results section's heading: the machine (its CPUs and model) and the date, and whether the sweep
    ran only some of the cells."""
    return (f"## Results — {os.cpu_count()}-CPU {metadata.cpu_model()}, {dt.datetime.now(dt.UTC):%Y-%m-%d}"
            + (" (some cells)" if partial else ""))


def markdown(rows: list[list[str]], args: argparse.Namespace, seconds: float) -> str:
    measured = (
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {metadata.cpu_model()} "
        f"({os.cpu_count()} logical CPUs), simasgd "
        f"{metadata.git_commit()}, in {seconds / 60:.1f} min, by `benchmarks/fidelity_sweep.py "
        f"{' '.join(sys.argv[1:])}`. Profile: `{args.profile_used}`{_calibrated_at(args.profile_used)}. "
        "Load average (1, 5, 15 min) at the "
        f"start {_load(args.load_before)}, now {_load(os.getloadavg())}: other work on the machine skews the "
        "measured side.")
    legend = (
        f"Each cell: {args.repeats} runs per backend, at most {args.max_updates} updates or "
        f"{args.max_time_s} s, MLP {'-'.join(map(str, LAYERS))} on digits, lr {args.lr}, "
        f"ε = {args.epsilon} × initial loss, "
        f"numerics {'off' if args.timing_only else 'on'}. Errors are sim − cpu relative to cpu; brackets: 95% "
        "bootstrap interval over runs. Goals: mean staleness within 5%, KS ≤ 0.1, updates/s within 10%, "
        "updates to ε within 15% (✓ met, ✗ missed, · not computable). "
        "\"(within drift)\": the gradient re-timed right before the cell had drifted beyond ±10% of the profile and "
        "explains every miss (simasgd.evaluation.drift: the updates/s error within the drift; with --refresh the "
        "cell is "
        "simulated at the re-timed speed). \"cycle err: main phase\": the "
        "phase whose mean error explains most of the mean cycle-time error (simasgd.evaluation.phases), for Lopez "
        "the master's "
        "mean step simulated / measured (its staleness counts them; beyond ±10% with the master on a CPU of its own, "
        "⚠ memory drift, and the cell is measured again as below); \"grad median err\": the "
        "simulated (calibrated) gradient's median against the measured one — beyond ±10% the machine itself ran "
        "differently than at calibration (such a cell is measured again, up to --attempts times: \"tries\"; with "
        "--interleave each run probes the host first and waits while it drifts: \"tries\", the most probes a run of "
        "the cell took); "
        "\"grad. at once\": workers inside a gradient at once, time-averaged "
        "(simasgd.evaluation.phases.gradient_concurrency) — "
        "a measured value near half the simulated one means the workers took turns on the host. \"absent\": the "
        "share of the time a worker spent in cycles past twice its median (simasgd.evaluation.phases.absence) — "
        "with no more "
        "workers than CPUs, the host taking a CPU away (⚠ host took CPUs: 5 points more measured than simulated; "
        "each such gap gives the other workers a run of τ = 0; or a measured "
        "run with its workers inside a gradient at once less than 75% as much as simulated: they took turns, "
        "simasgd.evaluation.phases.took_turns). \"c2c ns\": the "
        "core-to-core hand-off latency measured before and after each real run (executors/c2c.py; the profile's: "
        f"{metadata.calibrated_c2c_ns() or math.nan:.0f} ns) — a VM's vCPUs may sit on cores sharing a cache or "
        "not; a cell whose runs were not in the profile's placement (⚠ CPUs moved) is measured again, up to "
        "--attempts times. \"cpu floor\": the measured side's repeatability "
        "(simasgd.evaluation.fidelity.repeatability): each "
        "measured run against the others pooled, root mean square, scaled to the error a simulator that ran exactly "
        "like the machine would show with as many runs; ⚠ unstable where that misses a goal. \"cpu as prediction\": "
        "the share of the measured runs that, each taken as the prediction of the others pooled, meet all four "
        "goals, errors scaled to as many runs as the simulator's (simasgd.evaluation.fidelity.self_prediction); "
        "summed over "
        "the cells, about the count a simulator that ran exactly like this machine would meet.")
    head = [
        TITLE, "", heading(getattr(args, "partial", False)), "", measured, "", legend, "",
        f"**Headline: {headline(rows)}**", "",
        "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(head + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def headline(rows: list[list[str]]) -> str:
    done = [r for r in rows if not r[COLUMNS.index("verdict")].startswith("error")]
    ok = [r[COLUMNS.index("verdict")] == "✓" for r in done]
    placed = [not r[COLUMNS.index("c2c ns")].endswith("CPUs moved") for r in done]
    kept = [p and not r[COLUMNS.index("absent sim / cpu")].endswith("host took CPUs")
            for p, r in zip(placed, done, strict=True)]
    moved = len(done) - sum(placed)
    steady = [not r[COLUMNS.index("cpu floor τ̄ / KS / upd/s")].endswith("unstable") for r in done]
    shares = [float(r[COLUMNS.index("cpu as prediction")]) for r in done
              if r[COLUMNS.index("cpu as prediction")] not in ("·", "—")]
    return f"{sum(ok)} of {len(done)} cells meet all four goals" + (
        f"; a simulator that ran exactly like this machine would meet about {sum(shares):.1f} of the "
        f"{len(shares)} cells it could be judged on (the measured runs as predictions of each other)"
        if shares else "") + (
        f"; {sum(o and s for o, s in zip(ok, steady, strict=True))} of the {sum(steady)} whose measured runs meet "
        "every goal among "
        "themselves" if sum(steady) < len(done) else "") + (
        f"; {sum(o and p for o, p in zip(ok, placed, strict=True))} of the {sum(placed)} measured in the profile's "
        "placement of the "
        f"CPUs ({moved} were not, in --attempts tries)" if moved else "") + (
        f"; {sum(o and k for o, k in zip(ok, kept, strict=True))} of the {sum(kept)} measured in that placement with "
        "the host "
        "taking no more CPU time than at calibration" if sum(kept) < sum(placed) else "") + (
        f" ({len(rows) - len(done)} cells could not run)" if len(done) < len(rows) else "")


def cells(args: argparse.Namespace) -> Iterator[tuple[str, Any, int, int]]:
    """(row label, scenario, threads, batch) of every valid cell the arguments select."""
    for name, params in ALGORITHMS:
        label = name + "".join(f" {k}={v}" for k, v in params.items())
        if args.algorithms is not None and label not in args.algorithms:
            continue
        for threads in args.threads:
            if threads < algorithms.ALGORITHMS[name].min_workers:
                continue  # not a valid cell (e.g. lopez: a master and at least one worker)
            for batch in args.batches:
                yield label, scenario(name, params, threads, batch, args), threads, batch


def groups(args: argparse.Namespace) -> list[list[tuple[str, Any, int, int]]]:
    """The cells by (threads, batch), each group's algorithms in the sweep's order: what ``--interleave``
    measures in turn."""
    by: dict[tuple[int, int], list[tuple[str, Any, int, int]]] = {}
    for cell in cells(args):
        by.setdefault((cell[2], cell[3]), []).append(cell)
    return [by[k] for k in sorted(by)]


def measure_in_turn(group: list[tuple[str, Any, int, int]], args: argparse.Namespace,
                    backend: str = "cpu") -> tuple[dict[str, tuple[Any, Any]], dict[str, int]]:
    """The measured runs of a group's cells taken in turn: run r of every cell, then run r + 1. The host's speed
    drifts within minutes; cell by cell, a cell's runs share the host of their seconds and the drift goes with the
    algorithm, while in turn every algorithm of the group meets it alike. The gradient and placement are re-timed
    right before each run (:func:`settled`: a run waits while the host is off its calibrated speed); each cell's
    ``cpu`` folder holds its runs merged as they finish. Returns, by cell name, the merged runs and the drift
    probed before its first run (as the corpus keeps it), and the most probes one of its runs took."""
    from simasgd.runs import backends, results

    done: dict[str, list[Any]] = {sc.name: [] for _label, sc, _t, _b in group}
    # what the probe times: the simulator's side of each cell, on the calibrated profile (checked once a cell)
    sims = {sc.name: fidelity.sim_scenario(sc, ["sim", "cpu"]) for _label, sc, _t, _b in group}
    merged: dict[str, Any] = {}
    probes: dict[str, Any] = {}
    tries = dict.fromkeys(done, 0)
    for r in range(args.repeats):
        for _label, sc, _threads, _batch in group:
            found, k = settled(sims[sc.name], args)
            probes.setdefault(sc.name, found)
            tries[sc.name] = max(tries[sc.name], k)
            done[sc.name].append(backends.run_repeat(sc, backend, r))
            merged[sc.name] = results.merge(done[sc.name])
            merged[sc.name].save(args.out / sc.name / backend)
            print(f"  {sc.name}: run {r + 1} of {args.repeats}", flush=True)
    return {name: (merged[name], probes[name]) for name in done}, tries


def settled(sim: Any, args: argparse.Namespace) -> tuple[Any, int]:
    """The drift probed right before a run of the cell whose simulated side is ``sim``, and the probes it took:
    while the gradient is off its calibrated speed beyond ``DRIFT`` or the CPUs are in another placement (another
    tenant, for the minutes it lasts), the run waits ``--drift-wait-s`` and probes again, up to ``--attempts``
    probes; then it runs, as the host is. A run is not spent on a host the profile does not describe, and every
    algorithm of the group waits for the same host."""
    from simasgd.evaluation import drift
    from simasgd.machines import machine

    for attempt in range(1, args.attempts + 1):
        found = drift.measure(sim, machine.profile_path())
        if not (found.drifted or found.moved) or attempt == args.attempts:
            return found, attempt
        why = found.placement_line() if found.moved else found.gradient_line()
        print(f"  {sim.name}: {why}: probe {attempt + 1} in {args.drift_wait_s:g} s", flush=True)
        time.sleep(args.drift_wait_s)
    raise ValueError("--attempts must be at least 1")


def sweep_in_turn(args: argparse.Namespace, start: float) -> list[list[str]]:
    """``--interleave``: each group's measured runs in turn (:func:`measure_in_turn`), then each cell simulated
    and compared. A run whose probe found the host drifted waits for it (:func:`settled`), not the cell: the
    runs already taken stand."""
    rows: list[list[str]] = []
    for group in groups(args):
        measured, tries = measure_in_turn(group, args)
        for label, sc, threads, batch in group:
            fid, res = fidelity.run_and_compare(sc, ["sim", "cpu"], args.out / sc.name, resamples=500,
                                                refresh=args.refresh, measured=measured[sc.name])
            rows.append([*row(fid, res, label, threads, batch), str(tries[sc.name])])
            print(" | ".join(rows[-1]), flush=True)
        save_table(args.table, markdown(rows, args, time.perf_counter() - start), args.key)
    return rows


def from_folders(args: argparse.Namespace) -> int:
    """The table of a sweep already run (``--out``), with today's metrics: no cell is run again."""
    args.profile_used, args.load_before = os.environ.get("SIMASGD_PROFILE", "(as measured)"), os.getloadavg()
    rows = []
    for label, sc, threads, batch in cells(args):
        cell = args.out / sc.name
        if (cell / "sim").is_dir() and (cell / "cpu").is_dir():
            fid, results = fidelity.compare_folders(cell / "sim", cell / "cpu", resamples=500)
            rows.append([*row(fid, results, label, threads, batch), "·"])
    save_table(args.table, markdown(rows, args, 0.0), args.key)
    print(headline(rows))
    print(f"wrote {args.table}")
    return 0


def section_key(args: argparse.Namespace) -> str:
    """Which results section of the table a sweep replaces: its machine kind's, or beside it that kind's
    section of some cells (a sweep of a subset must not overwrite the whole sweep's table)."""
    return record.machine_kind() + (" some cells" if args.partial else "")


def save_table(path: Path, text: str, key: str) -> None:
    """Write this sweep's table (``markdown``: the title, then its results section) into ``path``.

    The section goes between markers named by ``key``: where the file holds them, it replaces what is
    between them (each rewrite of the same sweep, one after every cell, and the next sweep of the same
    machine kind); where it does not, it is added at the end, after the method and the other machines'
    results. A new file gets the title and the section. Written atomically: an interrupted sweep leaves the
    file as it was after its last cell."""
    from simasgd.formats.atomicio import atomic_write_text

    begin, end = f"<!-- fidelity_sweep {key} -->", f"<!-- /fidelity_sweep {key} -->"
    old = path.read_text() if path.exists() else ""
    title, _, body = text.partition("\n")
    section = f"{begin}\n{body.strip()}\n{end}\n"
    if begin in old and end in old:
        head, _, rest = old.partition(begin)
        new = head + section + rest.partition(end)[2].lstrip("\n")
    elif old.strip():
        new = old.rstrip("\n") + "\n\n" + section
    else:
        new = f"{title}\n\n{section}"
    atomic_write_text(path, new)


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.1f}" for x in avg)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-updates", type=int, default=10000)
    p.add_argument("--max-time-s", type=float, default=20.0)
    p.add_argument("--lr", type=float, default=0.005)
    # 0.05: ~800 updates, runs of 0.2-2 s. At 0.2 (~200 updates, 30-130 ms) the real side's updates/s
    # is mostly thread start-up, not how the threads share the model.
    p.add_argument("--epsilon", type=float, default=0.05)
    p.add_argument("--refresh", action="store_true",
                   help="where the gradient re-timed right before a cell drifted >10%% from the profile, simulate "
                        "it at that speed (`simasgd compare --refresh`); by default the calibrated samples")
    p.add_argument("--attempts", type=int, default=3,
                   help="runs of a cell whose measured gradient drifts >10%% from calibration (host contention), whose "
                        "Lopez master (on a CPU of its own) steps >10%% off its calibrated speed, whose CPUs the host "
                        "moved (by the probes, or by a run's cycle shifting partway), or whose workers the host kept "
                        "off their CPUs more than at calibration")
    p.add_argument("--drift-wait-s", type=float, default=20.0, help="pause before measuring a drifting cell again")
    p.add_argument("--timing-only", action="store_true", help="sim without numerics (no updates to ε)")
    p.add_argument("--threads", type=int, nargs="*", default=list(THREADS))
    p.add_argument("--batches", type=int, nargs="*", default=list(BATCHES))
    p.add_argument("--algorithms", nargs="*", default=None,
                   help="cells to run, by row label (e.g. mutex hogwild \"leashed persistence=inf\"); default: all")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "fidelity")
    p.add_argument("--table", type=Path, default=ROOT / "benchmarks" / "fidelity.md")
    p.add_argument("--from-folders", action="store_true",
                   help="run nothing: rebuild the table from the cells already in --out (their sim and cpu folders)")
    p.add_argument("--profile", type=Path, default=None,
                   help="machine profile to use (calibrated there if absent); "
                        "default: SIMASGD_PROFILE or profiles/this.toml")
    p.add_argument("--quick-calibration", action="store_true",
                   help="calibrate briefly where it calibrates (the prepared many-core script's time budget)")
    p.add_argument("--interleave", action="store_true",
                   help="measure each (threads, batch) group's cells in turn, run r of every algorithm before run "
                        "r + 1, so the host's drift over the group falls on all of its algorithms alike; each run "
                        "probes the host first and waits while it drifts, up to --attempts probes")
    p.add_argument("--recalibrate", action="store_true",
                   help="calibrate afresh first, even where the profile exists (the old one kept as <name>.prev): "
                        "the host drifts within the hour, and the goals assume a profile measured right before")
    args = p.parse_args(argv)
    args.partial = (args.algorithms is not None or sorted(args.threads) != sorted(THREADS)
                    or sorted(args.batches) != sorted(BATCHES))
    args.key = section_key(args)
    if args.profile is not None:
        os.environ["SIMASGD_PROFILE"] = str(args.profile.resolve())
    if args.recalibrate and not args.from_folders:
        from simasgd.machines import machine

        old = machine.profile_path()
        if old.exists():
            old.replace(old.with_name(old.name + ".prev"))
    start = time.perf_counter()
    if args.from_folders:
        return from_folders(args)
    # Gradient times for every batch size of the sweep: a batch the profile lacks is scaled from the
    # nearest one, and GEMMs are more efficient at larger batches (B=64 from B=16: -19% upd/s at 1 thread).
    args.profile_used = fidelity.ensure_profile(scenario("mutex", {}, 2, args.batches[0], args),
                                                quick=args.quick_calibration, also=[
        scenario("mutex", {}, 2, b, args).workload for b in args.batches[1:]])
    args.load_before = os.getloadavg()
    if args.interleave:
        rows = sweep_in_turn(args, start)
        print(headline(rows))
        print(f"wrote {args.table}")
        return 0
    rows = []
    for label, sc, threads, batch in cells(args):
        try:
            for attempt in range(1, args.attempts + 1):
                # the drift is re-timed and recorded either way (the corpus keeps it); --refresh predicts
                # at the re-timed speed
                fid, results = fidelity.run_and_compare(sc, ["sim", "cpu"], args.out / sc.name, resamples=500,
                                                         refresh=args.refresh)
                # with more threads than CPUs a gradient phase also holds time-slice waits: no yardstick
                drift = gradient_drift(fid) if threads <= len(os.sched_getaffinity(0)) else math.nan
                # the host had put the CPUs elsewhere than at calibration (executors/c2c.py)
                moved = metadata.topology_warnings(results["cpu"].metadata, metadata.calibrated_c2c_ns())
                # ... or away and back between the probes: only the run's own cycles show it (at 2 threads
                # or fewer on 2 CPUs; time-sliced workers' cycles are not steady enough to tell)
                if threads <= len(os.sched_getaffinity(0)):
                    moved += [f"run {k}: its median cycle shifted ×{x:.2f} partway (simasgd.evaluation.stability)"
                              for k, x in stability.regime_ratios(results["cpu"].updates).items()
                              if x > stability.SHIFT]
                away = host_took_cpus(results["sim"], results["cpu"], threads, len(os.sched_getaffinity(0)))
                # a Lopez master on a CPU of its own stepping >10% off its calibrated (memory-bound) speed
                mem = master_drift(label, results) if threads <= len(os.sched_getaffinity(0)) else math.nan
                if not ((math.isfinite(drift) and abs(drift) > DRIFT) or moved or away
                        or (math.isfinite(mem) and abs(mem) > DRIFT)) or attempt == args.attempts:
                    break
                # the host ran the gradient >10% off its calibrated speed (on a shared VM, another
                # tenant), moved the CPUs, or took them away more than at calibration: the cell
                # measures the host, not the model - wait, measure again
                why = (f"{sc.name}: {moved[0]}" if moved else f"host drift {drift:+.0%} in {sc.name}"
                       if math.isfinite(drift) and abs(drift) > DRIFT else
                       f"memory drift {-mem / (1 + mem):+.0%} in {sc.name} (the master's step)"
                       if math.isfinite(mem) and abs(mem) > DRIFT else
                       f"{sc.name}: the host took the workers' CPUs more than at calibration")
                print(f"  {why}: attempt {attempt + 1} in {args.drift_wait_s:g} s", flush=True)
                time.sleep(args.drift_wait_s)
            rows.append([*row(fid, results, label, threads, batch), str(attempt)])
        except Exception as e:  # one failing cell is a row, not the end of the sweep
            v = COLUMNS.index("verdict")
            rows.append([label, str(threads), str(batch)] + ["—"] * (v - 3)
                        + [f"error: {type(e).__name__}: {str(e).splitlines()[0][:120]}"]
                        + ["·"] * (len(COLUMNS) - v - 1))
        print(" | ".join(rows[-1]), flush=True)
        save_table(args.table, markdown(rows, args, time.perf_counter() - start), args.key)  # keep partial tables
    print(headline(rows))
    print(f"wrote {args.table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
