"""Datasets: digits, synthetic mixtures, MNIST IDX files; splits, caching, determinism."""

from __future__ import annotations

import gzip
import hashlib
import inspect
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simasgd.numerics.workloads import WorkloadError, build_workload, densify, load_dataset, read_idx, to_csr
from simasgd.numerics.workloads.data import Dataset
from simasgd.spec.scenario import WorkloadConfig

REPO = Path(__file__).resolve().parents[1]


def _digest(ds: Dataset, eval_idx: np.ndarray) -> str:
    h = hashlib.sha256()
    for X in (ds.X, ds.X_test):
        for a in (X if isinstance(X, tuple) else (X,)):
            h.update(np.ascontiguousarray(a).tobytes())
    for a in (ds.y, ds.y_test, eval_idx):
        h.update(a.tobytes())
    return h.hexdigest()


# -- digits ---------------------------------------------------------------------

def test_digits_split_and_standardised() -> None:
    ds = load_dataset(WorkloadConfig(dataset="digits", test_fraction=0.25), seed=1)
    assert ds.features == 64 and ds.classes == 10 and ds.name == "digits"
    assert ds.X.shape == (len(ds.y), 64) and len(ds.y) + len(ds.y_test) == 1797
    assert len(ds.y_test) == round(0.25 * 1797)
    assert ds.X.dtype == np.float64 and ds.y.dtype == np.int64
    mu, sd = ds.X.mean(axis=0), ds.X.std(axis=0)
    varying = sd > 0
    assert np.allclose(mu, 0, atol=1e-12) and np.allclose(sd[varying], 1)
    assert set(np.unique(ds.y)) == set(range(10))


def test_digits_are_scikit_learns_read_without_importing_it() -> None:
    """The arrays ``sklearn.datasets.load_digits`` gives, bit for bit; and a process that loads digits has not
    imported scikit-learn (its import costs every such process about 2 s)."""
    from sklearn.datasets import load_digits

    from simasgd.numerics.workloads.data import _digits

    X, y = _digits()
    d = load_digits()
    assert X.dtype == np.float64 and y.dtype == np.int64 and X.flags.c_contiguous
    assert np.array_equal(X, d.data) and np.array_equal(y, d.target)
    code = ("import sys\n"
            "from simasgd.numerics.workloads import load_dataset\n"
            "from simasgd.spec.scenario import WorkloadConfig\n"
            "ds = load_dataset(WorkloadConfig(dataset='digits'), seed=1)\n"
            "print(len(ds.y) + len(ds.y_test), sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1797", "[]"]


def test_same_config_same_data_and_cached() -> None:
    a = load_dataset(WorkloadConfig(dataset="digits"), seed=2)
    assert load_dataset(WorkloadConfig(dataset="digits", model="logreg", batch_size=7), seed=2) is a
    b = load_dataset(WorkloadConfig(dataset="digits"), seed=3)
    assert not np.array_equal(a.y, b.y)  # another seed, another split
    assert not a.X.flags.writeable and not a.y.flags.writeable  # shared by the cache


@pytest.mark.slow
def test_bit_identical_in_another_process() -> None:
    cfg = dict(model="logreg", dataset="synthetic", features=30, classes=4, samples=400, sparse=True,
               density=0.3, eval_rows=50)
    wl = build_workload(WorkloadConfig(**cfg), 11)
    here = _digest(load_dataset(WorkloadConfig(**cfg), 11), wl.eval_idx)
    code = (f"import hashlib\nimport numpy as np\nfrom simasgd.numerics.workloads.data import Dataset\n"
            f"from simasgd.spec.scenario import WorkloadConfig\n"
            f"from simasgd.numerics.workloads import build_workload, load_dataset\n"
            f"{inspect.getsource(_digest)}\n"  # the same digest, without importing this test module
            f"cfg = WorkloadConfig(**{cfg!r})\n"
            f"print(_digest(load_dataset(cfg, 11), build_workload(cfg, 11).eval_idx))\n")
    there = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert there.stdout.strip() == here


def test_least_squares_on_digits_regresses_the_label() -> None:
    ds = load_dataset(WorkloadConfig(dataset="digits", model="least_squares"), seed=0)
    assert ds.classes == 0 and ds.y.dtype == np.float64 and set(np.unique(ds.y)) <= set(range(10))


