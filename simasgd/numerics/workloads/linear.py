"""Linear models: multinomial logistic regression and least squares.

Dense logistic regression is the one-layer softmax network (same kernel as the
MLP, BLAS-batched); the sparse-row variants loop over CSR rows so the gradient
touches only the coordinates of the batch's nonzero features. Both start
from θ = 0: the problems are convex, there is no symmetry to break.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from simasgd.numerics.workloads.base import ModelSpec, WorkloadError
from simasgd.numerics.workloads.data import Dataset
from simasgd.numerics.workloads.kernels import LEAST_SQUARES, SOFTMAX
from simasgd.numerics.workloads.mlp import check_layers, softmax_spec, zeros_init
from simasgd.spec.scenario import WorkloadConfig


def build_logreg(cfg: WorkloadConfig, data: Dataset) -> ModelSpec:
    if data.classes == 0:
        raise WorkloadError("workload.model = 'logreg' needs class labels")
    F, C = data.features, data.classes
    if cfg.layers is not None:
        if len(cfg.layers) != 2:
            raise WorkloadError(f"workload.layers = {list(cfg.layers)}: logreg has no hidden layers; "
                                f"omit layers or give [{F}, {C}]")
        check_layers(list(cfg.layers), data)
    if not data.sparse:
        spec = softmax_spec([F, C], f"logreg {F}x{C}")
        return _zeros(spec)
    nnz = data.nnz_per_row
    flops = 4 * nnz * C + 5 * C  # logits and gradient over the row's nonzeros only
    shape = np.array([SOFTMAX, F, C], dtype=np.int64)
    dim = F * C + C
    return ModelSpec(shape=shape, dim=dim, flops_per_sample=float(flops),
                     init=partial(zeros_init, dim), description=f"logreg {F}x{C} sparse")


def build_least_squares(cfg: WorkloadConfig, data: Dataset) -> ModelSpec:
    F = data.features
    if cfg.layers is not None and list(cfg.layers) != [F, 1]:
        raise WorkloadError(f"workload.layers = {list(cfg.layers)}: least_squares has one output; "
                            f"omit layers or give [{F}, 1]")
    nnz = data.nnz_per_row
    shape = np.array([LEAST_SQUARES, F], dtype=np.int64)
    return ModelSpec(shape=shape, dim=F + 1, flops_per_sample=float(4 * nnz + 4),
                     init=partial(zeros_init, F + 1),
                     description=f"least_squares {F}" + (" sparse" if data.sparse else ""))


def _zeros(spec: ModelSpec) -> ModelSpec:
    return replace(spec, init=partial(zeros_init, spec.dim))
