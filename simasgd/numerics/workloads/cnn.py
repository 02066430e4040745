"""The ``cnn`` workload: Lopez et al. 2020's GPU model (§IV-B).

conv (K filters k×k) → ReLU → P×P max-pool → dense Hd → ReLU → dense classes →
softmax cross-entropy; kernels in :mod:`simasgd.numerics.workloads.cnn_kernels` (CPU)
and ``executors/cuda/model.py`` (GPU), one flat θ layout.

Configuration: ``layers = [K, k, P, Hd]`` (default ``[16, 5, 2, 64]``). The
image shape follows from the data: ``features = 3·s²`` is a 3-channel s×s
image (CIFAR-10: 3072 = 3·32·32), else ``features = s²`` one channel (MNIST
784, digits 64). Data: ``dataset = "synthetic"`` with ``features = 3072``
(CIFAR-10-shaped class mixtures) or ``dataset = "cifar10:PATH"``, a folder
holding CIFAR-10's binary version (read by :mod:`simasgd.numerics.workloads.cifar10`).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from simasgd.numerics.workloads.base import ModelSpec, WorkloadError
from simasgd.numerics.workloads.cnn_kernels import CNN
from simasgd.numerics.workloads.data import Dataset
from simasgd.spec.scenario import WorkloadConfig

DEFAULT_LAYERS = (16, 5, 2, 64)  # filters, kernel size, pool size, hidden units


def image_shape(features: int, where: str) -> tuple[int, int, int]:
    """(C, H, W) of a row of ``features`` pixels: 3·s² → (3, s, s), else s² → (1, s, s)."""
    for c in (3, 1):
        s = math.isqrt(features // c)
        if features % c == 0 and s * s * c == features:
            return c, s, s
    raise WorkloadError(f"{where}: {features} features are no square image (3·s² or s²; CIFAR-10: 3072)")


def build(cfg: WorkloadConfig, data: Dataset) -> ModelSpec:
    if data.classes == 0:
        raise WorkloadError("workload.model = 'cnn' needs class labels")
    if data.sparse:
        raise WorkloadError("workload.model = 'cnn' needs dense images (sparse = false)")
    C, H, W = image_shape(data.features, f"workload.model = 'cnn' on {data.name}")
    layers = tuple(cfg.layers) if cfg.layers is not None else DEFAULT_LAYERS
    if len(layers) != 4:
        raise WorkloadError(f"workload.layers = {list(layers)}: the cnn takes [filters, kernel, pool, hidden] "
                            f"(default {list(DEFAULT_LAYERS)})")
    K, k, P, Hd = layers
    if k > H or (H - k + 1) // P < 1:
        raise WorkloadError(f"workload.layers = {list(layers)}: kernel {k} and pool {P} leave nothing of a "
                            f"{H}×{W} image")
    shape = np.array([CNN, C, H, W, K, k, P, Hd, data.classes], dtype=np.int64)
    return spec(shape, f"cnn conv{K}x{k}x{k}-pool{P}-{Hd}-{data.classes} on {C}x{H}x{W}")


def sizes(shape: np.ndarray) -> dict[str, int]:
    """The layer sizes of a cnn ``shape`` (Python ints, for builders, cost models and the CUDA kernels)."""
    _, C, H, W, K, k, P, Hd, nc = (int(v) for v in shape)
    Ho, Wo = H - k + 1, W - k + 1
    Hp, Wp = Ho // P, Wo // P
    F1 = K * Hp * Wp
    conv = K * C * k * k + K
    return dict(C=C, H=H, W=W, K=K, k=k, P=P, Hd=Hd, nc=nc, Ho=Ho, Wo=Wo, Hp=Hp, Wp=Wp, F1=F1,
                conv=conv, dim=conv + F1 * Hd + Hd + Hd * nc + nc)


def spec(shape: np.ndarray, description: str) -> ModelSpec:
    s = sizes(shape)
    conv_macs = s["K"] * s["Ho"] * s["Wo"] * s["C"] * s["k"] ** 2
    dense_macs = s["F1"] * s["Hd"] + s["Hd"] * s["nc"]
    # forward 2·macs; backward: weight gradients 2·macs everywhere, input deltas of the dense layers 2·macs.
    flops = 4 * conv_macs + 6 * dense_macs + 5 * (s["K"] * s["Ho"] * s["Wo"] + s["Hd"] + s["nc"])
    return ModelSpec(shape=shape, dim=s["dim"], flops_per_sample=float(flops),
                     init=partial(he_init, tuple(int(v) for v in shape)), description=description)


def he_init(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """He-normal conv and hidden weights (they feed ReLUs), Glorot-normal output layer, zero biases."""
    s = sizes(np.asarray(shape))
    theta = np.zeros(s["dim"])
    fan_conv = s["C"] * s["k"] ** 2
    n = s["conv"] - s["K"]
    theta[:n] = rng.standard_normal(n) * math.sqrt(2.0 / fan_conv)
    o = s["conv"]
    theta[o:o + s["F1"] * s["Hd"]] = rng.standard_normal(s["F1"] * s["Hd"]) * math.sqrt(2.0 / s["F1"])
    o += s["F1"] * s["Hd"] + s["Hd"]
    theta[o:o + s["Hd"] * s["nc"]] = rng.standard_normal(s["Hd"] * s["nc"]) * math.sqrt(2.0 / (s["Hd"] + s["nc"]))
    return theta
