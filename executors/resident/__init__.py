"""Backend ``gpu``: asynchronous SGD with its workers resident on the GPU (:mod:`.backend`)."""

NAME = "gpu"  # the backend's name (results, refusals); here so that backend and runner share it
