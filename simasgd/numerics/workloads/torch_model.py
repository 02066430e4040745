"""Workload ``model = "torch"``: the user's own ``torch.nn.Module`` on their data or a built-in dataset.

::

    [workload]
    model = "torch"
    module = "my_pkg.models:make"   # a factory returning an nn.Module (imported from the scenario's folder first)
    data = "my_pkg.data:make"       # optional: a torch Dataset, (X, y) or (X, y, X_test, y_test); else `dataset`
    loss = "cross_entropy"          # default; "mse", or "my_pkg.losses:fn" (fn(output, target) -> mean loss)

θ is the module's parameters as one flat vector, in ``module.parameters()`` order
(``torch.nn.utils.parameters_to_vector``); a gradient is the flat vector of their
``.grad``. The kernels are Python callables with the numba kernels' signatures
(:class:`TorchModel`), so the sim numerics, the serial backend and the ``torch``
backend (``executors/torchmp``) call them as they call any workload's; the cpu
backend's nopython loops cannot, and refuse the workload (:data:`RUNS_ON`).

The module runs in training mode; its buffers (BatchNorm statistics) are not
part of θ and evolve in each process or simulation on their own. A custom loss
returns the mean over the batch (the ε loss is evaluated in chunks).

θ₀ comes from the module's own initialisation: the factory is called with
torch's RNG seeded from the run's ``Role.INIT`` stream inside ``fork_rng`` (the
global torch RNG is left as it was). torch is imported only when a torch
workload is built; without it the error says how to install it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from simasgd.numerics.workloads.base import Workload, WorkloadError
from simasgd.numerics.workloads.data import Dataset, _split, eval_rows, load_dataset
from simasgd.spec.scenario import WorkloadConfig

INSTALL = "pip install 'simasgd[torch]'"
RUNS_ON = ("sim", "serial", "torch")   # backends that call Python kernels (the cpu loops are nopython)
LOSSES = ("cross_entropy", "mse")
EVAL_CHUNK = 1024                       # rows per forward pass when the ε loss is evaluated
CHECK_ROWS = 2                          # rows the module is tried on when the workload is built

_DATA_CACHE: dict[tuple[Any, ...], Dataset] = {}


def import_torch() -> Any:
    """``torch``, or a :class:`WorkloadError` that says how to install it."""
    try:
        import torch
    except ImportError as e:
        raise WorkloadError(f"workload.model = 'torch' needs PyTorch, which is not installed ({e}); "
                            f"install it with: {INSTALL}") from None
    return torch


def resolve(spec: str, key: str, base_dir: str | None) -> Callable[..., Any]:
    """The callable named by ``"package.module:name"``; the scenario's folder is searched first."""
    mod_name, attr = spec.split(":")
    if base_dir is not None and base_dir not in sys.path:
        sys.path.insert(0, base_dir)  # an example package next to its scenario file imports as-is
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        where = f"the scenario's folder {base_dir} and sys.path" if base_dir else "sys.path"
        raise WorkloadError(f"workload.{key} = {spec!r}: cannot import module {mod_name!r} "
                            f"({type(e).__name__}: {e}); looked in {where}") from None
    except Exception as e:
        raise WorkloadError(f"workload.{key} = {spec!r}: importing {mod_name!r} raised "
                            f"{type(e).__name__}: {e}") from None
    fn = getattr(mod, attr, None)
    if fn is None:
        raise WorkloadError(f"workload.{key} = {spec!r}: module {mod_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise WorkloadError(f"workload.{key} = {spec!r}: {attr!r} is a {type(fn).__name__}, not a function")
    return fn


def make_module(cfg: WorkloadConfig, base_dir: str | None, seed: int) -> Any:
    """The factory's module in the workload dtype, built with torch's RNG seeded by ``seed`` (restored after)."""
    torch = import_torch()
    factory = resolve(str(cfg.module), "module", base_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            module = factory()
        except Exception as e:
            raise WorkloadError(f"workload.module = {cfg.module!r}: the factory raised "
                                f"{type(e).__name__}: {e}") from None
    if not isinstance(module, torch.nn.Module):
        raise WorkloadError(f"workload.module = {cfg.module!r}: the factory returned a "
                            f"{type(module).__name__}, not a torch.nn.Module")
    if not list(module.parameters()):
        raise WorkloadError(f"workload.module = {cfg.module!r}: the module has no parameters to train")
    return module.to(getattr(torch, cfg.dtype)).train()


def init_from_factory(cfg: WorkloadConfig, base_dir: str | None, rng: np.random.Generator) -> np.ndarray:
    """θ₀: the flat parameters of a fresh module whose initialisation drew from ``rng`` (float64)."""
    torch = import_torch()
    module = make_module(cfg, base_dir, int(rng.integers(0, 2**63 - 1)))
    return torch.nn.utils.parameters_to_vector(module.parameters()).detach().to(torch.float64).numpy()


# --- data ----------------------------------------------------------------------------------------

def load_data(cfg: WorkloadConfig, seed: int, base_dir: str | None) -> Dataset:
    """The built-in ``dataset``, or the ``data`` factory's arrays (split like the built-ins when it gives no test
    set)."""
    if cfg.data is None:
        return load_dataset(cfg, seed, base_dir)
    key = (cfg.data, base_dir, seed, cfg.dtype, cfg.test_fraction, _loss_name(cfg))
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = _factory_data(cfg, seed, base_dir)
    return _DATA_CACHE[key]


def _factory_data(cfg: WorkloadConfig, seed: int, base_dir: str | None) -> Dataset:
    spec = str(cfg.data)
    try:
        got = resolve(spec, "data", base_dir)()
    except WorkloadError:
        raise
    except Exception as e:
        raise WorkloadError(f"workload.data = {spec!r}: the factory raised {type(e).__name__}: {e}") from None
    if isinstance(got, (tuple, list)) and len(got) in (2, 4):
        arrays = [_numpy(a) for a in got]
    elif hasattr(got, "__getitem__") and hasattr(got, "__len__") and not isinstance(got, (str, bytes, np.ndarray)):
        # a map-style Dataset of (x, y) items
        items = [got[i] for i in range(len(got))]
        if not items or not all(isinstance(it, (tuple, list)) and len(it) == 2 for it in items):
            raise WorkloadError(f"workload.data = {spec!r}: a Dataset must yield (x, y) pairs")
        arrays = [np.stack([_numpy(x) for x, _ in items]), np.stack([_numpy(y) for _, y in items])]
    else:
        raise WorkloadError(f"workload.data = {spec!r}: the factory returned a {type(got).__name__}; return a "
                            f"torch Dataset of (x, y), (X, y) or (X, y, X_test, y_test)")
    for X, y, which in ((arrays[0], arrays[1], "X, y"), *([(arrays[2], arrays[3], "X_test, y_test")]
                                                          if len(arrays) == 4 else [])):
        if X.ndim < 1 or y.ndim < 1 or len(X) != len(y) or len(X) == 0:
            raise WorkloadError(f"workload.data = {spec!r}: {which} have shapes {X.shape} and {y.shape}; "
                                f"they need the same (non-zero) number of rows")
    if len(arrays) == 2:
        tr, te = _split(len(arrays[1]), cfg.test_fraction, seed)
        arrays = [arrays[0][tr], arrays[1][tr], arrays[0][te], arrays[1][te]]
    X, y, X_test, y_test = (_typed(a, cfg) for a in arrays)
    classification = _loss_name(cfg) == "cross_entropy" or np.issubdtype(y.dtype, np.integer)
    if _loss_name(cfg) == "cross_entropy" and not np.issubdtype(y.dtype, np.integer):
        raise WorkloadError(f"workload.data = {spec!r}: workload.loss = 'cross_entropy' needs integer class "
                            f"labels, the factory gave {y.dtype}")
    classes = int(max(y.max(), y_test.max() if len(y_test) else 0)) + 1 if classification else 0
    for a in (X, y, X_test, y_test):
        a.flags.writeable = False
    return Dataset(name=spec, X=X, y=y, X_test=X_test, y_test=y_test, features=int(np.prod(X.shape[1:])),
                   classes=classes, nnz_per_row=float(np.prod(X.shape[1:])))


def _numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def _typed(a: np.ndarray, cfg: WorkloadConfig) -> np.ndarray:
    """Floating arrays in the workload dtype; integers (labels, token ids) as int64."""
    if np.issubdtype(a.dtype, np.floating):
        return np.ascontiguousarray(a, dtype=cfg.dtype)
    if np.issubdtype(a.dtype, np.integer) or a.dtype == bool:
        return np.ascontiguousarray(a, dtype=np.int64)
    raise WorkloadError(f"workload.data = {cfg.data!r}: arrays of {a.dtype} are not numbers")


# --- the kernels ---------------------------------------------------------------------------------

def _loss_name(cfg: WorkloadConfig) -> str:
    return cfg.loss or "cross_entropy"


def _mse(out: Any, target: Any) -> Any:
    import torch.nn.functional as F

    return F.mse_loss(out.reshape(target.shape), target)


def loss_function(cfg: WorkloadConfig, base_dir: str | None) -> Callable[[Any, Any], Any]:
    name = _loss_name(cfg)
    if name == "cross_entropy":
        import torch.nn.functional as F

        return F.cross_entropy
    if name == "mse":
        return _mse
    if ":" not in name:
        raise WorkloadError(f"workload.loss = {name!r}: give one of {', '.join(LOSSES)} or "
                            f"\"package.module:function\" (output, target) -> mean loss")
    return resolve(name, "loss", base_dir)


class OneThread:
    """torch on one intra-op thread inside the block, as a ``torch`` backend worker computes (and much faster
    for small models on a busy machine, where extra intra-op threads wait for CPUs); the caller's setting is
    restored after."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def __enter__(self) -> None:
        self.before = self.torch.get_num_threads()
        if self.before != 1:
            self.torch.set_num_threads(1)

    def __exit__(self, *exc: Any) -> None:
        if self.before != 1:
            self.torch.set_num_threads(self.before)


class TorchModel:
    """The module behind numba-kernel signatures: θ and gradients are flat numpy vectors.

    Not thread-safe (one module, its ``.grad`` buffers): each process or simulation owns one."""

    def __init__(self, module: Any, loss: Callable[[Any, Any], Any]) -> None:
        import torch

        self.torch = torch
        self.module = module
        self.params = list(module.parameters())
        self.sizes = [p.numel() for p in self.params]
        self.dim = int(sum(self.sizes))
        self.loss_fn = loss
        self.one_thread = OneThread(torch)

    def load(self, theta: np.ndarray) -> None:
        """θ into the module's parameters (copied: the module never aliases a buffer others write)."""
        vec = self.torch.from_numpy(theta)
        with self.torch.no_grad():
            off = 0
            for p, n in zip(self.params, self.sizes, strict=False):
                p.copy_(vec[off:off + n].view_as(p))
                off += n

    def __call__(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray,
                 grad_out: np.ndarray, shape: np.ndarray | None = None) -> float:
        """Mean loss on rows ``idx``; the flat gradient overwrites ``grad_out`` (the kernels' signature)."""
        torch = self.torch
        self.load(theta)
        for p in self.params:
            p.grad = None
        with torch.enable_grad(), self.one_thread:
            loss = self.loss_fn(self.module(torch.from_numpy(X[idx])), torch.from_numpy(y[idx]))
            loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        torch.from_numpy(grad_out).copy_(torch.nn.utils.parameters_to_vector(grads))
        return float(loss.detach())

    def loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, idx: np.ndarray,
             shape: np.ndarray | None = None) -> float:
        """Mean loss over rows ``idx`` (forward only, in chunks of :data:`EVAL_CHUNK`)."""
        torch = self.torch
        self.load(theta)
        total = 0.0
        with torch.no_grad(), self.one_thread:
            for lo in range(0, len(idx), EVAL_CHUNK):
                part = idx[lo:lo + EVAL_CHUNK]
                out = self.module(torch.from_numpy(X[part]))
                total += float(self.loss_fn(out, torch.from_numpy(y[part]))) * len(part)
        return total / max(1, len(idx))

    def predict(self, theta: np.ndarray, X: np.ndarray, idx: np.ndarray, shape: np.ndarray | None,
                out: np.ndarray) -> None:
        torch = self.torch
        self.load(theta)
        with torch.no_grad():
            for lo in range(0, len(idx), EVAL_CHUNK):
                part = idx[lo:lo + EVAL_CHUNK]
                out[lo:lo + len(part)] = self.module(torch.from_numpy(X[part])).argmax(dim=1).numpy()


def _check(model: TorchModel, cfg: WorkloadConfig, data: Dataset) -> None:
    """Try the module and the loss on a few rows: a shape mismatch names the keys involved."""
    source = f"workload.data = {cfg.data!r}" if cfg.data else f"workload.dataset = {cfg.dataset!r}"
    X, y = data.X, data.y
    assert isinstance(X, np.ndarray)  # dense: sparse = true is refused for a torch model (WorkloadConfig)
    idx = np.arange(min(CHECK_ROWS, len(y)), dtype=np.int64)
    xb = model.torch.from_numpy(X[idx])
    try:
        with model.torch.no_grad():
            out = model.module(xb)
    except Exception as e:
        raise WorkloadError(f"workload.module = {cfg.module!r} does not fit {source}: its forward on rows of "
                            f"shape {tuple(xb.shape)} ({xb.dtype}) raised {type(e).__name__}: {e}") from None
    shape = tuple(getattr(out, "shape", ()))
    if _loss_name(cfg) == "cross_entropy" and (len(shape) != 2 or shape[1] < data.classes):
        raise WorkloadError(f"workload.module = {cfg.module!r} does not fit {source}: it outputs shape {shape}; "
                            f"cross_entropy needs (rows, classes) with at least the data's {data.classes} classes")
    try:
        model(np.zeros(model.dim, dtype=cfg.dtype), X, y, idx, np.empty(model.dim, dtype=cfg.dtype))
    except Exception as e:
        raise WorkloadError(f"workload.loss = {_loss_name(cfg)!r} on workload.module = {cfg.module!r}'s output "
                            f"{shape} and the labels of {source} raised {type(e).__name__}: {e}") from None


def flops_per_sample(model: TorchModel, X: np.ndarray) -> float:
    """Forward + backward FLOPs per row: 3 x the forward's multiply-adds of its Linear and convolution layers
    (counted by forward hooks; backward ~ 2 x forward); 6 per parameter when it has neither. An estimate,
    used only where no gradient time is calibrated or given (hooks, not torch's FlopCounterMode, which is slow
    to start)."""
    torch = model.torch
    fwd = [0.0]

    def count(mod: Any, inputs: Any, out: Any) -> None:
        if isinstance(mod, torch.nn.Linear):
            fwd[0] += 2.0 * mod.in_features * out.numel()
        elif isinstance(mod, torch.nn.modules.conv._ConvNd):
            fwd[0] += 2.0 * mod.weight[0].numel() * out.numel()  # each output element: Cin/groups x kernel MACs

    idx = np.arange(min(4, len(X)), dtype=np.int64)
    handles = [m.register_forward_hook(count) for m in model.module.modules()]
    try:
        with torch.no_grad(), model.one_thread:
            model.module(torch.from_numpy(X[idx]))
    finally:
        for h in handles:
            h.remove()
    return 3.0 * fwd[0] / len(idx) if fwd[0] > 0 else 6.0 * model.dim


def build(cfg: WorkloadConfig, seed: int, base_dir: str | None = None) -> Workload:
    """The :class:`Workload` of a ``model = "torch"`` table (``build_workload`` calls this)."""
    import_torch()
    data = load_data(cfg, seed, base_dir)
    assert isinstance(data.X, np.ndarray)  # dense: sparse = true is refused for a torch model (WorkloadConfig)
    module = make_module(cfg, base_dir, seed)
    model = TorchModel(module, loss_function(cfg, base_dir))
    _check(model, cfg, data)
    dtype = np.dtype(cfg.dtype)
    row_bytes = float(data.X[0].nbytes) if len(data.y) else 0.0
    src = cfg.data or cfg.dataset
    return Workload(
        name="torch", kernel=model, loss_kernel=model.loss, predict_kernel=model.predict if data.classes else None,
        shape=np.zeros(1, dtype=np.int64), X=data.X, y=data.y, X_test=data.X_test, y_test=data.y_test,
        eval_idx=eval_rows(len(data.y), cfg.eval_rows, seed), dim=model.dim, dtype=dtype,
        flops_per_sample=flops_per_sample(model, data.X), bytes_per_sample=row_bytes,
        features=data.features, classes=data.classes, sparse=False, batch_size=cfg.batch_size,
        description=f"torch {cfg.module} on {src} ({cfg.dtype}, d={model.dim}, {_loss_name(cfg)})",
        init_fn=partial(init_from_factory, cfg, base_dir))
