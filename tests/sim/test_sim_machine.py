"""The machine model end to end: stragglers, pauses, NUMA, CAS drops, master/worker, profiles, CLI."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simasgd.cli import app
from simasgd.runs.results import RunResult
from simasgd.sim import backend
from simasgd.spec import loader

REPO = Path(__file__).resolve().parents[2]
FREE = {"gradient": {"dist": "exponential", "mean_s": 1e-3},
        "read": {"dist": "deterministic", "mean_s": 0.0}, "update": {"dist": "deterministic", "mean_s": 0.0}}
BASE: dict[str, Any] = {
    "name": "machine", "seed": 5, "machine": {"preset": "xeon-e5-2687w-v2"}, "workers": {"count": 6},
    "algorithm": {"name": "hogwild"}, "timing": FREE, "sim": {"numerics": False},
    "stop": {"max_updates": 30000, "max_time_s": 1e9},
}
EK_MLP = ("workload.model=\"mlp\"", "workload.layers=[784, 128, 128, 128, 10]", "workload.dataset=\"synthetic\"",
          "workload.batch_size=64", "workload.samples=2000")


def simulate(*overrides: str, base: dict[str, Any] = BASE) -> pd.DataFrame:
    return backend.run_once(loader.from_dict(loader.apply_overrides(base, overrides)), 0).updates


def without_timing(*overrides: str) -> pd.DataFrame:
    """Costs derived from the machine and the workload (no [timing])."""
    return simulate(*EK_MLP, *overrides, base={k: v for k, v in BASE.items() if k != "timing"})


def test_straggler_runs_at_its_slowdown() -> None:
    u = simulate("workers.stragglers.count=1", "workers.stragglers.slowdown=4")
    counts = u.groupby("worker").size()
    ratio = counts[0] / counts[1:].mean()
    se = ratio * math.sqrt(1 / counts[0] + 1 / counts[1:].sum())  # Poisson counts of exponential renewals
    assert abs(ratio - 0.25) < 4 * se, (ratio, se)


def test_transient_pauses_lengthen_the_mean_cycle() -> None:
    u = simulate("timing.gradient.dist=\"deterministic\"", "workers.stragglers.probability=0.2",
                 "workers.stragglers.pause={dist=\"deterministic\", mean_s=5e-4}")
    gaps = np.concatenate([np.diff(g.t_write.to_numpy()) for _, g in u.groupby("worker")])
    assert set(np.round(gaps * 1e4).astype(int)) == {10, 15}  # 1 ms, or 1 ms + a 0.5 ms pause
    se = gaps.std(ddof=1) / math.sqrt(len(gaps))
    assert abs(gaps.mean() - 1.1e-3) < 4 * se  # E[X] = 1 ms + 0.2 × 0.5 ms


def mean_gap(u: pd.DataFrame) -> tuple[float, float]:
    """Mean time between a worker's consecutive updates, and its standard error."""
    gaps = np.concatenate([np.diff(g.t_write.to_numpy()) for _, g in u.groupby("worker")])
    return float(gaps.mean()), float(gaps.std(ddof=1) / math.sqrt(len(gaps)))


@pytest.mark.slow
def test_numa_splits_throughput_and_staleness_by_socket() -> None:
    numa = without_timing("workers.count=8", "workers.placement=\"numa\"", "stop.max_updates=8000")
    uma = without_timing("workers.count=8", "workers.placement=\"uma\"", "stop.max_updates=8000")
    for u, split in ((numa, True), (uma, False)):
        odd = u.worker % 2 == 1  # numa alternates sockets: odd workers sit on socket 1, away from the model
        (local, se_l), (remote, se_r) = mean_gap(u[~odd]), mean_gap(u[odd])
        assert (remote - local > 4 * math.hypot(se_l, se_r)) is split, (split, local, remote)
    remote = numa.worker % 2 == 1
    assert numa[remote].staleness.mean() > numa[~remote].staleness.mean()


