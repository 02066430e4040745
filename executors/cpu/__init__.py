"""The CPU executor (backend ``cpu``): numba nogil worker loops on real OS threads."""

from simasgd.spec.traits import ExecutorTraits

# Its traits (simasgd/spec/traits.py), here so that the simulator reads them without importing the executor:
# run_locked keeps the updated θ in the worker's copy and skips a read that would find it unchanged (HOGWILD!
# only alone: shared.S_ELIDED counts them); its spin locks pause 64 times between sched_yield calls
# (shared.SPINS_BEFORE_YIELD); take_snapshot copies θ into the loss ring inside the update; the record, budget
# check and clock between cycles are nopython (executors/calibration/bookkeeping.py times them).
TRAITS = ExecutorTraits(reads="elided", lock_waiters="spin_pauses", snapshots=True, bookkeeping="nopython",
                        updates="mirrored")
