"""The model's steps timed inside a one-thread worker's cycle: a gradient table's
``cycle_read/update/fresh/snapshot_s``.

``[copy_by_size]`` times a copy and an update of a warm buffer back to back: the buffer is all a core
touches. A worker touches more between two steps: its gradient reads the weights, writes the
activations and the gradient (a 680 KB model at B = 16: two or three model-sized buffers in all, two where the
gradient is written over the copy, ``kernels.grad_over_theta``). On a
core whose private cache holds a model but not a worker's whole cycle (e.g. 2 MB of L2 a core and a
680 KB model), part of the model's lines are in the next level when the update and the read begin, and
warm rates predict too fast an update. So calibration runs a
worker's cycle on one thread, the gradient the workload's kernel, and times the steps as the executor
makes them: ``update_rule.step`` in place and ``memops.copy_into`` (locks, HOGWILD!), or
``update_rule.step_into`` into a fresh vector (Leashed-SGD). docs/profile.md has the keys; the
simulator uses their medians for a worker's own lines (``[sim] steps_in_cycle``, docs/model.md).

Every ``SNAPSHOT_EVERY``-th in-place cycle also copies θ, just updated, into the next slot of a loss ring
built as the executor builds its own (:func:`executors.cpu.monitor.new_ring`, the full memory budget):
the executor's worker that makes every k-th version does so inside its update phase
(``executors.cpu.shared.take_snapshot``), and a slot is written once a run or less, so the copy's
destination is in no cache: an update that takes the snapshot is markedly longer than one that does
not. The simulator charges the median where the executor it models takes such
snapshots (its traits' ``snapshots``, simasgd/spec/traits.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.numerics import update_rule
from simasgd.numerics.memops import copy_into
from simasgd.numerics.update_rule import step_into, step_mirrored
from simasgd.numerics.workloads.kernels import SOURCE_HASH, grad_over_theta, loss_and_grad


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


# Leashed-SGD's vectors the pass alternates between when timed alone, the pool's lowest free slot claimed:
# each vector built in the one published before the current. (The pass of a multi-worker run: a lone
# worker of the executor builds over its gradient instead, an update's time; executors/cpu/lockfree.py.)
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

