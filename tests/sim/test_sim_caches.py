"""Reads and updates at the calibrated bandwidth of the model's buffer size (simasgd/sim/caches.py).

The expected times are the closed forms of the model (2·S / gbs(S), 3·S / update_gbs(S), log-log
interpolation between measured sizes), checked on the table, on the platform and on a whole
simulated run through the recorded phase boundaries.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from simasgd.machines import machine
from simasgd.runs import backends
from simasgd.sim.caches import CacheModel
from simasgd.spec import loader
from simasgd.spec.traits import ExecutorTraits

SIZES = [65536, 262144, 1048576, 4194304]
GBS = [100.0, 80.0, 60.0, 20.0]
UPD = [300.0, 200.0, 150.0, 50.0]


COH_SIZES = [65536, 1048576, 4194304]
COH_READ = [50.0, 40.0, 15.0]
COH_WRITE = [120.0, 90.0, 40.0]


def _profile(tmp_path: Path, llc: int = 32 << 20, table: bool = True, coherence: bool = False) -> Path:
    lines = ["[machine]", "sockets = 1", "cores_per_socket = 2", "threads_per_core = 1",
             "local_latency_ns = 90.0", "remote_latency_ns = 90.0", "mem_bandwidth_gbs = 10.0",
             "link_bandwidth_gbs = 10.0", "gflops_per_core = 1.0", "quantum_s = 0.004",
             "context_switch_s = 2e-6", "", "[cache]", "line_bytes = 64", "levels = [1, 2, 3]",
             f"sizes_bytes = [49152, 1048576, {llc}]", "shared_by = [1, 1, 2]", ""]
    if table:
        lines += ["[copy_by_size]", f"sizes_bytes = {SIZES}", f"gbs = {GBS}", f"update_gbs = {UPD}", ""]
    if coherence:
        lines += ["[coherence]", f"sizes_bytes = {COH_SIZES}", f"read_gbs = {COH_READ}", f"write_gbs = {COH_WRITE}", ""]
    path = tmp_path / "this.toml"
    path.write_text("\n".join(lines))
    return path


def test_rates_at_measured_sizes_and_between_them(tmp_path: Path) -> None:
    m = CacheModel.from_profile(machine.load_profile(_profile(tmp_path)).profile)
    assert m is not None
    for s, g, u in zip(SIZES, GBS, UPD, strict=False):
        assert m.read_s(s) == pytest.approx(2 * s / (g * 1e9), rel=1e-12)
        assert m.update_s(s) == pytest.approx(3 * s / (u * 1e9), rel=1e-12)
    # halfway in log size between 256 KiB and 1 MiB: the geometric mean of the two rates
    mid = math.sqrt(SIZES[1] * SIZES[2])
    assert m.read_s(mid) == pytest.approx(2 * mid / (math.sqrt(GBS[1] * GBS[2]) * 1e9), rel=1e-9)
    # clamped outside the table
    assert m.read_s(1024) == pytest.approx(2 * 1024 / (GBS[0] * 1e9), rel=1e-12)
    assert m.read_s(1 << 30) == pytest.approx(2 * (1 << 30) / (GBS[-1] * 1e9), rel=1e-12)


def test_llc_footprint_rule(tmp_path: Path) -> None:
    m = CacheModel.from_profile(machine.load_profile(_profile(tmp_path, llc=8 << 20)).profile)
    assert m.in_cache(1 << 20, 7)          # 8 × 1 MiB = the LLC
    assert not m.in_cache(1 << 20, 8)      # 9 MiB: spills to DRAM


def test_no_table_no_model(tmp_path: Path) -> None:
    assert CacheModel.from_profile(machine.load_profile(_profile(tmp_path, table=False)).profile) is None
    assert CacheModel.from_profile(None) is None


def _traits(monkeypatch: pytest.MonkeyPatch, **changes: object) -> None:
    """The cpu executor simulated with some of its traits changed (simasgd/spec/traits.py); the latest change of a
    trait wins."""
    declared = backends.traits

    def changed(name: str) -> ExecutorTraits | None:
        t = declared(name)
        return dataclasses.replace(t, **changes) if name == "cpu" and t is not None else t

    monkeypatch.setattr(backends, "traits", changed)


@pytest.fixture(autouse=True)
def _every_read_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests time the copies: every read copies θ (the elision tests below skip reads again)."""
    _traits(monkeypatch, reads="copy")


def _scenario(workers: int, cache_model: bool = True):
    return loader.from_dict({
        "name": "c", "seed": 3, "workers": {"count": workers, "placement": "uma"}, "machine": {"preset": "this"},
        "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8},
        "timing": {"gradient": {"dist": "exponential", "mean_s": 1e-4}},
        "algorithm": {"name": "mutex"}, "stop": {"max_updates": 3000, "max_time_s": 10},
        "sim": {"numerics": False, "cache_model": cache_model}})


