"""CIFAR-10's binary version, from a folder a user points to (``dataset = "cifar10:PATH"``).

The folder holds ``data_batch_1.bin`` … ``data_batch_5.bin`` and ``test_batch.bin``: each record one
label byte and 3072 pixel bytes, channel by channel, row by row (Krizhevsky 2009,
https://www.cs.toronto.edu/~kriz/cifar.html).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simasgd.numerics.workloads.base import WorkloadError

CIFAR_RECORD = 1 + 3 * 32 * 32
CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST = "test_batch.bin"


def read_cifar_bin(path: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 binary batch: float64 rows in [0, 1] (C, H, W order) and int64 labels."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % CIFAR_RECORD:
        raise WorkloadError(f"workload.dataset = {dataset!r}: {path} has {raw.size} bytes, not a multiple of "
                            f"a CIFAR-10 record ({CIFAR_RECORD} bytes: 1 label + 3072 pixels)")
    rec = raw.reshape(-1, CIFAR_RECORD)
    y = rec[:, 0].astype(np.int64)
    if y.max() > 9:
        raise WorkloadError(f"workload.dataset = {dataset!r}: {path} has label {int(y.max())} (CIFAR-10: 0-9)")
    return rec[:, 1:].astype(np.float64) / 255.0, y


def read_cifar10(folder: Path) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Training rows from the ``data_batch_*.bin`` present (at least one), and ``test_batch.bin`` if there."""
    dataset = f"cifar10:{folder}"
    if not folder.is_dir():
        raise WorkloadError(f"workload.dataset = {dataset!r}: {folder} is not a folder")
    train = [folder / n for n in CIFAR_TRAIN if (folder / n).is_file()]
    if not train:
        raise WorkloadError(f"workload.dataset = {dataset!r}: no {CIFAR_TRAIN[0]} … {CIFAR_TRAIN[-1]} in {folder} "
                            f"(CIFAR-10 binary version)")
    parts = [read_cifar_bin(p, dataset) for p in train]
    X, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    test = read_cifar_bin(folder / CIFAR_TEST, dataset) if (folder / CIFAR_TEST).is_file() else None
    return X, y, test
