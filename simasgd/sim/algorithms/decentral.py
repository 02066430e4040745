"""Workers with states of their own: SimuParallelSGD (Zinkevich et al. 2010) and Keuper & Pfreundt's ASGD.

Both follow Keuper & Pfreundt's Alg. 3 / Alg. 5: the training rows are
randomly partitioned, H = ⌊m/n⌋ to each worker (``partition = true``;
:func:`simasgd.spec.algorithms.partition`), and every worker runs minibatch SGD on
its own state θ_w, starting from the run's θ0.

- ``simuparallel``: no communication; the result is the mean of the θ_w
  (their "aggregate" once at the end). The loss curve evaluates that mean:
  what the algorithm returns if it stops there.
- ``keuper``: after every ``exchange_every`` steps a node sends its state to
  a random other node (its ``Role.SCHEDULE`` stream); the receiver keeps the
  latest state received and uses it in its next step by
  :func:`simasgd.numerics.parzen.merge_step` (δ = 1 when the local step moves it
  towards that state), once. The loss curve evaluates node 0 (Alg. 5 returns
  w¹). A message costs, with ``[network]``, the network model's transfer
  (the sender does not wait: RDMA one-sided writes), else a copy of the model
  on the sender's CPU (shared memory). Where a message costs the rank that
  receives it CPU time (the profile measured ``[network] handling_us``), the
  send is ``dist``'s (executors/dist/decentral.py): it returns once the
  receiver's thread that takes states (``Inbox``) has it — the transfer, then
  that thread's handling on the receiver's CPU, which the sender waits for —
  and the state is then there to merge; that thread's time is not taken from
  the receiver's gradient.

``dist``'s version counter (both algorithms): the global version is a counter
in the process group's store on rank 0, which a worker adds to after each
gradient and before its step — one blocking round trip a step. Not the
algorithm's (Keuper & Pfreundt's nodes coordinate with no one): the stop rule's
(``stop.max_updates`` counts every worker's steps, and a step is taken only
while the count is within it — the first N steps to finish, as here) and the
rows' (``version``, curve points at global multiples of ``eval_every``), which
a distributed backend can only keep exactly by asking a shared count before
each step. Where the profile measured the round trip (``[network]
store_round_trip_us``, :mod:`simasgd.sim.network`) a worker waits that long
between its gradient and its step, holding nothing: the store's thread is not
modelled as a queue (at 8 ranks, 7 000 adds/s on the 16-core host).

Rows: one per step, ``version`` = the global count of steps, ``read_version``
= version − 1 (a gradient is on the worker's own current state: staleness 0).
How far the states drift apart is :func:`simasgd.numerics.parzen.spread`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from simasgd.numerics import update_rule
from simasgd.numerics.parzen import merge_step, spread
from simasgd.sim.engine import SimRun
from simasgd.spec import algorithms, seeds

Proc = Generator[simpy.Event, object, None]


class States:
    """Every worker's own θ_w and velocity, its data shard, and (Keuper) its inbox."""

    def __init__(self, run: SimRun, output: str) -> None:
        model = run.model
        assert model is not None
        n, sc = run.n, run.sc
        self.model, self.wl, self.output = model, model.wl, output
        self.theta = np.repeat(model.theta[None, :], n, axis=0)
        self.vel = np.zeros_like(self.theta) if model.momentum else np.zeros((n, 0), model.theta.dtype)
        self.shards = shards(run, self.wl) if sc.algorithm.param("partition") else None
        self.inbox = np.zeros_like(self.theta)
        self.has = [False] * n
        self.merges = [0, 0]  # accepted, rejected
        model.loss = self.loss  # the monitor's loss is the algorithm's result, not the unused shared θ

    def result(self) -> np.ndarray:
        return self.theta[0] if self.output == "first" else self.theta.mean(axis=0)

    def loss(self) -> float:
        return float(self.wl.eval_loss(np.ascontiguousarray(self.result())))

    def spread(self) -> float:
        return spread(self.theta)

    def gradient(self, w: int) -> None:
        """Worker ``w``'s gradient at its own state, on a minibatch of its shard (or of every row)."""
        m, wl = self.model, self.wl
        rng = m.rngs[w]
        if self.shards is None:
            idx = wl.sample_batch(rng, m.batch)
        else:
            shard = self.shards[w]
            idx = shard[rng.integers(0, len(shard), size=m.batch)]
        wl.kernel(self.theta[w], wl.X, wl.y, idx, m.grad[w], wl.shape)

    def step(self, w: int) -> None:
        m = self.model
        update_rule.step(self.theta[w], self.vel[w], m.grad[w], m.lr, m.momentum, 0, m.staleness_aware)

    def merge(self, w: int) -> float:
        """Keuper's step of node ``w``; returns ‖θ_w − θ_j‖ to the state it merged or refused (NaN: none)."""
        m = self.model
        got = self.has[w]
        self.has[w] = False  # a received state is merged (or refused) once
        dist = float(np.linalg.norm(self.theta[w] - self.inbox[w])) if got else float("nan")
        accepted = merge_step(self.theta[w], self.vel[w], m.grad[w], self.inbox[w], got, m.lr, m.momentum,
                              m.staleness_aware)
        if got:
            self.merges[0 if accepted else 1] += 1
        return dist

    def deliver(self, src: np.ndarray, dst: int) -> None:
        self.inbox[dst] = src
        self.has[dst] = True


