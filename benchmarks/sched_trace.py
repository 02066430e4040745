"""Where the threads of a time-shared cell lose their CPU: the kernel's scheduler trace of a real run against the
simulator's turns of the same cell.

Run (root, or ``perf_event_paranoid`` ≤ 1, with ``perf`` installed)::

    .venv/bin/python benchmarks/sched_trace.py --entry intel_xeon_emerald_rapids_2vcpu_c --cell fid-mutex-n4-b16

The cell's scenario (a corpus entry's, measured on this kind of machine) runs on the cpu executor under
``perf sched record -k CLOCK_MONOTONIC``; every ``sched_switch`` of its worker threads becomes a *turn* (a
thread's stay on a CPU), placed on the run's own clock by matching the threads with the workers whose updates
they made (each update is written while its worker's thread is on a CPU). The simulator runs the same cell on
the entry's profile with every turn an event (``simasgd.sim.cpu.FAST_ROTATION`` off) and hands its CPU grants
and give-ups (``simasgd.sim.cpu.TURNS``). Both sides are summarised alike: turns a second, the share of short
turns (a spinner's ``sched_yield`` ping-pong), and for the long ones where in its cycle the thread was when it
lost the CPU — waiting for or copying θ (*read*), computing (*gradient*), waiting for the lock to update
(*write wait*), updating under it (*update*) — with how long a thread preempted in its gradient stays off and
how much of τ̄ comes from updates whose cycle held a descheduling. It prints the table benchmarks/fidelity.md
keeps and writes the record ``results/sched_trace_<machine kind>.json``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record

if TYPE_CHECKING:
    from simasgd.corpus.store import Cell, Entry

SCHEMA, VERSION = "sched_trace", 1
SHORT_S = 20e-6      # a turn shorter than this is a spinner's yield ping-pong
DESCHEDULED_S = 1e-3  # a phase longer than this held a descheduling (a cycle's steps take well under it)
UPDATE_S = 45e-6     # the tail of the write phase that is the update itself, the lock held
PHASES = ("read", "gradient", "write wait", "update")
IDLE = 0  # the idle task's pid (swapper/N): a CPU with nothing to run switches to it

_SWITCH = re.compile(r"\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:\s+prev_comm=.*? prev_pid=(\d+) prev_prio=\d+ "
                     r"prev_state=(\S+) ==> next_comm=.*? next_pid=(\d+)")


class Switch(NamedTuple):
    """One ``sched_switch``: at ``t`` (seconds, the trace's clock) CPU ``cpu`` went from ``prev`` to ``next``."""

    t: float
    cpu: int
    prev: int
    state: str
    next: int


def parse_switches(text: str) -> list[Switch]:
    """The ``sched_switch`` lines of ``perf script``'s output, in time order."""
    out = []
    for line in text.splitlines():
        m = _SWITCH.search(line)
        if m:
            cpu, t, prev, state, nxt = m.groups()
            out.append(Switch(float(t), int(cpu), int(prev), state, int(nxt)))
    return sorted(out, key=lambda s: s.t)


def stays(switches: Sequence[Switch]) -> dict[int, np.ndarray]:
    """Each thread's stays on a CPU, ``[[start, end, cpu], ...]`` in time order, from consecutive switches of a
    CPU."""
    on: dict[int, tuple[float, int]] = {}
    out: dict[int, list[tuple[float, float, int]]] = {}
    for s in switches:
        if s.cpu in on:
            t0, tid = on[s.cpu]
            out.setdefault(tid, []).append((t0, s.t, s.cpu))
        on[s.cpu] = (s.t, s.next)
    return {tid: np.array(sorted(v)) for tid, v in out.items()}


def _on(iv: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Whether each instant of ``ts`` falls in one of the stays ``iv``."""
    if len(iv) == 0:
        return np.zeros(len(ts), bool)
    i = np.searchsorted(iv[:, 0], ts, side="right") - 1
    return (i >= 0) & (iv[np.clip(i, 0, None), 1] >= ts)


def align(on_cpu: dict[int, np.ndarray], rows: pd.DataFrame, coarse_s: float = 2e-4,
          fine_s: float = 2e-6, sample: int = 400) -> tuple[float, dict[int, int], float]:
    """The run's clock on the trace's (``offset``: trace time = row time + offset), the thread of each worker, and
    the share of sampled updates whose mapped thread was on a CPU as it wrote. The candidates are the threads with
    the most stays; the offset is scanned over their first stays, coarse then fine, for the best match."""
    workers = sorted(int(w) for w in rows.worker.unique())
    # not the idle task: on a CPU whenever no thread is, it covers any update at any offset
    tids = sorted((t for t in on_cpu if t != IDLE), key=lambda t: -len(on_cpu[t]))[:len(workers) + 2]
    s = rows.iloc[::max(1, len(rows) // sample)]
    ws, tw = s.worker.to_numpy(), s.t_write.to_numpy()
    firsts = [on_cpu[t][0, 0] for t in tids]
    best: tuple[int, float, dict[tuple[int, int], int]] | None = None
    lo, hi, step = min(firsts) - 0.5, max(firsts) + 3.0, coarse_s
    for _ in range(2):
        for off in np.arange(lo, hi, step):
            hits = {(w, t): int(_on(on_cpu[t], tw[ws == w] + off).sum()) for w in workers for t in tids}
            score = sum(max(hits[(w, t)] for t in tids) for w in workers)
            if best is None or score > best[0]:
                best = (score, float(off), hits)
        assert best is not None
        lo, hi, step = best[1] - 2 * coarse_s, best[1] + 2 * coarse_s, fine_s
    assert best is not None
    score, off, hits = best
    threads = {w: max(tids, key=lambda t: hits[(w, t)]) for w in workers}
    if len(set(threads.values())) < len(threads):
        raise SystemExit(f"sched_trace: the trace's threads do not match the run's workers one to one ({threads}): "
                         "the trace holds no stays of some worker (perf lost events?)")
    return off, threads, score / len(s)


def real_turns(on_cpu: dict[int, np.ndarray], offset: float, threads: dict[int, int]) -> pd.DataFrame:
    """The workers' stays on the run's clock: columns worker, cpu, a (on), b (off)."""
    parts = [pd.DataFrame({"worker": w, "cpu": on_cpu[t][:, 2].astype(int), "a": on_cpu[t][:, 0] - offset,
                           "b": on_cpu[t][:, 1] - offset}) for w, t in threads.items()]
    return pd.concat(parts, ignore_index=True)


def sim_turns(log: Sequence[tuple[int, int, float, bool]]) -> pd.DataFrame:
    """The simulator's grants and give-ups (``simasgd.sim.cpu.TURNS``) as stays: columns worker, cpu, a, b."""
    on: dict[int, float] = {}
    rows = []
    for w, cpu, t, up in log:
        if up:
            on[w] = t
        elif w in on:
            rows.append((w, cpu, on.pop(w), t))
    return pd.DataFrame(rows, columns=["worker", "cpu", "a", "b"])


def phase_at(rows: pd.DataFrame, worker: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Where in its cycle each worker was at each instant (:data:`PHASES`), from its update rows; "" outside."""
    out = np.full(len(t), "", dtype=object)
    for w, x in rows.sort_values("t_write").groupby("worker"):
        sel = np.flatnonzero(worker == w)
        if not len(sel):
            continue
        i = np.searchsorted(x.t_write.to_numpy(), t[sel])
        ok = i < len(x)
        j = np.clip(i, 0, len(x) - 1)
        start, gs, ge, tw = (x[c].to_numpy()[j] for c in ("t_start", "t_grad_start", "t_grad_end", "t_write"))
        tt = t[sel]
        ph = np.select([tt < start, tt < gs, tt < ge, tt > tw - UPDATE_S], ["", "read", "gradient", "update"],
                       "write wait")
        out[sel] = np.where(ok, ph, "")
    return out


def summarise(turns: pd.DataFrame, rows: pd.DataFrame, warmup_s: float = 0.05) -> dict[str, Any]:
    """One side's figures: the run's rate and staleness, and its turns inside the run (after ``warmup_s``)."""
    rows = rows[rows.applied].sort_values("t_write")
    t0, t1 = float(rows.t_start.min()) + warmup_s, float(rows.t_write.max())
    span = t1 - t0
    turns = turns[(turns.a > t0) & (turns.b < t1)].sort_values(["worker", "a"]).copy()
    turns["len"] = turns.b - turns.a
    turns["out"] = phase_at(rows, turns.worker.to_numpy(), turns.b.to_numpy())
    turns["off"] = turns.groupby("worker").a.shift(-1) - turns.b
    turns["resumes"] = turns.groupby("worker").out.shift()  # where its previous stay left it
    long = turns[turns.len >= SHORT_S]
    pre = long[long.out == "gradient"].off.dropna()  # a stay cut short in the gradient: preempted
    after = _next_on_cpu(turns, long[long.out == "gradient"].index)  # who took the CPU from it
    own = rows.groupby("worker").version.shift()
    fresh = rows.read_version == own  # θ unchanged since the worker's own last update: its copy is θ
    phase = {"read": rows.t_grad_start - rows.t_start, "gradient": rows.t_grad_end - rows.t_grad_start,
             "write": rows.t_write - rows.t_grad_end}
    tau = float(rows.staleness.mean())
    return {
        "updates_per_s": len(rows) / float(rows.t_write.max() - rows.t_write.min()),
        "mean_staleness": tau,
        "reads_after_another_update": float(1 - fresh[own.notna()].mean()),
        "turns_per_s": len(turns) / span,
        "short_share": float((turns.len < SHORT_S).mean()) if len(turns) else float("nan"),
        "long_turns_per_s": len(long) / span,
        "long_turn_median_us": float(long.len.median() * 1e6) if len(long) else float("nan"),
        "long_out_per_s": {p: float((long.out == p).sum() / span) for p in PHASES},
        "off_after_gradient_us": {"median": float(pre.median() * 1e6) if len(pre) else float("nan"),
                                  "p90": float(pre.quantile(0.9) * 1e6) if len(pre) else float("nan")},
        "taken_by_a_waiter": float(after.resumes.isin(["read", "write wait"]).mean()) if len(after) else float("nan"),
        "given_straight_back": float((after.len < SHORT_S).mean()) if len(after) else float("nan"),
        "descheduled_per_s": {k: float((v > DESCHEDULED_S).sum() / span) for k, v in phase.items()},
        "staleness_share": {k: float(rows.staleness[v > DESCHEDULED_S].sum() / rows.staleness.sum())
                            if tau > 0 else 0.0 for k, v in phase.items()},
    }


def _next_on_cpu(turns: pd.DataFrame, which: pd.Index) -> pd.DataFrame:
    """For each stay in ``which``, the next stay on its CPU (by whichever thread)."""
    order = turns.sort_values(["cpu", "a"])
    nxt = order.shift(-1)
    same = nxt.cpu == order.cpu
    picked = nxt[same & order.index.isin(which)]
    return picked


def cell_of(entry: Entry, cell: str) -> Cell:
    """The corpus entry's cell of that name (a clear exit naming the cells it has where it has none)."""
    found = [c for c in entry.cells if c.name == cell]
    if not found:
        raise SystemExit(f"{entry.name}: no cell {cell!r}; it has {', '.join(c.name for c in entry.cells)}")
    return found[0]


def cell_scenario(cell: Cell, sim: bool) -> Any:
    """The cell's scenario as the corpus keeps it, one run, to its update budget (no ε stop); timing only for the
    simulator."""
    from simasgd.corpus import score
    from simasgd.spec import loader

    doc = score.scenario_of(cell, {"numerics": False} if sim else {}, 0, 1).to_dict()
    doc["stop"]["epsilon"] = 0.0
    return loader.from_dict(doc, base_dir=Path.cwd())


def untraced(cell: Cell) -> dict[str, float]:
    """The means of the cell's runs the corpus keeps (measured without a trace): what perf's own work moves."""
    return {"updates_per_s": float(np.mean([r.updates_per_s for r in cell.runs])),
            "mean_staleness": float(np.mean([r.mean_staleness for r in cell.runs]))}


def simulate(entry: Entry, cell: Cell) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cell on the entry's profile, every turn an event: (its turns, its update rows)."""
    from simasgd.evaluation.drift import using_profile
    from simasgd.machines import profile
    from simasgd.machines.profile import to_toml
    from simasgd.sim import backend, cpu

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.toml"
        path.write_text(to_toml(profile.typed(entry.profile, entry.name)))
        fast, cpu.FAST_ROTATION, cpu.TURNS = cpu.FAST_ROTATION, False, []
        try:
            with using_profile(path):
                result = backend.run_once(cell_scenario(cell, True), 0)
            log = cpu.TURNS
        finally:
            cpu.FAST_ROTATION, cpu.TURNS = fast, None
    return sim_turns(log), result.updates


def trace_real(entry: str, cell: str, corpus: Path, out: Path) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """The cell on the cpu executor under ``perf sched record``: (its turns on the run's clock, its update rows,
    the share of updates the alignment placed on their thread's stays)."""
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("sched_trace: no `perf` on PATH (linux-tools): it records the kernel's sched_switch events")
    data, run = out / "sched.data", out / "cpu_run"
    child = [sys.executable, str(Path(__file__).resolve()), "--child", entry, cell, str(corpus), str(run)]
    rec = subprocess.run([perf, "sched", "record", "-k", "CLOCK_MONOTONIC", "-o", str(data), "--", *child],
                         capture_output=True, text=True)
    if rec.returncode != 0:
        raise SystemExit(f"sched_trace: perf sched record failed (rc {rec.returncode}): {rec.stderr[-2000:]}\n"
                         "it needs root or kernel.perf_event_paranoid <= 1")
    text = subprocess.run([perf, "script", "-i", str(data)], capture_output=True, text=True, check=True).stdout
    rows = pd.read_parquet(run / "updates.parquet")
    on_cpu = stays(parse_switches(text))
    offset, threads, matched = align(on_cpu, rows[rows.applied])
    return real_turns(on_cpu, offset, threads), rows, matched


def _child(entry: str, cell: str, corpus: str, out: str) -> int:
    """Under perf: the cell's one run on the cpu executor."""
    from simasgd.corpus import store
    from simasgd.runs import backends

    found = cell_of(store.load(Path(corpus) / f"{entry}.json.gz"), cell)
    backends.run(cell_scenario(found, False), "cpu", repeats=1, out=Path(out))
    return 0


def table(real: dict[str, Any], sim: dict[str, Any], plain: dict[str, float]) -> list[list[str]]:
    """Rows of the comparison: measure, machine (the kernel's trace; ``plain``: the corpus's untraced runs),
    simulator."""
    def f(v: float, nd: int = 0) -> str:
        return "–" if v != v else f"{v:,.{nd}f}"

    rows = [["updates/s (the entry's untraced runs)", f"{f(real['updates_per_s'])} ({f(plain['updates_per_s'])})",
             f(sim["updates_per_s"])],
            ["τ̄ (the entry's untraced runs)", f"{f(real['mean_staleness'], 2)} ({f(plain['mean_staleness'], 2)})",
             f(sim["mean_staleness"], 2)],
            ["reads after another's update", f(real["reads_after_another_update"], 2),
             f(sim["reads_after_another_update"], 2)],
            ["turns a second (short ones' share)", f"{f(real['turns_per_s'])} ({f(real['short_share'], 2)})",
             f"{f(sim['turns_per_s'])} ({f(sim['short_share'], 2)})"],
            ["long turns a second (median µs)", f"{f(real['long_turns_per_s'])} ({f(real['long_turn_median_us'])})",
             f"{f(sim['long_turns_per_s'])} ({f(sim['long_turn_median_us'])})"]]
    rows += [[f"… that end in {p}, a second", f(real["long_out_per_s"][p]), f(sim["long_out_per_s"][p])]
             for p in PHASES]
    rows.append(["a preemption in the gradient: the CPU taken by a lock waiter; given straight back",
                 f"{f(real['taken_by_a_waiter'], 2)}; {f(real['given_straight_back'], 2)}",
                 f"{f(sim['taken_by_a_waiter'], 2)}; {f(sim['given_straight_back'], 2)}"])
    rows.append(["off after a preemption in the gradient, µs (median, p90)",
                 f"{f(real['off_after_gradient_us']['median'])}, {f(real['off_after_gradient_us']['p90'])}",
                 f"{f(sim['off_after_gradient_us']['median'])}, {f(sim['off_after_gradient_us']['p90'])}"])
    rows += [[f"cycles descheduled in {k} (> 1 ms) a second; their share of τ̄",
              f"{f(real['descheduled_per_s'][k])}; {f(real['staleness_share'][k], 2)}",
              f"{f(sim['descheduled_per_s'][k])}; {f(sim['staleness_share'][k], 2)}"] for k in ("read", "gradient",
                                                                                                   "write")]
    return rows


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"]:
        return _child(*args[1:5])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entry", required=True, help="corpus entry measured on this kind of machine")
    p.add_argument("--cell", action="append", required=True, help="a cell of it (repeatable), e.g. fid-mutex-n4-b16")
    p.add_argument("--corpus", type=Path, default=Path("corpus"))
    p.add_argument("--work", type=Path, default=None,
                   help="where the traces and the runs' rows stay (default: a temporary folder, removed)")
    p.add_argument("--record", type=Path, default=record.current_path(SCHEMA))
    a = p.parse_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        return _compare(a.entry, a.cell, a.corpus, a.work or Path(tmp), a.record)


def _compare(entry: str, cells_: list[str], corpus: Path, work: Path, out: Path) -> int:
    from simasgd.corpus import store

    e = store.load(corpus / f"{entry}.json.gz")
    found = {cell: cell_of(e, cell) for cell in cells_}  # every name checked before the first run
    cells: dict[str, Any] = {}
    for cell in cells_:
        here = work / cell
        here.mkdir(parents=True, exist_ok=True)
        turns, rows, matched = trace_real(entry, cell, corpus, here)
        if matched < 0.95:
            print(f"warning: {cell}: only {matched:.0%} of the sampled updates fall in their thread's stays "
                  "on the aligned clock; the turns below may be misplaced", file=sys.stderr)
        real = summarise(turns, rows)
        sim = summarise(*simulate(e, found[cell]))
        plain = untraced(found[cell])
        cells[cell] = {"machine": real, "simulator": sim, "untraced": plain, "aligned": matched}
        print(f"\n{cell} ({entry}; {matched:.0%} of updates on their thread's stays)\n")
        print("| measure | machine (kernel trace) | simulator |\n|---|---|---|")
        for r in table(real, sim, plain):
            print("| " + " | ".join(r) + " |")
    path = record.write(out, SCHEMA, VERSION, {"entry": entry, "cells": cells})
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
