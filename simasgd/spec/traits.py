"""How a backend's workers behave around their steps: its executor's traits.

The machine decides what a copy or a gradient costs; the executor decides which copies happen, what a
worker does while a lock is taken, and what else it does between its steps. Each backend module declares
its ``TRAITS`` (an :class:`ExecutorTraits`, or None where the simulator models no CPU executor of it);
``simasgd.runs.backends.traits(name)`` reads them, and the simulator models the backend that ``[sim] traits``
names (``simasgd compare --backends sim,X`` names X where X declares them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Reads = Literal["elided", "copy"]
Updates = Literal["mirrored", "plain"]
LockWaiters = Literal["spin_pauses", "spin", "sleep"]
Bookkeeping = Literal["nopython", "python"]


@dataclass(frozen=True)
class ExecutorTraits:
    """What the simulator needs to know of an executor besides the machine it runs on."""

    # "elided": a worker whose private copy still is θ (no update since its own) skips the read, as the
    # cpu executor's lock loops do, and HOGWILD!'s with one worker; "copy": every read copies θ.
    reads: Reads
    # A lock waiter that finds the lock taken: "spin_pauses" spins, calling sched_yield only after its
    # pauses (the cpu executor's 64 between calls, profile [scheduler] spin_yield_s); "spin" spins and
    # yields at once; "sleep" gives its CPU away until the holder wakes it (a futex).
    lock_waiters: LockWaiters
    # The worker that makes every k-th version copies θ into the loss ring inside its update phase (under
    # its lock where it holds one), at the time calibrated in a worker's cycle (cycle_snapshot_median_s).
    snapshots: bool
    # The executor's own work between a worker's bump of the version and its next read of it (the record,
    # the budget check, the clock): "nopython" is the cpu executor's compiled path, calibrated as
    # [executor] bookkeeping_s and simulated; "python" runs the same nopython calls from the interpreter,
    # microseconds that no table calibrates: the simulator leaves it out rather than price it as compiled.
    bookkeeping: Bookkeeping
    # "mirrored": a lock worker's update writes the new θ into its own copy in the same sweep (the cpu executor's
    # mutex, rwlock and SSP loops, ``update_rule.step_mirrored``: what lets a read be skipped), timed apart where
    # its lines are held by another cache too ([coherence] held_mirrored_gbs); "plain": θ ← θ − η·g alone.
    updates: Updates = "plain"

    def record(self, of: str) -> dict[str, Any]:
        """The traits as a result's ``metadata["model"]["traits"]`` records them: whose, then each value."""
        return {"of": of, **asdict(self)}


def describe(record: dict[str, Any] | None) -> str:
    """One line for :meth:`ExecutorTraits.record`: whose traits, and what they are."""
    if not record:
        return "executor traits: none (the simulator models no CPU executor here)"
    books = {"nopython": "bookkeeping as calibrated", "python": "its interpreter's bookkeeping not modelled"}
    return (f"executor traits: {record.get('of')}'s (reads {record.get('reads')}, lock waiters "
            f"{str(record.get('lock_waiters')).replace('_', ' with ')}, loss snapshots "
            f"{'in the update' if record.get('snapshots') else 'not priced'}, "
            f"{books.get(str(record.get('bookkeeping')), str(record.get('bookkeeping')))}"
            f"{', updates mirrored into the copy' if record.get('updates') == 'mirrored' else ''})")