@pytest.mark.parametrize("workers", [1, 2])
def test_simulated_phases_follow_the_cache_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 workers: int) -> None:
    """A whole run: the recorded read and update phases are the model's closed forms (plus lock waits)."""
    from simasgd.numerics.workloads import build_workload
    from simasgd.sim import backend

    path = _profile(tmp_path)
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    sc = _scenario(workers)
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    s = wl.dim * np.dtype(wl.dtype).itemsize
    model = CacheModel.from_profile(machine.load_profile(path).profile)
    u = backend.run_once(sc, 0).updates
    read = (u["t_grad_start"] - u["t_start"]).to_numpy()
    update = (u["t_write"] - u["t_grad_end"]).to_numpy()
    if workers == 1:  # nothing ever waits: every read and update takes exactly the model's time
        np.testing.assert_allclose(read, model.read_s(s), rtol=1e-9)
        np.testing.assert_allclose(update, model.update_s(s), rtol=1e-9)
    else:  # lock waits only add: the least a read or update takes is the model's time
        assert read.min() == pytest.approx(model.read_s(s), rel=1e-9)
        assert update.min() == pytest.approx(model.update_s(s), rel=1e-9)
    # and the switch turns it off: the older single-bandwidth model gives other times
    off = backend.run_once(_scenario(workers, cache_model=False), 0).updates
    assert not np.allclose((off["t_grad_start"] - off["t_start"]).min(), model.read_s(s), rtol=1e-6)


def test_coherence_rates_for_lines_another_core_wrote(tmp_path: Path) -> None:
    m = CacheModel.from_profile(machine.load_profile(_profile(tmp_path, coherence=True)).profile)
    assert m.has_coherence
    for s, r, w in zip(COH_SIZES, COH_READ, COH_WRITE, strict=False):
        assert m.read_s(s, shared=True) == pytest.approx(2 * s / (r * 1e9), rel=1e-12)
        assert m.update_s(s, shared=True) == pytest.approx(3 * s / (w * 1e9), rel=1e-12)
    # no fresh_gbs (an older profile): a fresh pass of another core's lines at the coherent update's rate
    assert m.update_into_s(COH_SIZES[1], shared=True) == pytest.approx(m.update_s(COH_SIZES[1], True) * 4 / 3)
    # with it: four streams at that rate
    (tmp_path / "f").mkdir()
    path = _profile(tmp_path / "f", coherence=True)
    path.write_text(path.read_text().replace("[coherence]\n", "[coherence]\nfresh_gbs = [70.0, 35.0, 20.0]\n"))
    f = CacheModel.from_profile(machine.load_profile(path).profile)
    assert f.update_into_s(COH_SIZES[1], shared=True) == pytest.approx(4 * COH_SIZES[1] / 35e9, rel=1e-12)
    assert f.update_into_s(COH_SIZES[1]) == pytest.approx(m.update_into_s(COH_SIZES[1]), rel=1e-12)  # own lines
    # without the table, shared reads fall back to the private rates
    (tmp_path / "x").mkdir()
    plain = CacheModel.from_profile(machine.load_profile(_profile(tmp_path / "x")).profile)
    assert not plain.has_coherence and plain.read_s(SIZES[1], shared=True) == plain.read_s(SIZES[1])


def _prepared(monkeypatch: pytest.MonkeyPatch, path: Path, sc) -> tuple[int, CacheModel]:
    """Point the runs at the profile ``path``: the model's bytes in ``sc`` and that profile's cache model."""
    from simasgd.numerics.workloads import build_workload

    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    return wl.dim * np.dtype(wl.dtype).itemsize, CacheModel.from_profile(machine.load_profile(path).profile)


def _with_sim(sc, **switches):
    return sc.model_copy(update={"sim": sc.sim.model_copy(update=switches)})


def _hogwild(workers: int, **switches):
    sc = loader.from_dict({**_scenario(workers).to_dict(), "algorithm": {"name": "hogwild"}})
    return _with_sim(sc, **switches)


def _steps(u):
    """HOGWILD! rows (no locks: a read is t_start → t_grad_start, an update t_grad_end → t_write) and, per
    row, whether another worker began an update between this worker's previous update and this read,
    and between this read and this update; rows where two such instants tie are left out."""
    u = u.sort_values(["worker", "t_start"]).reset_index(drop=True)
    starts = u["t_grad_end"].to_numpy()  # when each update began
    prev = u.groupby("worker")["t_grad_end"].shift(1).fillna(-1.0).to_numpy()
    worker, t_start = u["worker"].to_numpy(), u["t_start"].to_numpy()
    others = {w: starts[worker != w] for w in np.unique(worker)}

    def others_between(i: int, lo: float, hi: float) -> bool | None:
        other = others[worker[i]]
        if np.any(np.abs(other - lo) <= 1e-12) or np.any(np.abs(other - hi) <= 1e-12):
            return None
        return bool(np.any((other > lo) & (other < hi)))

    read_after = [others_between(i, prev[i], t_start[i]) for i in range(len(u))]
    update_after = [others_between(i, t_start[i], starts[i]) for i in range(len(u))]
    keep = np.array([a is not None and b is not None for a, b in zip(read_after, update_after, strict=False)])
    read = (u["t_grad_start"] - u["t_start"]).to_numpy()[keep]
    update = (u["t_write"] - u["t_grad_end"]).to_numpy()[keep]
    return (read, np.array(read_after, dtype=object)[keep].astype(bool),
            update, np.array(update_after, dtype=object)[keep].astype(bool))


