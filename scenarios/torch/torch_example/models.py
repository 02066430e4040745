"""A small CNN for 8x8 greyscale digits: two 3x3 convolutions with pooling, one linear layer."""

from __future__ import annotations

from torch import nn


def make(channels: int = 8) -> nn.Module:
    """The factory simasgd calls (``module = "torch_example.models:make"``); ~2k parameters."""
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),               # 8x8 -> 4x4
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),    # 4x4 -> 2x2
        nn.Flatten(), nn.Linear(2 * channels * 2 * 2, 10),
    )
