"""Backend ``gpu``: asynchronous SGD with its workers resident on the GPU (:mod:`.backend`)."""