def test_last_writer_rule() -> None:
    from simasgd.sim.caches import HELD, OTHERS, OWN, LastWriter

    lw = LastWriter(3)
    assert lw.touch(0, writes=False) == OWN       # nobody wrote yet
    assert lw.touch(0, writes=True) == OWN        # its own lines, in its cache alone
    assert lw.touch(1, writes=False) == OTHERS    # worker 0 wrote since worker 1 last looked
    assert lw.touch(1, writes=False) == HELD      # now it has them, and so has worker 0
    assert lw.touch(0, writes=False) == HELD      # worker 0's lines were downgraded by worker 1's read
    assert lw.touch(0, writes=True) == HELD       # its write must invalidate worker 1's copies
    assert lw.touch(0, writes=False) == OWN       # a read right after its own update: its lines alone
    assert lw.touch(2, writes=True) == OTHERS     # worker 0 wrote first
    assert lw.touch(0, writes=True) == OTHERS and lw.touch(1, writes=False) == OTHERS
    # lockstep, as the executor's mutex at 2 threads runs: update A, update B, read A, read B, update A
    ls = LastWriter(2)
    assert [ls.touch(0, False), ls.touch(0, True), ls.touch(1, False), ls.touch(1, True)] == [OWN, OWN, OTHERS, HELD]
    assert [ls.touch(0, False), ls.touch(1, False), ls.touch(0, True)] == [OTHERS, HELD, HELD]
    always = LastWriter(2, recency=False)         # [sim] coherence_recency = false
    assert always.touch(0, writes=True) == OTHERS and always.touch(0, writes=False) == OTHERS


def test_lines_a_worker_evicted_need_no_invalidation() -> None:
    from simasgd.sim.caches import HELD, OTHERS, OWN, LastWriter

    # B wrote, A copied: A holds B's lines until its own traffic evicts them
    lw = LastWriter(2)
    assert [lw.touch(1, True), lw.touch(0, False)] == [OWN, OTHERS]
    lw.evicted(0)
    assert lw.touch(1, True) == OWN  # nobody else holds them: no copies to invalidate
    assert lw.touch(0, False) == OTHERS
    lw.evicted(1)  # the writer's own lines, evicted by its gradient
    assert lw.touch(0, True) == OWN  # A read them last and holds them alone
    # evicted, then read again: held again
    lw2 = LastWriter(2)
    lw2.touch(1, True), lw2.touch(0, False), lw2.evicted(0), lw2.touch(0, False)
    assert lw2.touch(1, True) == HELD
    lw2.evicted(0), lw2.evicted(0)  # twice: counted once
    assert lw2.touch(0, False) == OTHERS and lw2.touch(1, False) == HELD


class _EveryWorkerLastWriter:
    """LastWriter's rule kept the direct way, a flag a worker cleared for all of them at every write: the oracle
    of the test below."""

    def __init__(self, n: int) -> None:
        self.writes, self.seen, self.valid, self.writer = 0, [-1] * n, 0, -1
        self.downgraded, self.lapsed = False, [False] * n

    def holds(self, w: int) -> bool:
        return self.seen[w] == self.writes and not self.lapsed[w]

    def evicted(self, w: int) -> None:
        if self.holds(w):
            self.lapsed[w], self.valid = True, self.valid - 1

    def touch(self, w: int, writes: bool) -> int:
        from simasgd.sim.caches import HELD, OTHERS, OWN

        if self.seen[w] != self.writes and self.writes:
            where = OTHERS
        elif self.valid - self.holds(w) > (self.seen[w] != self.writes) and (writes or self.downgraded):
            where = HELD
        else:
            where = OWN
        if writes:
            self.writes += 1
            self.writer, self.valid, self.downgraded = w, 1, False
            self.lapsed = [False] * len(self.lapsed)
        else:
            if self.seen[w] != self.writes or self.lapsed[w]:
                self.valid, self.lapsed[w] = self.valid + 1, False
            self.downgraded = self.downgraded or w != self.writer
        self.seen[w] = self.writes
        return where


@pytest.mark.parametrize("seed", range(4))
def test_where_the_lines_are_as_the_direct_rule_says_with_no_pass_over_the_workers(seed: int) -> None:
    """Random reads, writes and evictions by 2–6 workers: every touch finds the lines where the direct rule
    (a flag per worker, all cleared at each write) finds them; and a write by one of 200,000 workers allocates
    nothing in proportion to them (an update must not cost more because more workers exist)."""
    import tracemalloc

    from simasgd.sim.caches import LastWriter

    rng = np.random.default_rng(seed)
    n = 2 + seed
    fast, direct = LastWriter(n), _EveryWorkerLastWriter(n)
    for _ in range(3000):
        w, op = int(rng.integers(n)), int(rng.integers(3))
        if op == 2:
            fast.evicted(w), direct.evicted(w)
        else:
            assert fast.touch(w, op == 1) == direct.touch(w, op == 1)
    many = LastWriter(200_000)
    many.touch(1, False), many.evicted(1), many.touch(0, True)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    many.touch(2, True)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 10_000  # a list over the workers would be 1.6 MB


