"""Workload kernels against torch autograd and finite differences; the Workload API."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest
import torch
from scipy import stats

from simasgd.numerics.workloads import (
    WORKLOADS,
    Workload,
    WorkloadError,
    build_workload,
    densify,
    kernels,
    to_csr,
    workload_names,
)
from simasgd.numerics.workloads.mlp import softmax_spec
from simasgd.spec.scenario import WorkloadConfig

REPO = Path(__file__).resolve().parents[1]


def _ro(X: Any) -> Any:
    """``X`` (an array, or CSR's three) read-only, as a built workload's data are (simasgd/numerics/workloads/data.py):
    the kernels then run the machine code compiled for the workloads' argument types, not a second copy
    compiled for writable ones (each of which costs a cold cache seconds of compiling the whole kernel)."""
    for a in X if isinstance(X, tuple) else (X,):
        a.flags.writeable = False
    return X


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _softmax_problem(layers: list[int], n: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    spec = softmax_spec(layers, "")
    theta = rng.standard_normal(spec.dim) * 0.7  # large enough that some ReLUs are off
    X = rng.standard_normal((n, layers[0]))
    y = rng.integers(0, layers[-1], size=n).astype(np.int64)
    return spec, theta, _ro(X), _ro(y)


def _torch_softmax(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray,
                   layers: list[int]) -> tuple[float, np.ndarray]:
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    A = torch.tensor(X[idx], dtype=torch.float64)
    o = 0
    pairs = list(itertools.pairwise(layers))
    for l, (i, out) in enumerate(pairs):
        A = A @ t[o:o + i * out].view(i, out) + t[o + i * out:o + i * out + out]
        o += i * out + out
        if l < len(pairs) - 1:
            A = torch.relu(A)
    loss = torch.nn.functional.cross_entropy(A, torch.tensor(y[idx]))
    loss.backward()
    return float(loss.item()), t.grad.numpy()


def _torch_lsq(theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    F = X.shape[1]
    r = torch.tensor(X[idx]) @ t[:F] + t[F] - torch.tensor(y[idx])
    loss = 0.5 * (r * r).mean()
    loss.backward()
    return float(loss.item()), t.grad.numpy()


BATCHES = [np.array([3]), np.array([0, 1, 2, 5, 7]), np.array([2, 2, 9, 0, 2, 11])]  # incl. duplicates


# -- gradients against torch ----------------------------------------------------

@pytest.mark.parametrize("layers", [[5, 3], [6, 4, 3], [8, 7, 5, 4]])
@pytest.mark.parametrize("b", range(len(BATCHES)))
def test_softmax_gradient_matches_torch(layers: list[int], b: int) -> None:
    spec, theta, X, y = _softmax_problem(layers)
    idx = BATCHES[b].astype(np.int64)
    g = np.full(spec.dim, np.nan)  # overwrite, never accumulate: NaNs must all go
    loss = kernels.loss_and_grad(theta, X, y, idx, g, spec.shape)
    ref_loss, ref_g = _torch_softmax(theta, X, y, idx, layers)
    assert abs(loss - ref_loss) <= 1e-12 * abs(ref_loss)
    assert _rel(g, ref_g) < 1e-10
    assert kernels.loss(theta, X, y, idx, spec.shape) == pytest.approx(ref_loss, rel=1e-12)


def test_softmax_gradient_over_several_blocks_matches_torch() -> None:
    # More rows than kernels.CHUNK: the gradient is accumulated block by block.
    layers = [6, 5, 3]
    spec, theta, X, y = _softmax_problem(layers, n=40)
    idx = np.random.default_rng(1).integers(0, 40, size=2 * kernels.CHUNK + 17).astype(np.int64)
    g = np.full(spec.dim, np.nan)
    loss = kernels.loss_and_grad(theta, X, y, idx, g, spec.shape)
    ref_loss, ref_g = _torch_softmax(theta, X, y, idx, layers)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    assert _rel(g, ref_g) < 1e-10
    assert kernels.loss(theta, X, y, idx, spec.shape) == pytest.approx(ref_loss, rel=1e-12)


@pytest.mark.parametrize("layers", [[5, 3], [6, 4, 3], [8, 7, 5, 4]])
@pytest.mark.parametrize("b", range(len(BATCHES)))
def test_softmax_gradient_written_over_theta_is_the_same_gradient(layers: list[int], b: int) -> None:
    # A worker's private copy takes its own gradient (kernels.grad_over_theta): each layer's weights
    # must be read for the last time before its gradient overwrites them.
    spec, theta, X, y = _softmax_problem(layers)
    idx = BATCHES[b].astype(np.int64)
    g = np.empty(spec.dim)
    loss = kernels.loss_and_grad(theta, X, y, idx, g, spec.shape)
    assert kernels.grad_over_theta(X, idx, spec.shape)
    over = theta.copy()
    loss_over = kernels.loss_and_grad(over, X, y, idx, over, spec.shape)
    assert loss_over == loss
    assert np.array_equal(over, g)  # the same operations in the same order: bit for bit
    assert _rel(over, _torch_softmax(theta, X, y, idx, layers)[1]) < 1e-10


def test_grad_over_theta_only_where_the_kernel_allows_it() -> None:
    spec, _theta, X, _y = _softmax_problem([6, 4, 3], n=40)
    one_block = np.arange(kernels.CHUNK, dtype=np.int64) % 40
    two_blocks = np.arange(kernels.CHUNK + 1, dtype=np.int64) % 40  # the next block's forward needs θ
    assert kernels.grad_over_theta(X, one_block, spec.shape)
    assert not kernels.grad_over_theta(X, two_blocks, spec.shape)
    lsq = np.array([kernels.LEAST_SQUARES, 6], dtype=np.int64)  # zeroes grad_out before reading θ
    assert not kernels.grad_over_theta(X, one_block[:4], lsq)
    assert not kernels.grad_over_theta(_ro(to_csr(X)), one_block[:4], spec.shape)  # the sparse row kernels
    # what would go wrong: least squares written over its θ is not its gradient
    Xl, yl, t = _ro(np.random.default_rng(3).standard_normal((12, 6))), _ro(np.zeros(12)), np.ones(7)
    g, over = np.empty(7), t.copy()
    kernels.loss_and_grad(t, Xl, yl, one_block[:4], g, lsq)
    kernels.loss_and_grad(over, Xl, yl, one_block[:4], over, lsq)
    assert not np.allclose(over, g)


def test_softmax_is_stable_for_huge_logits() -> None:
    spec, theta, X, y = _softmax_problem([4, 3])
    theta = theta * 1e4  # exp would overflow without the log-sum-exp shift
    g = np.empty(spec.dim)
    idx = np.arange(12, dtype=np.int64)
    loss = kernels.loss_and_grad(theta, X, y, idx, g, spec.shape)
    ref_loss, _ref_g = _torch_softmax(theta, X, y, idx, [4, 3])
    assert np.isfinite(loss) and np.all(np.isfinite(g))
    assert loss == pytest.approx(ref_loss, rel=1e-10)


@pytest.mark.parametrize("b", range(len(BATCHES)))
def test_least_squares_gradient_matches_torch(b: int) -> None:
    rng = np.random.default_rng(2)
    X, y, theta = _ro(rng.standard_normal((12, 7))), _ro(rng.standard_normal(12)), rng.standard_normal(8)
    shape = np.array([kernels.LEAST_SQUARES, 7], dtype=np.int64)
    idx = BATCHES[b].astype(np.int64)
    g = np.full(8, np.nan)
    loss = kernels.loss_and_grad(theta, X, y, idx, g, shape)
    ref_loss, ref_g = _torch_lsq(theta, X, y, idx)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    assert _rel(g, ref_g) < 1e-10
    assert kernels.loss(theta, X, y, idx, shape) == pytest.approx(ref_loss, rel=1e-12)


def _sparse_rows(n: int, F: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, F))
    X[rng.random((n, F)) < 0.7] = 0.0
    X[4] = 0.0  # an empty row
    return _ro(X)


@pytest.mark.parametrize("b", range(len(BATCHES)))
def test_sparse_logreg_equals_dense_and_torch(b: int) -> None:
    F, C = 9, 4
    X = _sparse_rows(12, F, 3)
    y = _ro(np.random.default_rng(4).integers(0, C, 12).astype(np.int64))
    spec = softmax_spec([F, C], "")
    theta = np.random.default_rng(5).standard_normal(spec.dim)
    idx = BATCHES[b].astype(np.int64)
    gd, gs = np.empty(spec.dim), np.full(spec.dim, np.nan)
    ld = kernels.loss_and_grad(theta, X, y, idx, gd, spec.shape)
    ls = kernels.loss_and_grad(theta, _ro(to_csr(X)), y, idx, gs, spec.shape)
    assert ls == pytest.approx(ld, rel=1e-12)
    assert _rel(gs, gd) < 1e-12
    assert _rel(gs, _torch_softmax(theta, X, y, idx, [F, C])[1]) < 1e-10
    assert kernels.loss(theta, _ro(to_csr(X)), y, idx, spec.shape) == pytest.approx(ld, rel=1e-12)
    # Only the weight rows of features present in the batch are touched.
    untouched = np.all(X[idx] == 0, axis=0)
    assert np.all(gs[:F * C].reshape(F, C)[untouched] == 0)


@pytest.mark.parametrize("b", range(len(BATCHES)))
def test_sparse_least_squares_equals_dense(b: int) -> None:
    F = 9
    X = _sparse_rows(12, F, 6)
    y = _ro(np.random.default_rng(7).standard_normal(12))
    shape = np.array([kernels.LEAST_SQUARES, F], dtype=np.int64)
    theta = np.random.default_rng(8).standard_normal(F + 1)
    idx = BATCHES[b].astype(np.int64)
    gd, gs = np.empty(F + 1), np.full(F + 1, np.nan)
    ld = kernels.loss_and_grad(theta, X, y, idx, gd, shape)
    ls = kernels.loss_and_grad(theta, _ro(to_csr(X)), y, idx, gs, shape)
    assert ls == pytest.approx(ld, rel=1e-12) and _rel(gs, gd) < 1e-12
    assert kernels.loss(theta, _ro(to_csr(X)), y, idx, shape) == pytest.approx(ld, rel=1e-12)
    assert np.all(gs[:F][np.all(X[idx] == 0, axis=0)] == 0)


def test_finite_differences_agree_with_gradient() -> None:
    layers = [6, 5, 4, 3]
    spec, theta, X, y = _softmax_problem(layers, seed=9)
    idx = np.array([1, 4, 4, 8, 10], dtype=np.int64)
    g = np.empty(spec.dim)
    kernels.loss_and_grad(theta, X, y, idx, g, spec.shape)
    h = 1e-6
    fd = np.empty(spec.dim)
    for k in range(spec.dim):
        e = np.zeros(spec.dim)
        e[k] = h
        fd[k] = (kernels.loss(theta + e, X, y, idx, spec.shape) - kernels.loss(theta - e, X, y, idx, spec.shape)) / (2 * h)
    assert _rel(g, fd) < 1e-6


def test_float32_kernel_tracks_float64() -> None:
    spec, theta, X, y = _softmax_problem([8, 7, 5, 4])
    idx = np.arange(12, dtype=np.int64)
    g64, g32 = np.empty(spec.dim), np.empty(spec.dim, np.float32)
    l64 = kernels.loss_and_grad(theta, X, y, idx, g64, spec.shape)
    l32 = kernels.loss_and_grad(theta.astype(np.float32), _ro(X.astype(np.float32)), y, idx, g32, spec.shape)
    assert l32 == pytest.approx(l64, rel=1e-5)
    assert _rel(g32.astype(np.float64), g64) < 1e-5


def test_empty_batch_is_nan_with_zero_gradient() -> None:
    spec, theta, X, y = _softmax_problem([5, 3])
    g = np.full(spec.dim, 7.0)
    assert np.isnan(kernels.loss_and_grad(theta, X, y, np.empty(0, np.int64), g, spec.shape))
    assert np.all(g == 0)


def test_unknown_model_tag_is_an_error() -> None:
    spec, theta, X, y = _softmax_problem([5, 3])
    bad = spec.shape.copy()
    bad[0] = 99
    with pytest.raises(ValueError, match="unknown model tag"):
        kernels.loss_and_grad(theta, X, y, np.arange(3, dtype=np.int64), np.empty(spec.dim), bad)


# -- numba callers: kernels as arguments, from threads, without the GIL ----------

# Not cache=True: a caller taking a dispatcher argument is keyed by the dispatcher's
# address, so every process would add a cache file (see the cross-process test).
@numba.njit(nogil=True)
def _sgd_steps(kernel, theta, X, y, idx, grad, shape, lr, steps):
    """A worker-like loop receiving the kernel as a first-class dispatcher argument."""
    last = 0.0
    for _ in range(steps):
        last = kernel(theta, X, y, idx, grad, shape)
        theta -= lr * grad
    return last


@pytest.fixture(scope="module")
def digits_mlp() -> Workload:
    return build_workload(WorkloadConfig(model="mlp", layers=[64, 32, 10]), seed=3)


@pytest.fixture(scope="module")
def digits_logreg() -> Workload:
    return build_workload(WorkloadConfig(model="logreg"), seed=3)


@pytest.mark.slow
def test_kernel_passed_as_argument_runs_in_threads_without_the_gil(digits_mlp: Workload) -> None:
    wl = digits_mlp
    idx = wl.sample_batch(np.random.default_rng(0), 32)
    theta0 = wl.init_theta(np.random.default_rng(1))
    expected_theta = theta0.copy()
    expected = _sgd_steps(wl.kernel, expected_theta, wl.X, wl.y, idx, wl.new_grad(), wl.shape, 0.01, 5)

    results: dict[int, tuple[float, np.ndarray]] = {}

    def work(k: int) -> None:
        th = theta0.copy()
        results[k] = (_sgd_steps(wl.kernel, th, wl.X, wl.y, idx, wl.new_grad(), wl.shape, 0.01, 5), th)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for loss, th in results.values():  # no shared scratch: every thread gets the same numbers
        assert loss == expected and np.array_equal(th, expected_theta)

    # Every entry point is compiled to release the GIL.
    for disp in (kernels.loss_and_grad, kernels.loss, kernels.predict):
        assert disp.targetoptions["nogil"] is True


@pytest.mark.hardware
def test_python_keeps_running_while_a_thread_is_in_the_kernel(digits_mlp: Workload) -> None:
    # Size a kernel loop to ~0.5 s, run it in a thread, and require the main thread
    # never to stall for most of it (holding the GIL would stall it throughout).
    wl = digits_mlp
    idx = wl.sample_batch(np.random.default_rng(0), 32)
    theta0 = wl.init_theta(np.random.default_rng(1))
    # Time warm calls only: a first call that compiles or loads the cache would size the loop
    # to a few microseconds, done before the main thread looks.
    _sgd_steps(wl.kernel, theta0.copy(), wl.X, wl.y, idx, wl.new_grad(), wl.shape, 0.0, 1)
    steps, elapsed = 20, 0.0
    while elapsed < 0.05:
        steps *= 2
        t0 = time.perf_counter()
        _sgd_steps(wl.kernel, theta0.copy(), wl.X, wl.y, idx, wl.new_grad(), wl.shape, 0.0, steps)
        elapsed = time.perf_counter() - t0
    steps = int(steps * 0.5 / elapsed)
    t = threading.Thread(target=_sgd_steps,
                         args=(wl.kernel, theta0.copy(), wl.X, wl.y, idx, wl.new_grad(), wl.shape, 0.0, steps))
    start = time.perf_counter()
    t.start()
    stamps = []
    while t.is_alive():
        stamps.append(time.perf_counter())
    end = time.perf_counter()
    # The end closes the last gap: a main thread held off throughout has one gap, the whole run.
    assert np.diff([start, *stamps, end]).max() < 0.75 * (end - start)


@pytest.mark.slow
def test_cached_callers_across_processes(tmp_path: Path) -> None:
    # Three ways a cached numba caller can reach the kernel. All must work; the two
    # that name kernels.loss_and_grad (directly, or in a closure over SOURCE_HASH so
    # the cache follows kernel edits) must load from the on-disk cache in a second
    # process. The dispatcher-argument caller is keyed by the dispatcher's memory
    # address by numba, so it recompiles per process (not asserted: numba's business).
    # Sparse rows: each caller compiles the kernel into itself, seconds for the CSR
    # path against tens for the dense one; which path does not change what is cached.
    (tmp_path / "caller.py").write_text(textwrap.dedent("""
        import numba, numpy as np
        from simasgd.numerics.workloads import kernels

        @numba.njit(nogil=True, cache=True)
        def by_global(theta, X, y, idx, grad, shape):
            return kernels.loss_and_grad(theta, X, y, idx, grad, shape)

        @numba.njit(nogil=True, cache=True)
        def by_argument(kernel, theta, X, y, idx, grad, shape):
            return kernel(theta, X, y, idx, grad, shape)

        def _make(kernels_version=kernels.SOURCE_HASH):
            @numba.njit(nogil=True, cache=True)
            def by_closure(theta, X, y, idx, grad, shape):
                if len(kernels_version) == 0:
                    return -1.0
                return kernels.loss_and_grad(theta, X, y, idx, grad, shape)
            return by_closure

        by_closure = _make()

        if __name__ == "__main__":
            from simasgd.spec.scenario import WorkloadConfig
            from simasgd.numerics.workloads import build_workload
            wl = build_workload(WorkloadConfig(model="logreg", dataset="synthetic", features=50, classes=3,
                                               samples=300, density=0.2, sparse=True), 4)
            th = np.random.default_rng(0).normal(0.0, 0.1, wl.dim)
            args = (th, wl.X, wl.y, wl.eval_idx[:8], wl.new_grad(), wl.shape)
            print(by_global(*args), by_argument(wl.kernel, *args), by_closure(*args))
            print(sum(by_global.stats.cache_hits.values()), sum(by_closure.stats.cache_hits.values()))
    """))
    outs = [subprocess.run([sys.executable, "caller.py"], cwd=tmp_path, capture_output=True, text=True,
                           check=True, env={"PYTHONPATH": str(REPO), "PATH": ""}).stdout.split()
            for _ in range(2)]
    assert outs[0][:3] == outs[1][:3] and len(set(outs[0][:3])) == 1
    assert outs[1][3:] == ["1", "1"]  # the second process loads both compiled callers


# -- the Workload API -------------------------------------------------------------

def test_registry_and_unimplemented_model() -> None:
    assert workload_names() == list(WORKLOADS)
    assert list(WORKLOADS)[:4] == ["mlp", "logreg", "least_squares", "cnn"]
    unknown = WorkloadConfig.model_construct(**{**WorkloadConfig().model_dump(), "model": "resnet"})  # past validation
    with pytest.raises(WorkloadError, match=r"workload\.model = 'resnet'.*available: mlp, logreg, least_squares, cnn"):
        build_workload(unknown, 0)


@pytest.mark.parametrize(("kw", "message"), [
    (dict(model="mlp", layers=[784, 10]),
     r"workload\.layers = \[784, 10\]: first layer must equal the dataset's 64 features"),
    (dict(model="mlp", layers=[64, 32, 7]), r"workload\.layers = \[64, 32, 7\]: last layer must equal the dataset's 10 classes"),
    (dict(model="logreg", layers=[64, 32, 10]), r"workload\.layers = \[64, 32, 10\]: logreg has no hidden layers"),
    (dict(model="least_squares", layers=[64, 10]), r"workload\.layers = \[64, 10\]: least_squares has one output"),
])
def test_bad_combinations_name_the_key(kw: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        build_workload(WorkloadConfig(**kw), 0)


def test_workload_fields(digits_mlp: Workload) -> None:
    wl = digits_mlp
    assert wl.name == "mlp" and wl.kernel is kernels.loss_and_grad and wl.loss_kernel is kernels.loss
    assert list(wl.shape[1:]) == [64, 32, 10] and wl.shape.dtype == np.int64
    assert wl.dim == 64 * 32 + 32 + 32 * 10 + 10
    assert wl.features == 64 and wl.classes == 10 and wl.classification and not wl.sparse
    assert wl.flops_per_sample > 4 * (64 * 32 + 32 * 10)
    assert wl.bytes_per_sample == 64 * 8
    assert wl.eval_idx.dtype == np.int64 and len(wl.eval_idx) == wl.n_train
    assert "mlp 64-32-10 on digits" in wl.description


def test_init_theta_reproducible_and_scaled(digits_mlp: Workload) -> None:
    a = digits_mlp.init_theta(np.random.default_rng(5))
    b = digits_mlp.init_theta(np.random.default_rng(5))
    c = digits_mlp.init_theta(np.random.default_rng(6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.dtype == np.float64 and a.shape == (digits_mlp.dim,)
    W1 = a[:64 * 32]
    assert np.std(W1) == pytest.approx(np.sqrt(2 / 64), rel=0.1)  # He for a ReLU layer
    assert np.all(a[64 * 32:64 * 32 + 32] == 0)  # biases start at zero


def test_sample_batch(digits_mlp: Workload) -> None:
    idx = digits_mlp.sample_batch(np.random.default_rng(0))
    assert idx.dtype == np.int64 and len(idx) == 64
    assert idx.min() >= 0 and idx.max() < digits_mlp.n_train
    assert np.array_equal(idx, digits_mlp.sample_batch(np.random.default_rng(0), 64))


def test_bound_methods_agree_with_kernels(digits_mlp: Workload) -> None:
    wl = digits_mlp
    th = wl.init_theta(np.random.default_rng(0))
    idx = wl.sample_batch(np.random.default_rng(1), 16)
    g1, g2 = wl.new_grad(), wl.new_grad()
    assert wl.loss_and_grad(th, wl.X, wl.y, idx, g1) == wl.kernel(th, wl.X, wl.y, idx, g2, wl.shape)
    assert np.array_equal(g1, g2) and np.array_equal(wl.gradient(th, idx), g1)
    assert wl.eval_loss(th) == pytest.approx(wl.loss(th, wl.X, wl.y, wl.eval_idx))
    assert np.isfinite(wl.test_loss(th))


def _log_slope_upper(losses: list[float]) -> float:
    """Upper end of the 95% CI of the OLS slope of log-loss against the evaluation index."""
    fit = stats.linregress(np.arange(len(losses)), np.log(losses))
    return float(fit.slope + stats.t.ppf(0.975, len(losses) - 2) * fit.stderr)


@pytest.mark.parametrize("model", ["logreg", "mlp"])
def test_sgd_on_digits_lowers_the_loss(model: str, digits_logreg: Workload, digits_mlp: Workload) -> None:
    wl = digits_logreg if model == "logreg" else digits_mlp
    rng = np.random.default_rng(0)
    th = wl.init_theta(rng)
    g = wl.new_grad()
    n_test = len(wl.y_test)
    acc_before = wl.accuracy(th)
    losses = [wl.eval_loss(th)]
    for step in range(1, 301):
        wl.loss_and_grad(th, wl.X, wl.y, wl.sample_batch(rng), g)
        th -= 0.05 * g
        if step % 25 == 0:
            losses.append(wl.eval_loss(th))
    assert _log_slope_upper(losses) < 0  # the loss falls: the slope's whole 95% CI is below 0
    # Test accuracy after training above before it: 95% (normal) intervals on the test rows do not overlap.
    acc = wl.accuracy(th)
    half = lambda p: 1.96 * math.sqrt(max(p * (1 - p), 1 / n_test) / n_test)
    assert acc - half(acc) > acc_before + half(acc_before)


def test_least_squares_sgd_and_no_accuracy() -> None:
    wl = build_workload(WorkloadConfig(model="least_squares", dataset="synthetic", features=20, samples=500), 1)
    rng = np.random.default_rng(0)
    th, g = wl.init_theta(rng), wl.new_grad()
    losses = [wl.eval_loss(th)]
    for step in range(1, 301):
        wl.loss_and_grad(th, wl.X, wl.y, wl.sample_batch(rng, 16), g)
        th -= 0.05 * g
        if step % 25 == 0:
            losses.append(wl.eval_loss(th))
    assert _log_slope_upper(losses) < 0
    assert not wl.classification and wl.predict_kernel is None
    with pytest.raises(WorkloadError, match="regression"):
        wl.accuracy(th)


@pytest.mark.parametrize("model", ["logreg", "least_squares"])
def test_sparse_workload_equals_dense_workload(model: str) -> None:
    kw = dict(model=model, dataset="synthetic", features=50, classes=3, samples=300, density=0.2)
    sp = build_workload(WorkloadConfig(sparse=True, **kw), 4)
    de_X = _ro(densify(sp.X, sp.features))
    th = np.random.default_rng(0).standard_normal(sp.dim)
    idx = sp.sample_batch(np.random.default_rng(1), 32)
    gs, gd = sp.new_grad(), sp.new_grad()
    ls = sp.loss_and_grad(th, sp.X, sp.y, idx, gs)
    ld = sp.kernel(th, de_X, sp.y, idx, gd, sp.shape)
    assert ls == pytest.approx(ld, rel=1e-12) and _rel(gs, gd) < 1e-12
    assert sp.sparse and sp.bytes_per_sample == pytest.approx(10 * 16)
    if model == "logreg":
        assert 0.0 <= sp.accuracy(th) <= 1.0


def test_float32_workload() -> None:
    wl = build_workload(WorkloadConfig(model="mlp", layers=[64, 16, 10], dtype="float32"), 0)
    assert wl.dtype == np.float32 and wl.X.dtype == np.float32
    th = wl.init_theta(np.random.default_rng(0))
    th64 = build_workload(WorkloadConfig(model="mlp", layers=[64, 16, 10]), 0).init_theta(np.random.default_rng(0))
    assert th.dtype == np.float32 and np.array_equal(th, th64.astype(np.float32))
    g = wl.new_grad()
    assert g.dtype == np.float32
    assert np.isfinite(wl.loss_and_grad(th, wl.X, wl.y, wl.sample_batch(np.random.default_rng(1)), g))
    assert wl.bytes_per_sample == 64 * 4
    sp = build_workload(WorkloadConfig(model="logreg", dataset="synthetic", features=40, samples=200,
                                       sparse=True, density=0.1, dtype="float32"), 0)
    g = sp.new_grad()
    th = np.random.default_rng(0).standard_normal(sp.dim).astype(np.float32)
    idx = sp.sample_batch(np.random.default_rng(1), 8)
    g64 = np.empty(sp.dim)
    l32 = sp.loss_and_grad(th, sp.X, sp.y, idx, g)
    X64 = _ro(tuple(a.astype(np.float64) if a.dtype == np.float32 else a for a in sp.X))
    l64 = sp.kernel(th.astype(np.float64), X64, sp.y, idx, g64, sp.shape)
    assert g.dtype == np.float32 and l32 == pytest.approx(l64, rel=1e-5) and _rel(g.astype(np.float64), g64) < 1e-5


def test_eval_idx_capped_and_reproducible() -> None:
    cfg = WorkloadConfig(model="logreg", dataset="synthetic", features=10, samples=1000, eval_rows=100)
    a, b = build_workload(cfg, 7), build_workload(cfg, 7)
    assert len(a.eval_idx) == 100 and np.array_equal(a.eval_idx, b.eval_idx)
    assert np.all(np.diff(a.eval_idx) > 0) and a.eval_idx.max() < a.n_train
    assert not np.array_equal(a.eval_idx, build_workload(cfg, 8).eval_idx)


def test_packages_that_must_not_import_workloads() -> None:
    code = ("import sys, simasgd, simasgd.spec.scenario, simasgd.spec.loader; "
            "assert 'simasgd.numerics.workloads' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_warmup_and_pickle(digits_logreg: Workload) -> None:
    import pickle

    digits_logreg.warmup()  # compiles (or loads) for exactly these types
    sig = kernels.loss_and_grad.signatures
    th = digits_logreg.init_theta(np.random.default_rng(0))
    digits_logreg.loss_and_grad(th, digits_logreg.X, digits_logreg.y, digits_logreg.eval_idx[:4],
                                digits_logreg.new_grad())
    assert kernels.loss_and_grad.signatures == sig  # no new compilation on the first real call
    back = pickle.loads(pickle.dumps(digits_logreg))  # e.g. shipped to a sweep worker
    assert back.kernel is kernels.loss_and_grad
    for a in (back.X, back.y):  # read-only as built (pickle drops the flag): the kernels' code for those types
        a.flags.writeable = False
    assert back.eval_loss(th) == digits_logreg.eval_loss(th)
