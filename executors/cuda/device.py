"""Finding the GPU (or numba's CUDA simulator), lazily: nothing here imports numba.cuda at module load.

``require()`` returns the ``numba.cuda`` module or raises :class:`NoDevice`
with one line saying what is missing. Under the simulator
(``NUMBA_ENABLE_CUDASIM=1``, read when numba.cuda is first imported) kernels
run synchronously in the launching thread, and the simulator swaps a
module-level fake ``cuda`` into a kernel's globals while it runs: two host
threads launching kernels of one module at once would corrupt each other's
grid. :func:`launch_lock` is therefore a real lock under the simulator and a
no-op on a GPU, where launches are asynchronous and thread-safe.

The simulator guards each kind of atomic with a lock of its own, so an
``atomic.add`` and an ``atomic.cas`` on one word interleave: the add of 0 that
reads a word writes back the value it read over a CAS that landed between
(Leashed-SGD's latest index moved back, one version published twice). A GPU's
atomics on one address are linearisable; :func:`require` makes the
simulator's so by giving every kind the same lock.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from simasgd.runs.backends import BackendError

SIM_ENV = "NUMBA_ENABLE_CUDASIM"
_SIM_LOCK = threading.RLock()
_ATOMIC_LOCK = threading.Lock()


class NoDevice(BackendError):
    """No CUDA GPU and no simulator: the cuda backend cannot run here (the CLI prints it as one line)."""


def simulator() -> bool:
    """numba's CUDA simulator is (or will be) what numba.cuda is in this process."""
    from numba.core import config

    if "numba.cuda" not in sys.modules and os.environ.get(SIM_ENV, "0") not in ("", "0"):
        config.reload_config()  # the variable was set after numba was imported (a test's conftest)
    return bool(config.ENABLE_CUDASIM)


def require() -> ModuleType:
    """numba.cuda, with a GPU or the simulator behind it; else :class:`NoDevice` (one line)."""
    sim = simulator()
    from numba import cuda

    if sim:
        _one_atomic_lock()
    if sim or cuda.is_available():
        return cuda
    raise NoDevice("backend 'cuda': no CUDA GPU found (numba.cuda.is_available() is false); "
                   f"run on a machine with an NVIDIA GPU and driver, or set {SIM_ENV}=1 for numba's CUDA simulator")


def _one_atomic_lock() -> None:
    """Every atomic of the simulator under one lock (module docstring). Each holds its lock alone and
    calls nothing that takes another, so one plain lock cannot deadlock."""
    from numba.cuda.simulator import kernelapi

    names = [n for n, v in vars(kernelapi).items() if n.endswith("lock") and isinstance(v, type(_ATOMIC_LOCK))]
    for name in names:
        setattr(kernelapi, name, _ATOMIC_LOCK)


def describe() -> dict[str, Any]:
    """The device, for results metadata."""
    cuda = require()
    if simulator():
        return {"device": "numba CUDA simulator", "simulator": True}
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return {"device": name, "simulator": False, "sms": int(dev.MULTIPROCESSOR_COUNT),
            "compute_capability": list(dev.compute_capability)}


SIM_SWITCH_S = 2e-4  # the interpreter's thread switch interval during a simulated run (Python's default: 5 ms)


@contextlib.contextmanager
def sim_turns() -> Iterator[None]:
    """Under the simulator, for a run: threads take the interpreter's turns every ``SIM_SWITCH_S``. A
    simulated block's threads meet at barriers many times a kernel, and each meeting waits for the turns
    of the threads that are not waiting (the simulator's own polls the block's threads). On a GPU:
    nothing."""
    if not simulator():
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@contextlib.contextmanager
def launch_lock() -> Iterator[None]:
    """Serialises kernel launches under the simulator (module docstring); nothing on a GPU."""
    if simulator():
        with _SIM_LOCK:
            yield
    else:
        yield