@pytest.mark.parametrize("l2", [1 << 20, 256 << 10], ids=["model-and-copy-fit-L2", "they-do-not"])
def test_a_gradient_on_a_copy_evicts_the_model_only_where_the_two_outgrow_the_private_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, l2: int) -> None:
    """Mutex at 2 workers, a 262 KB model: with a 1 MB L2 some updates take the held-lines rate (the other
    worker's copy of the lines is still in its cache); with 256 KB, where the copy and the model outgrow it,
    none does: each worker's copy and gradient evicted the lines before the next write."""
    from simasgd.sim import backend

    path = _profile(tmp_path, coherence=True)
    path.write_text(path.read_text().replace(
        "[coherence]\n", f"[coherence]\nheld_read_gbs = {HELD_READ}\nheld_write_gbs = {HELD_WRITE}\n")
        .replace("sizes_bytes = [49152, 1048576,", f"sizes_bytes = [49152, {l2},"))
    sc = loader.from_dict({**_scenario(2).to_dict(), "workload": {
        "model": "least_squares", "dataset": "synthetic", "batch_size": 8, "features": 32768, "samples": 64}})
    s, model = _prepared(monkeypatch, path, sc)
    u = backend.run_once(sc, 0).updates
    held = np.isclose((u["t_write"] - u["t_grad_end"]).to_numpy(), model.held_s(s, True), rtol=0, atol=0.2e-6)
    assert held.any() == (2 * s <= l2), held.mean()


HELD_READ, HELD_WRITE = [30.0, 25.0, 10.0], [45.0, 35.0, 15.0]  # slower than the coherent rates above
HELD_MIRRORED = [12.0, 10.0, 4.0]  # the mirrored update of held lines: slower again (four streams)


def _replayed(u):
    """A mutex run's reads and updates in the order the lock let them happen, each with its duration, where
    its lines were (0 own, 1 another core's, 2 held by both) and whether the worker wrote them last, replayed
    as MESI states per worker (I, S, M): a write leaves the writer M and the others I; a read makes the reader
    S (a writer keeps M) and downgrades another's M to S."""
    steps = [(r.t_grad_start, r.t_start, int(r.worker), False) for r in u.itertuples()]
    steps += [(r.t_write, r.t_grad_end, int(r.worker), True) for r in u.itertuples()]
    steps.sort()
    n = int(u["worker"].max()) + 1
    state, wrote, prev_end, out, writer = ["I"] * n, False, 0.0, [], -1
    for end, begin, w, writes in steps:
        others = [state[v] for v in range(n) if v != w]
        if state[w] == "I" and wrote:
            where = 1
        elif any(x != "I" for x in others) and (writes or state[w] == "S"):
            where = 2
        else:
            where = 0
        out.append((writes, where, writer == w, end - max(begin, prev_end)))  # the lock was free, or came free then
        if writes:
            state, wrote, writer = ["I"] * n, True, w
            state[w] = "M"
        else:
            state = ["S" if (x == "M" and v != w) else x for v, x in enumerate(state)]
            state[w] = "M" if state[w] == "M" else "S"
        prev_end = end
    return out


@pytest.mark.parametrize("held", [True, False])
def test_steps_of_lines_both_caches_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool) -> None:
    """Mutex at 2 workers: every read and update takes the rate of where its lines were as it began — its own
    cache alone, another core's, or both (``held_read_gbs``/``held_write_gbs``); ``[sim] held_lines = false``
    puts the held ones back at the private rates."""
    from simasgd.sim import backend

    path = _profile(tmp_path, coherence=True)
    path.write_text(path.read_text().replace(
        "[coherence]\n", f"[coherence]\nheld_read_gbs = {HELD_READ}\nheld_write_gbs = {HELD_WRITE}\n"))
    sc = loader.from_dict({**_scenario(2).to_dict(), "workload": {
        "model": "least_squares", "dataset": "synthetic", "batch_size": 8, "features": 32768, "samples": 64}})
    sc = _with_sim(sc, held_lines=held)
    s, model = _prepared(monkeypatch, path, sc)
    assert model.held_s(s, True) > model.update_s(s, True) > model.update_s(s)
    steps = _replayed(backend.run_once(sc, 0).updates)
    expected = {(False, 0): model.read_s(s), (True, 0): model.update_s(s),
                (False, 1): model.read_s(s, True), (True, 1): model.update_s(s, True),
                (False, 2): model.held_s(s, False) if held else model.read_s(s),
                (True, 2): model.held_s(s, True) if held else model.update_s(s)}
    seen = {key: np.array([d for wr, wh, _own, d in steps if (wr, wh) == key]) for key in expected}
    assert all(len(v) > 20 for v in seen.values()), {k: len(v) for k, v in seen.items()}
    for key, times in seen.items():  # a lock handed over adds its latency (90 ns here), nothing else
        np.testing.assert_allclose(times, expected[key], rtol=0, atol=0.2e-6, err_msg=str(key))


