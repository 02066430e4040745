"""``simasgd calibrate --network``: the transport ``dist`` uses, measured — the profile's ``[network]`` table.

Processes on loopback, as the ``dist`` backend starts them (gloo over TCP on 127.0.0.1), measure:

- **point to point**: a ping-pong between two ranks for each message size (8 B … 4 MiB); the
  one-way time is half the median round trip. ``latency_us`` is the smallest size's one-way time,
  ``bandwidth_gbps`` the slope of one-way time against bytes over the sizes ≥ 1 MiB (least squares:
  t = latency + bytes / bandwidth; up to 64 MiB, so that the transfer, not a process's wake-up on
  a busy host, makes the time), both what :mod:`simasgd.sim.network` takes;
- **the server's link under N senders**: N ranks send rank 0 messages of ``SERVER_BYTES`` as fast as
  it takes them; ``server[N]`` is the bytes/s rank 0 received, and ``server_bandwidth_gbps`` the
  most of them;
- **all-reduce**: ``all_reduce(SUM)`` of a float32 vector for N = 2..``max_ranks`` (and up to
  :data:`ALLREDUCE_RANKS` where the host has a CPU for each) and each size; the median time. The simulator
  charges a ``sync`` round this (:class:`simasgd.sim.network.AllreduceTable`), extended beyond the measured
  ranks along the ring's 2(N−1) steps, so a host that can run 8 ranks measures 8;
- **the server loop**: 2 ranks, rank 0 running ``dist``'s own parameter server (``param_server.serve``, one
  shard), rank 1 pushing a gradient of :data:`LOOP_DIM` float64 and waiting for the reply, as a worker with a
  gradient that costs nothing; the median round trip, the server process's CPU time per push (all its threads:
  gloo's transport thread and ``serve``'s loop, over the timed pushes), and the median time of the server's update
  step (``update_rule.step`` on the shard) timed apart in the server's process. ``handling_us``, what a rank
  spends on a message it receives beyond its update, is that CPU time less the step
  (:func:`simasgd.sim.network.handling_from_cpu`): the simulator charges it to the receiving rank's CPU, a
  server's serialised with its updates. (The round trip less two one-way transfers is smaller — the ping-pong
  that times a transfer already holds most of both ends' CPU work — and underprices a server: 55 against
  176 µs a push on the 16-core entry, whose server applies ~5,500 pushes a second at most, 1 / 182 µs;
  benchmarks/README_dist.md.)
- **the server loop under N senders** (``[network.server_loop.by_senders]``, read by nothing yet): the same
  ``serve`` driven by N worker ranks at once for N in :data:`QUEUE_SENDERS` where the host has N + 1 CPUs, each
  worker pushing its next gradient as soon as its reply arrives, rank r's main thread pinned to a CPU of its own
  and gloo's threads to the rest, as the backend pins them (``cpu.pin``); per N, the pushes the server applied a
  second, the median round trip the workers saw, and the server process's CPU time per push (all its threads, and
  its main thread alone: ``serve`` itself), over a window of :data:`QUEUE_ROUNDS` pushes per worker after
  :data:`QUEUE_WARM` each. With N ≥ 2 a push is waiting whenever the server is done with one, so
  1 / ``messages_per_s`` is what a push costs it; a round trip is then about N of those by queueing alone.
  Whether that cost grows with N is the question it answers (benchmarks/README_dist.md).
- **the server loop with the worker busy first** (``[network.server_loop.by_gap]``): the same loop at 2 ranks,
  pinned, the worker spinning :data:`WAKE_GAPS_S` on its own CPU before each push (a gradient's place); a round
  trip that grows with the gap is the ranks waking from idle, which the simulator adds to a message taken after
  idling (:func:`simasgd.sim.network.wake_from_gaps`).
- **the store's round trip** (``store_round_trip_us``): 2 ranks, rank 0 timing ``store.add`` on the process group's
  key-value store (a TCPStore whose server is a thread of rank 0), one client; the median. ``dist``'s ``keuper``
  and ``simuparallel`` take each step's global version so (``executors/dist/decentral.py``), and the simulator
  charges it to their steps.

Each rank runs one intra-op thread. The numbers describe this host's loopback under whatever else
runs on it (``loadavg`` is recorded with them), not a NIC: on a cluster, run it there (two or more
ranks per machine under torchrun is not supported here; measure across machines with the backend
itself and ``benchmarks/dist_rates.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from executors.dist.world import free_port

SIZES = (8, 64, 512, 4096, 32768, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
QUICK_SIZES = (8, 512, 65536, 1048576, 16777216)
FIT_FROM = 1048576      # the bandwidth's fit: sizes whose transfer outlasts a wake-up's milliseconds
MOVE_BYTES = 1 << 29    # a size's repeats move at most this much (the large ones: a few round trips)
SERVER_BYTES = 262144
ALLREDUCE_SIZES = (4096, 65536, 1048576)
ALLREDUCE_RANKS = 8     # the all-reduce's rank counts go this far where the host has as many CPUs
LOOP_DIM = 4810         # the server loop's shard: the Wongpanich MLP's size (38.5 KB float64), benchmarks' model
QUEUE_SENDERS = (1, 2, 4, 7)  # the server loop driven by N workers at once (7: dist_fidelity's 8 processes)
QUEUE_WARM, QUEUE_ROUNDS = 20, 100  # pushes per worker before the timed window, and in it (quick: 10, 25)
QUEUE_DEADLINE_S = 20.0  # an N's ranks, start-up included (about 1 s each on 16 cores)
WAKE_GAPS_S = (0.0, 250e-6, 550e-6, 1e-3)  # the worker's busy time before each push at 2 ranks: back to back,
                                            # then around a gradient's (the benchmarks' MLP: ~550 µs on 16 cores)


def calibrate(quick: bool = False, max_ranks: int = 4, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    t0 = time.perf_counter()
    sizes = QUICK_SIZES if quick else SIZES
    reps = 20 if quick else 200
    log("point-to-point latency and bandwidth by message size")
    p2p = _spawn(2, _pingpong, (sizes, reps))
    one_way = [float(x) for x in p2p]
    big = [(s, t) for s, t in zip(sizes, one_way, strict=True) if s >= FIT_FROM]
    slope = np.polyfit([s for s, _ in big], [t for _, t in big], 1)[0] if len(big) >= 2 else float("nan")
    bw = 8.0 / slope / 1e9 if slope > 0 else float("nan")  # Gb/s
    log("the server's link under N senders")
    server = {}
    for n in range(1, max_ranks):
        server[str(n)] = float(_spawn(n + 1, _fan_in, (SERVER_BYTES, 10 if quick else 60)))
    log("all-reduce by ranks and size")
    allreduce: dict[str, list[float]] = {}
    for n in range(2, max(max_ranks, min(ALLREDUCE_RANKS, len(os.sched_getaffinity(0)))) + 1):
        allreduce[str(n)] = [float(x) for x in _spawn(n, _allreduce, (ALLREDUCE_SIZES, 10 if quick else 50))]
    log("round trips through the parameter server's loop")
    rounds = 50 if quick else 400
    round_trip, cpu, step, nbytes = _spawn(2, _server_loop, (LOOP_DIM, rounds))
    log("round trips to the process group's store")
    store_rt = float(_spawn(2, _store_round_trip, (50 if quick else 500,)))
    log("the server loop under N senders at once")
    by_senders = server_queue(quick, log=log)
    log("the server loop with the worker busy before each push")
    by_gap = server_gaps(quick)
    server_gbps = max(server.values()) * 8 / 1e9 if server else bw
    from simasgd.sim.network import handling_from_cpu

    handling = handling_from_cpu(cpu, step)
    return {
        "transport": "gloo, TCP loopback (127.0.0.1)", "latency_us": one_way[0] * 1e6, "bandwidth_gbps": bw,
        "server_bandwidth_gbps": server_gbps, "handling_us": handling * 1e6, "store_round_trip_us": store_rt * 1e6,
        "server_loop": {"bytes": int(nbytes), "round_trip_s": float(round_trip), "cpu_per_message_s": float(cpu),
                        "update_s": float(step), "rounds": rounds,
                        **({"by_senders": by_senders} if by_senders else {}), "by_gap": by_gap},
        "p2p": {"bytes": list(sizes), "one_way_s": one_way},
        "server": {"bytes": SERVER_BYTES, "senders": [int(k) for k in server],
                   "bytes_per_s": list(server.values())},
        "allreduce": {"bytes": [4 * (s // 4) for s in ALLREDUCE_SIZES], "ranks": [int(k) for k in allreduce],
                      "seconds": list(allreduce.values())},
        "loadavg": list(os.getloadavg()), "cpus": len(os.sched_getaffinity(0)),
        "seconds": time.perf_counter() - t0,
    }


def server_queue(quick: bool = False, senders: tuple[int, ...] = QUEUE_SENDERS,
                 log: Callable[[str], None] = lambda s: None) -> dict[str, Any] | None:
    """``[network.server_loop.by_senders]``: :func:`_queued_loop` for each N of ``senders`` whose N + 1 ranks have
    a CPU each (none: None), the ranks pinned as the backend pins them. Read by nothing, so it never costs the
    table the simulator reads: an N whose ranks fail or outlast :data:`QUEUE_DEADLINE_S` ends the sweep with the
    rows measured before it (logged)."""
    t0 = time.perf_counter()
    allowed = sorted(os.sched_getaffinity(0))
    warm, rounds = (10, 25) if quick else (QUEUE_WARM, QUEUE_ROUNDS)
    rows = []
    for n in [n for n in senders if n + 1 <= len(allowed)]:
        try:
            rows.append(_spawn(n + 1, _queued_loop, (LOOP_DIM, warm, rounds), _pins(n + 1, allowed),
                               deadline_s=QUEUE_DEADLINE_S))
        except RuntimeError as e:
            log(f"the server loop under {n} senders not measured ({e}); kept N < {n}")
            break
    if not rows:
        return None
    return {"senders": [r["senders"] for r in rows], **_loop_columns(rows),
            "rounds": rounds, "pinned": True, "seconds": time.perf_counter() - t0}


def server_gaps(quick: bool = False, gaps_s: tuple[float, ...] = WAKE_GAPS_S) -> dict[str, Any]:
    """``[network.server_loop.by_gap]``: :func:`_queued_loop` at 2 ranks with the worker spinning each of ``gaps_s``
    on its CPU before every push, the ranks pinned as the backend pins them (where the host has a CPU for each):
    what a rank adds to a message after idling (:func:`simasgd.sim.network.wake_from_gaps`)."""
    t0 = time.perf_counter()
    allowed = sorted(os.sched_getaffinity(0))
    warm, rounds = (10, 25) if quick else (QUEUE_WARM, 2 * QUEUE_ROUNDS)
    pins = _pins(2, allowed) if len(allowed) >= 2 else None
    rows = [_spawn(2, _queued_loop, (LOOP_DIM, warm, rounds, gap), pins, deadline_s=QUEUE_DEADLINE_S)
            for gap in gaps_s]
    return {"gap_s": list(gaps_s), **_loop_columns(rows),
            "rounds": rounds, "pinned": pins is not None, "seconds": time.perf_counter() - t0}


def _pins(world: int, allowed: list[int]) -> tuple[list[int | None], list[int]]:
    """Each of ``world`` ranks' CPU and the transport's CPUs, as the backend pins a run."""
    from executors.cpu import placement
    from executors.dist.backend import transport_cpus

    cpus, _ = placement.plan(world, "uma")
    return cpus, transport_cpus(cpus, allowed)


def _loop_columns(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The :func:`_queued_loop` rows' figures as a table's columns, one entry a row."""
    keys = ("round_trip_s", "messages_per_s", "cpu_per_message_s", "main_cpu_per_message_s")
    return {k: [r[k] for r in rows] for k in keys}