def test_sparse_digits_equal_dense_digits() -> None:
    dense = load_dataset(WorkloadConfig(dataset="digits", model="logreg"), seed=0)
    sparse = load_dataset(WorkloadConfig(dataset="digits", model="logreg", sparse=True), seed=0)
    assert isinstance(sparse.X, tuple) and np.array_equal(densify(sparse.X, 64), dense.X)
    assert np.array_equal(densify(sparse.X_test, 64), dense.X_test)
    indptr, indices, values = sparse.X
    assert indptr.dtype == np.int64 and indices.dtype == np.int64 and values.dtype == np.float64


def test_csr_round_trip() -> None:
    X = np.array([[0.0, 1.5, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, -1.0]])
    indptr, indices, values = to_csr(X)
    assert indptr.tolist() == [0, 1, 1, 3] and indices.tolist() == [1, 0, 2] and values.tolist() == [1.5, 2.0, -1.0]
    assert np.array_equal(densify((indptr, indices, values), 3), X)


# -- synthetic ------------------------------------------------------------------

def test_synthetic_knobs_honoured() -> None:
    cfg = WorkloadConfig(model="logreg", dataset="synthetic", features=33, classes=5, samples=600,
                         test_fraction=0.1)
    ds = load_dataset(cfg, seed=4)
    assert ds.features == 33 and ds.classes == 5
    assert ds.X.shape == (540, 33) and ds.X_test.shape == (60, 33)
    assert set(np.unique(ds.y)) == set(range(5))
    # Class means differ: the data is learnable.
    means = np.array([ds.X[ds.y == c].mean(axis=0) for c in range(5)])
    assert np.linalg.norm(means[0] - means[1]) > 3


def test_synthetic_sparse_density() -> None:
    cfg = WorkloadConfig(model="logreg", dataset="synthetic", features=200, samples=300, sparse=True, density=0.05)
    ds = load_dataset(cfg, seed=5)
    indptr, indices, _values = ds.X
    assert np.all(np.diff(indptr) == 10)  # density · features nonzeros, distinct, per row
    for r in range(len(indptr) - 1):
        cols = indices[indptr[r]:indptr[r + 1]]
        assert np.all(np.diff(cols) > 0) and cols.max() < 200
    assert ds.nnz_per_row == 10
    assert len(ds.y) == 240 and len(ds.y_test) == 60


def test_synthetic_regression_target_is_linear() -> None:
    cfg = WorkloadConfig(model="least_squares", dataset="synthetic", features=12, samples=2000)
    ds = load_dataset(cfg, seed=6)
    assert ds.classes == 0 and ds.y.dtype == np.float64
    A = np.hstack([ds.X, np.ones((len(ds.y), 1))])
    coef, *_ = np.linalg.lstsq(A, ds.y, rcond=None)
    resid = ds.y - A @ coef
    assert resid.std() == pytest.approx(0.1, rel=0.1)  # REGRESSION_NOISE


def test_float32_data() -> None:
    ds = load_dataset(WorkloadConfig(model="least_squares", dataset="synthetic", features=8, samples=50,
                                     dtype="float32", sparse=True), seed=0)
    assert ds.X[2].dtype == np.float32 and ds.y.dtype == np.float32 and ds.X[0].dtype == np.int64


def test_test_fraction_zero_keeps_everything_for_training() -> None:
    ds = load_dataset(WorkloadConfig(model="logreg", dataset="synthetic", features=4, samples=50,
                                     test_fraction=0.0), seed=0)
    assert len(ds.y) == 50 and len(ds.y_test) == 0


# -- MNIST IDX files --------------------------------------------------------------

