"""A GPU in the simulator: CUDA streams sharing the multiprocessors, as in Lopez et al. 2020 §IV-B.

Each worker is a stream driven by a host thread. Its steps are kernels:
read = a copy of θ, update = an element-wise step, Lopez accumulation = d
atomic adds, gradient = ``kernels_per_gradient`` kernels sharing the
workload's flops and bytes. A kernel costs a launch latency on its stream,
then its work on three processor-sharing servers (:class:`memory.Bandwidth`):

- the SMs: ``sms × clock × fp32_lanes × 2 × efficiency`` flop/s shared by the kernels running at
  once; one kernel alone uses at most the fraction of the SMs its threads fill,
  ``min(1, threads / (sms × threads_per_sm))`` — so two small kernels run side by side at full
  speed, while kernels that each fill the GPU slow each other down in proportion to their number
  (the streams' share of the GPU is decided by the hardware, "dynamically and without control from
  the user", §IV-B);
- device memory: ``mem_bandwidth_gbs`` shared by the kernels' bytes;
- the atomic units: ``atomics_per_s`` shared by the kernels' atomic operations.

A kernel ends when its flops, bytes and atomics are all done. A barrier or a
host-side hand-off costs ``host_sync_s`` (stream synchronise + the host
threads' barrier). The presets come from public specifications (cited at
each); ``simasgd calibrate --gpu`` (``executors/calibration/gpu.py``) measures
a real GPU's, including kernel time against concurrent streams, into the
profile's ``[gpu]`` table (preset ``this-gpu``).

This kernel-sequence model is the ``cuda`` backend's design. Where the profile also has a block's measured
rates (``[gpu.block]``), :func:`platform` models the ``gpu`` backend instead: resident blocks or one fused
launch per attempt (:mod:`simasgd.sim.gpu_resident`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import replace
from typing import Any

import numpy as np
import simpy

from simasgd.machines import machine, profile
from simasgd.machines.gpus import PRESETS, PROFILE_PRESET, Gpu, from_profile, names  # noqa: F401 - re-exported
from simasgd.sim.primitives import Req
from simasgd.sim.sharing import Bandwidth, SharedServer
from simasgd.spec import seeds
from simasgd.spec.scenario import Scenario

# Algorithms whose workers need a CPU's scheduler (spin locks): not modelled on streams.
CPU_ONLY = frozenset({"mutex", "rwlock", "ssp"})


def resolve(name: str) -> Gpu | None:
    """The GPU preset ``name`` (``this-gpu``: the calibrated profile), or None if it names no GPU."""
    if name in PRESETS:
        return PRESETS[name]
    if name == PROFILE_PRESET:
        path = machine.profile_path()
        if not path.exists():
            raise machine.MachineError(f"machine.preset = \"{name}\": no calibrated profile at {path}; "
                                       f"run `simasgd calibrate --gpu --out {path}` on the GPU machine")
        try:
            return from_profile(profile.read(path), path)
        except (ValueError, profile.ProfileError) as e:
            raise machine.MachineError(str(e)) from None
    return None


def parallel_threads(shape: np.ndarray | None, dim: int, batch: int) -> int:
    """Threads the widest kernel of a gradient runs: batch × the widest layer (cnn: its conv output)."""
    from simasgd.numerics.workloads.cnn_kernels import CNN
    from simasgd.numerics.workloads.kernels import SOFTMAX

    if shape is not None and len(shape) and int(shape[0]) == CNN:
        from simasgd.numerics.workloads.cnn import sizes

        s = sizes(shape)
        return batch * s["K"] * s["Ho"] * s["Wo"]
    if shape is not None and len(shape) > 1 and int(shape[0]) == SOFTMAX:
        return batch * int(max(shape[1:]))
    return max(batch, dim)


class SMs:
    """The multiprocessors as a server shared in proportion to demand: a kernel that can fill a
    fraction f of the GPU runs at f·rate while the kernels running at once fill it no more than
    once (Σf ≤ 1), and at f·rate/Σf when they oversubscribe it (weighted processor sharing,
    :class:`~simasgd.sim.sharing.SharedServer`: a kernel's weight is its occupancy)."""

    def __init__(self, env: simpy.Environment, flops_per_s: float) -> None:
        self.env, self.rate = env, flops_per_s
        self.server = SharedServer(env, self._speed, self._tolerance)

    def _speed(self, _n: int, demand: float) -> float:
        return self.rate * min(1.0, 1.0 / demand) if demand > 0 else self.rate

    def _tolerance(self, now: float, _rate: float) -> float:
        return self.rate * 1e-12 * max(1.0, now)  # flops left below a picosecond of the GPU: done

    def run(self, flops: float, occupancy: float) -> simpy.Event:
        return self.server.submit(float(flops), float(occupancy))


class DeviceCores:
    """The lock interface of :class:`simasgd.sim.cpu.Cores` for blocks: a spinning block keeps its SM and is
    never descheduled, so a spin is a plain wait."""

    def spin_wait(self, w: int, req: Req, request: Callable[[], Req]) -> Generator[simpy.Event, object, Req]:
        yield req
        return req

    def hold(self, w: int, held: bool) -> None:
        pass


class GpuPlatform:
    """The GPU as the workers see it: the interface of :class:`simasgd.sim.costs.Platform`
    (:class:`simasgd.sim.engine.WorkerPlatform`)."""

    def __init__(self, env: simpy.Environment, sc: Scenario, gpu: Gpu, run: int, dim: int | None,
                 itemsize: int, flops_per_sample: float | None, shape: np.ndarray | None = None,
                 check: bool = True) -> None:
        if check and sc.algorithm.name in CPU_ONLY:
            raise ValueError(f"machine.preset = \"{gpu.name}\" is a GPU: algorithm {sc.algorithm.name!r} (spin "
                             f"locks on CPU cores) is not modelled on streams")
        if dim is None or flops_per_sample is None:
            raise ValueError("a GPU machine derives every step from the workload (dim and flops)")
        self.env, self.gpu, self.n = env, gpu, sc.workers.count
        self.dim, self.model_bytes = int(dim), int(dim) * itemsize
        self.sm = SMs(env, gpu.flops_per_s)
        self.mem = Bandwidth(env, gpu.mem_bandwidth_gbs * 1e9, gpu.mem_bandwidth_gbs * 1e9)
        self.atom = Bandwidth(env, gpu.atomics_per_s, gpu.atomics_per_s)
        batch = sc.workload.batch_size
        self.grad_flops = flops_per_sample * batch
        self.grad_bytes = 3.0 * self.model_bytes + batch * itemsize * 4096  # θ in, g out, activations
        self.grad_threads = parallel_threads(shape, self.dim, batch)
        self.cas_latency = [gpu.host_sync_s] * self.n  # a device atomic seen from the host: a sync
        self.handoff_s = [gpu.host_sync_s] * self.n
        # the cpu executor's loss snapshot (SimRun.snapshot): the GPU executor's is a device copy, not priced
        self.snapshot_s: float | None = None
        # the lock workers' view of the CPUs: streams run no spin lock (CPU_ONLY); resident blocks spin on their SMs
        self.cores = DeviceCores()
        st = sc.workers.stragglers
        self.slow = [st.slowdown if w < st.count else 1.0 for w in range(self.n)]
        self.rng = [np.random.default_rng(seeds.sequence(sc.timing_seed, run, seeds.Role.TIMING, w))
                    for w in range(self.n)]
        self.cv = sc.sim.gradient_cv

    def occupancy(self, threads: float) -> float:
        """The fraction of the GPU one kernel of ``threads`` threads can use alone."""
        return min(1.0, max(threads, 1.0) / self.gpu.resident_threads)

    def kernel(self, flops: float = 0.0, nbytes: float = 0.0, atomics: float = 0.0,
               threads: float = 1.0) -> simpy.Event:
        """Launch latency, then flops / bytes / atomics on the shared servers; done when all are."""
        return self.env.process(self._kernel(flops, nbytes, atomics, threads))

    def _kernel(self, flops: float, nbytes: float, atomics: float, threads: float) -> Any:
        yield self.env.timeout(self.gpu.launch_latency_s)
        parts = []
        if flops > 0:
            parts.append(self.sm.run(flops, self.occupancy(threads)))
        if nbytes > 0:
            parts.append(self.mem.transfer(nbytes))
        if atomics > 0:
            parts.append(self.atom.transfer(atomics))
        if parts:
            yield simpy.AllOf(self.env, parts)

    def gradient(self, w: int) -> simpy.Event:
        return self.env.process(self._gradient(w))

    def _gradient(self, w: int) -> Any:
        k = self.gpu.kernels_per_gradient
        x = self.slow[w] * (self.rng[w].gamma(1 / self.cv ** 2, self.cv ** 2) if self.cv > 0 else 1.0)
        for _ in range(k):
            yield self.kernel(x * self.grad_flops / k, x * self.grad_bytes / k, 0.0, self.grad_threads)

    def read(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        if seconds is not None:
            return self.env.timeout(seconds)
        return self.kernel(0.0, 2 * self.model_bytes * part, 0.0, self.dim * part)

    def update(self, w: int, part: float = 1.0, seconds: float | None = None, first: bool = True) -> simpy.Event:
        """An update's kernel."""
        if seconds is not None:
            return self.env.timeout(seconds)
        return self.kernel(2 * self.dim * part, 3 * self.model_bytes * part, 0.0, self.dim * part)

    def update_into(self, w: int) -> simpy.Event:
        """θ' = θ − η·g into a fresh device buffer: an update's kernel (full-line writes read nothing)."""
        return self.update(w)

    def private_copy(self, w: int) -> simpy.Event:
        """A copy between two of the worker's own device buffers: a read's kernel."""
        return self.read(w)

    def atomic_adds(self, w: int, reader: int | None = None) -> simpy.Event:
        """``g[i] += δ[i]`` for every i with ``cuda.atomic.add`` (Lopez accumulation, sync's sum); a
        reader's traffic shares the device's memory system like any kernel's (``reader`` unused)."""
        return self.kernel(0.0, 2 * self.model_bytes, self.dim, self.dim)

    def bookkeeping(self, w: int) -> simpy.Event | None:
        """The CPU executor's per-cycle work between a bump and the next read: not calibrated on a GPU."""
        return None

    def snapshot(self, w: int) -> simpy.Event:
        """Never called: the loss snapshot is not priced on a GPU (:attr:`snapshot_s` is None)."""
        raise RuntimeError("a loss snapshot without its calibrated time (snapshot_s)")

    def touch(self, w: int) -> None:
        """Leashed-SGD's gradient reads the latest vector in place: no cache on the GPU model to warm."""

    def computes_on_copy(self, w: int) -> None:
        """A gradient on a private copy: no per-core caches on the GPU model to evict from."""

    def first_turn(self, w: int) -> simpy.Event | None:
        """A worker's stream is its own from the start: no CPU to wait for."""
        return None

    def cycle_vectors(self, w: int, vectors: int) -> None:
        """A worker's cycle on the device: no per-core caches for it to outgrow; nothing to set."""

    def fuses_read(self, w: int) -> None:
        """A Lopez master's steps are kernels on its stream like any other's (the CPU platform's cache tiers
        and calibrated step times have no GPU counterpart): nothing to set."""

    def mirrors(self, w: int) -> None:
        """A lock worker's update on the device is a kernel like any other (no per-core caches to hold θ's lines
        in two places): nothing to set."""

    def read_time(self, w: int) -> float | None:
        return None

    def update_time(self, w: int) -> float | None:
        return None

    def block(self, w: int) -> None:
        """A host thread waiting frees nothing on the GPU."""

    def sync(self, w: int) -> simpy.Event:
        return self.env.timeout(self.gpu.host_sync_s)



def with_overrides(gpu: Gpu, **given: Any) -> Gpu:
    return replace(gpu, **{k: v for k, v in given.items() if v is not None})


def predicted_kernel_s(gpu: Gpu, flops: float, threads: float, streams: int) -> float:
    """One kernel's time when ``streams`` identical ones start together (closed form of :class:`SMs`):
    latency + flops / (rate·f·min(1, 1/(streams·f))), f its occupancy."""
    f = min(1.0, max(threads, 1.0) / gpu.resident_threads)
    return gpu.launch_latency_s + flops / (gpu.flops_per_s * f * min(1.0, 1.0 / (streams * f)))
