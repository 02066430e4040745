"""How the executor's numba functions reach the workload kernel: as a global, cached by source.

A cached numba function that took the kernel dispatcher as an argument would be
keyed in numba's on-disk cache by the dispatcher's memory address: recompiled in
every process, one more cache file each time. So every executor function that
computes a gradient calls :func:`simasgd.numerics.workloads.kernels.loss_and_grad` (the
one dispatcher of every workload) as the module global ``loss_and_grad``, and
is built in a closure over ``kernels.SOURCE_HASH`` so that its cache also
follows edits of ``kernels.py`` (see that module's docstring)::

    def _make(kernels_version=SOURCE_HASH):
        @njit(nogil=True, cache=True)
        def run_x(w, X, y, shape, ...):
            if len(kernels_version) == 0:  # never; makes it a closure cell, part of the cache key
                return OK
            ... loss_and_grad(theta, X, y, idx, g, shape) ...
        return run_x

A workload may bring its own kernel (the executor tests' constant gradient):
:func:`with_kernel` compiles the very same function — same code object — with
the global ``loss_and_grad`` bound to that kernel and the global
``grad_over_theta`` (``kernels.grad_over_theta``: may the gradient be written
over the θ it is taken at?) bound to :func:`never_over`. Where the kernel is a
cached module-level numba function, the copy is cached too, under a name of its
own (its cache files apart from the original's) and with the kernel's name and
its file's bytes added to the ``kernels_version`` cell: another process loads
it, and an edit of the kernel's file recompiles it. Any other kernel (one built
in a function: its closure's values are in no file) gets an uncached copy,
compiled once per process.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from simasgd.numerics.workloads import kernels

GLOBAL = "loss_and_grad"  # the name every executor function calls the kernel by
OVER = "grad_over_theta"  # kernels.grad_over_theta: whether the kernel may write g over the θ it reads
VERSION = "kernels_version"  # the closure cell (part of numba's cache key) by which an executor function follows edits


@njit(nogil=True, cache=True)
def never_over(X: np.ndarray, idx: np.ndarray, shape: np.ndarray) -> bool:
    """``grad_over_theta`` for a workload's own kernel: its gradient always goes to its own buffer."""
    return False

_bound: dict[tuple[Any, Any], Any] = {}
_lock = threading.Lock()


def with_kernel(fn: Any, kernel: Any) -> Any:
    """``fn`` (a numba dispatcher calling the global ``loss_and_grad``) with that global bound to ``kernel``.

    ``kernels.loss_and_grad`` itself gives back ``fn``; another kernel gets a copy, built once per process
    and kernel, cached apart from ``fn`` where the kernel's name and file pin its code down (:func:`_kernel_key`)."""
    if kernel is kernels.loss_and_grad:
        return fn
    with _lock:
        key = (fn, kernel)
        if key not in _bound:
            py = fn.py_func
            if GLOBAL not in py.__code__.co_names:
                raise ValueError(f"{py.__qualname__} does not call the global {GLOBAL!r}")
            glob = dict(py.__globals__)
            glob[GLOBAL] = kernel
            if OVER in glob:  # a kernel we do not know: never handed θ as its gradient buffer
                glob[OVER] = never_over
            closure, name = _keyed_closure(py, kernel)
            copy = types.FunctionType(py.__code__, glob, py.__name__, py.__defaults__, closure)
            copy.__qualname__, copy.__doc__, copy.__kwdefaults__ = name, py.__doc__, py.__kwdefaults__
            options = {k: v for k, v in fn.targetoptions.items() if k not in ("nopython", "cache")}  # given below
            _bound[key] = njit(**options, cache=closure is not py.__closure__)(copy)
        return _bound[key]


def _kernel_key(kernel: Any) -> str | None:
    """The kernel's name and the hash of its file's bytes (its code and whatever it calls there); None where
    that does not pin its code down: a kernel numba does not cache itself, or one built in a function."""
    py = getattr(kernel, "py_func", None)
    if py is None or py.__closure__ or "<locals>" in py.__qualname__:
        return None
    if type(getattr(kernel, "_cache", None)).__name__ != "FunctionCache":  # cache=True
        return None
    try:
        source = Path(inspect.getsourcefile(py) or "").read_bytes()
    except (TypeError, OSError):
        return None
    return f"{py.__module__}.{py.__qualname__}:{hashlib.sha256(source).hexdigest()[:16]}"


def _keyed_closure(py: Any, kernel: Any) -> tuple[Any, str]:
    """The copy's closure and qualified name: with the kernel's key in its ``kernels_version`` cell and its
    name in the qualified name (numba names the cache files by it), or ``py``'s own, uncached."""
    k = _kernel_key(kernel)
    if k is None or VERSION not in py.__code__.co_freevars:
        return py.__closure__, py.__qualname__
    cells = list(py.__closure__)
    i = py.__code__.co_freevars.index(VERSION)
    cells[i] = types.CellType(f"{cells[i].cell_contents}+{k}")
    return tuple(cells), f"{py.__qualname__}.{kernel.py_func.__qualname__}"
