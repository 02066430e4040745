"""scikit-learn's digits as 1x8x8 images in [0, 1] (ships with scikit-learn: no download)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import TensorDataset


def make() -> TensorDataset:
    """The factory simasgd calls (``data = "torch_example.data:make"``): a Dataset of (image, label).

    simasgd splits it into training and test rows (``workload.test_fraction``) with the scenario's seed."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = torch.from_numpy((d.images / 16.0).astype(np.float32)).unsqueeze(1)  # (n, 1, 8, 8)
    return TensorDataset(images, torch.from_numpy(d.target.astype(np.int64)))