def shards(run: SimRun, wl: Any) -> list[np.ndarray]:
    return algorithms.partition(int(getattr(wl, "n_train", None) or len(wl.y)), run.n, run.sc.seed)


def own_worker(env: simpy.Environment, w: int, run: SimRun, states: States | None, exchange: int,
               network: Any) -> Proc:
    """Gradient on the own state, step; Keuper: merge the received state in the step, send every ``exchange``."""
    p = run.platform
    peers = seeds.rng(run.sc.seed, run.run, seeds.Role.SCHEDULE, w)
    store_s = store_round_trip_s(network)
    yield from run.start(w)
    steps = 0
    while True:
        run.begin(w)
        run.computing(w)  # no read: the state is the worker's own
        t_read = env.now
        if states is not None:
            states.gradient(w)
        yield p.gradient(w)
        run.computed(w)
        if store_s:  # dist's version counter: the store's answer before the step (module docstring)
            yield env.timeout(store_s)
        yield p.update(w)
        dist = float("nan")
        if states is not None:
            if exchange:
                dist = states.merge(w)
            else:
                states.step(w)
        if not run.stopped:
            run.applied(w, run.version, t_read)
            run.rec.distance[run.rec.n - 1] = dist  # curve.parquet's spread: RMS over nodes of the latest
        steps += 1
        if exchange and steps % exchange == 0:
            j = int(peers.integers(0, run.n - 1))
            j += j >= w  # a random node other than w
            if network is not None and network.enabled:
                msg = None if states is None else states.theta[w].copy()
                if network.handles:  # the sender waits until the receiver's thread has taken it (dist's send)
                    p.block(w)
                    yield from network.send(w, j, p.model_bytes)
                    yield from _take(network, j, states, msg)
                else:
                    env.process(_send(network, w, j, states, msg, p.model_bytes))
            else:  # shared memory: the sender copies its state into the receiver's buffer
                yield p.read(w)
                if states is not None:
                    states.deliver(states.theta[w], j)


def _send(network: Any, w: int, j: int, states: States | None, msg: np.ndarray | None, nbytes: float) -> Proc:
    yield from network.send(w, j, nbytes)
    if states is not None and msg is not None:
        states.deliver(msg, j)


def _take(network: Any, j: int, states: States | None, msg: np.ndarray | None) -> Proc:
    """Node ``j``'s receiving thread takes a state that arrived (its CPU's handling), then it is there to merge."""
    yield from network.handle(j)
    if states is not None and msg is not None:
        states.deliver(msg, j)


def store_round_trip_s(network: Any) -> float:
    """Seconds a step waits for ``dist``'s version counter (0: the profile did not measure it, or no network)."""
    links = None if network is None else network.links
    return 0.0 if links is None or links.store_s is None else float(links.store_s)


def _network(run: SimRun) -> Any:
    """The run's network model (:mod:`simasgd.sim.network`); messages are free-standing copies without links."""
    from simasgd.sim import network

    return network.for_run(run)


def _start(run: SimRun, output: str, exchange: int) -> States | None:
    states = States(run, output) if run.model is not None else None
    network = _network(run) if exchange or run.sc.network is not None else None
    for w in range(run.n):
        run.env.process(own_worker(run.env, w, run, states, exchange, network))
    return states


def start_simuparallel(run: SimRun) -> None:
    _start(run, "mean", 0)


def start_keuper(run: SimRun) -> None:
    _start(run, "first", run.sc.algorithm.param("exchange_every"))
