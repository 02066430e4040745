"""What every worker loop shares: one nopython function per algorithm, run by one OS thread for the whole run.

The loops live in one module per algorithm family, named as the simulator's (``simasgd/sim/algorithms/``):
``sequential``, ``locks``, ``lockfree``, ``synchronous``, ``bounded``, ``lopez``, ``decentral``, ``elastic``,
``param_server``; ``wiring.IMPLEMENTATIONS`` maps each algorithm to its loop.

Every loop has the same head — ``(w, X, y, shape, theta, vel, ctrl, cfg_i,
cfg_f, ri, rf, nrec, seed, slowdown, ring, meta)`` — and returns a code from
:mod:`executors.cpu.shared` (``OK``, ``STOPPED_WAITING``, ``BUFFER_FULL``).
The gradient is ``kernels.loss_and_grad`` called as a global, so no Python runs
between the read and the record and the loops load from numba's cache in every
process; they are built in a closure over :data:`CODE_VERSION` (the kernels'
and the update rule's source hashes) and a workload with its own kernel gets
a copy of its own (:mod:`executors.kernel`). Every update goes through
:mod:`simasgd.numerics.update_rule` (``shared.apply_update`` / ``seq_update``; HOGWILD! element-wise).

Version counting is the measuring instrument: every applied update does an
atomic fetch-add on ``ctrl[S_VERSION]`` — in HOGWILD! too — and records the
value it produced; ``read_version`` is the counter when the worker read θ.
Each record carries the cycle's phase boundaries in clock ns (``t_s`` cycle start,
``t_r`` the read version taken, ``t_gs``/``t_ge`` gradient start/end; the write
time is taken by ``record``): ``simasgd.evaluation.phases`` turns them into phase times.
The worker that makes a version the loss ring keeps copies θ there right away
(inside the lock for the lock-based loops), so the loss is never taken on a
thread that competes with the workers (``shared.take_snapshot``).
"""

from __future__ import annotations

from simasgd.numerics import compression, update_rule
from simasgd.numerics.workloads.kernels import SOURCE_HASH

# The loops' numba cache key: the kernels' source and the update rule's (a cached caller is not
# recompiled when a callee's file changes; closure values are part of the key).
CODE_VERSION = SOURCE_HASH + update_rule.SOURCE_HASH + compression.SOURCE_HASH  # sync's 1-bit quantiser too
