"""Elastic averaging: EASGD (Zhang, Choromanska, LeCun 2015) and EA-wild (Wongpanich, You, Demmel 2020).

Every worker (a group's leader, for EA-wild with ``group_size`` > 1) keeps
its own state x_j and velocity; the centre x̃ is the run's θ (``Model.theta``:
its loss is the curve). A worker's cycle, as Zhang et al.'s Algorithm 1 and
Wongpanich et al.'s Algorithm 1 order it: every ``tau`` local steps it
exchanges with the centre — it gets x̃, the centre gets x_j —

    d = α(x_j − x̃);  x_j ← x_j − d;  x̃ ← x̃ + α(x_j_sent − x̃)

then takes a local step x_j ← x_j − η·g(x_j) (``update_rule``, the worker's
own velocity when ``optimizer.momentum`` > 0: EA-MSGD; staleness 0, the
gradient is taken at the state it updates).

- ``easgd``: the exchanges are round-robin — worker j's exchange starts only
  after worker j−1's has finished (a token passed 0, 1, …, n−1, 0, …; Zhang et
  al. via Wongpanich §2.3.2) — and hold the centre for the whole exchange, so
  the worker's x̃ and the centre's are the same: the force is symmetric.
- ``eawild``: no lock (§3.1). The worker moves by the x̃ it pulled; the
  centre applies α(x_j − x̃) with its *current* x̃, chunk by chunk as the write
  lands ([sim] read_chunks), so concurrent exchanges interleave. With
  ``group_size`` = g, g consecutive workers form a group with one state: each
  member computes a gradient at it on its own minibatch (in parallel; the
  step waits for the slowest), the group steps with their mean, and its first
  worker (the leader) exchanges with the centre.

Rows (``algorithms._EXCHANGES``): one per exchange, by the worker (leader)
that made it; ``version`` = the centre version it made, ``read_version`` =
the centre version the worker's state reflects — what it read at its previous
exchange plus that exchange's own move (under the lock: the version that
exchange made; at its first exchange, which carries no gradient, version − 1)
— so staleness counts the other workers' exchanges since its local steps
began (DESIGN's definition; deterministic round-robin: n − 1), ``distance`` =
‖x_j − x̃‖ at the exchange (curve.parquet's ``spread``). With a network
(``[network]``), an exchange is a pull of x̃ from the server and a push of
x_j to it (:mod:`simasgd.sim.network`); without, a read and an update of the
shared centre on the worker's CPU.

Where a message costs the rank that receives it CPU time (the profile measured ``[network] handling_us``:
``Network.handles``), an exchange is the messages ``dist``'s ranks send (executors/dist/elastic.py, ``centre``
and ``_exchange``), each handled on the receiving rank's CPU, the centre's one message at a time
(``Network.handle``) and its update of x̃ priced as the machine prices an update of d parameters
(``costs.server_update_s``):

- ``easgd``: the worker sends x_j, then waits for its turn (the centre receives from the leaders round-robin);
  the centre takes it, replies with x̃ as it is, then updates x̃ and passes the turn; the worker takes the reply
  and moves by that x̃.
- ``eawild``: a pull request (a header alone) and its reply x̃, the worker's move, then the push of x_j and its
  acknowledgement (a header alone); the centre takes each message as it arrives, whoever sent it, and applies a
  push to x̃ as it then is, whole (one process applies it: no other exchange runs meanwhile).

Not priced there: the centre's loss snapshots (a copy of x̃ every ``stop.eval_every_updates``).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy

from simasgd.numerics import update_rule
from simasgd.sim import network as net
from simasgd.sim.costs import server_update_s
from simasgd.sim.engine import SimRun, WorkerPlatform
from simasgd.sim.numerics import Model

Proc = Generator[simpy.Event, object, None]


class Elastic:
    """Shared state of one run: the workers' states, the round-robin token, the network."""

    def __init__(self, run: SimRun, locked: bool, group: int) -> None:
        self.run, self.locked, self.group = run, locked, group
        sc = run.sc
        self.alpha, self.tau = float(sc.algorithm.param("alpha")), int(sc.algorithm.param("tau"))
        self.leaders = list(range(0, run.n, group))
        self.turn = 0                      # easgd: the leader whose exchange is next
        self.waiting: dict[int, simpy.Event] = {}  # a leader waiting for its turn -> what wakes it
        self.net = net.for_run(run)
        self.update_s = server_update_s(run.platform) if self.net.handles else 0.0  # the centre's x̃ += α(x_j − x̃)
        m = run.model
        self.x = {w: m.theta.copy() for w in self.leaders} if m is not None else {}
        self.v = {w: np.zeros_like(m.theta) for w in self.leaders} if m is not None and m.momentum else {}

    def pass_token(self) -> None:
        """The next leader's turn: it alone is woken (the others sleep on until theirs)."""
        self.turn = (self.turn + 1) % len(self.leaders)
        ev = self.waiting.pop(self.turn, None)
        if ev is not None:
            ev.succeed()


