"""Multi-layer perceptron: ReLU hidden layers, softmax cross-entropy output.

The numba kernels live in :mod:`simasgd.numerics.workloads.kernels` (one file, so the
on-disk cache stays coherent); this module decides the architecture, the
parameter layout and the initialisation.
"""

from __future__ import annotations

import itertools
from functools import partial

import numpy as np

from simasgd.numerics.workloads.base import ModelSpec, WorkloadError
from simasgd.numerics.workloads.data import Dataset
from simasgd.numerics.workloads.kernels import SOFTMAX
from simasgd.spec.scenario import WorkloadConfig

DEFAULT_HIDDEN = 128  # `layers` omitted: one hidden layer of this width


def build(cfg: WorkloadConfig, data: Dataset) -> ModelSpec:
    if data.classes == 0:
        raise WorkloadError("workload.model = 'mlp' needs class labels")
    layers = list(cfg.layers) if cfg.layers is not None else [data.features, DEFAULT_HIDDEN, data.classes]
    check_layers(layers, data)
    return softmax_spec(layers, f"mlp {'-'.join(map(str, layers))}")


def check_layers(layers: list[int], data: Dataset) -> None:
    if layers[0] != data.features:
        raise WorkloadError(f"workload.layers = {layers}: first layer must equal the dataset's "
                            f"{data.features} features ({data.name})")
    if layers[-1] != data.classes:
        raise WorkloadError(f"workload.layers = {layers}: last layer must equal the dataset's "
                            f"{data.classes} classes ({data.name})")


def softmax_spec(layers: list[int], description: str) -> ModelSpec:
    """θ = per layer W (in×out, row-major) then b; logreg is the one-layer case."""
    pairs = list(itertools.pairwise(layers))
    dim = sum(i * o + o for i, o in pairs)
    macs = sum(i * o for i, o in pairs)
    # forward (2·macs) + weight gradients (2·macs) + deltas for every layer but the
    # first (2·macs each) + bias, ReLU and softmax element work (~5 per unit).
    flops = 4 * macs + 2 * sum(i * o for i, o in pairs[1:]) + 5 * sum(layers[1:])

    shape = np.array([SOFTMAX, *layers], dtype=np.int64)
    return ModelSpec(shape=shape, dim=dim, flops_per_sample=float(flops),
                     init=partial(he_glorot_init, tuple(layers)), description=description)


def he_glorot_init(layers: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """He-normal weights for layers feeding a ReLU, Glorot-normal for the linear
    output layer, zero biases; float64 (the workload casts)."""
    pairs = list(itertools.pairwise(layers))
    theta = np.zeros(sum(i * o + o for i, o in pairs))
    off = 0
    for l, (i, out) in enumerate(pairs):
        std = np.sqrt(2.0 / i) if l < len(pairs) - 1 else np.sqrt(2.0 / (i + out))
        theta[off:off + i * out] = rng.standard_normal(i * out) * std
        off += i * out + out
    return theta


def zeros_init(dim: int, rng: np.random.Generator) -> np.ndarray:
    """θ₀ = 0 (convex models: no symmetry to break). Module-level, so workloads pickle."""
    return np.zeros(dim)
