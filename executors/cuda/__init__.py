"""Backend ``cuda``: numba.cuda kernels, one CUDA stream (and host thread) per worker."""
