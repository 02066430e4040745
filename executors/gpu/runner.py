"""One run of the ``gpu`` backend: device state, the launch (resident or streams), the monitor, the results.

Resident mode launches every worker once (a block each) and the host only watches. Streams mode
gives each worker a CUDA stream and a host thread that launches its block once per attempt
(:mod:`.launch`). In both the main thread polls the device's words every ``POLL_S``: it copies new
snapshots from the ring, evaluates their loss on the host with the workload's CPU kernel, and writes
the stop word at ε, on a crash, or at the time budget. Rows come back once, after the run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from executors.cuda import device as cuda_device
from executors.gpu import IMPLEMENTATIONS, NAME, device, kernels
from executors.gpu import protocol as P
from executors.gpu.launch import ExecutorError, Launcher
from executors.gpu.wiring import Entry
from simasgd.runs.convergence import Monitor
from simasgd.runs.progress import Advance
from simasgd.runs.results import RunResult, updates_frame
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario

POLL_S = 2e-3
RING = 32            # snapshot slots
MAX_ROWS = 20_000_000
_REHEARSED: set[str] = set()


@dataclass
class Run:
    """Host and device state of one run."""

    sc: Scenario
    wl: Any
    cuda: Any
    n: int
    threads: int
    kind: str
    entry: Entry  # the algorithm's (IMPLEMENTATIONS)
    arrays: dict[str, Any] = field(default_factory=dict)
    stop_seen: threading.Event = field(default_factory=threading.Event)

    def args(self, first: int) -> tuple[Any, ...]:
        a = self.arrays
        return (first, a["theta"], a["vel"], a["X"], a["y"], a["ctl"], a["cfg"], a["cfgf"], a["local"], a["g"],
                a["act"], a["dl"], a["conv"], a["arg"], a["idx"], a["rng"], a["wsw"], a["rows_i"], a["rows_t"],
                a["snap"], a["meta"], a["af"], a["af2"], a["ai"])


def mode(sc: Scenario) -> str:
    return sc.gpu.mode if sc.gpu is not None else "resident"


def threads_per_worker(sc: Scenario) -> int:
    return sc.gpu.threads_per_worker if sc.gpu is not None else 128


def entry(sc: Scenario) -> Entry:
    """The algorithm's entry (executors/gpu/wiring.py), through the backend's table."""
    e: Entry = IMPLEMENTATIONS[sc.algorithm.name].load()
    return e


def rows_capacity(sc: Scenario, n: int) -> int:
    return int(min(MAX_ROWS, (sc.stop.max_updates + n) * entry(sc).rows(n) + 16))


def _scratch(wl: Any, kind: str, batch: int) -> tuple[int, int, int, list[int], list[int]]:
    """(act, dl, conv) sizes per worker, the dense widths and the cnn's dims."""
    if kind == "const":
        return 1, 1, 1, [1, 1], [0] * 10
    if kind == "mlp":
        widths = [int(v) for v in wl.shape[1:]]
        conv, cd = 1, [0] * 10
    else:
        from simasgd.numerics.workloads.cnn import sizes

        s = sizes(wl.shape)
        widths = [s["F1"], s["Hd"], s["nc"]]
        cd = [s[k] for k in ("C", "H", "W", "K", "k", "Ho", "Wo", "P", "Hp", "Wp")]
        conv = batch * s["K"] * s["Ho"] * s["Wo"]
    act = batch * sum(widths)
    dl = batch * sum(widths[:-1])
    return act, dl, conv, widths, cd


def _config(sc: Scenario, n: int, kind: str, widths: list[int], cd: list[int], cap: int, dim: int,
            attempts: int) -> np.ndarray:
    a, opt = sc.algorithm, sc.optimizer
    cfg = np.zeros(P.CFG_LEN, np.int64)
    cfg[P.MAXU], cfg[P.BATCH], cfg[P.EVERY], cfg[P.RING] = sc.stop.max_updates, sc.workload.batch_size, \
        sc.stop.eval_updates(), RING
    cfg[P.LOCAL], cfg[P.PERSIST] = 1, -1  # a copy of θ, unbounded retries: where the algorithm has no say
    cfg[P.AWARE] = int(bool(opt.staleness_aware))
    cfg[P.WORKERS], cfg[P.ATTEMPTS], cfg[P.CAP], cfg[P.DIM] = n, attempts, cap, dim
    entry(sc).configure(a, cfg)  # the algorithm's own words
    cfg[P.LAYERS] = len(widths) - 1
    cfg[P.WIDTHS:P.WIDTHS + len(widths)] = widths
    cfg[P.CONV:P.CONV + 10] = cd
    return cfg