def _write_idx(path: Path, arr: np.ndarray, code: int = 0x08) -> None:
    """An IDX file written independently of the reader: magic 00 00 type ndim, big-endian dims."""
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    dt = {0x08: ">u1", 0x0B: ">i2", 0x0D: ">f4"}[code]
    payload = header + arr.astype(dt).tobytes()
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def _mnist_folder(root: Path, gz: bool, with_test: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(20, 3, 2), dtype=np.uint8)
    labels = (np.arange(20) % 3).astype(np.uint8)
    ext = ".gz" if gz else ""
    root.mkdir(parents=True, exist_ok=True)
    _write_idx(root / f"train-images-idx3-ubyte{ext}", images)
    _write_idx(root / f"train-labels-idx1-ubyte{ext}", labels)
    if with_test:
        _write_idx(root / f"t10k-images-idx3-ubyte{ext}", images[:5])
        _write_idx(root / f"t10k-labels-idx1-ubyte{ext}", labels[:5])
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_round_trip(tmp_path: Path, gz: bool) -> None:
    images, labels = _mnist_folder(tmp_path, gz, with_test=False)
    ext = ".gz" if gz else ""
    got = read_idx(tmp_path / f"train-images-idx3-ubyte{ext}")
    assert got.shape == (20, 3, 2) and got.dtype == np.uint8 and np.array_equal(got, images)
    assert np.array_equal(read_idx(tmp_path / f"train-labels-idx1-ubyte{ext}"), labels)
    wide = np.array([[1, -2, 300], [4, 5, -600]], dtype=np.int16)
    _write_idx(tmp_path / "wide", wide, code=0x0B)
    assert np.array_equal(read_idx(tmp_path / "wide"), wide)
    floats = np.array([0.5, -1.25], dtype=np.float32)
    _write_idx(tmp_path / "floats", floats, code=0x0D)
    assert np.array_equal(read_idx(tmp_path / "floats"), floats)


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    (tmp_path / "junk").write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(WorkloadError, match="not an IDX file"):
        read_idx(tmp_path / "junk")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 5) + b"\x01\x02")
    with pytest.raises(WorkloadError, match="need 5 bytes"):
        read_idx(tmp_path / "short")


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_dataset_with_split(tmp_path: Path, gz: bool) -> None:
    images, labels = _mnist_folder(tmp_path / "mn", gz, with_test=False)
    # A relative path resolves against base_dir (the scenario file's folder).
    ds = load_dataset(WorkloadConfig(model="logreg", dataset="mnist:mn", test_fraction=0.25), 0, str(tmp_path))
    assert ds.name == "mnist" and ds.features == 6 and ds.classes == 3
    assert len(ds.y) == 15 and len(ds.y_test) == 5
    assert ds.X.min() >= 0 and ds.X.max() <= 1  # pixels scaled to [0, 1]
    flat = images.reshape(20, 6) / 255.0
    for row, lab in zip(ds.X, ds.y, strict=False):  # every row is one of the images, with its label
        match = np.flatnonzero(np.all(np.isclose(flat, row), axis=1))
        assert len(match) >= 1 and labels[match[0]] == lab


def test_mnist_uses_t10k_as_test_set(tmp_path: Path) -> None:
    images, labels = _mnist_folder(tmp_path, gz=True, with_test=True)
    wl = build_workload(WorkloadConfig(model="mlp", layers=[6, 4, 3], dataset=f"mnist:{tmp_path}"), 0)
    assert wl.n_train == 20 and wl.n_test == 5
    assert np.allclose(wl.X_test, images[:5].reshape(5, 6) / 255.0) and np.array_equal(wl.y_test, labels[:5])
    assert np.allclose(wl.X, images.reshape(20, 6) / 255.0)


def test_mnist_missing_files_name_key_and_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"workload\.dataset = 'mnist:.*nowhere.*not a folder"):
        load_dataset(WorkloadConfig(dataset=f"mnist:{tmp_path / 'nowhere'}"), 0)
    _write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((2, 2, 2), np.uint8))
    with pytest.raises(WorkloadError, match=r"workload\.dataset = 'mnist:.*train-labels-idx1-ubyte.*not found"):
        load_dataset(WorkloadConfig(dataset=f"mnist:{tmp_path}"), 0)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(2, np.uint8))
    _write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((1, 2, 2), np.uint8))
    with pytest.raises(WorkloadError, match=r"t10k-labels-idx1-ubyte.*not found"):
        load_dataset(WorkloadConfig(dataset=f"mnist:{tmp_path}"), 0)


def test_mnist_mismatched_counts(tmp_path: Path) -> None:
    _write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((3, 2, 2), np.uint8))
    _write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(2, np.uint8))
    with pytest.raises(WorkloadError, match="do not match"):
        load_dataset(WorkloadConfig(dataset=f"mnist:{tmp_path}"), 0)


def test_mnist_layers_checked_against_the_files(tmp_path: Path) -> None:
    _mnist_folder(tmp_path, gz=False, with_test=False)
    with pytest.raises(WorkloadError, match=r"workload\.layers = \[784, 10\]: first layer must equal the dataset's 6 features"):
        build_workload(WorkloadConfig(model="mlp", layers=[784, 10], dataset=f"mnist:{tmp_path}"), 0)
