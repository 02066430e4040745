"""The executor's loss snapshot timed inside a one-thread worker's cycle: a gradient table's
``cycle_snapshot_s``.

A worker of the cpu executor that makes every k-th version copies θ, just updated, into the next slot of a
loss ring inside its update phase (``executors.cpu.shared.take_snapshot``). A slot is written once a run or
less, so the copy's destination is in no cache, and between two such copies the worker's gradient passes
its own traffic (weights, activations, the gradient) through the core's caches. So calibration runs a
worker's cycle on one thread, the gradient the workload's kernel and the steps as the executor makes them
(``update_rule.step_mirrored`` in place, then ``memops.copy_into``), and every ``SNAPSHOT_EVERY``-th cycle
copies θ into a loss ring built as the executor builds its own (:func:`executors.cpu.monitor.new_ring`, the
full memory budget), timing that copy. The simulator charges the median where the executor it models takes
such snapshots (its traits' ``snapshots``, simasgd/spec/traits.py). The cycle's other steps are timed too
(the kernel times what it runs) and not kept: the simulator prices them at the warm ``[copy_by_size]`` rates
and the ``[coherence]`` ones (docs/model.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from executors import atomics as A
from simasgd.numerics import update_rule
from simasgd.numerics.memops import copy_into
from simasgd.numerics.update_rule import step_mirrored
from simasgd.numerics.workloads.kernels import SOURCE_HASH, grad_over_theta, loss_and_grad


def _make_steps(kernels_version: str = SOURCE_HASH, rule_version: str = update_rule.SOURCE_HASH) -> Any:
    """The in-cycle step timer, in a closure over the kernel's and the update rule's source hashes."""

    @njit(nogil=True, cache=True)
    def time_steps(pool: np.ndarray, X: np.ndarray, y: np.ndarray, shape: np.ndarray, n_rows: np.ndarray, batch: int,
                   out_ns: np.ndarray, seed: np.ndarray, ring: np.ndarray, every: np.ndarray) -> None:
        """A one-thread worker's cycle with its model steps timed (ns), as the executor runs them (locks,
        HOGWILD!): ``pool[0]`` is the shared model, ``pool[1]`` the private copy; a gradient on the copy
        (written over it where ``kernels.grad_over_theta`` allows, as the executor's loops do), then the update
        ``θ −= η·g`` that leaves the new θ in the copy too (``out_ns[k, 0]``, ``update_rule.step_mirrored``)
        and the read ``θ → copy`` (``out_ns[k, 1]``). Every ``every``-th cycle copies θ into the next slot of
        ``ring`` between the update and the read (``out_ns[k, 2]``, else 0), as the executor's loss snapshot
        does."""
        if len(kernels_version) == 0 or len(rule_version) == 0:  # never: closure cells, in the cache key
            return
        np.random.seed(seed)
        d = pool.shape[1]
        g = np.zeros(d, dtype=pool.dtype)
        none = np.zeros(0, dtype=pool.dtype)
        idx = np.empty(batch, dtype=np.int64)
        gr = pool[1] if grad_over_theta(X, idx, shape) else g  # in place: over the copy, as the executor does
        slot = 0
        for k in range(out_ns.shape[0]):
            for i in range(batch):
                idx[i] = np.random.randint(0, n_rows)
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


# The in-place cycles between two loss snapshots: the executor's k for a 2000-update run (stop.eval_updates).
SNAPSHOT_EVERY = 10


def step_samples(timer: Any, theta: np.ndarray, wl: Any, n_rows: int, batch: int, n: int,
                 seed: int) -> dict[str, np.ndarray]:
    """The loss ring's copies (ns) over ``n`` in-place cycles (one every ``SNAPSHOT_EVERY``), the first 5%
    dropped (caches and clocks warming up): ``{"snapshot": ...}``. ``timer`` is :func:`time_steps` or its
    copy bound to the workload's own kernel (``executors.kernel.with_kernel``)."""
    from executors.cpu.monitor import new_ring

    ring = new_ring(theta, SNAPSHOT_EVERY, max_updates=1 << 40).data  # as large as the memory budget allows
    place = np.zeros((n, 3), dtype=np.int64)
    timer(np.stack([theta, theta]), wl.X, wl.y, wl.shape, n_rows, batch, place, seed, ring, SNAPSHOT_EVERY)
    del ring
    snaps = place[:, 2][place[:, 2] > 0]
    return {"snapshot": snaps[len(snaps) // 20:]}

