"""One seed per scenario, a child stream per run, per role and per worker.

Streams are addressed, not spawned: ``SeedSequence(seed, spawn_key=(run, role, worker))``
gives the same stream in every process and for every backend, whatever order
things are created in. No global RNG anywhere.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Role(IntEnum):
    DATA = 0      # datasets, train/test split, evaluation rows (per scenario, not per run)
    INIT = 1      # initial parameters
    BATCH = 2     # minibatch indices, one stream per worker
    TIMING = 3    # simulated durations, one stream per worker
    SCHEDULE = 4  # anything else random in the run (peer choice, tie breaks), per worker
    SWEEP = 5     # seeds derived for sweep cells


def sequence(seed: int, run: int, role: Role, worker: int = 0) -> np.random.SeedSequence:
    return np.random.SeedSequence(seed, spawn_key=(run, int(role), worker))


def rng(seed: int, run: int, role: Role, worker: int = 0) -> np.random.Generator:
    return np.random.default_rng(sequence(seed, run, role, worker))


def worker_rngs(seed: int, run: int, role: Role, workers: int) -> list[np.random.Generator]:
    return [rng(seed, run, role, w) for w in range(workers)]


def int_seed(seed: int, run: int, role: Role, worker: int = 0) -> int:
    """A 63-bit integer seed for code that wants an int (numba's RNG, derived scenarios)."""
    return int(sequence(seed, run, role, worker).generate_state(1, np.uint64)[0] >> np.uint64(1))

