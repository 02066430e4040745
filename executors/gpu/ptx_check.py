"""Compile every resident kernel for a GPU architecture, with no GPU: ``python -m
executors.gpu.ptx_check [cc]``. numba-cuda and NVVM must be installed (``pip install
'simasgd[cuda]'``); numba's simulator must be off. Catches typing and lowering errors before a
kernel meets a device, and, where nvJitLink is installed (it comes with the ``cuda`` extra), assembles
each kernel's PTX for that architecture and prints what ptxas reports: registers a thread, static shared
memory and local memory spilled, and so how many 128-thread workers an SM holds at once."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass

import numpy as np

THREADS = 128  # a worker's threads (runner.threads_per_worker's default)
# An SM of compute capability 9.0 (H100, H200): 64 Ki 32-bit registers, allocated 256 to a warp at a time;
# 228 KiB of shared memory, 1 KiB of it reserved per block; at most 32 blocks and 64 warps.
SM90 = {"regs": 65536, "reg_unit": 256, "smem": 228 * 1024, "smem_block": 1024, "blocks": 32, "warps": 64}


def signature(dtype: str) -> str:
    f = "float32" if dtype == "float32" else "float64"
    a1, a2 = f"{f}[::1]", f"{f}[:, ::1]"
    i1, i2 = "int64[::1]", "int64[:, ::1]"
    return (f"void(int64, {a1}, {a1}, {a2}, {i1}, {i1}, {i1}, {a1}, {a2}, {a2}, {a2}, {a2}, {a2}, {i2}, {i2}, "
            f"uint64[::1], {i2}, {i2}, {i2}, {a2}, {i1}, {a2}, {a2}, {i1})")


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    smem: int  # static shared memory, bytes a block
    spill: int  # bytes of spill stores

    def blocks_per_sm(self, threads: int = THREADS, sm: dict[str, int] = SM90) -> int:
        """Blocks of ``threads`` an SM holds at once (the occupancy calculator's rule)."""
        warps = -(-threads // 32)
        per_warp = -(-self.registers * 32 // sm["reg_unit"]) * sm["reg_unit"]
        by_regs = sm["regs"] // (per_warp * warps)
        by_smem = sm["smem"] // (self.smem + sm["smem_block"])
        return min(by_regs, by_smem, sm["blocks"], sm["warps"] // warps)


def parse(log: str) -> Resources:
    """Resources from a ptxas (nvJitLink ``-verbose``) info log of one kernel."""
    regs = re.search(r"[Uu]sed (\d+) registers", log)
    smem = re.search(r"(\d+) bytes smem", log)
    spill = re.search(r"(\d+) bytes spill stores", log)
    if regs is None:
        raise ValueError(f"no register count in the assembler's log: {log[:400]!r}")
    return Resources(int(regs.group(1)), int(smem.group(1)) if smem else 0, int(spill.group(1)) if spill else 0)


def assemble(ptx: str, cc: tuple[int, int]) -> Resources | None:
    """ptxas's figures for ``ptx`` on sm_<cc> through nvJitLink (None where it is not installed)."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError:
        return None
    h = nvjitlink.create(3, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose", "-O3"])
    try:
        data = ptx.encode()
        nvjitlink.add_data(h, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        nvjitlink.complete(h)
        buf = bytearray(nvjitlink.get_info_log_size(h))
        nvjitlink.get_info_log(h, buf)
        return parse(buf.decode(errors="replace"))
    finally:
        nvjitlink.destroy(h)


def main(argv: list[str]) -> int:
    from types import SimpleNamespace

    from numba import cuda
    from numba.cuda import dispatcher

    from executors.gpu import kernels

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
                res = assemble(ptx, (cc[0], cc[1]))
                took = time.perf_counter() - t
                what = ("" if res is None else
                        f"  {res.registers:3d} registers, {res.smem:6d} B shared, {res.spill} B spilled, "
                        f"{res.blocks_per_sm()} workers an SM" + (" (sm_90's limits)" if cc != (9, 0) else ""))
                print(f"ok   {kind:5} {dtype} B={batch:<2} {name:8} {took:5.1f} s{what}", flush=True)
            except Exception as e:
                bad += 1
                print(f"FAIL {kind:5} {dtype} {name:8} {type(e).__name__}: {str(e)[:2000]}", flush=True)
    print(f"{bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main(sys.argv[1:]))