@pytest.mark.slow
def test_leashed_drops_past_its_persistence() -> None:
    contended = ("algorithm.name=\"leashed\"", "timing.update={dist=\"deterministic\", mean_s=3e-4}",
                 "stop.max_updates=10000")
    for persistence in (0, 1):
        u = simulate(*contended, f"algorithm.persistence={persistence}")
        dropped = u[~u.applied]
        assert len(dropped) > 0.01 * len(u)
        assert (dropped.retries == persistence + 1).all()
        assert (dropped.staleness >= 1).all()  # someone published after this worker's read
        assert (u[u.applied].retries <= persistence).all()
    forever = simulate(*contended, "algorithm.persistence=\"inf\"")
    assert forever.applied.all() and forever.retries.max() >= 1


def test_lopez_gradients_reach_the_model_at_the_next_master_step() -> None:
    # The master shares CPU 0 with two workers, so the two workers alone on their CPUs outpace it. Copies
    # as long as updates: a worker looks at the master's step after its copies of g_old and of w, so that
    # window must span master steps for its gradients to be read (free copies: none would be).
    u = simulate("algorithm.name=\"lopez\"", "workers.count=5", "workers.placement=[0, 0, 0, 1, 2]",
                 "timing.update={dist=\"deterministic\", mean_s=2e-3}",
                 "timing.read={dist=\"deterministic\", mean_s=2e-3}", "stop.max_updates=2000")
    applied = u[u.applied]
    # Worker 0 is the master; each master step includes at most one gradient per worker.
    assert set(u.worker) == {1, 2, 3, 4}
    assert applied.groupby(["version", "worker"]).size().max() == 1
    dropped = u[~u.applied]  # replaced before any master step read them
    fast = dropped.worker.isin([3, 4])
    assert fast.sum() > 2 * (~fast).sum() > 0  # mostly the unshared workers, whose cycles outpace the master
    assert (applied.staleness >= 0).all()
    versions = applied.version.unique()
    assert np.all(np.diff(np.sort(versions)) >= 1)


def test_numerics_does_not_change_the_timing() -> None:
    timed = dict(BASE, workload={"model": "logreg", "dataset": "digits", "batch_size": 8})
    args = ("algorithm.name=\"mutex\"", "stop.max_updates=500", "stop.epsilon=1e-6",
            "timing.update={dist=\"exponential\", mean_s=1e-4}")
    a = simulate(*args, base=timed)
    b = simulate(*args, "sim.numerics=true", base=timed)
    pd.testing.assert_frame_equal(a, b)


def test_calibrated_profile_supplies_gradient_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = tmp_path / "this.toml"
    profile.write_text("[machine]\nsockets = 1\ncores_per_socket = 4\nthreads_per_core = 1\n"
                       "local_latency_ns = 80\nremote_latency_ns = 80\nmem_bandwidth_gbs = 20\n"
                       "link_bandwidth_gbs = 20\ngflops_per_core = 10\nquantum_s = 4e-3\ncontext_switch_s = 3e-6\n"
                       "[gradient.\"mlp-64-32-10-digits-b32-float64\"]\nsamples_s = [0.001, 0.003]\n"
                       "batch_size = 32\n"
                       "[gradient.\"mlp-64-32-10-digits-b16-float32\"]\nsamples_s = [0.5]\nbatch_size = 16\n")
    monkeypatch.setenv("SIMASGD_PROFILE", str(profile))
    base = {k: v for k, v in BASE.items() if k != "timing"}
    base["timing"] = {"read": FREE["read"], "update": FREE["update"]}
    u = simulate("machine.preset=\"this\"", "workers.count=1", "algorithm.name=\"sequential\"",
                 "workload.layers=[64, 32, 10]", "workload.batch_size=64", "stop.max_updates=4000", base=base)
    gaps = np.diff(u.t_write.to_numpy())
    # The same workload's samples (not the float32 table), scaled from batch 32 to 64.
    assert set(np.round(gaps * 1e3).astype(int)) == {2, 6}


