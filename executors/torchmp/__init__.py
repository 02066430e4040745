"""Backend ``torch``: one process per worker over shared memory, in the style of PyTorch's Hogwild example.

``backend.py`` (run_once), ``state.py`` (the shared arrays), ``worker.py`` (the loops),
``calibrate.py`` (gradient times of a ``model = "torch"`` workload for the profile).
"""

from simasgd.spec.traits import ExecutorTraits

# Its traits (simasgd/spec/traits.py), here so that the simulator reads them without importing the executor:
# worker.py's run_locked copies θ into its local buffer at every read (``local[:] = st.theta``), HOGWILD! too
# (local_copy); a waiter sleeps in a multiprocessing.Lock (a futex, polled every LOCK_POLL_S for an abort);
# the cpu executor's take_snapshot copies θ into the loss ring inside the update; the record, budget check
# and clock between cycles are the cpu executor's nopython calls made from the interpreter.
TRAITS = ExecutorTraits(reads="copy", lock_waiters="sleep", snapshots=True, bookkeeping="python")
