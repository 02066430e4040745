"""The numerical kernels (numba, ``cache=True``): the update rule, Keuper's step, 1-bit compression, the GEMM,
memory copies, and the workloads."""