def test_cli_runs_the_quickstart_on_sim_by_default(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "q"
    res = runner.invoke(app, ["run", str(REPO / "scenarios" / "quickstart.toml"), "--out", str(out), "-n", "1"])
    assert res.exit_code == 0, res.output
    r = RunResult.load(out)
    assert r.backend == "sim" and r.runs[0].final_loss < r.runs[0].initial_loss
    shown = runner.invoke(app, ["show", str(out)])
    assert shown.exit_code == 0 and "sim" in shown.output and "quickstart" in shown.output


def test_unsupported_algorithm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from simasgd.spec.algorithms import UnsupportedAlgorithm
    monkeypatch.setattr(backend, "ALGORITHMS", backend.ALGORITHMS - {"easgd"})  # the simulator now has them all
    with pytest.raises(UnsupportedAlgorithm, match="backend 'sim' does not implement algorithm 'easgd'"):
        simulate("algorithm.name=\"easgd\"")


def test_simulated_time_budget_stops_the_run() -> None:
    r = backend.run_once(loader.from_dict(loader.apply_overrides(BASE, ["stop.max_time_s=0.5"])), 0)
    s = r.runs[0]
    assert s.time_s == pytest.approx(0.5) and 0 < s.updates < 30000
    assert r.updates.t_write.max() <= 0.5
    # 6 workers at 1 ms each for 0.5 s: about 3000 updates (Poisson, sd ~ 55).
    assert abs(s.updates - 3000) < 4 * math.sqrt(3000)


def test_spinning_lock_with_backoff_is_unfair_but_loses_no_update() -> None:
    locked = ("algorithm.name=\"mutex\"", "timing.update={dist=\"exponential\", mean_s=3e-4}", "stop.max_updates=5000")
    fifo = simulate(*locked)
    spin = simulate(*locked, "algorithm.backoff={kind=\"exponential\", initial_s=1e-5, max_s=1e-3}")
    assert fifo.applied.all() and spin.applied.all()
    # Sleeping between test-and-set retries leaves the lock idle at times: fewer updates per second,
    # and the longest waits grow (a newcomer can overtake a sleeping waiter).
    rate = lambda u: len(u) / u.t_write.max()
    assert rate(spin) < rate(fifo)
    assert spin.lock_wait_s.max() > fifo.lock_wait_s.max()


SMALL_MLP = ("workload.dataset=\"digits\"", "workload.layers=[64, 32, 10]", "workload.batch_size=16",
             "stop.max_updates=600")


def test_k_sync_gradients_stay_fresh_on_an_oversubscribed_machine() -> None:
    # 5 threads time-sharing 2 CPUs: slow reads overlap the round's close; they must be cancelled too.
    u = without_timing(*SMALL_MLP, "algorithm.name=\"k_sync\"", "algorithm.k=2", "workers.count=5",
                       "machine.preset=\"laptop-2core\"", "workers.placement=\"os\"")
    assert (u.staleness == 0).all() and (u.groupby("version").size() == 2).all()


def test_torn_reads_cost_what_whole_reads_cost() -> None:
    # Chunked copies through the memory model pay the latency once, like the whole copy they replace.
    args = (*SMALL_MLP, "workers.placement=\"numa\"")
    timing = without_timing(*args)
    numerics = without_timing(*args, "sim.numerics=true", "stop.epsilon=1e-6")
    np.testing.assert_allclose(numerics.t_write, timing.t_write, rtol=1e-9)
    assert (numerics.staleness == timing.staleness).all()


@pytest.mark.parametrize("algorithm", ["sequential", "sync", "k_sync", "k_async", "mutex", "rwlock", "hogwild",
                                       "leashed", "lopez"])
def test_timing_only_runs_are_reproducible_per_seed_and_differ_per_run(algorithm: str) -> None:
    n = 1 if algorithm == "sequential" else 4
    # A Lopez master steps without waiting for gradients: its steps must cost time for gradients to land.
    steps = ["timing.read.mean_s=1e-5", "timing.update.mean_s=1e-5"] if algorithm == "lopez" else []
    sc = loader.from_dict(loader.apply_overrides(BASE, [f"algorithm.name=\"{algorithm}\"", f"workers.count={n}",
                                                        "stop.max_updates=2000", *steps]))
    a, b, c = backend.run_once(sc, 0), backend.run_once(sc, 0), backend.run_once(sc, 1)
    pd.testing.assert_frame_equal(a.updates, b.updates)
    assert a.runs[0].to_json() == b.runs[0].to_json()
    assert not np.array_equal(a.updates.t_write.to_numpy(), c.updates.t_write.to_numpy())


def test_a_timing_seed_redraws_the_timing_and_keeps_the_numerics() -> None:
    # [sim] timing_seed: another draw of the machine's timing with the same θ₀ and minibatches.
    over = ["sim.numerics=true", "workers.count=2", "stop.max_updates=40", "workload.model=\"least_squares\"",
            "workload.batch_size=4"]

    def run(*extra: str) -> Any:
        return backend.run_once(loader.from_dict(loader.apply_overrides(BASE, [*over, *extra])), 0)

    plain, same, other = run(), run("sim.timing_seed=5"), run("sim.timing_seed=6")
    pd.testing.assert_frame_equal(plain.updates, same.updates)  # unset = the scenario's seed (5)
    assert not np.array_equal(plain.updates.t_write.to_numpy(), other.updates.t_write.to_numpy())
    # θ₀ is the data's: the loss before any update is the same whatever the timing
    assert plain.runs[0].initial_loss == other.runs[0].initial_loss
    moved = backend.run_once(loader.from_dict(loader.apply_overrides(BASE, [*over, "seed=6"])), 0)
    assert moved.runs[0].initial_loss != plain.runs[0].initial_loss  # (which the scenario's seed does move)


@pytest.mark.parametrize("algorithm", ["sync", "k_sync", "k_async", "mutex", "rwlock", "hogwild", "leashed", "lopez"])
def test_threads_sharing_one_cpu_make_progress(algorithm: str) -> None:
    # Every wait gives the CPU away: nobody sleeps on a CPU another thread needs.
    extra = ["algorithm.k=2"] if algorithm.startswith("k_") else []
    if algorithm == "lopez":  # master steps of 0.2 ms: 300 of them outlast a few quanta (copies take time,
        extra = ["timing.update.mean_s=1e-4", "timing.read.mean_s=1e-4"]  # or no step reads a gradient)
    u = simulate(f"algorithm.name=\"{algorithm}\"", "workers.count=3", "workers.placement=[0, 0, 0]",
                 "stop.max_updates=300", "stop.max_time_s=10", *extra)
    if algorithm == "lopez":  # the master steps without waiting; gradients reach it. (A worker preempted
        # mid-gradient has already taken its previous one out of g, Alg. 3 line 4: on one CPU most never do.)
        assert u.applied.any() and (u.version <= 301).all()
        return
    assert u.applied.sum() >= 300 or algorithm in ("sync", "k_sync", "k_async")
    assert u.version.max() == 300


def test_rows_refer_only_to_versions_that_exist_when_time_runs_out() -> None:
    for algorithm in ("lopez", "k_async", "mutex"):
        extra = ["algorithm.k=2"] if algorithm == "k_async" else []
        r = backend.run_once(loader.from_dict(loader.apply_overrides(BASE, [
            f"algorithm.name=\"{algorithm}\"", "stop.max_time_s=0.0537", "timing.update.mean_s=3e-4",
            "timing.read.mean_s=3e-4", *extra])), 0)
        u, s = r.updates, r.runs[0]
        assert s.updates < 30000 and u[u.applied].version.max() == s.updates
        assert (u[~u.applied].version <= s.updates + 1).all()


@pytest.mark.slow
def test_lock_convoy_when_the_holder_is_descheduled() -> None:
    # Threads 0 and 1 share CPU 0; thread 2 has CPU 1 to itself. When 0 is preempted inside its
    # 1 ms critical section (to let 1 compute), 2 waits on a lock whose holder is not running.
    args = ("algorithm.name=\"mutex\"", "sim.read_lock=false", "workers.count=3", "stop.max_updates=3000",
            "timing.gradient={dist=\"exponential\", mean_s=3e-3}",
            "timing.update={dist=\"deterministic\", mean_s=1e-3}")
    shared = simulate(*args, "workers.placement=[0, 0, 1]")
    apart = simulate(*args, "workers.placement=[0, 2, 1]")
    # With every holder running, a wait is at most the two other critical sections (+ hand-offs).
    assert apart.lock_wait_s.max() <= 2e-3 + 1e-6
    alone = shared[shared.worker == 2]
    assert alone.lock_wait_s.max() > 3e-3  # a quantum-scale stall: the convoy


def test_missing_empirical_samples_is_a_one_line_error(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('[timing]\ngradient = { dist = "empirical", path = "nope.npy" }\n'
                        'read = { dist = "deterministic" }\nupdate = { dist = "deterministic" }\n'
                        '[sim]\nnumerics = false\n')
    res = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    assert "timing.gradient.path = \"nope.npy\"" in res.output and "Traceback" not in res.output
    samples = tmp_path / "g.txt"
    samples.write_text("0.001\n0.002\n")
    scenario.write_text(scenario.read_text().replace("nope.npy", "g.txt"))
    assert CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path / "r")]).exit_code == 0


