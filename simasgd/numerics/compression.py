"""1-bit gradient quantisation with error feedback (Seide, Fu, Droppo, Li, Yu 2014), written once.

Used by the simulator's numerics and by the cpu loops (numba, ``cache=True``),
for every algorithm with the ``onebit`` parameter (``sync``, ``param_server``,
``backup``). One sender (a worker) keeps a residual ``e`` (the quantisation
error not yet sent, zero at the start) and, for each gradient ``g``::

    v = g + e                         # the error of earlier messages is fed back
    q = Q(v)                          # what is sent: one bit per element + 2 floats per bucket
    e = v − q                         # what q left out waits for the next message

``Q`` is Seide et al.'s two-level quantiser (Hattendorf 2024 §3.2 describes it
as "quantizing it to its sign" with the errors "added to the gradients of the
subsequent mini-batch"): the vector is cut into buckets of :data:`BUCKET`
elements (Seide et al. quantise per column of a weight matrix); in a bucket,
every element ``v_i >= 0`` is sent as the mean of the bucket's non-negative
elements, every ``v_i < 0`` as the mean of its negative ones. These two means
minimise the squared error of a sign quantiser, and they make ``Q`` a
contraction: ``‖v − Q(v)‖² <= (1 − 1/B)‖v‖²`` per bucket of B elements
(``‖v − Q(v)‖² = ‖v‖² − n₊μ₊² − n₋μ₋² <= ‖v‖² − ‖v‖₁²/B``), so with gradients
bounded by ``G`` the residual stays bounded, ``‖e‖ <= G·√(1−δ)/(1 − √(1−δ))``
with ``δ = 1/B`` (:func:`residual_bound`), and Σq = Σg − e: every gradient
reaches the receiver in full, only late (``tests/test_compression.py``).

API (all arrays 1-d, contiguous, the same float dtype):

- :func:`quantize` ``(g, residual, out)`` — ``out ← Q(g + residual)``, ``residual ← g + residual − out``;
  the one call a sender makes per message (njit; callable from Python and from nopython loops).
- :func:`message_bytes` ``(dim)`` — bytes of one quantised message on the wire: ⌈d/8⌉ sign bytes and
  two float32 reconstruction values per bucket (what ``simasgd.sim.network`` charges and the results record).
- :data:`SOURCE_HASH` — a cached numba caller in another file builds itself in a closure over it
  (as over ``update_rule.SOURCE_HASH``), so its cache follows edits of this file.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
from numba import njit

SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]

BUCKET = 256           # elements sharing one pair of reconstruction values
WIRE_FLOAT_BYTES = 4   # the reconstruction values travel as float32


def message_bytes(dim: int) -> int:
    """Bytes of one 1-bit message for a ``dim``-element gradient: the signs and each bucket's two values."""
    buckets = (dim + BUCKET - 1) // BUCKET
    return (dim + 7) // 8 + 2 * WIRE_FLOAT_BYTES * buckets


def residual_bound(gradient_norm: float, bucket: int = BUCKET) -> float:
    """The bound on ‖e‖ of error feedback with gradients of norm <= ``gradient_norm`` (module docstring)."""
    c = math.sqrt(1.0 - 1.0 / bucket)
    return gradient_norm * c / (1.0 - c)


@njit(nogil=True, cache=True)
def quantize(g: np.ndarray, residual: np.ndarray, out: np.ndarray) -> None:
    """``out ← Q(g + residual)`` and ``residual ← g + residual − out`` (Seide et al.'s 1-bit SGD step).

    ``out`` may be ``g`` itself (the gradient buffer is then replaced by what is sent)."""
    d = g.shape[0]
    for lo in range(0, d, BUCKET):
        hi = min(lo + BUCKET, d)
        pos_sum, neg_sum = 0.0, 0.0
        n_pos = 0
        for i in range(lo, hi):
            v = g[i] + residual[i]
            residual[i] = v            # the residual holds v until the bucket's levels are known
            if v >= 0.0:
                pos_sum += v
                n_pos += 1
            else:
                neg_sum += v
        n_neg = (hi - lo) - n_pos
        pos = pos_sum / n_pos if n_pos > 0 else 0.0
        neg = neg_sum / n_neg if n_neg > 0 else 0.0
        for i in range(lo, hi):
            v = residual[i]
            q = pos if v >= 0.0 else neg
            out[i] = q
            residual[i] = v - q
