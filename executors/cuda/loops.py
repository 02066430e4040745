"""What the host side of every stream shares: one Python thread per worker enqueues its attempt's kernels.

Every attempt is read → gradient → update, with four time marks, and ends
with a stream synchronisation (one attempt in flight per stream, as
MagmaDNN's workers synchronise their stream each iteration). The loops hold
no Python lock while kernels run on a GPU (launches are asynchronous); under
the simulator launches are serialised (:func:`device.launch_lock`).

The loops live in one module per algorithm family, named as the simulator's: :mod:`.lockfree` (hogwild,
leashed), :mod:`.synchronous` (sync), :mod:`.lopez` (Alg. 2/3, master on stream 0 stepping
continuously); ``executors.cuda.IMPLEMENTATIONS`` maps each algorithm to its loop. Here: what they share.
"""

from __future__ import annotations

from typing import Any

from executors.cuda import kernels as K
from executors.cuda.model import launch


def read(r: Any, w: int, local: Any) -> None:
    """Copy θ into ``local`` on worker ``w``'s stream, noting the version counter in its record."""
    rec = r.records[w]
    launch(K.read_into, r.dim, r.streams[w], local, r.theta, r.ctr, rec.recr, rec.slot)


