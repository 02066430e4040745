"""Workloads: a model plus its data plus numba kernels every backend can call.

``build_workload(cfg, seed)`` turns a validated ``[workload]`` table into a
:class:`Workload`. Models are registered by name in ``WORKLOADS``; adding one
is a builder module (returning a :class:`ModelSpec`) plus one line here, and,
for a new kind of loss, a tagged branch in :mod:`simasgd.numerics.workloads.kernels`.

Every workload's ``kernel`` is the same dispatcher, ``kernels.loss_and_grad``,
which selects the model from ``workload.shape[0]`` and the data layout from the
type of ``X``. Numba worker loops call ``simasgd.numerics.workloads.kernels.loss_and_grad``
directly (in a closure over ``kernels.SOURCE_HASH``): passed as an argument, it
would make numba recompile the caller in every process.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simasgd.numerics.workloads import cnn, kernels, linear, mlp
from simasgd.numerics.workloads.base import CSR, DataMatrix, ModelSpec, Workload, WorkloadError
from simasgd.numerics.workloads.data import Dataset, densify, eval_rows, load_dataset, read_idx, to_csr
from simasgd.spec.scenario import WorkloadConfig

Builder = Callable[[WorkloadConfig, Dataset], ModelSpec]

WORKLOADS: dict[str, Builder] = {
    "mlp": mlp.build,
    "logreg": linear.build_logreg,
    "least_squares": linear.build_least_squares,
    "cnn": cnn.build,
}

__all__ = [
    "CSR",
    "WORKLOADS",
    "DataMatrix",
    "Dataset",
    "ModelSpec",
    "Workload",
    "WorkloadError",
    "build_workload",
    "check_backend",
    "densify",
    "eval_rows",
    "kernels",
    "load_dataset",
    "read_idx",
    "to_csr",
    "workload_names",
]


def workload_names() -> list[str]:
    return list(WORKLOADS)


def check_backend(cfg: WorkloadConfig, backend: str) -> None:
    """Refuse a workload whose kernels the backend cannot call (``model = "torch"``: Python, not numba)."""
    if cfg.model == "torch":
        from simasgd.numerics.workloads.torch_model import RUNS_ON
        if backend not in RUNS_ON:
            raise WorkloadError(f"workload.model = 'torch' runs on backends {', '.join(RUNS_ON)}; backend "
                                f"{backend!r} compiles its workers with numba, which cannot call torch")


def build_workload(cfg: WorkloadConfig, seed: int, base_dir: str | None = None) -> Workload:
    """The workload of a ``[workload]`` table; data depends only on (cfg, seed).

    ``base_dir`` resolves a relative ``mnist:PATH`` (the scenario file's folder).
    Raises :class:`WorkloadError` naming the offending key.
    """
    if cfg.model == "torch":  # the user's own nn.Module: Python kernels, torch imported only here
        from simasgd.numerics.workloads import torch_model
        return torch_model.build(cfg, seed, base_dir)
    builder = WORKLOADS.get(cfg.model)
    if builder is None:
        raise WorkloadError(f"workload.model = {cfg.model!r} is not implemented yet; "
                            f"available: {', '.join(workload_names())}")
    data = load_dataset(cfg, seed, base_dir)
    spec = builder(cfg, data)
    dtype = np.dtype(cfg.dtype)
    # a sparse row: its stored values plus their int64 column indices
    bytes_per_sample = data.nnz_per_row * (dtype.itemsize + 8) if data.sparse else float(data.features * dtype.itemsize)
    return Workload(
        name=cfg.model, kernel=kernels.loss_and_grad, loss_kernel=kernels.loss,
        predict_kernel=kernels.predict if data.classes else None,
        shape=spec.shape, X=data.X, y=data.y, X_test=data.X_test, y_test=data.y_test,
        eval_idx=eval_rows(len(data.y), cfg.eval_rows, seed), dim=spec.dim, dtype=dtype,
        flops_per_sample=spec.flops_per_sample, bytes_per_sample=bytes_per_sample,
        features=data.features, classes=data.classes, sparse=data.sparse, batch_size=cfg.batch_size,
        description=f"{spec.description} on {data.name} ({cfg.dtype}, d={spec.dim})", init_fn=spec.init)