@pytest.mark.parametrize("algorithm", ["mutex", "rwlock"])
def test_spinning_waiters_keep_their_cpu_so_pairs_run_for_a_quantum(algorithm: str) -> None:
    # 4 threads on 2 CPUs. Sleeping waiters hand their CPU over at every contended lock, so all four
    # interleave (τ spreads over 1..3); spinning ones (the executor's spin locks) keep it until their
    # quantum ends, so two threads alternate for a quantum while two wait: most updates see exactly
    # one other (τ = 1), and a thread back from the run queue sees a quantum's worth (a long tail).
    # A preempted spinner withdraws its request (test-and-test-and-set), so no lock is ever handed to
    # a thread that is not running, and every thread makes progress.
    args = (f"algorithm.name=\"{algorithm}\"", "machine.preset=\"laptop-2core\"", "workers.count=4",
            "workers.placement=\"os\"", "stop.max_updates=4000",
            "timing.gradient={dist=\"gamma\", mean_s=2e-4, shape=100}", "timing.read={dist=\"deterministic\", mean_s=2e-5}",
            "timing.update={dist=\"deterministic\", mean_s=2e-5}")
    spin = simulate(*args, "sim.traits=\"cpu\"")  # the cpu executor's spin locks
    sleep = simulate(*args, "sim.traits=\"torch\"")  # the torch executor's multiprocessing.Lock (a futex)
    share = {k: float((u[u.applied].staleness == 1).mean()) for k, u in (("spin", spin), ("sleep", sleep))}
    assert share["spin"] > 0.6 > share["sleep"]
    assert spin[spin.applied].staleness.quantile(0.99) > 3 * sleep[sleep.applied].staleness.quantile(0.99)
    assert spin.worker.nunique() == 4 and spin.version.max() == 4000


