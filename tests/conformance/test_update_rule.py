"""The staleness-aware step with momentum, on a hand-computed sequence, through every backend's path.

lr = 0.5, momentum = 0.5, θ0 = 1, v0 = 0, three gradients of 1 with staleness 0, 2, 4, staleness-aware
(ĝ = g / max(1, τ) enters the velocity; simasgd/numerics/update_rule.py):

    τ = 0: ĝ = 1     v = 0.5·0 + 1     = 1     θ = 1   − 0.5·1    = 0.5
    τ = 2: ĝ = 0.5   v = 0.5·1 + 0.5   = 1     θ = 0.5 − 0.5·1    = 0
    τ = 4: ĝ = 0.25  v = 0.5·1 + 0.25  = 0.75  θ = 0   − 0.5·0.75 = −0.375

Every number is exact in binary floating point, so every path must give them exactly. Dividing the
learning rate instead (the cpu executor's former rule, θ ← θ − (lr/τ)·v with v ← m·v + g) gives
θ = 0.125 after the second step: the test tells the two apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from executors.cpu import lockfree, runner, shared
from simasgd.numerics import update_rule
from simasgd.numerics.workloads.constant import ConstWorkload
from simasgd.sim.numerics import Model
from simasgd.spec import loader

LR, M = 0.5, 0.5
STALENESS = (0, 2, 4)
THETA = (0.5, 0.0, -0.375)      # θ after each step
VEL = (1.0, 1.0, 0.75)          # v after each step
PLAIN_THETA = (0.5, -0.25, -1.125)  # not staleness-aware: ĝ = g (v = 1, 1.5, 1.75)
D = 20                          # two full HOGWILD! cache lines of 8 and a partial one


def _scenario(aware: bool, algorithm: str = "mutex", workers: int = 2) -> Any:
    return loader.from_dict({"workers": {"count": workers}, "algorithm": {"name": algorithm},
                             "optimizer": {"lr": LR, "momentum": M, "staleness_aware": aware},
                             "stop": {"max_updates": 10}})


def _shared_rule(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware: bool) -> None:
    update_rule.step(theta, vel, g, LR, M, tau, aware)


def _sim(aware: bool) -> Callable[..., None]:
    model = Model(_scenario(aware), 0, ConstWorkload(dim=D))

    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        model.theta, model.velocity = theta, vel
        model.step(g, tau)
    return step


def _sim_chunked(aware: bool) -> Callable[..., None]:
    model = Model(_scenario(aware, "hogwild"), 0, ConstWorkload(dim=D))

    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        model.theta, model.velocity = theta, vel
        for part in model.chunks:  # the chunked HOGWILD! write, chunk by chunk
            model.step(g, tau, part)
    return step


def _cpu(aware: bool) -> Callable[..., None]:
    sc = _scenario(aware)
    cfg_i, cfg_f = runner.config(sc, ConstWorkload(dim=D), 2, 10, 0)  # the run's lr, momentum, awareness

    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        shared.apply_update(theta, vel, g, cfg_i, cfg_f, tau)
    return step


def _cpu_hogwild(aware: bool) -> Callable[..., None]:
    canary = np.zeros(lockfree.n_probes(D))

    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        lockfree.hogwild_step(theta, vel, g, LR, M, update_rule.divisor(tau, aware_), canary, True)
    return step


def _cpu_hogwild_plain(aware: bool) -> Callable[..., None]:
    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        lockfree.hogwild_step(theta, vel, g, LR, M, update_rule.divisor(tau, aware_), np.zeros(0), False)
    return step


def _cpu_hogwild_down(aware: bool) -> Callable[..., None]:
    """An odd-numbered worker's sweep, from the top of θ down."""
    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        lockfree.hogwild_step(theta, vel, g, LR, M, update_rule.divisor(tau, aware_), np.zeros(0), False, True)
    return step


def _cpu_leashed(aware: bool) -> Callable[..., None]:
    """Leashed-SGD's one-pass build of the next vector from the latest, which then becomes the latest."""
    sc = _scenario(aware)
    cfg_i, cfg_f = runner.config(sc, ConstWorkload(dim=D), 2, 10, 0)

    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        out, vout = np.full(D, np.nan), np.full(D, np.nan)
        shared.update_into(out, vout, theta, vel, g, cfg_i, cfg_f, tau)
        theta[:], vel[:] = out, vout
    return step