def _exchange(env: simpy.Environment, w: int, run: SimRun, el: Elastic,
              prev: tuple[int, float] | None) -> Generator[simpy.Event, object, tuple[int, float]]:
    """One exchange of leader ``w`` with the centre; returns (the version it read, when).

    ``prev``: (read version, time) of the worker's previous exchange; None at its first."""
    p, m, nw = run.platform, run.model, el.net
    nbytes = p.model_bytes
    if nw.handles:
        return (yield from _exchange_ranks(env, w, run, el, prev))
    if el.locked:
        me = el.leaders.index(w)
        t0 = env.now
        while el.turn != me:                       # round-robin: wait for the previous worker's exchange
            p.block(w)
            el.waiting[me] = ev = env.event()
            yield ev
        wait = env.now - t0
    else:
        wait = 0.0
    # get x̃ (Alg. 1: "Master sends x̃ to Worker")
    if nw.enabled:
        yield from nw.send(nw.server, w, nbytes)
    else:
        yield p.read(w)
    rv, t_read = run.version, env.now
    sent = None
    dist = float("nan")
    if m is not None:
        x, centre = el.x[w], m.theta
        dist = float(np.linalg.norm(x - centre))
        sent = x.copy()                            # the centre gets x_j as it was before the move
        x -= el.alpha * (sent - centre)            # the worker moves by the x̃ it got
    # the centre gets x_j and moves towards it
    if nw.enabled:
        yield from nw.send(w, nw.server, nbytes)
    if el.locked or m is None or len(m.chunks) <= 1:
        if not nw.enabled:                         # over a network the server's CPU applies it
            yield p.update(w)
        if m is not None:
            m.theta += el.alpha * (sent - m.theta)
    else:
        assert sent is not None  # set above wherever the model is
        total = p.update_time(w)
        for i, part in enumerate(m.chunks):        # lock-free: each chunk against the centre as it is then
            if not nw.enabled:
                yield p.update(w, 1 / len(m.chunks), None if total is None else total / len(m.chunks), i == 0)
            m.theta[part] += el.alpha * (sent[part] - m.theta[part])
    # The centre version the worker's state reflects: what it read at its previous exchange plus
    # that exchange's own move (under the lock: the version that exchange made). The first exchange
    # carries no gradient: staleness 0.
    prev_rv, prev_t = (run.version, t_read) if prev is None else (prev[0] + 1, prev[1])
    i = run.rec.n
    snap = run.snapshot(w, run.applied(w, prev_rv, prev_t, wait=wait))
    if run.rec.n > i:
        run.rec.distance[i] = dist
    if snap is not None:  # the loss ring's copy of the centre, before the turn passes on
        yield snap
    if el.locked:
        el.pass_token()
    return rv, t_read


def _exchange_ranks(env: simpy.Environment, w: int, run: SimRun, el: Elastic,
                    prev: tuple[int, float] | None) -> Generator[simpy.Event, object, tuple[int, float]]:
    """:func:`_exchange` as ``dist``'s ranks run it where messages cost their CPUs (module docstring)."""
    p, m, nw = run.platform, run.model, el.net
    nbytes, centre = p.model_bytes, nw.server
    t0 = env.now
    if el.locked:
        yield from nw.send(w, centre, nbytes)      # x_j, then the centre's turn
        me = el.leaders.index(w)
        while el.turn != me:
            p.block(w)
            el.waiting[me] = ev = env.event()
            yield ev
        with nw.cpu[centre].request() as r:
            yield r
            # the centre takes x_j; its reply, x̃ as it is, leaves now
            yield env.timeout(nw.handling_s + nw.wake_s(centre))
            rv, t_read = run.version, env.now
            sent, dist = _move(el, m, w)
            reply = env.process(nw.send(centre, w, nbytes))
            yield env.timeout(el.update_s)         # then it updates x̃
            _pull(el, m, sent)
            _row(run, w, prev, rv, t_read, env.now - t0, dist)
            el.pass_token()
        p.block(w)
        yield reply
        yield from nw.handle(w)
        return rv, t_read
    p.block(w)
    yield from nw.send(w, centre, net.HEADER_BYTES)  # the pull request, a header alone
    yield from nw.handle(centre)
    rv, t_read = run.version, env.now
    sent, dist = _move(el, m, w)                   # the reply carries x̃ as it is now: the worker moves by it
    yield from nw.send(centre, w, nbytes)
    yield from nw.handle(w)
    yield from nw.send(w, centre, net.HEADER_BYTES + nbytes)  # the push of x_j as it was
    yield from nw.handle(centre, el.update_s)
    _pull(el, m, sent)                             # x̃ as it is when the centre applies it
    _row(run, w, prev, rv, t_read, 0.0, dist)
    yield from nw.send(centre, w, net.HEADER_BYTES)  # the acknowledgement
    yield from nw.handle(w)
    return rv, t_read


