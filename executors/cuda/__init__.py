"""Backend ``cuda``: numba.cuda kernels, one CUDA stream (and host thread) per worker."""

NAME = "cuda"  # the backend's name (results, refusals); here so that backend and runner share it