@pytest.mark.parametrize("traits", ["cpu", "torch"])
def test_a_mirrored_update_of_its_own_lines_another_core_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             traits: str) -> None:
    """Mutex at 2 workers on a profile with ``held_mirrored_gbs``: under the cpu executor's traits (``updates =
    "mirrored"``: its update leaves the new θ in the worker's copy) an update of held lines the worker wrote
    last runs at 4·S over that rate, and one of held lines another worker wrote (and this one read) at the
    held update's rate, as does every held update under the torch executor's traits (``updates = "plain"``)."""
    from simasgd.sim import backend

    path = _profile(tmp_path, coherence=True)
    path.write_text(path.read_text().replace("[coherence]\n", f"[coherence]\nheld_read_gbs = {HELD_READ}\n"
                                             f"held_write_gbs = {HELD_WRITE}\nheld_mirrored_gbs = {HELD_MIRRORED}\n"))
    sc = loader.from_dict({**_scenario(2).to_dict(), "workload": {
        "model": "least_squares", "dataset": "synthetic", "batch_size": 8, "features": 32768, "samples": 64}})
    sc = _with_sim(sc, traits=traits)
    s, model = _prepared(monkeypatch, path, sc)
    mirrored = model.held_mirrored_s(s)
    rate = math.exp(float(np.interp(math.log(s), np.log(COH_SIZES), np.log(HELD_MIRRORED))))  # log-log between sizes
    assert mirrored == pytest.approx(4 * s / (rate * 1e9), rel=1e-9)
    assert mirrored is not None and mirrored > model.held_s(s, True)
    updates = [(own, d) for wr, wh, own, d in _replayed(backend.run_once(sc, 0).updates) if wr and wh == 2]
    own = np.array([d for o, d in updates if o])
    other = np.array([d for o, d in updates if not o])
    assert len(own) > 20 and len(other) > 20, (len(own), len(other))
    np.testing.assert_allclose(own, mirrored if traits == "cpu" else model.held_s(s, True), rtol=0, atol=0.2e-6)
    np.testing.assert_allclose(other, model.held_s(s, True), rtol=0, atol=0.2e-6)


@pytest.mark.parametrize("workers,switch", [(1, True), (2, True), (2, False)])
@pytest.mark.slow
def test_simulated_steps_pay_coherence_only_after_another_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 workers: int, switch: bool) -> None:
    """Every read (update) runs at another core's rates exactly when another worker began an update since
    this worker's own previous update (its read), and at the private rates otherwise."""
    from simasgd.sim import backend

    sc = _hogwild(workers, coherence=switch)
    s, model = _prepared(monkeypatch, _profile(tmp_path, coherence=True), sc)
    read, read_after, update, update_after = _steps(backend.run_once(sc, 0).updates)
    assert len(read) > 1000
    for kind, times, after, rate in (("read", read, read_after, model.read_s),
                                     ("update", update, update_after, model.update_s)):
        shared = after & switch
        assert shared.any() == (workers > 1 and switch) and (~shared).any(), kind
        expected = np.where(shared, rate(s, True), rate(s))
        np.testing.assert_allclose(times, expected, rtol=1e-9, err_msg=kind)
    # [sim] coherence_recency = false: every step of a multi-worker run at another core's rates
    if workers > 1 and switch:
        u = backend.run_once(_with_sim(sc, coherence_recency=False), 0).updates
        np.testing.assert_allclose(u["t_grad_start"] - u["t_start"], model.read_s(s, True), rtol=1e-9)
        np.testing.assert_allclose(u["t_write"] - u["t_grad_end"], model.update_s(s, True), rtol=1e-9)


def _with_snapshot(path: Path, sc, snapshot_s: float | None = None, *extra: str) -> None:
    """A gradient table for the scenario's workload: a sample, the loss snapshot's time if given, and ``extra``
    lines."""
    from simasgd.machines.profile import workload_key

    snap = [] if snapshot_s is None else [f"cycle_snapshot_median_s = {snapshot_s!r}"]
    path.write_text(path.read_text() + "\n".join([
        f'[gradient."{workload_key(sc.workload)}"]', f"batch_size = {sc.workload.batch_size}", "samples_s = [1e-4]",
        *snap, *extra, ""]))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_leashed_pass_writes_a_fresh_vector_at_four_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              workers: int) -> None:
    """Leashed builds θ_latest − η·g in another buffer, whose lines are read for ownership before they are
    written: 4·S / update_gbs(S), where an in-place update is 3·S / update_gbs(S). A lone worker computed
    its gradient into that buffer (its CAS cannot fail, so g need not be kept for a retry): its pass is
    the in-place update (executors/cpu/lockfree.py). Attempts without retries."""
    from simasgd.sim import backend

    sc = loader.from_dict({**_scenario(workers).to_dict(), "algorithm": {"name": "leashed"}}, base_dir=tmp_path)
    s, model = _prepared(monkeypatch, _profile(tmp_path), sc)
    u = backend.run_once(sc, 0).updates
    first = u[u["retries"] == 0]
    assert len(first) > 0.9 * len(u)
    cas = 90e-9  # then the pointer's CAS: a line from memory (the profile's local latency, no [cas] table)
    want = model.update_into_s(s) if workers > 1 else model.update_s(s)
    np.testing.assert_allclose((first["t_write"] - first["t_grad_end"]).to_numpy(), want + cas, rtol=1e-9)
    rate = math.exp(np.interp(math.log(s), np.log(SIZES), np.log(UPD))) * 1e9  # the update's rate at S
    assert model.update_into_s(s) == pytest.approx(4 * s / rate, rel=1e-12)
    assert model.update_s(s) == pytest.approx(3 * s / rate, rel=1e-12)


