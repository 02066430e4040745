"""Backend ``gpu`` under numba's CUDA simulator: the device gradients against the CPU kernels, θ exact on
the constant workload for every algorithm and both modes, rows from the device's versions, and the
refusals. (On a GPU: ``benchmarks/gpu_check.py`` runs the same checks at full size.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simasgd.numerics.workloads.constant import LR, STEP, ConstWorkload, first_loss
from simasgd.runs import backends
from simasgd.spec import algorithms, loader, seeds


# "-wide": layers wider than a shared-memory tile (gradients.KT), more filters than a lane sums at once
# (gradients.KF), more pooled maxima than a lane loads at once (gradients.U): every tiled loop runs more than
# one round and a partial last one.
@pytest.mark.parametrize("model", ["mlp", "cnn", "mlp-wide", "cnn-wide"])
def test_device_gradient_is_the_cpu_kernels(model: str, tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # One sequential update with lr = 1 from θ0 leaves θ0 − g: g against the workload's own CPU kernel
    # on the minibatch the device drew.
    from executors.gpu import runner
    from simasgd.numerics.workloads import build_workload

    seen: dict[str, Any] = {}
    real = runner.final_theta

    def spy(r: Any) -> Any:
        seen["idx"] = r.arrays["idx"].copy_to_host()
        out = real(r)
        seen["theta"] = out[1]
        return out

    monkeypatch.setattr(runner, "final_theta", spy)
    from executors.gpu.gradients import KF, KT

    wide = ({"layers": [KT + 9, 2 * KT + 3, 3], "features": KT + 9} if model == "mlp-wide" else
            {"layers": [KF + 3, 3, 2, 4], "features": 3 * 12 * 12} if model == "cnn-wide" else {})
    sc = tiny(model.removesuffix("-wide"), workers={"count": 1}, algorithm={"name": "sequential"},
              optimizer={"lr": 1.0}, stop={"max_updates": 1, "eval_every_updates": 1}, workload=wide)
    backends.load("gpu").run_once(sc, 0)
    wl = build_workload(sc.workload, sc.seed, None)
    th0 = wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT)).astype(np.float64)
    g = np.empty_like(th0)
    wl.kernel(th0, wl.X, wl.y, np.ascontiguousarray(seen["idx"][0]), g, wl.shape)
    np.testing.assert_allclose(th0 - seen["theta"], g, rtol=1e-9, atol=1e-12)
    assert np.abs(g).max() > 0


CASES = [("hogwild", 1, "resident"), ("mutex", 3, "resident"), ("leashed", 3, "resident"), ("sync", 3, "resident"),
         ("sequential", 1, "resident"), ("mutex", 2, "streams"), ("leashed", 2, "streams")]


@pytest.mark.parametrize(("algorithm", "workers", "mode"), CASES, ids=[f"{a}-{n}-{m}" for a, n, m in CASES])
@pytest.mark.slow
def test_lossless_algorithms_leave_theta_exact(algorithm: str, workers: int, mode: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The constant gradient: θ0 = 1, LR·G = 2⁻¹⁶, so N applied updates leave θ[0] = 1 − N·2⁻¹⁶ exactly;
    # a lost or doubled update, or a step with the wrong staleness divisor, would move it.
    wl = ConstWorkload(dim=12, loss_kernel=first_loss)
    monkeypatch.setattr("simasgd.numerics.workloads.build_workload", lambda cfg, seed, base_dir=None: wl)
    sc = loader.from_dict({"name": "c", "seed": 3, "workers": {"count": workers},
                           "workload": {"model": "least_squares", "batch_size": 1},
                           "algorithm": {"name": algorithm}, "optimizer": {"lr": LR},
                           "stop": {"max_updates": 10, "eval_every_updates": 5, "max_time_s": 120},
                           "gpu": {"mode": mode}})
    r = backends.load("gpu").run_once(sc, 0)
    u = r.updates
    assert r.runs[0].updates == 10
    assert float(r.curve["loss"].iloc[-1]) == 1.0 - 10 * STEP
    applied = u[u["applied"]]
    if algorithm == "sync":
        assert (applied["staleness"] == 0).all() and (applied.groupby("version")["worker"].nunique() == workers).all()
    else:
        np.testing.assert_array_equal(np.sort(applied["version"]), np.arange(1, 11))
    assert (applied["staleness"] >= 0).all()
    assert (u["t_start"] <= u["t_grad_start"]).all() and (u["t_grad_end"] <= u["t_write"]).all()


@pytest.mark.slow
def test_hogwild_staleness_counts_the_other_workers_versions(tiny: Any) -> None:
    r = backends.load("gpu").run_once(tiny("mlp", workers={"count": 3}), 0)
    u = r.updates
    assert len(u) == 12 and u["applied"].all()
    np.testing.assert_array_equal(np.sort(u["version"]), np.arange(1, 13))
    for _, row in u.iterrows():
        others = u[(u["worker"] != row["worker"]) & (u["version"] > row["read_version"])
                   & (u["version"] < row["version"])]
        assert len(others) == row["staleness"]
    assert r.metadata["gpu_mode"] == "resident" and r.metadata["stopped_by"] == "budget"


@pytest.mark.parametrize(("over", "words"), [
    ({"algorithm": {"name": "sync"}, "gpu": {"mode": "streams"}}, ["sync", "gpu.mode"]),
    ({"algorithm": {"name": "mutex", "backoff": {"kind": "linear"}}}, ["backoff.kind", "none"]),
    ({"workload": {"batch_size": 65}}, ["batch_size", "64"]),
])
def test_refusals_name_the_key(over: dict[str, Any], words: list[str], tiny: Any) -> None:
    with pytest.raises(algorithms.UnsupportedAlgorithm) as e:
        backends.load("gpu").run_once(tiny("mlp", **over), 0)
    for w in words:
        assert w in str(e.value)


def test_a_cnn_whose_image_exceeds_a_blocks_shared_memory_is_refused(tiny: Any) -> None:
    from executors.gpu.gradients import shared_limits

    side = int(np.sqrt(shared_limits("float64")[0] / 3)) + 1  # 3 channels of side² pixels: one row too many
    sc = tiny("cnn", workload={"features": 3 * side * side})
    with pytest.raises(algorithms.UnsupportedAlgorithm, match=f"workload.features = {3 * side * side}"):
        backends.load("gpu").run_once(sc, 0)


def test_a_workload_without_a_device_gradient_is_refused() -> None:
    sc = loader.from_dict({"name": "ls", "workload": {"model": "least_squares", "samples": 50, "features": 4},
                           "algorithm": {"name": "hogwild"}, "stop": {"max_updates": 5}})
    with pytest.raises(algorithms.UnsupportedAlgorithm, match="workload.model = 'least_squares'"):
        backends.load("gpu").run_once(sc, 0)
