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
:func:`with_kernel` compiles the very same function — same code object, same
closure — with the global ``loss_and_grad`` bound to that kernel, uncached, and
the global ``grad_over_theta`` (``kernels.grad_over_theta``: may the gradient be
written over the θ it is taken at?) bound to :func:`never_over`.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import numpy as np
from numba import njit

from simasgd.numerics.workloads import kernels

GLOBAL = "loss_and_grad"  # the name every executor function calls the kernel by
OVER = "grad_over_theta"  # kernels.grad_over_theta: whether the kernel may write g over the θ it reads


@njit(nogil=True, cache=True)
def never_over(X: np.ndarray, idx: np.ndarray, shape: np.ndarray) -> bool:
    """``grad_over_theta`` for a workload's own kernel: its gradient always goes to its own buffer."""
    return False

_bound: dict[tuple[Any, Any], Any] = {}
_lock = threading.Lock()


def with_kernel(fn: Any, kernel: Any) -> Any:
    """``fn`` (a numba dispatcher calling the global ``loss_and_grad``) with that global bound to ``kernel``.

    ``kernels.loss_and_grad`` itself gives back ``fn``, cached; another kernel gets an uncached copy,
    compiled once per process and kernel."""
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
            copy = types.FunctionType(py.__code__, glob, py.__name__, py.__defaults__, py.__closure__)
            copy.__qualname__, copy.__doc__, copy.__kwdefaults__ = py.__qualname__, py.__doc__, py.__kwdefaults__
            options = {k: v for k, v in fn.targetoptions.items() if k != "nopython"}  # njit sets it
            _bound[key] = njit(**options)(copy)  # no cache=True: a custom kernel has no stable cache key
        return _bound[key]