def _leashed_on_a_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, given: float | None = None,
                        **sim: object):
    """Leashed-SGD on a 256 KiB model (between two of the table's sizes, as twice it is), its gradients from a
    one-sample table (1e-4 s), or ``given`` as a constant ``[timing] gradient``: the model's bytes, the cache
    model, the run's rows."""
    from simasgd.sim import backend

    doc = {**_scenario(workers).to_dict(), "algorithm": {"name": "leashed"},
           "workload": {"model": "least_squares", "dataset": "synthetic", "batch_size": 8, "features": 32768,
                        "samples": 64},
           "timing": {} if given is None else {"gradient": {"dist": "deterministic", "mean_s": given}}}
    sc = _with_sim(loader.from_dict(doc, base_dir=tmp_path), **sim)
    path = _profile(tmp_path)
    _with_snapshot(path, sc)
    s, model = _prepared(monkeypatch, path, sc)
    return s, model, backend.run_once(sc, 0).updates


@pytest.mark.parametrize("workers", [1, 2])
def test_a_leashed_gradient_pays_for_the_vectors_its_cycle_adds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                workers: int) -> None:
    """With other workers, a Leashed-SGD cycle touches four model-sized vectors (the latest it computes on, its
    gradient, the fresh vector it builds, the latest it builds from) where the calibration timed the gradient on
    two (θ and the gradient): each gradient's two streams run at the copy rate of 4·S touched (a copy of 2·S)
    instead of 2·S (a copy of S), adding 2·S/gbs(2·S) − 2·S/gbs(S). A lone worker computes into the vector it
    publishes (two vectors) and adds nothing. Every gradient phase is the table's sample plus that."""
    s, _model, u = _leashed_on_a_table(tmp_path, monkeypatch, workers)
    gbs = lambda size: math.exp(np.interp(math.log(size), np.log(SIZES), np.log(GBS))) * 1e9
    extra = 2 * s / gbs(2 * s) - 2 * s / gbs(s) if workers > 1 else 0.0
    assert workers == 1 or extra > 1e-6  # the two sizes' rates differ here
    np.testing.assert_allclose((u["t_grad_end"] - u["t_grad_start"]).to_numpy(), 1e-4 + extra, rtol=1e-9)


def test_a_leashed_gradient_off_the_cache_model_is_the_sample(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``[sim] cache_model = false``: one bandwidth for every size, so no footprint to outgrow."""
    _s, _model, u = _leashed_on_a_table(tmp_path, monkeypatch, 2, cache_model=False)
    np.testing.assert_allclose((u["t_grad_end"] - u["t_grad_start"]).to_numpy(), 1e-4, rtol=1e-9)


def test_a_given_gradient_time_is_the_whole_leashed_gradient(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``[timing] gradient`` the scenario gives is what a gradient takes: a constant one is every gradient
    phase, on the same cache model that adds the footprint's time to a calibrated one."""
    _s, _model, u = _leashed_on_a_table(tmp_path, monkeypatch, 2, given=2e-4)
    np.testing.assert_allclose((u["t_grad_end"] - u["t_grad_start"]).to_numpy(), 2e-4, rtol=1e-9)


def test_the_lopez_master_steps_at_the_warm_update_rate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master computes no gradient between its steps and alone writes θ; its step is one pass (θ ← θ −
    η·acc/(N−1) reads the sum as it writes θ): each step takes the warm `[copy_by_size]` update. Passes that cost nothing
    (adds and line moves of 1e-18 s) are never under way as a step begins, so its step rate is 1 / update,
    to within the run's ends."""
    from simasgd.numerics.workloads import build_workload
    from simasgd.sim import backend

    path = _profile(tmp_path, coherence=True)
    sc = loader.from_dict({**_scenario(2).to_dict(), "algorithm": {"name": "lopez"}})
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    s = wl.dim * np.dtype(wl.dtype).itemsize
    model = CacheModel.from_profile(machine.load_profile(path).profile)
    _with_snapshot(path, sc)
    path.write_text(path.read_text() + "\n[cas]\nlatency_s = 1e-18\n\n[locks]\nhandoff_s = 1e-18\n")
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    (run,) = backend.run_once(sc, 0).runs
    assert run.updates_per_s * model.update_s(s) == pytest.approx(1.0, rel=0.01)


@pytest.mark.parametrize("coherence", [True, False])
def test_beside_an_atomic_pass_the_lopez_master_steps_at_another_cores_rate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, coherence: bool) -> None:
    """While a worker's atomic pass over the sum is under way as a step begins, the sum's lines come from
    the adder's cache: the step takes the update at another core's rate (`[coherence]`). Passes of 1e-5 s
    an add (~1 s a pass against 0.1 ms gradients) nearly always are: steps at 1 / shared update, to within
    the share of the time the worker spends outside its passes; `[sim] coherence = false`: the own rate."""
    from simasgd.numerics.workloads import build_workload
    from simasgd.sim import backend

    path = _profile(tmp_path, coherence=True)
    path.write_text(path.read_text() + "\n[cas]\nlatency_s = 1e-5\n")
    sc = _with_sim(loader.from_dict({**_scenario(2).to_dict(), "algorithm": {"name": "lopez"},
                                     "stop": {"max_updates": 3000, "max_time_s": 1e9}}), coherence=coherence)
    wl = build_workload(sc.workload, sc.seed, sc.base_dir)
    s = wl.dim * np.dtype(wl.dtype).itemsize
    model = CacheModel.from_profile(machine.load_profile(path).profile)
    step = model.update_s(s, True) if coherence else model.update_s(s)
    assert not math.isclose(model.update_s(s, True), model.update_s(s), rel_tol=0.1)  # the two are told apart
    monkeypatch.setenv(machine.PROFILE_ENV, str(path))
    (run,) = backend.run_once(sc, 0).runs
    assert run.updates_per_s * step == pytest.approx(1.0, rel=0.03)