def _move(el: Elastic, m: Model | None, w: int) -> tuple[np.ndarray | None, float]:
    """The worker's move by the centre as it is now: (x_j as it was, ‖x_j − x̃‖); (None, NaN) without numerics."""
    if m is None:
        return None, float("nan")
    x, centre = el.x[w], m.theta
    sent = x.copy()
    x -= el.alpha * (sent - centre)
    return sent, float(np.linalg.norm(sent - centre))


def _pull(el: Elastic, m: Model | None, sent: np.ndarray | None) -> None:
    """The centre moves towards the x_j it got: x̃ += α(x_j − x̃)."""
    if m is not None and sent is not None:
        m.theta += el.alpha * (sent - m.theta)


def _row(run: SimRun, w: int, prev: tuple[int, float] | None, rv: int, t_read: float, wait: float,
         dist: float) -> None:
    """The exchange's row, as :func:`_exchange` records it (read version: the previous exchange's + 1; at the
    first, which carries no gradient, the version before this one: staleness 0)."""
    prev_rv, prev_t = (run.version, t_read) if prev is None else (prev[0] + 1, prev[1])
    i = run.rec.n
    run.applied(w, prev_rv, prev_t, wait=wait)
    if run.rec.n > i:
        run.rec.distance[i] = dist


def _local_step(env: simpy.Environment, w: int, run: SimRun, el: Elastic) -> Proc:
    """The group's gradients at its state (in parallel), their mean applied to the state."""
    p, m = run.platform, run.model
    members = range(w, w + el.group)
    run.computing(w)
    if m is not None:
        x = el.x[w]
        for k in members:
            m.read_into[k] = x
            m.gradient(k)
    if el.group == 1:
        yield p.gradient(w)
    else:  # the members compute on their own CPUs; each gives its CPU back when done (a sleeping wait)
        others = [env.process(_member(p, k)) for k in members if k != w]
        yield p.gradient(w)
        p.block(w)
        yield simpy.AllOf(env, others)
        if el.net.enabled:                          # the group's all-reduce of its gradients
            yield env.timeout(el.net.allreduce_s(p.model_bytes, el.group))
    run.computed(w)
    yield p.update(w)
    if m is not None:
        g = m.grad[w] if el.group == 1 else np.mean([m.grad[k] for k in members], axis=0)
        v = el.v.get(w, m.velocity)
        update_rule.step(el.x[w], v, g, m.lr, m.momentum, 0, False)


def _member(p: WorkerPlatform, k: int) -> Proc:
    """A group member's gradient on its own CPU; then it sleeps until the group's next step."""
    yield p.gradient(k)
    p.block(k)


def elastic_worker(env: simpy.Environment, w: int, run: SimRun, el: Elastic) -> Proc:
    yield from run.start(w)
    prev: tuple[int, float] | None = None
    t = 0
    while True:
        if t % el.tau == 0:
            run.begin(w)
            prev = yield from _exchange(env, w, run, el, prev)
        yield from _local_step(env, w, run, el)
        t += 1


def _start(run: SimRun, locked: bool) -> None:
    group = 1 if locked else int(run.sc.algorithm.param("group_size"))
    el = Elastic(run, locked, group)
    for w in el.leaders:
        run.env.process(elastic_worker(run.env, w, run, el))


def start_easgd(run: SimRun) -> None:
    _start(run, locked=True)


def start_eawild(run: SimRun) -> None:
    _start(run, locked=False)
