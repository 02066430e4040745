"""The GPU kernels give the CPU kernels' gradient (same flat θ), and the cnn's CPU gradient is torch autograd's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simasgd.numerics.workloads import build_workload
from simasgd.numerics.workloads.cnn import sizes
from simasgd.spec import seeds


def _device_gradient(cuda: Any, wl: Any, theta: np.ndarray, idx: np.ndarray) -> np.ndarray:
    from executors.cuda.model import gradient_class

    stream = cuda.stream()
    cls = gradient_class(wl)
    assert cls.on_device, cls
    grad = cls(cuda, wl, cuda.to_device(wl.X), cuda.to_device(wl.y), stream, len(idx))
    g = cuda.device_array(wl.dim, dtype=wl.dtype)
    grad.compute(cuda.to_device(theta), idx, g)
    stream.synchronize()
    return g.copy_to_host()


# "cnn-wide": 14×14 images, so each conv weight's sum (4 rows × 6×6 pooled outputs, 144) is split over more
# items than a reduction block has threads, on a GPU (128) as under the simulator (4) (kernels.conv_grad); the
# smallest such images: under the simulator every CUDA thread is a Python thread (16×16: a third more).
@pytest.mark.parametrize("model", ["mlp", "cnn", "cnn-wide"])
@pytest.mark.slow
def test_gpu_gradient_equals_the_cpu_kernels(cuda: Any, tiny: Any, model: str) -> None:
    from executors.cuda import kernels as K

    sc = tiny("cnn", workload={"features": 3 * 14 * 14}) if model == "cnn-wide" else tiny(model)
    wl = build_workload(sc.workload, 5)
    if model == "cnn-wide":
        s = sizes(wl.shape)
        assert 4 * s["Hp"] * s["Wp"] > K.reduce_threads(4 * s["Hp"] * s["Wp"])
    theta = wl.init_theta(seeds.rng(5, 0, seeds.Role.INIT))
    theta += np.random.default_rng(1).standard_normal(wl.dim) * 0.05  # nonzero biases too
    idx = np.array([3, 0, 7, 3], dtype=np.int64)  # a repeated row, as sampling with replacement gives
    want = wl.gradient(theta, idx)
    got = _device_gradient(cuda, wl, theta, idx)
    assert np.abs(want).max() > 1e-3  # a gradient that says something
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_cnn_gradient_equals_torch_autograd(tiny: Any) -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    wl = build_workload(tiny("cnn").workload, 5)
    theta = wl.init_theta(seeds.rng(5, 0, seeds.Role.INIT)) + np.random.default_rng(2).standard_normal(wl.dim) * 0.05
    idx = np.arange(8, dtype=np.int64)
    g = wl.gradient(theta, idx)
    loss = wl.loss(theta, wl.X, wl.y, idx)
    s = sizes(wl.shape)
    th = torch.tensor(theta, requires_grad=True)
    parts, o = [], 0
    for n, shp in [(s["K"] * s["C"] * s["k"] ** 2, (s["K"], s["C"], s["k"], s["k"])), (s["K"], (s["K"],)),
                   (s["F1"] * s["Hd"], (s["F1"], s["Hd"])), (s["Hd"], (s["Hd"],)),
                   (s["Hd"] * s["nc"], (s["Hd"], s["nc"])), (s["nc"], (s["nc"],))]:
        parts.append(th[o:o + n].reshape(shp))
        o += n
    assert o == wl.dim
    wc, bc, w1, b1, w2, b2 = parts
    x = torch.tensor(wl.X[idx]).reshape(-1, s["C"], s["H"], s["W"])
    a = F.max_pool2d(torch.relu(F.conv2d(x, wc, bc)), s["P"])
    h = torch.relu(a.reshape(len(idx), -1) @ w1 + b1)
    t_loss = F.cross_entropy(h @ w2 + b2, torch.tensor(wl.y[idx]))
    t_loss.backward()
    assert loss == pytest.approx(t_loss.item(), rel=1e-12)
    np.testing.assert_allclose(g, th.grad.numpy(), rtol=1e-9, atol=1e-12)
