"""The simulator's atomics on one word are linearisable, as a GPU's are (executors/cuda/device.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from executors.cuda import device

PAUSE_S = 0.05


class _SlowWord(np.ndarray):
    """A word whose every read takes PAUSE_S after it reads, so an atomic that is not exclusive with
    another one on the same word lets the other land between its read and its write."""

    def __getitem__(self, key: Any) -> Any:
        got = np.ndarray.__getitem__(self, key)
        time.sleep(PAUSE_S)
        return got


@pytest.mark.skipif(not device.simulator(), reason="the simulator's atomics; a GPU's need no test here")
def test_an_add_of_zero_never_undoes_a_cas_between_its_read_and_write(cuda: Any) -> None:
    # The load (add of 0) reads the word, then its read-modify-write reads again and writes what it read;
    # the CAS starts inside that window. Linearisable: whichever goes first, the CAS's success stays.
    from numba.cuda.simulator.kernelapi import FakeCUDAAtomic

    word = np.zeros(1, dtype=np.int64).view(_SlowWord)
    atomic = FakeCUDAAtomic()
    got: dict[str, int] = {}
    load = threading.Thread(target=lambda: got.setdefault("load", int(atomic.add(word, 0, 0))))
    swap = threading.Thread(target=lambda: got.setdefault("cas", int(atomic.cas(word, 0, 0, 7))))
    load.start()
    time.sleep(PAUSE_S / 5)
    swap.start()
    load.join()
    swap.join()
    assert got["cas"] == 0  # the CAS found 0 and swapped
    assert int(np.ndarray.__getitem__(word, 0)) == 7
    assert got["load"] in (0, 7)