def test_a_leashed_pass_is_timed_by_where_the_lines_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leashed-SGD's pass (θ_latest − η·g built in a fresh vector: four streams) is a step like an update,
    timed by where the model's lines are as it begins (``LastWriter``): the worker's own lines (it published
    last, no one has read them since) at the private rate, lines another core wrote since this worker
    touched them at the coherence rate, lines another core has read since they were written (held) at the
    held update's rate. Two workers computing exponential gradients meet all three; every pass without
    retries takes one of them, then the CAS."""
    from simasgd.sim import backend

    path = _profile(tmp_path, coherence=True)
    path.write_text(path.read_text().replace(
        "[coherence]\n", f"[coherence]\nheld_read_gbs = {HELD_READ}\nheld_write_gbs = {HELD_WRITE}\n"))
    sc = loader.from_dict({**_scenario(2).to_dict(), "algorithm": {"name": "leashed"}}, base_dir=tmp_path)
    s, model = _prepared(monkeypatch, path, sc)
    held = model.held_s(s, True)
    assert held is not None
    times = (model.update_into_s(s), model.update_into_s(s, True), held * 4 / 3)  # own, another's, held
    assert times[0] < times[1] < times[2]
    u = backend.run_once(sc, 0).updates
    once = u[u["applied"] & (u["retries"] == 0)]
    phase = (once["t_write"] - once["t_grad_end"]).to_numpy() - 90e-9  # the CAS: a line from memory
    kinds = [np.isclose(phase, t, rtol=1e-9, atol=0) for t in times]
    assert len(phase) > 1000 and np.logical_or.reduce(kinds).all()
    assert all(k.any() for k in kinds)


def test_a_profile_with_keys_of_removed_mechanisms_simulates_as_one_without(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys nothing reads any more (Leashed's two-worker pass by destination, the host's shared speed, the steps
    timed in a worker's cycle) are ignored: a profile calibrated while their mechanisms were in the model
    loads, and a Leashed run on it is the run on the same profile without them, row for row."""
    import pandas as pd

    from simasgd.machines.profile import workload_key
    from simasgd.sim import backend

    sc = loader.from_dict({**_scenario(2).to_dict(), "algorithm": {"name": "leashed"}}, base_dir=tmp_path)
    runs = []
    for old in (False, True):
        (tmp_path / str(old)).mkdir()
        path = _profile(tmp_path / str(old), coherence=True)
        steps = ("cycle_read_median_s = 1e-06", "cycle_update_median_s = 2e-06", "cycle_fresh_median_s = 3e-06",
                 "cycle_fresh_s = [3e-06, 3e-06]")
        _with_snapshot(path, sc, None, *(steps if old else ()))
        if old:
            kinds = ("", "claimed_", "retry_", "kept_", "claimed_dropping_")
            removed = [f"cycle_fresh_k2_{k}median_s = 4e-05" for k in kinds] + [
                "cycle_fresh_k2_in_placement = true", f'[gradient."{workload_key(sc.workload)}".concurrent]',
                "k2_speed_corr = 0.7", "k2_speed_time_s = 0.00045", ""]
            path.write_text(path.read_text() + "\n".join(removed))
        monkeypatch.setenv(machine.PROFILE_ENV, str(path))
        runs.append(backend.run_once(sc, 0).updates)
    assert len(runs[0]) > 1000
    pd.testing.assert_frame_equal(runs[0], runs[1])


SNAP_S = 40e-6  # the loss snapshot's copy, against 1e-4 s gradients and µs steps: one row in k stands out


@pytest.mark.parametrize("algorithm", ["mutex", "hogwild", "leashed"])
def test_the_worker_that_makes_every_kth_version_copies_it_into_the_loss_ring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algorithm: str) -> None:
    """One worker: an update phase takes the warm update (Leashed: the update over its gradient, then the
    CAS's line) and, when
    its version is a multiple of k = stop.eval_updates(), the profile's `cycle_snapshot_median_s` on top;
    an executor that takes no such snapshots (traits `snapshots = false`) never."""
    from simasgd.sim import backend

    sc = loader.from_dict({**_scenario(1).to_dict(), "algorithm": {"name": algorithm}})
    path = _profile(tmp_path)
    s, model = _prepared(monkeypatch, path, sc)
    _with_snapshot(path, sc, SNAP_S)
    step = model.update_s(s) + (90e-9 if algorithm == "leashed" else 0.0)
    k = sc.stop.eval_updates()
    for switch in (True, False):
        _traits(monkeypatch, snapshots=switch)
        u = backend.run_once(sc, 0).updates
        v = u["version"].to_numpy()
        due = (v % k == 0) & (v < sc.stop.max_updates) & switch  # the budget's last version ends the run
        assert due.sum() >= 100 or not switch
        np.testing.assert_allclose((u["t_write"] - u["t_grad_end"]).to_numpy(), step + SNAP_S * due, rtol=1e-9)


