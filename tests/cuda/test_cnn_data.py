"""The cnn workload's data: CIFAR-10's binary batches read from files a user points to, and the image shape rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simasgd.numerics.workloads import WorkloadError, build_workload
from simasgd.numerics.workloads.cifar10 import CIFAR_RECORD
from simasgd.numerics.workloads.cnn import image_shape
from simasgd.spec import loader


def _batch(path: Path, labels: list[int], rng: np.random.Generator) -> np.ndarray:
    pixels = rng.integers(0, 256, size=(len(labels), CIFAR_RECORD - 1), dtype=np.uint8)
    rec = np.concatenate([np.asarray(labels, np.uint8)[:, None], pixels], axis=1)
    rec.tofile(path)
    return pixels


def _cfg(folder: Path, **over: object) -> object:
    return loader.from_dict({"workload": {"model": "cnn", "dataset": f"cifar10:{folder}", "batch_size": 2,
                                          "layers": [2, 5, 2, 4], **over}}).workload


def test_cifar10_binary_batches_are_read_as_images_and_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    p1 = _batch(tmp_path / "data_batch_1.bin", [3, 9, 0], rng)
    p2 = _batch(tmp_path / "data_batch_2.bin", [1, 1], rng)
    pt = _batch(tmp_path / "test_batch.bin", [7, 2], rng)
    wl = build_workload(_cfg(tmp_path), 0)
    assert wl.features == 3072 and wl.classes == 10
    np.testing.assert_array_equal(wl.y, [3, 9, 0, 1, 1])
    np.testing.assert_array_equal(wl.y_test, [7, 2])
    np.testing.assert_allclose(wl.X, np.concatenate([p1, p2]) / 255.0)
    np.testing.assert_allclose(wl.X_test, pt / 255.0)
    assert list(wl.shape[1:4]) == [3, 32, 32]
    g = wl.gradient(wl.init_theta(np.random.default_rng(1)), np.array([0, 4], np.int64))
    assert np.isfinite(g).all() and g.shape == (wl.dim,)


def test_cifar10_bad_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="data_batch_1.bin"):
        build_workload(_cfg(tmp_path), 0)
    (tmp_path / "data_batch_1.bin").write_bytes(b"\x00" * (CIFAR_RECORD + 5))
    with pytest.raises(WorkloadError, match="not a multiple of a CIFAR-10 record"):
        build_workload(_cfg(tmp_path, batch_size=3), 0)


def test_image_shape_from_the_feature_count() -> None:
    assert image_shape(3072, "x") == (3, 32, 32)
    assert image_shape(784, "x") == (1, 28, 28)
    with pytest.raises(WorkloadError, match="no square image"):
        image_shape(100 * 3 + 1, "x")