def state(sc: Scenario, run: int, wl: Any, cuda: Any, kind: str) -> Run:
    n, dt = sc.workers.count, np.dtype(wl.dtype)
    theta0 = np.ascontiguousarray(wl.init_theta(seeds.rng(sc.seed, run, seeds.Role.INIT)), dtype=dt)
    dim, batch = int(theta0.shape[0]), sc.workload.batch_size
    r = Run(sc, wl, cuda, n, threads_per_worker(sc), kind, entry(sc))
    act, dl, conv, widths, cd = _scratch(wl, kind, batch)
    cap = rows_capacity(sc, n)
    attempts = -1 if mode(sc) == "resident" else 1
    cfg = _config(sc, n, kind, widths, cd, cap, dim, attempts)
    cfg[P.NROWS] = int(wl.n_train)
    mom = sc.optimizer.momentum
    scale = r.entry.scale(n)
    ctl = np.zeros(P.CTL_WORDS * P.LINE, np.int64)
    ctl[P.GO * P.LINE] = 1 if sc.stop.max_updates > 0 else 0
    seeds_ = np.array([seeds.rng(sc.seed, run, seeds.Role.BATCH, w).integers(1, 2**63 - 1) for w in range(n)],
                      dtype=np.uint64)
    X = wl.X if kind != "const" else np.zeros((1, 1), dt)  # kind_of: mlp and cnn have dense X
    y = np.ascontiguousarray(wl.y, dtype=np.int64) if kind != "const" else np.zeros(1, np.int64)
    host: dict[str, np.ndarray] = {
        "theta": theta0, "vel": np.zeros(dim if mom > 0 else 1, dt), "X": np.ascontiguousarray(X, dtype=dt),
        "y": y, "ctl": ctl, "cfg": cfg, "cfgf": np.array([sc.optimizer.lr, mom, scale], dt),
        "local": np.zeros((n, dim), dt), "g": np.zeros((n, dim), dt), "act": np.zeros((n, act), dt),
        "dl": np.zeros((n, dl), dt), "conv": np.zeros((n, conv), dt), "arg": np.zeros((n, max(1, conv)), np.int64),
        "idx": np.zeros((n, batch), np.int64), "rng": seeds_, "wsw": np.zeros((n, P.WS_COLS), np.int64),
        "rows_i": np.zeros((cap, P.ROW_COLS), np.int64), "rows_t": np.zeros((cap, 4), np.int64),
        "snap": np.zeros((RING, dim), dt), "meta": np.full(2 * RING, -1, np.int64),
    }
    host.update(r.entry.aux(theta0, n, mom > 0))
    r.arrays = {k: cuda.to_device(v) for k, v in host.items()}
    return r


def run_workload(sc: Scenario, run: int, wl: Any, advance: Advance | None = None) -> RunResult:
    """One run, after a rehearsal of the same scenario the first time this process runs it on a GPU: the
    cuda backend's (``executors/cuda/runner.py``), so that no kernel compiles inside a timed run."""
    from executors.cuda.runner import rehearsal, rehearsal_key

    cuda = cuda_device.require()
    kind = kernels.kind_of(wl)
    assert kind is not None  # the backend refused other workloads
    key = rehearsal_key(sc)
    if not device.SIM and key not in _REHEARSED:
        _run(rehearsal(sc), run, wl, cuda, kind, None)
        _REHEARSED.add(key)
    return _run(sc, run, wl, cuda, kind, advance)


def _kernel(r: Run) -> Any:
    from simasgd.numerics.workloads.constant import G

    ks = kernels.build(r.kind, np.dtype(r.wl.dtype).name, r.sc.workload.batch_size, G if r.kind == "const" else 0.0)
    return getattr(ks, r.entry.kernel)


def resident_max(kernel: Any, threads: int) -> int | None:
    """How many blocks of the compiled ``kernel`` the GPU holds at once (None: not compiled, or simulator)."""
    if device.SIM or not kernel.overloads:
        return None
    return int(next(iter(kernel.overloads.values())).max_cooperative_grid_blocks(threads))


def _run(sc: Scenario, run: int, wl: Any, cuda: Any, kind: str, advance: Advance | None) -> RunResult:
    r = state(sc, run, wl, cuda, kind)
    kernel = _kernel(r)
    most = resident_max(kernel, r.threads)
    if most is not None and r.n > most and (mode(sc) == "resident" or r.entry.together):
        raise ExecutorError(f"workers.count = {r.n} exceeds the {most} blocks of {r.threads} threads this GPU holds "
                            "at once; resident workers wait for each other and must all be on the device")
    launcher = Launcher(r, kernel, mode(sc))
    mon = Monitor(sc.stop, run)
    mon.observe(0.0, 0, wl.eval_loss(np.asarray(r.arrays["theta"].copy_to_host())))
    with cuda_device.sim_turns():
        t0 = time.perf_counter()
        launcher.start()
        watch = Watch(r, mon, advance)
        try:
            while launcher.alive():
                launcher.join(POLL_S)
                elapsed = time.perf_counter() - t0
                if watch.poll(elapsed) or elapsed >= sc.stop.max_time_s:
                    watch.stop()
                if launcher.failed():
                    watch.stop()
            launcher.finish(sc.cpu.join_timeout_s)
        except BaseException:
            watch.stop()
            launcher.finish(sc.cpu.join_timeout_s)
            raise
        wall = time.perf_counter() - t0
    watch.poll(wall)  # snapshots left in the ring
    return _result(sc, run, r, mon, wall, launcher)


