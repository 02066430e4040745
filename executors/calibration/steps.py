"""The model's steps timed inside a one-thread worker's cycle: a gradient table's
``cycle_read/update/fresh/snapshot_s``.

``[copy_by_size]`` times a copy and an update of a warm buffer back to back: the buffer is all a core
touches. A worker touches more between two steps: its gradient reads the weights, writes the
activations and the gradient (a 680 KB model at B = 16: two or three model-sized buffers in all, two where the
gradient is written over the copy, ``kernels.grad_over_theta``). On a
core whose private cache holds a model but not a worker's whole cycle (e.g. 2 MB of L2 a core and a
680 KB model), part of the model's lines are in the next level when the update and the read begin, and
warm rates predicted a 1-thread update of 17.6 µs where the executor took 23.7. So calibration runs a
worker's cycle on one thread, the gradient the workload's kernel, and times the steps as the executor
makes them: ``update_rule.step`` in place and ``memops.copy_into`` (locks, HOGWILD!), or
``update_rule.step_into`` into a fresh vector (Leashed-SGD). docs/profile.md has the keys; the
simulator uses their medians for a worker's own lines (``[sim] steps_in_cycle``, docs/model.md).

Every ``SNAPSHOT_EVERY``-th in-place cycle also copies θ, just updated, into the next slot of a loss ring
built as the executor builds its own (:func:`executors.cpu.monitor.new_ring`, the full memory budget):
the executor's worker that makes every k-th version does so inside its update phase
(``executors.cpu.shared.take_snapshot``), and a slot is written once a run or less, so the copy's
destination is in no cache: a 680 KB model's update took 32–60 µs longer when it took the snapshot
(2 MB of L2 a core). The simulator charges the median where the executor it models takes such
snapshots (its traits' ``snapshots``, simasgd/traits.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from executors.c2c import same_mode
from executors.cpu.leashed import acquire_latest, claim, pool_size, release
from executors.cpu.shared import CLAIMED, LINE, S_LATEST, new_ctrl
from simasgd import update_rule
from simasgd.memops import copy_into
from simasgd.update_rule import step_into, step_mirrored
from simasgd.workloads.kernels import SOURCE_HASH, grad_over_theta, loss_and_grad


def _make_steps(kernels_version: str = SOURCE_HASH, rule_version: str = update_rule.SOURCE_HASH) -> Any:
    """The in-cycle step timer, in a closure over the kernel's and the update rule's source hashes."""

    @njit(nogil=True, cache=True)
    def time_steps(pool: np.ndarray, X: np.ndarray, y: np.ndarray, shape: np.ndarray, n_rows: np.ndarray, batch: int,
                   out_ns: np.ndarray, seed: np.ndarray, fresh: np.ndarray, ring: np.ndarray,
                   every: np.ndarray) -> None:
        """A one-thread worker's cycle with its model steps timed (ns), as the executor runs them.

        In place (``fresh`` false; locks, HOGWILD!): ``pool[0]`` is the shared model, ``pool[1]`` the
        private copy; a gradient on the copy (written over it where ``kernels.grad_over_theta`` allows,
        as the executor's loops do), then the update ``θ −= η·g`` that leaves the new θ in the copy too
        (``out_ns[k, 0]``, ``update_rule.step_mirrored``) and the read ``θ → copy`` (``out_ns[k, 1]``): a
        read the executor makes when another worker has updated θ since (at one thread it makes none).
        Fresh (Leashed-SGD): the gradient on ``pool[cur]``, then
        ``θ' = pool[cur] − η·g`` built in the next vector of the pool (``out_ns[k, 0]``), which becomes
        the current one. Between two steps the gradient's own traffic (weights, activations, g)
        passes through the core's caches: on a core whose private cache holds a model but not a
        worker's cycle, the steps read part of their lines from the next level, which a warm copy
        timed back to back (``[copy_by_size]``) never does. In place, every ``every``-th cycle copies
        θ into the next slot of ``ring`` between the update and the read (``out_ns[k, 2]``, else 0),
        as the executor's loss snapshot does."""
        if len(kernels_version) == 0 or len(rule_version) == 0:  # never: closure cells, in the cache key
            return
        np.random.seed(seed)
        d = pool.shape[1]
        g = np.zeros(d, dtype=pool.dtype)
        none = np.zeros(0, dtype=pool.dtype)
        idx = np.empty(batch, dtype=np.int64)
        gr = pool[1] if grad_over_theta(X, idx, shape) else g  # in place: over the copy, as the executor does
        cur, slot = 0, 0
        for k in range(out_ns.shape[0]):
            for i in range(batch):
                idx[i] = np.random.randint(0, n_rows)
            if fresh:
                loss_and_grad(pool[cur], X, y, idx, g, shape)
                nxt = (cur + 1) % pool.shape[0]
                t0 = A.now_ns()
                step_into(pool[nxt], none, pool[cur], none, g, 1e-12, 0.0, 0, False)
                out_ns[k, 0] = A.now_ns() - t0
                cur = nxt
            else:
                loss_and_grad(pool[1], X, y, idx, gr, shape)
                t0 = A.now_ns()
                step_mirrored(pool[0], none, gr, pool[1], 1e-12, 0.0, 1.0)  # the new θ into the copy too
                t1 = A.now_ns()
                out_ns[k, 0] = t1 - t0
                if ring.shape[0] > 0 and (k + 1) % every == 0:
                    copy_into(ring[slot % ring.shape[0]], pool[0])
                    slot += 1
                    t2 = A.now_ns()
                    out_ns[k, 2] = t2 - t1
                    t1 = t2
                copy_into(pool[1], pool[0])
                out_ns[k, 1] = A.now_ns() - t1

    return time_steps


time_steps = _make_steps()


# What a two-thread pass was built into (``time_shared_fresh``'s ``kinds``): the executor's worker claims a
# free pool vector after it published; keeps its own vector after a failed CAS and builds in it again at
# once (a retry), or, after a dropped attempt (persistence reached), after its next gradient.
PASS_CLAIMED, PASS_RETRY, PASS_KEPT = 0, 1, 2
PASS_KINDS = {PASS_CLAIMED: "claimed", PASS_RETRY: "retry", PASS_KEPT: "kept"}


def _make_shared_fresh(kernels_version: str = SOURCE_HASH, rule_version: str = update_rule.SOURCE_HASH) -> Any:
    """The two-thread Leashed pass timer, in a closure over the kernel's and the update rule's source hashes."""

    @njit(nogil=True, cache=True)
    def time_shared_fresh(pool: np.ndarray, X: np.ndarray, y: np.ndarray, shape: np.ndarray, n_rows: np.ndarray,
                          batch: int, out_ns: np.ndarray, kinds: np.ndarray, persistence: np.ndarray, seed: np.ndarray,
                          ctrl: np.ndarray, rc: np.ndarray, stale: np.ndarray, peak: np.ndarray) -> None:
        """One of two threads sharing a pool of vectors with the executor's Leashed-SGD protocol
        (executors/cpu/leashed.py: ``acquire_latest``, ``claim``, ``release``, the CAS on the latest
        index) without its records, versions and budget: a gradient on the latest vector in place, then
        ``θ' = latest − η·g`` built in the thread's own vector (each pass timed, ``out_ns[k]``), which it
        then publishes. Its own vector is the lowest-index free one, claimed after each publication:
        one core wrote it and both gradients read it in place a publication or two before, so its lines
        may be valid in the other core's cache and each write first invalidates them (the held lines of
        ``[coherence] held_write_gbs``), while the gradients' traffic in between has evicted some of them.
        A failed CAS builds again in the same vector, as the executor's retries do, up to ``persistence``
        times (-1: unbounded); past that the attempt is dropped and the vector kept for the next
        gradient's pass. ``kinds[k]``: ``PASS_CLAIMED``, ``PASS_RETRY`` or ``PASS_KEPT``, which the
        simulator times apart (its lines are in this core's cache in the last two)."""
        if len(kernels_version) == 0 or len(rule_version) == 0:  # never: closure cells, in the cache key
            return
        np.random.seed(seed)
        g = np.zeros(pool.shape[1], dtype=pool.dtype)
        none = np.zeros(0, dtype=pool.dtype)
        idx = np.empty(batch, dtype=np.int64)
        mine, k = -1, 0
        while k < out_ns.shape[0]:
            for i in range(batch):
                idx[i] = np.random.randint(0, n_rows)
            pr = acquire_latest(ctrl, rc)
            loss_and_grad(pool[pr], X, y, idx, g, shape)
            release(rc, pr)
            kind = PASS_KEPT if mine >= 0 else PASS_CLAIMED  # kept: held over from a dropped attempt
            if mine < 0:
                mine = claim(ctrl, rc, stale, peak)
            failures = 0
            while k < out_ns.shape[0]:
                base = acquire_latest(ctrl, rc)
                t0 = A.now_ns()
                step_into(pool[mine], none, pool[base], none, g, 1e-12, 0.0, 0, False)
                out_ns[k] = A.now_ns() - t0
                kinds[k] = kind
                k += 1
                A.store(stale, mine * LINE, 0)
                if A.cas(ctrl, S_LATEST * LINE, base, mine) == base:
                    A.fetch_add(rc, mine * LINE, -CLAIMED)
                    A.store(stale, base * LINE, 1)
                    release(rc, base)
                    mine = -1
                    break
                release(rc, base)
                failures += 1
                if persistence >= 0 and failures > persistence:
                    break  # dropped: the vector stays this thread's (the executor's ``mine``)
                kind = PASS_RETRY

    return time_shared_fresh


time_shared_fresh = _make_shared_fresh()
# Leashed-SGD's vectors the pass alternates between when timed alone, the pool's lowest free slot claimed:
# each vector built in the one published before the current. (The pass of a multi-worker run: a lone
# worker of the executor builds over its gradient instead, an update's time; executors/cpu/leashed.py.)
FRESH_POOL = 2
# The in-place cycles between two loss snapshots: the executor's k for a 2000-update run (stop.eval_updates).
SNAPSHOT_EVERY = 10


def step_samples(timer: Any, theta: np.ndarray, wl: Any, n_rows: int, batch: int, n: int,
                 seed: int) -> dict[str, np.ndarray]:
    """Per-step times (ns) of ``n`` cycles each, the first 5% dropped (caches and clocks warming up):
    ``update`` and ``read`` of the in-place cycle, ``fresh`` of Leashed's, ``snapshot`` of the loss
    ring's copies (one every ``SNAPSHOT_EVERY`` in-place cycles). ``timer`` is :func:`time_steps` or its
    copy bound to the workload's own kernel (``executors.kernel.with_kernel``)."""
    from executors.cpu.monitor import new_ring

    ring = new_ring(theta, SNAPSHOT_EVERY, max_updates=1 << 40).data  # as large as the memory budget allows
    place = np.zeros((n, 3), dtype=np.int64)
    timer(np.stack([theta, theta]), wl.X, wl.y, wl.shape, n_rows, batch, place, seed, False, ring,
          SNAPSHOT_EVERY)
    del ring
    fresh = np.zeros((n, 3), dtype=np.int64)
    timer(np.stack([theta] * FRESH_POOL), wl.X, wl.y, wl.shape, n_rows, batch, fresh, seed, True,
          np.zeros((0, theta.shape[0]), dtype=theta.dtype), SNAPSHOT_EVERY)
    warm = n // 20
    snaps = place[:, 2][place[:, 2] > 0]
    return {"update": place[warm:, 0], "read": place[warm:, 1], "fresh": fresh[warm:, 0],
            "snapshot": snaps[len(snaps) // 20:]}


MIN_OF_KIND = 10  # passes of a destination kind a run needs for its median
SHARED_FRESH_TRIES = 3  # runs of the two-thread pass; the median of their medians (a host's bad minute is one run)


def leashed_pool(theta: np.ndarray, workers: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The executor's Leashed pool for ``workers`` (``leashed.pool_size``), every vector θ, vector 0 the
    latest, and its control words as :func:`time_shared_fresh` takes them: (ctrl, rc, stale, peak)."""
    pool = np.stack([theta] * pool_size(workers))
    stale = np.zeros(pool.shape[0] * LINE, dtype=np.int64)
    stale[LINE::LINE] = 1  # every vector but the latest is free
    return pool, (new_ctrl(), np.zeros(pool.shape[0] * LINE, dtype=np.int64), stale, np.zeros(1, dtype=np.int64))


def _in_placement(runs: list[tuple[Any, ...]], like: float | None) -> list[tuple[Any, ...]]:
    """Of runs ``(..., c2c before, c2c after)``, those whose two probes agree and that are in ``like``'s
    placement (else the first such run's)."""
    steady = [r for r in runs if same_mode(r[-2], r[-1])]
    mode = like if like is not None else (steady[0][-2] if steady else None)
    return [r for r in steady if same_mode(r[-2], mode)]


def steady_runs(runs: list[tuple[Any, ...]], like: float | None = None) -> list[tuple[Any, ...]]:
    """The runs :func:`_in_placement` keeps; every run when it keeps none (nothing better to keep)."""
    return _in_placement(runs, like) or list(runs)


def shared_fresh_samples(timer: Any, theta: np.ndarray, wl: Any, n_rows: int, batch: int, n: int, seed: int,
                         cpus: list[int], threads: Any, probe: Callable[[], float | None] | None = None,
                         like: float | None = None, persistence: int = -1,
                         settle: Callable[[float | None], Any] | None = None) -> dict[str, Any] | None:
    """Leashed-SGD's pass as two workers on two CPUs make it (:func:`time_shared_fresh`, ``n`` passes each,
    the first 5% dropped, failed CASes retried up to ``persistence`` times, -1 unbounded),
    ``SHARED_FRESH_TRIES`` steady runs: ``samples_ns`` (every thread's, of the median run), ``median_ns``
    (the median of the runs' medians), ``by_kind_ns`` (the same per destination, ``PASS_KINDS``' names, of
    the kinds every steady run has at least ``MIN_OF_KIND`` of) and ``c2c_ns`` (each run's core-to-core
    hand-off before and after it, when ``probe`` gives one: ``executors.c2c.latency_ns``). A run whose
    probes disagree (the host moved the CPUs during it) or are not in ``like``'s placement is measured
    again, up to twice as many runs in all (:func:`steady_runs`); ``settle(like)``, given, is called before
    each run (``executors.c2c.wait_for``: a run started once the CPUs came home is likelier to stay there).
    ``in_placement``: whether the runs kept were in ``like``'s placement (false: none was, every run is
    kept, and the figures are another placement's). ``threads`` runs one call per thread pinned to
    ``cpus`` (``executors.calibration.timing.run_threads``). None with fewer than two CPUs."""
    if len(cpus) < 2:
        return None
    runs: list[tuple[Any, ...]] = []
    for t in range(2 * SHARED_FRESH_TRIES):
        pool, shared = leashed_pool(theta, 2)
        outs = [np.zeros(n, dtype=np.int64) for _ in range(2)]
        kinds = [np.full(n, -1, dtype=np.int64) for _ in range(2)]
        if settle is not None:
            settle(like)
        before = probe() if probe is not None else None
        threads(timer, [(pool, wl.X, wl.y, wl.shape, n_rows, batch, outs[i], kinds[i], persistence,
                         seed + 2 * t + i, *shared) for i in range(2)], cpus=cpus[:2])
        after = probe() if probe is not None else None
        kept = np.concatenate([o[n // 20:] for o in outs])
        kind = np.concatenate([o[n // 20:] for o in kinds])
        runs.append((float(np.median(kept)), kept, kind, before, after))
        if len(_in_placement(runs, like)) >= SHARED_FRESH_TRIES:  # without probes every run is steady
            break
    steady = sorted(steady_runs(runs, like), key=lambda r: r[0])
    by_kind = {}
    for code, name in PASS_KINDS.items():
        if all((r[2] == code).sum() >= MIN_OF_KIND for r in steady):
            by_kind[name] = float(np.median([np.median(r[1][r[2] == code]) for r in steady]))
    out: dict[str, Any] = {"samples_ns": steady[len(steady) // 2][1], "kinds": steady[len(steady) // 2][2],
                           "median_ns": float(np.median([r[0] for r in steady])), "by_kind_ns": by_kind,
                           "in_placement": bool(_in_placement(runs, like))}
    if probe is not None:
        out["c2c_ns"] = [float(x) for r in runs for x in (r[3], r[4]) if x is not None]
    return out