def _spawn(world: int, fn: Callable[..., Any], args: tuple[Any, ...],
           pins: tuple[list[int | None], list[int]] | None = None, deadline_s: float = 300.0) -> Any:
    """Run ``fn(rank, world, *args)`` in ``world`` forked ranks joined on loopback; rank 0's return value. With
    ``pins`` (each rank's CPU, the transport's CPUs) rank r's main thread runs on its CPU and the threads the
    process group starts on the transport's, as the backend pins a run (``backend._rank_main``)."""
    import torch.multiprocessing as mp

    ctx: Any = mp.get_context("fork")
    out, port = ctx.SimpleQueue(), free_port()
    procs = [ctx.Process(target=_main, daemon=True, args=(r, world, port, fn, args, out,
                                                          (pins[0][r], pins[1]) if pins else None))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + deadline_s
    while out.empty():
        if any(p.exitcode not in (None, 0) for p in procs) or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise RuntimeError(f"calibrate --network: a rank of {fn.__name__} failed or hung")
        time.sleep(0.01)
    ok, value = out.get()
    for p in procs:
        p.join(30)
    if not ok:
        raise RuntimeError(f"calibrate --network: {fn.__name__}: {value}")
    return value


def _main(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...], out: Any,
          pin: tuple[int | None, list[int]] | None = None) -> None:
    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(1)
        cpu = pin[0] if pin else None
        if pin is not None and cpu is not None:  # init's threads inherit the transport's CPUs; then this thread its own
            os.sched_setaffinity(0, set(pin[1]) or {cpu})
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})  # pid 0: the calling thread only (Linux)
        value = fn(rank, world, *args)
        dist.barrier()
        if rank == 0:
            out.put((True, value))
    except BaseException as e:
        out.put((False, f"rank {rank}: {type(e).__name__}: {e}"))
        os._exit(1)
    os._exit(0)


