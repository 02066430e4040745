"""The cuda backend's tests run under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set in
``tests/conftest.py`` before numba is imported; ``SIMASGD_TEST_GPU=1`` runs them on a real GPU).

Under the simulator every CUDA thread is a Python thread: shapes are tiny and runs short."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simasgd import loader
from simasgd.scenario import Scenario


@pytest.fixture(scope="session")
def cuda() -> Any:
    from executors.cuda import device

    return device.require()


def tiny(model: str, **over: Any) -> Scenario:
    """A tiny scenario: a 6-5-3 mlp, or a 3-filter cnn on 3×6×6 images, batch 4."""
    wl = ({"model": "mlp", "layers": [6, 5, 3], "features": 6} if model == "mlp" else
          {"model": "cnn", "layers": [3, 3, 2, 4], "features": 3 * 6 * 6})
    doc: dict[str, Any] = {"name": f"tiny-{model}", "seed": 5, "workers": {"count": 2},
                           "workload": {**wl, "dataset": "synthetic", "classes": 3, "samples": 40,
                                        "batch_size": 4, "eval_rows": 16},
                           "algorithm": {"name": "hogwild"}, "optimizer": {"lr": 0.05},
                           "stop": {"max_updates": 12, "eval_every_updates": 6, "max_time_s": 120}}
    for k, v in over.items():
        doc[k] = {**doc.get(k, {}), **v} if isinstance(v, dict) else v
    return loader.from_dict(doc)


@pytest.fixture(scope="session", name="tiny")
def tiny_fixture() -> Any:
    """``tiny(model, **overrides)``: a tiny scenario (``model`` = "mlp" | "cnn")."""
    return tiny


@pytest.fixture(scope="session")
def rng() -> np.random.Generator:
    return np.random.default_rng(7)
