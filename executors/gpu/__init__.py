"""Backend ``gpu``: asynchronous SGD with its workers resident on the GPU (:mod:`.backend`)."""

from executors.implementations import Lazy

NAME = "gpu"  # the backend's name (results, refusals); here so that backend and runner share it

# Algorithm (a registry name) -> its entry in executors/gpu/wiring.py (its kernel, rows, words, arrays):
# the backend's one list (backend.ALGORITHMS is its keys). Lazy: wiring imports the device protocol.
IMPLEMENTATIONS: dict[str, Lazy] = {
    name: Lazy("executors.gpu.wiring", name.upper())
    for name in ("sequential", "mutex", "hogwild", "leashed", "sync", "lopez")
}
