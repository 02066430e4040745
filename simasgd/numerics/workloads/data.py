"""Datasets: scikit-learn's digits, MNIST from IDX files, and synthetic mixtures.

Everything random is drawn from streams addressed by the scenario seed
(:mod:`simasgd.spec.seeds`, role DATA), never from a global RNG, so the same
(config, seed) gives bit-identical arrays in every process and backend.
Built datasets are cached in-process: backends rebuild workloads per run.
Arrays are returned read-only because the cache shares them between runs.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simasgd.numerics.workloads.base import CSR, DataMatrix, WorkloadError
from simasgd.numerics.workloads.cifar10 import read_cifar10
from simasgd.spec import seeds
from simasgd.spec.scenario import WorkloadConfig

# Synthetic mixtures: class means are scaled so that two classes are this many
# noise standard deviations apart (in expectation) over the coordinates a row
# actually has. Far enough to be learnable to a small loss, near enough that
# SGD has work to do whatever `features` is.
SEPARATION = 6.0
REGRESSION_NOISE = 0.1  # std of the noise on the synthetic least-squares target

# Sub-streams of the DATA role (the `worker` slot of seeds.rng).
_S_SYNTH, _S_SPLIT, _S_EVAL, _S_TARGET = 0, 1, 2, 3

# IDX type codes (third magic byte) and their big-endian numpy dtypes.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclass(frozen=True, eq=False)
class Dataset:
    name: str
    X: DataMatrix
    y: np.ndarray
    X_test: DataMatrix
    y_test: np.ndarray
    features: int
    classes: int               # 0: regression targets
    nnz_per_row: float         # mean stored entries per training row

    @property
    def sparse(self) -> bool:
        return isinstance(self.X, tuple)


# -- public entry points ----------------------------------------------------

def load_dataset(cfg: WorkloadConfig, seed: int, base_dir: str | None = None) -> Dataset:
    """The dataset of a `[workload]` table, split and typed, cached in-process.

    ``features``, ``classes``, ``samples`` and ``density`` shape synthetic data
    only; real datasets bring their own. MNIST's t10k files, when present, are
    the test set (``test_fraction`` then unused). For least squares on digits
    or MNIST the target is the class label as a number.
    """
    regression = cfg.model == "least_squares"
    source = cfg.dataset
    if source.startswith("mnist:"):
        source = "mnist:" + str(_resolve(source[len("mnist:"):], base_dir))
    if source.startswith("cifar10:"):
        source = "cifar10:" + str(_resolve(source[len("cifar10:"):], base_dir))
    synthetic = source == "synthetic"
    # Only the fields that change the arrays go into the key, so e.g. an mlp and
    # a logreg on the same data share one copy.
    return _cached(source, regression, cfg.sparse, cfg.dtype, cfg.test_fraction, seed,
                   cfg.features if synthetic else 0, cfg.classes if synthetic else 0,
                   cfg.samples if synthetic else 0, cfg.density if (synthetic and cfg.sparse) else 0.0)


def eval_rows(n_train: int, eval_rows: int, seed: int) -> np.ndarray:
    """Training rows for the ε loss: all of them, or a fixed sorted subset."""
    if n_train <= eval_rows:
        return np.arange(n_train, dtype=np.int64)
    g = seeds.rng(seed, 0, seeds.Role.DATA, _S_EVAL)
    return np.sort(g.choice(n_train, size=eval_rows, replace=False)).astype(np.int64)


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (plain or .gz) as a native-endian array of its stated dims."""
    p = Path(path)
    with (gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")) as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise WorkloadError(f"{p}: not an IDX file (magic bytes {raw[:4].hex() or 'missing'})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise WorkloadError(f"{p}: truncated IDX header")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dt = np.dtype(_IDX_DTYPES[raw[2]])
    count = math.prod(dims)
    if len(raw) - header != count * dt.itemsize:
        raise WorkloadError(f"{p}: IDX dims {dims} need {count * dt.itemsize} bytes, file has {len(raw) - header}")
    return np.frombuffer(raw, dtype=dt, count=count, offset=header).reshape(dims).astype(dt.newbyteorder("="))


def to_csr(X: np.ndarray) -> CSR:
    """Dense rows as CSR (indptr int64, indices int64, values of X's dtype)."""
    nz = X != 0
    indptr = np.concatenate([[0], np.cumsum(nz.sum(axis=1))]).astype(np.int64)
    return indptr, np.nonzero(nz)[1].astype(np.int64), X[nz]


def densify(X: CSR, features: int) -> np.ndarray:
    """CSR rows back to a dense array (for tests and small-scale inspection)."""
    indptr, indices, values = X
    out = np.zeros((len(indptr) - 1, features), dtype=values.dtype)
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    out[rows, indices] = values
    return out


# -- construction -------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _cached(source: str, regression: bool, sparse: bool, dtype: str, test_fraction: float, seed: int,
            features: int, classes: int, samples: int, density: float) -> Dataset:
    dt = np.dtype(dtype)
    test_given: tuple[np.ndarray, np.ndarray] | None = None
    csr: CSR | None = None
    X: np.ndarray | None  # None: synthetic sparse rows, built as CSR (csr)
    if source == "digits":
        X, y = _digits()
        classes, name = 10, "digits"
    elif source.startswith("mnist:"):
        X, y, test_given = _mnist(Path(source[len("mnist:"):]))
        classes, name = int(max(y.max(), test_given[1].max() if test_given else 0)) + 1, "mnist"
        classes = max(classes, 2)
    elif source.startswith("cifar10:"):
        X, y, test_given = read_cifar10(Path(source[len("cifar10:"):]))
        classes, name = 10, "cifar10"
    else:
        X, y, csr = _synthetic(features, classes, samples, sparse, density, regression, seed)
        name = "synthetic"

    if test_given is None:
        tr, te = _split(len(y), test_fraction, seed)
        if source == "digits":  # standardise with training statistics only
            assert X is not None
            mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
            X = (X - mu) / np.where(sd == 0, 1.0, sd)

    n_feat = features if X is None else int(X.shape[1])
    if test_given is not None:  # MNIST's own t10k test set
        assert X is not None
        X_tr, y_tr = _typed(X, dt, sparse), y
        X_te, y_te = _typed(test_given[0], dt, sparse), test_given[1]
    elif csr is not None:  # synthetic sparse rows are generated as CSR directly
        X_tr, X_te = _cast_csr(_csr_rows(csr, tr), dt), _cast_csr(_csr_rows(csr, te), dt)
        y_tr, y_te = y[tr], y[te]
    else:
        assert X is not None  # dense rows: only synthetic sparse ones come as CSR
        X_tr, X_te = _typed(X[tr], dt, sparse), _typed(X[te], dt, sparse)
        y_tr, y_te = y[tr], y[te]

    ydt = dt if regression else np.int64
    y_tr, y_te = np.ascontiguousarray(y_tr, dtype=ydt), np.ascontiguousarray(y_te, dtype=ydt)
    nnz = len(X_tr[1]) / max(len(y_tr), 1) if isinstance(X_tr, tuple) else float(n_feat)
    ds = Dataset(name=name, X=X_tr, y=y_tr, X_test=X_te, y_test=y_te, features=n_feat,
                 classes=0 if regression else classes, nnz_per_row=nnz)
    for a in (ds.y, ds.y_test, *_arrays(ds.X), *_arrays(ds.X_test)):
        a.flags.writeable = False
    return ds


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (1,797 8×8 images, 16 grey levels): its pixels as float64 and its labels, read
    as ``sklearn.datasets.load_digits`` reads them, from the file scikit-learn ships, without importing
    scikit-learn: that import takes about 2 s (most of scipy with it), in every process that runs a
    scenario on digits."""
    spec = importlib.util.find_spec("sklearn")
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    path = next((p for d in where if (p := Path(d) / "datasets" / "data" / "digits.csv.gz").is_file()), None)
    if path is None:  # a scikit-learn laid out otherwise: its own loader finds the file
        from sklearn.datasets import load_digits

        d = load_digits()
        return d.data.astype(np.float64), d.target.astype(np.int64)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return np.ascontiguousarray(data[:, :-1]), data[:, -1].astype(np.int64)


def _arrays(X: DataMatrix) -> tuple[np.ndarray, ...]:
    return X if isinstance(X, tuple) else (X,)


def _split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    n_test = min(round(test_fraction * n), n - 1)  # keep at least one training row
    perm = seeds.rng(seed, 0, seeds.Role.DATA, _S_SPLIT).permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def _synthetic(features: int, classes: int, samples: int, sparse: bool, density: float,
               regression: bool, seed: int) -> tuple[np.ndarray | None, np.ndarray, CSR | None]:
    """Gaussian class mixtures (unit noise); for regression a noisy linear target."""
    g = seeds.rng(seed, 0, seeds.Role.DATA, _S_SYNTH)
    k = max(1, round(density * features)) if sparse else features
    means = g.standard_normal((classes, features)) * (SEPARATION / math.sqrt(2 * k))
    labels = g.integers(0, classes, size=samples)
    X: np.ndarray | None = None
    csr: CSR | None = None
    if not sparse:
        X = means[labels] + g.standard_normal((samples, features))
    else:
        # Exactly k distinct columns per row: the k smallest of random keys,
        # drawn in row blocks so memory stays bounded for wide feature spaces.
        step = max(1, 4_000_000 // features)
        cols = np.empty((samples, k), dtype=np.int64)
        for lo in range(0, samples, step):
            keys = g.random((min(step, samples - lo), features))
            cols[lo:lo + step] = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < features else \
                np.broadcast_to(np.arange(features), keys.shape)
        cols.sort(axis=1)
        indices = cols.reshape(-1)
        row_of = np.repeat(np.arange(samples), k)
        values = means[labels[row_of], indices] + g.standard_normal(indices.shape[0])
        csr = (np.arange(0, samples * k + 1, k, dtype=np.int64), indices, values)
    if not regression:
        return X, labels.astype(np.int64), csr
    t = seeds.rng(seed, 0, seeds.Role.DATA, _S_TARGET)
    w = t.standard_normal(features) / math.sqrt(k)  # Var(xᵀw) ≈ 1 whatever k is
    b = t.standard_normal()
    lin: np.ndarray
    if X is not None:
        lin = X @ w
    else:
        assert csr is not None  # sparse rows: X is None exactly where csr is set
        lin = np.bincount(np.repeat(np.arange(samples), k), weights=csr[2] * w[csr[1]], minlength=samples)
    return X, lin + b + REGRESSION_NOISE * t.standard_normal(samples), csr


def _typed(X: np.ndarray, dt: np.dtype, sparse: bool) -> DataMatrix:
    dense = np.ascontiguousarray(X, dtype=dt)
    return to_csr(dense) if sparse else dense


def _csr_rows(X: CSR, sel: np.ndarray) -> CSR:
    """The rows ``sel`` of a CSR matrix, as a new CSR matrix."""
    indptr, indices, values = X
    counts = np.diff(indptr)[sel]
    starts = indptr[:-1][sel]
    take = (np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
            + np.arange(counts.sum()))
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), indices[take], values[take]


def _cast_csr(X: CSR, dt: np.dtype) -> CSR:
    indptr, indices, values = X
    return (np.ascontiguousarray(indptr, np.int64), np.ascontiguousarray(indices, np.int64),
            np.ascontiguousarray(values, dt))


def _resolve(path: str, base_dir: str | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p.resolve()


def _find(folder: Path, stem: str, dataset: str, required: bool) -> Path | None:
    # Both the canonical names and the common "train-images.idx3-ubyte" spelling.
    alt = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", alt, alt + ".gz"):
        if (folder / name).is_file():
            return folder / name
    if required:
        raise WorkloadError(f"workload.dataset = {dataset!r}: {folder / stem} (or {stem}.gz) not found")
    return None


def _mnist(folder: Path) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Training rows, labels, and the t10k test set when both its files exist."""
    dataset = f"mnist:{folder}"
    if not folder.is_dir():
        raise WorkloadError(f"workload.dataset = {dataset!r}: {folder} is not a folder of IDX files")
    images = _find(folder, "train-images-idx3-ubyte", dataset, True)
    labels = _find(folder, "train-labels-idx1-ubyte", dataset, True)
    X, y = _images_labels(images, labels, dataset)  # type: ignore[arg-type]
    ti = _find(folder, "t10k-images-idx3-ubyte", dataset, False)
    tl = _find(folder, "t10k-labels-idx1-ubyte", dataset, False)
    if (ti is None) != (tl is None):  # half a test set is a mistake worth naming
        missing = "t10k-labels-idx1-ubyte" if tl is None else "t10k-images-idx3-ubyte"
        raise WorkloadError(f"workload.dataset = {dataset!r}: {folder / missing} (or .gz) not found "
                            f"(the other t10k file is there)")
    test = None
    if ti is not None and tl is not None:
        test = _images_labels(ti, tl, dataset)
        if test[0].shape[1] != X.shape[1]:
            raise WorkloadError(f"workload.dataset = {dataset!r}: t10k images have {test[0].shape[1]} "
                                f"pixels, training images {X.shape[1]}")
    return X, y, test


def _images_labels(images: Path, labels: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    imgs, labs = read_idx(images), read_idx(labels)
    if imgs.ndim < 2 or labs.ndim != 1 or imgs.shape[0] != labs.shape[0]:
        raise WorkloadError(f"workload.dataset = {dataset!r}: {images.name} {imgs.shape} and "
                            f"{labels.name} {labs.shape} do not match")
    X = imgs.reshape(imgs.shape[0], -1).astype(np.float64)
    if imgs.dtype == np.uint8:
        X /= 255.0  # pixels to [0, 1]
    if labs.min() < 0:
        raise WorkloadError(f"workload.dataset = {dataset!r}: negative labels in {labels.name}")
    return X, labs.astype(np.int64)
