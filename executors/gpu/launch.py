"""Starting the workers' blocks: once (resident) or once per attempt from a host thread per stream.

Streams mode is Lopez et al.'s design (one stream and one host thread per worker) with the attempt
fused into one kernel. On a GPU each launch goes through :class:`Prepared`: the kernel's arguments
are marshalled once into a ``void*[]`` and every attempt is one ``cuLaunchKernel`` call, in place of
numba's per-call argument handling (which, for a kernel of many arrays, can take longer than the
attempt itself: benchmarks/README_cuda.md); the driver calls
release the GIL, so waiting streams do not hold up launching ones. Where the prepared path cannot
be set up (another numba-cuda), numba's launch is used and :meth:`Launcher.describe` says so.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

from executors.cuda.device import launch_lock
from executors.gpu import device


class ExecutorError(RuntimeError):
    """The kernel or a stream's host thread failed, or a run did not stop."""


class Prepared:
    """One worker's launch of a compiled kernel with fixed arguments: a single driver call per attempt."""

    def __init__(self, kernel: Any, args: tuple[Any, ...], threads: int, stream: Any) -> None:
        kernel[1, threads, stream](*args)  # compiles, and launches one attempt the numba way
        stream.synchronize()
        overload = next(iter(kernel.overloads.values()))
        kernelargs: list[Any] = []
        retr: list[Any] = []
        for t, v in zip(overload.argument_types, args, strict=False):
            overload._prepare_args(t, v, stream, retr, kernelargs)
        self._keep = [a if isinstance(a, ctypes._SimpleCData) else ctypes.c_int64(int(a)) for a in kernelargs]
        self._ptrs = (ctypes.c_void_p * len(self._keep))(*[ctypes.addressof(a) for a in self._keep])
        self.params = ctypes.addressof(self._ptrs)
        cufunc = overload._codelibrary.get_cufunc()
        self.func = cufunc.handle
        self.stream = stream
        self.hstream = stream.handle
        self.threads = threads
        from cuda.bindings import driver as cu

        self.cu = cu

    def __call__(self) -> None:
        err, = self.cu.cuLaunchKernel(self.func, 1, 1, 1, self.threads, 1, 1, 0, self.hstream, self.params, 0)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernel failed: {err}")


class Launcher:
    """The host side of a run: starts the kernel(s), and joins; errors are kept for the main thread."""

    def __init__(self, r: Any, kernel: Any, mode: str) -> None:
        self.r, self.kernel, self.mode = r, kernel, mode
        self.errors: dict[int, BaseException] = {}
        self.threads: list[threading.Thread] = []
        self.host_s = [0.0] * r.n       # host seconds spent launching, per worker
        self.wait_s = [0.0] * r.n       # host seconds waiting for the stream, per worker
        self.attempts = [0] * r.n
        self.path = "numba"

    def start(self) -> None:
        if self.mode == "resident":
            self.threads = [threading.Thread(target=self._guard, args=(0, self._resident), name="gpu-resident",
                                             daemon=True)]
        else:
            self.threads = [threading.Thread(target=self._guard, args=(w, self._streams), name=f"gpu-stream-{w}",
                                             daemon=True) for w in range(self.r.n)]
        for t in self.threads:
            t.start()

    def _guard(self, w: int, body: Any) -> None:
        try:
            body(w)
        except BaseException as e:
            self.errors[w] = e
            if device.SIM:
                device.sim_abort()

    def _resident(self, _: int) -> None:
        r = self.r
        stream = r.cuda.stream()
        blocks, threads = device.launch_shape(r.n, r.threads)
        t = time.perf_counter()
        with launch_lock():
            if device.SIM:
                device.sim_barriers(r.n)
            self.kernel[blocks, threads, stream](*r.args(0))
        self.host_s[0] = time.perf_counter() - t
        if not device.SIM:  # wait without a blocking driver call: the monitor thread must keep the GIL's turns
            done = r.cuda.event()
            done.record(stream)
            while not done.query():
                time.sleep(2e-4)
        stream.synchronize()
        self.attempts[0] = 1

    def _streams(self, w: int) -> None:
        r = self.r
        stream = r.cuda.stream()
        args = r.args(w)
        launch = self._prepared(args, stream)
        while not r.stop_seen.is_set():
            t = time.perf_counter()
            launch()
            t1 = time.perf_counter()
            stream.synchronize()
            self.host_s[w] += t1 - t
            self.wait_s[w] += time.perf_counter() - t1
            self.attempts[w] += 1

    def _prepared(self, args: tuple[Any, ...], stream: Any) -> Any:
        r = self.r
        blocks, threads = device.launch_shape(1, r.threads)
        if not device.SIM:
            try:
                p = Prepared(self.kernel, args, threads, stream)
                self.path = "prepared cuLaunchKernel"
                return p
            except Exception as e:
                self.path = f"numba (prepared launch unavailable: {type(e).__name__}: {e})"

        def numba_launch() -> None:
            with launch_lock():
                if device.SIM:
                    device.sim_barriers(1)
                self.kernel[blocks, threads, stream](*args)
        return numba_launch

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def failed(self) -> bool:
        return bool(self.errors)

    def join(self, timeout: float) -> None:
        self.threads[0].join(timeout)

    def finish(self, timeout: float) -> None:
        """Join every host thread; raise the first error, or name the threads that did not stop."""
        for t in self.threads:
            t.join(timeout)
        stuck = [t.name for t in self.threads if t.is_alive()]
        if self.errors:
            w, e = next(iter(self.errors.items()))
            raise ExecutorError(f"gpu worker {w} failed: {type(e).__name__}: {e}") from e
        if stuck:
            raise ExecutorError(f"{', '.join(stuck)} did not stop within cpu.join_timeout_s = {timeout} s")

    def describe(self) -> dict[str, Any]:
        n = sum(self.attempts)
        out: dict[str, Any] = {"path": self.path if self.mode == "streams" else "one launch"}
        if self.mode == "streams" and n:
            out["host_launch_us_per_attempt"] = 1e6 * sum(self.host_s) / n
            out["host_wait_us_per_attempt"] = 1e6 * sum(self.wait_s) / n
            out["launches"] = n
        return out
