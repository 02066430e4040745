"""Compile every resident kernel to PTX for a GPU architecture, with no GPU: ``python -m
executors.resident.ptx_check [cc]``. numba-cuda and NVVM must be installed (``pip install
'simasgd[cuda]'``); numba's simulator must be off. Catches typing and lowering errors before a
kernel meets a device."""

from __future__ import annotations

import sys
import time

import numpy as np


def signature(dtype: str) -> str:
    f = "float32" if dtype == "float32" else "float64"
    a1, a2 = f"{f}[::1]", f"{f}[:, ::1]"
    i1, i2 = "int64[::1]", "int64[:, ::1]"
    return (f"void(int64, {a1}, {a1}, {a2}, {i1}, {i1}, {i1}, {a1}, {a2}, {a2}, {a2}, {a2}, {a2}, {i2}, {i2}, "
            f"uint64[::1], {i2}, {i2}, {i2}, {a2}, {i1}, {a2}, {a2}, {i1})")


def main(argv: list[str]) -> int:
    from types import SimpleNamespace

    from numba import cuda
    from numba.cuda import dispatcher

    from executors.resident import kernels

    cc = tuple(int(x) for x in (argv[0] if argv else "9.0").split("."))
    # device functions are compiled for the current device's architecture: there is none here
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    bad = 0
    for kind, dtype, batch in (("mlp", "float32", 16), ("cnn", "float32", 32), ("const", "float64", 1)):
        ks = kernels.build(kind, dtype, batch, 0.5)
        for name in ("hogwild", "mutex", "leashed", "sync", "lopez"):
            t = time.perf_counter()
            try:
                ptx, _ = cuda.compile_ptx(getattr(ks, name).py_func, signature(dtype), cc=cc)
                took = time.perf_counter() - t
                print(f"ok   {kind:5} {dtype} {name:8} {len(ptx):8d} chars {took:5.1f} s", flush=True)
            except Exception as e:
                bad += 1
                print(f"FAIL {kind:5} {dtype} {name:8} {type(e).__name__}: {str(e)[:2000]}", flush=True)
    print(f"{bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main(sys.argv[1:]))
