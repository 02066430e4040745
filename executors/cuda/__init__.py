"""Backend ``cuda``: numba.cuda kernels, one CUDA stream (and host thread) per worker."""

from executors.implementations import Lazy

NAME = "cuda"  # the backend's name (results, refusals); here so that backend and runner share it

# Algorithm (a registry name) -> its stream loop, in its family's module (named as the simulator's): the
# backend's one list (backend.ALGORITHMS is its keys). Lazy: the loop modules import numba.cuda.
IMPLEMENTATIONS: dict[str, Lazy] = {
    "hogwild": Lazy("executors.cuda.lockfree", "hogwild"),
    "leashed": Lazy("executors.cuda.lockfree", "leashed"),
    "sync": Lazy("executors.cuda.synchronous", "sync"),
    "lopez": Lazy("executors.cuda.lopez", "worker"),
}
