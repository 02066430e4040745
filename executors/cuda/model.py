"""A workload's gradient on the GPU: per-stream scratch and the kernel sequence of one minibatch.

``gradient_for(workload)`` picks the device path by the model tag: softmax
networks (mlp, dense logreg) and the cnn run as CUDA kernels (tiled matrix
products, ReLU, softmax cross-entropy, conv/pool) on the flat θ layout of the
CPU kernels; any other workload (least squares, sparse rows, the test suite's
constant-gradient workload) computes its gradient on the host with its own
numba kernel, between a device→host copy of θ and a host→device copy of g.
``Gradient.on_device`` says which, and results record it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from executors.cuda import kernels as K
from executors.cuda.device import launch_lock
from simasgd.numerics.workloads import kernels as cpu_kernels
from simasgd.numerics.workloads.cnn import sizes
from simasgd.numerics.workloads.cnn_kernels import CNN


def launch(kernel: Any, n: int, stream: Any, *args: Any) -> None:
    """An element-wise kernel over ``n`` threads on ``stream``."""
    tpb = min(K.THREADS, max(1, n))  # small vectors: no idle threads (each is a Python thread in the simulator)
    with launch_lock():
        kernel[(n + tpb - 1) // tpb if n > 0 else 1, tpb, stream](*args)


def launch1(kernel: Any, stream: Any, *args: Any) -> None:
    """A single-thread kernel (versions, Leashed-SGD's pool protocol)."""
    with launch_lock():
        kernel[1, 1, stream](*args)


def to_host(arr: Any, stream: Any) -> np.ndarray:
    """A device array's values once the stream's work so far is done (a synchronisation)."""
    stream.synchronize()
    out = arr.copy_to_host(stream=stream)
    stream.synchronize()
    return out


def matmul(A: Any, B: Any, C: Any, ta: bool, tb: bool, stream: Any) -> None:
    m, o = C.shape
    grid = ((o + K.TILE - 1) // K.TILE, (m + K.TILE - 1) // K.TILE)
    with launch_lock():
        K.matmul[grid, (K.TILE, K.TILE), stream](A, B, C, ta, tb)


class Gradient:
    """One stream's gradient: ``compute(theta_dev, idx_host, g_dev)`` enqueues it on the stream."""

    on_device = True

    def __init__(self, cuda: Any, wl: Any, X_dev: Any, y_dev: Any, stream: Any, batch: int) -> None:
        self.cuda, self.wl, self.X, self.y, self.stream, self.batch = cuda, wl, X_dev, y_dev, stream, batch
        self.idx = cuda.device_array(batch, dtype=np.int64, stream=stream)
        self.loss = cuda.device_array(batch, dtype=np.float64, stream=stream)

    def _idx(self, idx: np.ndarray) -> None:
        self.idx.copy_to_device(np.ascontiguousarray(idx, dtype=np.int64), stream=self.stream)

    def compute(self, theta: Any, idx: np.ndarray, g: Any) -> None:
        raise NotImplementedError


class DenseNet(Gradient):
    """Softmax network: per layer Z = A·W (+b, ReLU); CE; gW = Aᵀ·D, gb = Σ D, D ← D·Wᵀ ⊙ [A > 0]."""

    def __init__(self, cuda: Any, wl: Any, X_dev: Any, y_dev: Any, stream: Any, batch: int,
                 layers: list[int] | None = None, first: int = 0) -> None:
        super().__init__(cuda, wl, X_dev, y_dev, stream, batch)
        self.layers = layers if layers is not None else [int(v) for v in wl.shape[1:]]
        self.first = first  # offset in θ of the first dense layer (the cnn's conv parameters come before)
        dt = np.dtype(wl.dtype)
        self.acts = [cuda.device_array((batch, n), dtype=dt, stream=stream) for n in self.layers]
        self.deltas = [cuda.device_array((batch, n), dtype=dt, stream=stream) for n in self.layers[1:-1]]
        self.off = []
        o = first
        for nin, nout in zip(self.layers[:-1], self.layers[1:], strict=False):
            self.off.append((o, o + nin * nout))
            o += nin * nout + nout

    def _views(self, arr: Any, l: int) -> tuple[Any, Any]:
        nin, nout = self.layers[l], self.layers[l + 1]
        w, b = self.off[l]
        return arr[w:w + nin * nout].reshape((nin, nout)), arr[b:b + nout]

    def forward(self, theta: Any) -> None:
        s, L = self.stream, len(self.layers) - 1
        for l in range(L):
            W, b = self._views(theta, l)
            Z = self.acts[l + 1]
            matmul(self.acts[l], W, Z, False, False, s)
            launch(K.bias_act, Z.size, s, Z, b, l < L - 1)

    def backward(self, theta: Any, g: Any) -> Any:
        """Gradients of the dense layers into g; returns the delta at the first layer's input (before
        any mask), in ``self.acts[0]``'s shape, when ``need_input_delta`` (the cnn), else None."""
        s, L = self.stream, len(self.layers) - 1
        Z = self.acts[L]
        launch(K.softmax_ce, self.batch, s, Z, self.y, self.idx, 1.0 / self.batch, self.loss)
        D = Z
        for l in range(L - 1, -1, -1):
            W, _ = self._views(theta, l)
            gW, gb = self._views(g, l)
            matmul(self.acts[l], D, gW, True, False, s)
            launch(K.col_sum, gb.size, s, D, gb)
            if l > 0:
                Dn = self.deltas[l - 1]
                matmul(D, W, Dn, False, True, s)
                launch(K.relu_mask, Dn.size, s, Dn, self.acts[l])
                D = Dn
        return D

    def compute(self, theta: Any, idx: np.ndarray, g: Any) -> None:
        self._idx(idx)
        A0 = self.acts[0]
        launch(K.gather, A0.size, self.stream, self.X, self.idx, A0)
        self.forward(theta)
        self.backward(theta, g)


class ConvNet(DenseNet):
    """The cnn: conv+ReLU, max-pool into the dense network's input, then its backward and the conv gradient."""

    def __init__(self, cuda: Any, wl: Any, X_dev: Any, y_dev: Any, stream: Any, batch: int) -> None:
        s = sizes(wl.shape)
        super().__init__(cuda, wl, X_dev, y_dev, stream, batch, [s["F1"], s["Hd"], s["nc"]], first=s["conv"])
        self.s = s
        dt = np.dtype(wl.dtype)
        self.conv = cuda.device_array((batch, s["K"] * s["Ho"] * s["Wo"]), dtype=dt, stream=stream)
        self.arg = cuda.device_array((batch, s["F1"]), dtype=np.int64, stream=stream)
        self.dpool = cuda.device_array((batch, s["F1"]), dtype=dt, stream=stream)
        self.cdims = cuda.to_device(np.array([s[k] for k in ("C", "H", "W", "K", "k", "Ho", "Wo")], np.int64),
                                    stream=stream)
        self.pdims = cuda.to_device(np.array([s[k] for k in ("K", "Ho", "Wo", "P", "Hp", "Wp")], np.int64),
                                    stream=stream)
        self.gdims = cuda.to_device(np.array([s[k] for k in ("C", "H", "W", "K", "k", "Ho", "Wo", "Hp", "Wp")],
                                             np.int64), stream=stream)

    def compute(self, theta: Any, idx: np.ndarray, g: Any) -> None:
        st, s = self.stream, self.s
        self._idx(idx)
        launch(K.conv_relu, self.conv.size, st, theta, self.X, self.idx, self.cdims, self.conv)
        pool = self.acts[0]
        launch(K.max_pool, pool.size, st, self.conv, self.pdims, pool, self.arg)
        self.forward(theta)
        D1 = self.backward(theta, g)  # delta at the first hidden layer (masked by its ReLU)
        W1, _ = self._views(theta, 0)
        matmul(D1, W1, self.dpool, False, True, st)  # δ_pool = δ_1·W1ᵀ
        tpb = K.reduce_threads(pool.shape[0] * s["Hp"] * s["Wp"])
        with launch_lock():
            K.conv_grad[K.reduce_blocks(s["conv"]), tpb, st](self.X, self.idx, self.dpool, pool, self.arg, self.gdims,
                                                             g[:s["conv"]])


class HostGradient(Gradient):
    """The workload's own numba kernel on the host, between copies (workloads without CUDA kernels)."""

    on_device = False

    def __init__(self, cuda: Any, wl: Any, X_dev: Any, y_dev: Any, stream: Any, batch: int) -> None:
        super().__init__(cuda, wl, X_dev, y_dev, stream, batch)
        self.theta_h = cuda.pinned_array(wl.dim, dtype=wl.dtype) if hasattr(cuda, "pinned_array") \
            else np.empty(wl.dim, dtype=wl.dtype)
        self.g_h = np.empty(wl.dim, dtype=wl.dtype)

    def compute(self, theta: Any, idx: np.ndarray, g: Any) -> None:
        theta.copy_to_host(self.theta_h, stream=self.stream)
        self.stream.synchronize()
        self.wl.kernel(self.theta_h, self.wl.X, self.wl.y, np.ascontiguousarray(idx, np.int64), self.g_h,
                       self.wl.shape)
        g.copy_to_device(self.g_h, stream=self.stream)


def gradient_class(wl: Any) -> type[Gradient]:
    tag = int(wl.shape[0]) if len(wl.shape) else -1
    dense = isinstance(getattr(wl, "X", None), np.ndarray)
    if dense and tag == cpu_kernels.SOFTMAX:
        return DenseNet
    if dense and tag == CNN:
        return ConvNet
    return HostGradient