def test_a_thread_sharing_a_cpu_begins_its_first_cycle_when_it_first_runs() -> None:
    """8 HOGWILD! threads on 2 CPUs, each run queue granting its CPU a thread at a time: a thread reads the
    version only once it runs, so each worker's first cycle starts when its thread is first granted a CPU and
    its context switch is paid (``cpu.TURNS``), and its first update sees only the updates made while it
    computed, never those of the quanta it waited through."""
    from simasgd.machines import machine as machines
    from simasgd.sim import cpu

    args = ("machine.preset=\"laptop-2core\"", "workers.count=8", "workers.placement=\"os\"",
            "stop.max_updates=400", "timing.gradient={dist=\"deterministic\", mean_s=2e-4}")
    cpu.TURNS = []
    try:
        u = simulate(*args)
        turns = cpu.TURNS
    finally:
        cpu.TURNS = None
    first_grant = {w: min(t for ww, _c, t, on in turns if ww == w and on) for w in range(8)}
    s = machines.resolve(loader.from_dict(loader.apply_overrides(BASE, args)).machine).context_switch_s
    first = u.sort_values("t_start").groupby("worker").head(1).set_index("worker").sort_index()
    np.testing.assert_allclose(first.t_start.to_numpy(), [first_grant[w] + s for w in range(8)], rtol=0, atol=1e-12)
    assert sorted(set(np.round(first.t_start.to_numpy(), 9))) != [round(s, 9)]  # they did not all start at once
    # a cycle of 0.2 ms: the other CPU's thread makes one update or two meanwhile
    assert (first.staleness <= 2).all(), first.staleness.tolist()