def test_a_mutex_holder_copies_the_snapshot_before_it_releases_the_lock(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers: version v + 1's update cannot begin before version v's row ends, its copy included (the
    executor copies under the lock); so a snapshot row ends SNAP_S after its own update, and the next
    row's update starts at or after that."""
    from simasgd.sim import backend

    sc = _with_sim(_scenario(2), coherence=False)
    path = _profile(tmp_path)
    s, model = _prepared(monkeypatch, path, sc)
    _with_snapshot(path, sc, SNAP_S)
    update = model.update_s(s)
    u = backend.run_once(sc, 0).updates.sort_values("version").reset_index(drop=True)
    v, t_write = u["version"].to_numpy(), u["t_write"].to_numpy()
    due = (v % sc.stop.eval_updates() == 0) & (v < sc.stop.max_updates)
    began = t_write - update - SNAP_S * due  # each update's start: the lock is taken by then
    assert np.all(began[1:] >= t_write[:-1] - 1e-12)
    assert np.all((t_write - u["t_grad_end"].to_numpy())[due] >= update + SNAP_S - 1e-12)
    # the next worker waited for the copy: some lock waits are at least the copy long
    assert (u["lock_wait_s"].to_numpy()[1:][due[:-1]] >= SNAP_S - 1e-12).any()


def test_a_lopez_master_pays_the_snapshot_every_kth_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master makes every version: its step rate is 1 / (update + SNAP_S / k), to within the run's ends (its
    step reads the sum inside its update)."""
    from simasgd.sim import backend

    path = _profile(tmp_path)
    sc = loader.from_dict({**_scenario(2).to_dict(), "algorithm": {"name": "lopez"}})
    s, model = _prepared(monkeypatch, path, sc)
    _with_snapshot(path, sc, SNAP_S)
    step = model.update_s(s)
    for switch, each in ((True, step + SNAP_S / sc.stop.eval_updates()), (False, step)):
        _traits(monkeypatch, snapshots=switch)
        (run,) = backend.run_once(sc, 0).runs
        assert run.updates_per_s * each == pytest.approx(1.0, rel=0.01)


def _previous(u, col: str):
    """Per row (rows sorted by worker, then t_start), the same worker's previous row's ``col`` (NaN first)."""
    return u.groupby("worker")[col].shift(1).to_numpy()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_lock_worker_skips_its_read_exactly_when_theta_is_at_its_own_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """The cpu executor's run_locked (traits `reads = "elided"`): a read (lock-free here, so its phase is the
    copy alone) costs nothing when θ is at the version this worker's own last update made, else the copy's
    time; an executor that copies every time (`reads = "copy"`), or a read time given in [timing]: every
    read copies."""
    from simasgd.sim import backend

    _traits(monkeypatch, reads="elided")
    sc = _with_sim(_scenario(workers), read_lock=False)
    s, model = _prepared(monkeypatch, _profile(tmp_path), sc)
    u = backend.run_once(sc, 0).updates.sort_values(["worker", "t_start"]).reset_index(drop=True)
    read = (u["t_grad_start"] - u["t_start"]).to_numpy()
    own = u["read_version"].to_numpy() == _previous(u, "version")
    assert own.any() and (workers == 1 or (~own[1:]).any())
    np.testing.assert_allclose(read, np.where(own, 0.0, model.read_s(s)), rtol=1e-9, atol=0)
    _traits(monkeypatch, reads="copy")
    off = backend.run_once(sc, 0).updates
    np.testing.assert_allclose(off["t_grad_start"] - off["t_start"], model.read_s(s), rtol=1e-9)
    _traits(monkeypatch, reads="elided")
    given = loader.from_dict({**sc.to_dict(), "timing": {**sc.to_dict()["timing"], "read": {"dist": "deterministic",
                                                                                            "mean_s": 3e-6}}})
    u = backend.run_once(given, 0).updates
    np.testing.assert_allclose(u["t_grad_start"] - u["t_start"], 3e-6, rtol=1e-9)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_hogwild_worker_alone_reads_once_and_two_read_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   workers: int) -> None:
    """The executor's run_hogwild: alone in the run, a worker's update leaves θ in its copy and only its first
    read copies; with another worker every read copies (a skipped read pulled the executor's workers into
    convoys)."""
    from simasgd.sim import backend

    _traits(monkeypatch, reads="elided")
    sc = _hogwild(workers)
    s, model = _prepared(monkeypatch, _profile(tmp_path), sc)
    u = backend.run_once(sc, 0).updates.sort_values(["worker", "t_start"]).reset_index(drop=True)
    read = (u["t_grad_start"] - u["t_start"]).to_numpy()
    first = u.groupby("worker").cumcount().to_numpy() == 0
    expected = np.where(first | (workers > 1), model.read_s(s), 0.0)
    np.testing.assert_allclose(read, expected, rtol=1e-9, atol=0)