class Watch:
    """The host monitor: new snapshots from the ring → losses → the stop rule; progress."""

    def __init__(self, r: Run, mon: Monitor, advance: Advance | None) -> None:
        self.r, self.mon, self.advance = r, mon, advance
        self.stream = r.cuda.stream()
        self.seen = 0  # the highest snapshot version evaluated
        self.reported = 0

    def stop(self) -> None:
        ctl = self.r.arrays["ctl"]
        word = ctl[P.STOP * P.LINE:P.STOP * P.LINE + 1]
        cur = word.copy_to_host(stream=self.stream)
        if cur[0] == P.RUNNING:
            word.copy_to_device(np.array([P.HOST], np.int64), stream=self.stream)
        self.stream.synchronize()
        self.r.stop_seen.set()

    def poll(self, elapsed: float) -> bool:
        """Evaluate the ring's new snapshots in version order; True when the stop rule says stop."""
        a, s = self.r.arrays, self.stream
        ctl = a["ctl"].copy_to_host(stream=s)
        meta = a["meta"].copy_to_host(stream=s)
        s.synchronize()
        if ctl[P.STOP * P.LINE] != P.RUNNING:
            self.r.stop_seen.set()
        done = False
        for slot in np.argsort(meta[0::2]):
            v = int(meta[2 * slot])
            if v <= self.seen:
                continue
            theta = a["snap"][slot].copy_to_host(stream=s)
            again = a["meta"][2 * slot:2 * slot + 1].copy_to_host(stream=s)
            s.synchronize()
            if int(again[0]) != v:
                continue  # overwritten while copied: a later snapshot follows
            self.seen = v
            t0 = int(ctl[P.T0 * P.LINE])
            t = (int(meta[2 * slot + 1]) - t0) / 1e9 if t0 > 0 else elapsed
            if self.mon.observe(max(t, 0.0), v, self.r.wl.eval_loss(theta)):
                done = True
        v_now = int(ctl[P.VERSION * P.LINE])
        if self.advance is not None and v_now > self.reported:
            self.advance(v_now - self.reported)
            self.reported = v_now
        return done


def _result(sc: Scenario, run: int, r: Run, mon: Monitor, wall: float, launcher: Launcher) -> RunResult:
    a = r.arrays
    ctl = a["ctl"].copy_to_host()
    n_rows = min(int(ctl[P.ROWS * P.LINE]), a["rows_i"].shape[0])
    ri = a["rows_i"].copy_to_host()[:n_rows]
    rt = a["rows_t"].copy_to_host()[:n_rows].astype(np.float64)
    version, theta = final_theta(r)
    t0 = float(ctl[P.T0 * P.LINE]) if ctl[P.T0 * P.LINE] > 0 else (float(rt[:, 0].min()) if n_rows else 0.0)
    rt = (rt - t0) / 1e9
    elapsed = float(rt[:, 3].max()) if n_rows else wall
    applied = ri[:, P.R_APPLIED] != 0
    applied = r.entry.applied(ri, version, applied)
    frame = updates_frame(run, ri[:, P.R_WORKER], ri[:, P.R_VERSION], ri[:, P.R_READ], rt[:, 1], rt[:, 3],
                          ri[:, P.R_WAIT] / 1e9, ri[:, P.R_RETRIES], applied, rt[:, 0], rt[:, 1], rt[:, 2])
    frame = frame.sort_values(["t_write", "worker"], kind="stable").reset_index(drop=True)
    ok = frame["applied"].to_numpy()
    if mon.updates[-1] != version and not mon.done:
        mon.observe(elapsed, version, r.wl.eval_loss(theta))
    why = {P.RUNNING: "running", P.BUDGET: "budget", P.ROWS_FULL: "rows buffer full", P.HOST: "host"}
    summary = mon.summary(version, elapsed, frame["staleness"].to_numpy()[ok], attempts=len(frame),
                          dropped=int((~ok).sum()), gradient_on_device=True)
    meta = {"device": cuda_device.describe(), "gpu_mode": mode(sc), "threads_per_worker": r.threads,
            "gradient_on_device": True, "stopped_by": why.get(int(ctl[P.STOP * P.LINE]), "?"),
            "launch": launcher.describe(), "wall_s": wall}
    return RunResult(scenario=sc.to_dict(), backend=NAME, runs=[summary], updates=frame, curve=mon.curve(),
                     metadata=meta)


def final_theta(r: Run) -> tuple[int, np.ndarray]:
    """(version, θ) at the end: the shared θ, or Leashed's latest pool vector."""
    return r.entry.final(r.arrays)