def _cpu_leashed_lone(aware: bool) -> Callable[..., None]:
    """A lone Leashed worker's build: the gradient already in the vector the step is built in."""
    sc = _scenario(aware)
    cfg_i, cfg_f = runner.config(sc, ConstWorkload(dim=D), 1, 10, 0)

    def step(theta: np.ndarray, vel: np.ndarray, g: np.ndarray, tau: int, aware_: bool) -> None:
        out, vout = g.copy(), np.full(D, np.nan)
        shared.update_into(out, vout, theta, vel, out, cfg_i, cfg_f, tau)
        theta[:], vel[:] = out, vout
    return step


PATHS: dict[str, Callable[[bool], Callable[..., None]]] = {
    "update_rule": lambda aware: _shared_rule, "sim": _sim, "sim_chunked": _sim_chunked, "cpu": _cpu,
    "cpu_hogwild": _cpu_hogwild, "cpu_hogwild_plain": _cpu_hogwild_plain, "cpu_hogwild_down": _cpu_hogwild_down,
    "cpu_leashed": _cpu_leashed, "cpu_leashed_lone": _cpu_leashed_lone,
}


@pytest.mark.parametrize("aware,expected", [(True, THETA), (False, PLAIN_THETA)], ids=["aware", "plain"])
@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_gives_the_hand_computed_sequence(path: str, aware: bool, expected: tuple[float, ...]) -> None:
    step = PATHS[path](aware)
    theta, vel, g = np.ones(D), np.zeros(D), np.ones(D)
    for tau, want in zip(STALENESS, expected, strict=False):
        step(theta, vel, g, tau, aware)
        assert np.all(theta == want), (path, tau, theta[:3], want)
    if aware:
        assert np.all(vel == VEL[-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("momentum,div", [(0.0, 1.0), (0.0, 3.0), (0.9, 1.0), (0.9, 2.0)])
@pytest.mark.slow
def test_hogwild_sweeps_down_to_the_same_bits(momentum: float, div: float, dtype: type) -> None:
    """Several blocks and a partial one (the top): every element written once, as the upward sweep does."""
    d = 3 * lockfree.SWEEP_BLOCK + 37
    rng = np.random.default_rng(11)
    theta, vel, g = (rng.standard_normal(d).astype(dtype) for _ in range(3))
    before, up, vup = theta.copy(), theta.copy(), vel.copy()
    lockfree.hogwild_step(up, vup, g, LR, momentum, div, np.zeros(0), False, False)
    lockfree.hogwild_step(theta, vel, g, LR, momentum, div, np.zeros(0), False, True)
    assert np.array_equal(theta, up) and np.array_equal(vel, vup)
    assert np.count_nonzero(up != before) > 0.99 * d  # it stepped (a rounding may leave a few)


@pytest.mark.parametrize("sweep,word", [(None, 1), ("alternate", 1), ("up", 0)])
def test_the_hogwild_sweep_reaches_the_cpu_loop(sweep: str | None, word: int) -> None:
    alg = {"name": "hogwild"} | ({"sweep": sweep} if sweep else {})
    sc = loader.from_dict({"workers": {"count": 2}, "algorithm": alg, "stop": {"max_updates": 10}})
    cfg_i, _ = runner.config(sc, ConstWorkload(dim=D), 2, 10, 0)
    assert cfg_i[shared.C_SWEEP_ALTERNATE] == word


def test_an_unknown_sweep_is_refused_by_name() -> None:
    with pytest.raises(loader.ScenarioError, match="sweep"):
        loader.from_dict({"algorithm": {"name": "hogwild", "sweep": "down"}, "stop": {"max_updates": 10}})


def test_sim_mean_of_gradients_divides_each_by_its_own_staleness() -> None:
    # sync / k_sync / k_async: one step with the mean of ĝ over the gradients: (1/1 + 1/2) / 2 = 0.75.
    model = Model(_scenario(True, "k_async", 2), 0, ConstWorkload(dim=D))
    model.theta, model.velocity = np.ones(D), np.zeros(D)
    model.grad = [np.ones(D), np.ones(D)]
    model.step_mean([0, 1], [0, 2])
    assert np.all(model.velocity == 0.75) and np.all(model.theta == 1 - LR * 0.75)


def test_momentum_zero_never_touches_the_velocity() -> None:
    theta, g = np.ones(D), np.ones(D)
    update_rule.step(theta, np.zeros(0), g, LR, 0.0, 3, True)  # an empty v is allowed without momentum
    assert np.all(theta == 1 - LR / 3)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_float32_model_steps_in_float32(momentum: float) -> None:
    # η, m and the divisor are converted to θ's type first (as PyTorch's SGD computes), so the step is
    # float32 arithmetic: η = 0.1 is not exactly 0.1 in float32, and the result shows which was used
    rng = np.random.default_rng(3)  # 1000 elements: float64 arithmetic rounds ~5% of them differently
    theta, vel, g = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
    t, v = theta.copy(), vel.copy()
    update_rule.step(t, v, g, 0.1, momentum, 3, True)
    f = np.float32
    want_v = f(momentum) * vel + g / f(3.0) if momentum else vel
    want = theta - f(0.1) * (want_v if momentum else g / f(3.0))
    assert t.dtype == np.float32 and np.array_equal(t, want) and np.array_equal(v, want_v)
    out, vout = np.empty_like(theta), np.empty_like(vel)
    update_rule.step_into(out, vout, theta, vel, g, 0.1, momentum, 3, True)  # Leashed's build: the same bits
    assert np.array_equal(out, want) and (not momentum or np.array_equal(vout, want_v))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("staleness", [0, 3])
def test_step_into_with_the_gradient_in_its_destination_gives_the_same_bits(dtype: type, momentum: float,
                                                                           staleness: int) -> None:
    # A lone Leashed worker computes its gradient into the vector it will publish (executors/cpu/lockfree.py):
    # step_into(out, ..., g=out) runs loops of its own, which must write what the three-vector form writes
    rng = np.random.default_rng(11)
    theta, vel, g = (rng.standard_normal(1001).astype(dtype) for _ in range(3))
    want, want_v = np.empty_like(theta), np.empty_like(vel)
    update_rule.step_into(want, want_v, theta, vel, g, 0.1, momentum, staleness, True)
    out, vout = g.copy(), np.empty_like(vel)
    update_rule.step_into(out, vout, theta, vel, out, 0.1, momentum, staleness, True)
    assert np.array_equal(out, want) and (not momentum or np.array_equal(vout, want_v))
    assert not np.array_equal(out, g)  # it did step



@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.slow
def test_the_lopez_masters_one_pass_step_is_the_scaled_copy_then_the_step(dtype: type, momentum: float) -> None:
    # The master reads the shared sum in the pass that writes θ (no copy of g·1/(N−1)); its bits must be
    # those of the product into a vector of its own and then the update rule, as the simulator steps.
    rng = np.random.default_rng(5)
    theta, vel, acc = (rng.standard_normal(1000).astype(dtype) for _ in range(3))
    scale = 1.0 / 3  # N = 4: not exact in binary, so a division or a float64 product would show
    want_t, want_v = theta.copy(), vel.copy()
    update_rule.step(want_t, want_v, acc * dtype(scale), LR, momentum, 0, False)
    sc = loader.from_dict({"workers": {"count": 4}, "algorithm": {"name": "lopez"},
                           "optimizer": {"lr": LR, "momentum": momentum}, "stop": {"max_updates": 10}})
    cfg_i, cfg_f = runner.config(sc, ConstWorkload(dim=1000), 4, 10, 0)
    ctrl = shared.new_ctrl()
    t, v = theta.copy(), vel.copy()
    ring, meta = np.zeros((1, 1000), dtype), np.zeros(shared.LINE, np.int64)  # no snapshot is due (k = 0)
    assert shared.seq_update_scaled(t, v, acc, scale, cfg_i, cfg_f, ctrl, ring, meta) == 1  # version 1
    assert np.array_equal(t, want_t) and (not momentum or np.array_equal(v, want_v))
    assert not np.array_equal(want_t, theta)  # the step moved θ


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("staleness", [1, 3])
@pytest.mark.parametrize("over_copy", [True, False], ids=["g-is-the-mirror", "g-apart"])
def test_the_mirrored_step_is_the_step_then_a_copy(dtype: type, momentum: float, staleness: int,
                                                   over_copy: bool) -> None:
    # The locks' and HOGWILD!'s update leaves the new θ in the worker's copy too, so that an unchanged θ
    # is not read again: its bits must be the step's, then a copy, including when g *is* that copy (the
    # gradient written over it) and each element of g is read just before its mirror element is written.
    rng = np.random.default_rng(7)
    theta, vel, g, mirror = (rng.standard_normal(1001).astype(dtype) for _ in range(4))  # odd: a loop tail
    if over_copy:
        g = mirror
    want_t, want_v = theta.copy(), vel.copy()
    update_rule.step(want_t, want_v, g.copy(), LR, momentum, staleness, True)
    v = vel if momentum else vel[:0]
    update_rule.step_mirrored(theta, v, g, mirror, LR, momentum, update_rule.divisor(staleness, True))
    assert np.array_equal(theta, want_t) and np.array_equal(mirror, want_t)
    assert not momentum or np.array_equal(vel, want_v)