def _pingpong(rank: int, world: int, sizes: tuple[int, ...], reps: int) -> list[float]:
    import torch
    import torch.distributed as dist

    out = []
    for s in sizes:
        t = torch.zeros(max(1, s), dtype=torch.uint8)
        times = []
        n = max(5, min(reps, MOVE_BYTES // max(1, s)))
        for i in range(n + 5):  # 5 to warm the connection and buffers
            dist.barrier() if i % 50 == 0 else None
            t0 = time.perf_counter_ns()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0)
                dist.send(t, 0)
            if i >= 5:
                times.append(time.perf_counter_ns() - t0)
        out.append(float(np.median(times)) * 1e-9 / 2)
    return out


def _store_round_trip(rank: int, world: int, reps: int) -> float:
    """The median seconds of one ``store.add`` from rank 0 to the process group's store, after 20 untimed: what a
    ``dist`` keuper / simuparallel step waits for its version (the other ranks idle)."""
    from torch.distributed.distributed_c10d import _get_default_store

    if rank != 0:
        return 0.0
    store, times = _get_default_store(), []
    for i in range(reps + 20):
        t0 = time.perf_counter_ns()
        store.add("simasgd-calibrate/version", 1)
        if i >= 20:
            times.append(time.perf_counter_ns() - t0)
    return float(np.median(times)) * 1e-9


def _fan_in(rank: int, world: int, nbytes: int, reps: int) -> float:
    """Bytes per second rank 0 takes in from ``world − 1`` senders at once."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(nbytes, dtype=torch.uint8)
    dist.barrier()
    t0 = time.perf_counter_ns()
    if rank == 0:
        for _ in range(reps * (world - 1)):
            dist.recv(t)
    else:
        for _ in range(reps):
            dist.send(t, 0)
    return reps * (world - 1) * nbytes / ((time.perf_counter_ns() - t0) * 1e-9)


def _marked(sc: Any, rank: int, workers: int, first: int, last: int) -> Any:
    """A server :class:`Rank` that reads its clocks (wall, process CPU, main thread CPU) where ``serve`` snapshots
    θ after the pushes that made versions ``first`` and ``last``: ``marks[version]``."""
    from executors.dist.world import Layout, Rank

    class Marked(Rank):
        marks: dict[int, tuple[int, int, int]]

        def snapshot(self, version: int, theta: np.ndarray) -> None:
            if version in (first, last):
                self.marks[version] = (time.perf_counter_ns(), time.process_time_ns(), time.thread_time_ns())
            super().snapshot(version, theta)

    me = Marked(sc, 0, None, rank, Layout("param_server", workers, 1), np.dtype(np.float64),
                t0_ns=time.perf_counter_ns())
    me.marks = {}
    return me


def _server_loop(rank: int, world: int, dim: int, rounds: int) -> tuple[float, float, float, int]:
    """Rank 0 serves as ``dist``'s parameter server does (``param_server.serve``, its own code); rank 1 pushes
    ``rounds`` gradients (after 20 to warm up) and times each push's send to its reply's arrival: :func:`_queued_loop`
    with one worker, the ranks where the OS puts them. Rank 0 returns (the median round trip, its process's CPU
    time per timed push, the median of its update step timed apart afterwards, a message's bytes)."""
    from executors.dist.world import message_buffer
    from simasgd.numerics import update_rule

    row = _queued_loop(rank, world, dim, 20, rounds)
    if rank != 0:
        return 0.0, 0.0, 0.0, 0
    theta, v, g = np.zeros(dim), np.zeros(0), np.full(dim, 1e-3)
    steps = []
    for i in range(rounds + 10):
        t0 = time.perf_counter_ns()
        update_rule.step(theta, v, g, 1e-9, 0.0, 0, False)
        if i >= 10:
            steps.append(time.perf_counter_ns() - t0)
    return (row["round_trip_s"], row["cpu_per_message_s"], float(np.median(steps)) * 1e-9,
            int(message_buffer(np.float64, dim).nbytes))


def _queued_loop(rank: int, world: int, dim: int, warm: int, rounds: int, gap_s: float = 0.0) -> dict[str, Any]:
    """Rank 0 serves (``param_server.serve``, one shard) ``world − 1`` workers that push as fast as their replies
    come back (with ``gap_s``: after spinning that long on their own CPU, a gradient's place,
    ``benchmarks/dist_idle_gap.py``), until it refuses them after ``(warm + rounds)`` pushes per worker. The
    window: from the push that made version ``warm·N`` to the one that made ``(warm + rounds)·N``, every worker
    still pushing; its wall time and CPU times are read in the server's loop itself (at the snapshot ``serve``
    takes after each push). A worker times its pushes after its own first ``warm`` that the server applied.
    Rank 0 returns the row."""
    import torch
    import torch.distributed as dist

    from executors.dist import param_server as ps
    from simasgd.spec import loader

    n = world - 1
    first, last = warm * n, (warm + rounds) * n
    sc = loader.from_dict({"name": "calibrate-network-queue", "algorithm": {"name": "param_server"},
                           "workers": {"count": n}, "optimizer": {"lr": 1e-9},
                           "stop": {"max_updates": last, "max_time_s": 600.0}})
    me = _marked(sc, rank, n, first, last)
    theta = np.zeros(dim)
    cap = (warm + rounds) * n  # a worker's timed pushes at most (the server applies `last` in all)
    times = np.full(cap, np.nan)
    dist.barrier()
    if rank == 0:
        ps.serve(me, theta)
    else:
        g = np.full(dim, 1e-3)
        me.send(0, ps.PULL, rank - 1, size=dim)
        _, hdr = me.recv(0, theta, with_payload=(ps.OK,))
        i = k = 0
        gap_ns = int(gap_s * 1e9)
        while int(hdr[0]) == ps.OK:  # not OK: the others made every push before this worker's first pull
            end = time.perf_counter_ns() + gap_ns
            while time.perf_counter_ns() < end:  # this CPU busy, the server waiting
                pass
            t0 = time.perf_counter_ns()
            me.send(0, ps.PUSH, rank - 1, i, payload=g)
            _, hdr = me.recv(0, theta, with_payload=(ps.OK,))
            if int(hdr[0]) != ps.OK:
                break
            if i >= warm and k < cap:
                times[k], k = (time.perf_counter_ns() - t0) * 1e-9, k + 1
            i += 1
    got = [torch.zeros(cap, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(got, torch.from_numpy(times))
    if rank != 0:
        return {}
    (w0, p0, t0), (w1, p1, t1) = me.marks[first], me.marks[last]
    pushes = last - first
    seen = torch.cat(got[1:]).numpy()
    return {"senders": n, "round_trip_s": float(np.nanmedian(seen)),
            "round_trip_p90_s": float(np.nanpercentile(seen, 90)), "messages_per_s": pushes / ((w1 - w0) * 1e-9),
            "cpu_per_message_s": (p1 - p0) * 1e-9 / pushes, "main_cpu_per_message_s": (t1 - t0) * 1e-9 / pushes}


def _allreduce(rank: int, world: int, sizes: tuple[int, ...], reps: int) -> list[float]:
    import torch
    import torch.distributed as dist

    out = []
    for s in sizes:
        t = torch.zeros(s // 4, dtype=torch.float32)
        times = []
        for i in range(reps + 3):
            dist.barrier()
            t0 = time.perf_counter_ns()
            dist.all_reduce(t)
            if i >= 3:
                times.append(time.perf_counter_ns() - t0)
        out.append(float(np.median(times)) * 1e-9)
    return out
