"""``model = "torch"``: the flat-θ view of the user's module, its data, and every error naming its key."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from simasgd.numerics.workloads import WorkloadError, build_workload
from simasgd.numerics.workloads.torch_model import INSTALL
from simasgd.runs import backends
from simasgd.spec import loader, seeds
from simasgd.spec.loader import ScenarioError


def build(sc):
    return build_workload(sc.workload, sc.seed, sc.base_dir)


def test_gradient_is_the_derivative_of_the_loss(torch_scenario) -> None:
    """The flat gradient against central differences of the flat loss (float64, a hidden layer)."""
    wl = build(torch_scenario({"module": "torch_factories:small_mlp", "dtype": "float64"}))
    theta = wl.init_theta(np.random.default_rng(0))
    idx = np.arange(5, dtype=np.int64)
    g = np.empty(wl.dim)
    loss = wl.kernel(theta, wl.X, wl.y, idx, g, wl.shape)
    assert np.isclose(loss, wl.loss(theta, wl.X, wl.y, idx), rtol=1e-12)
    h = 1e-6
    for i in np.random.default_rng(1).choice(wl.dim, size=12, replace=False):
        e = np.zeros(wl.dim)
        e[i] = h
        fd = (wl.loss(theta + e, wl.X, wl.y, idx) - wl.loss(theta - e, wl.X, wl.y, idx)) / (2 * h)
        assert np.isclose(g[i], fd, rtol=1e-5, atol=1e-8), (i, g[i], fd)


def test_theta_is_the_modules_parameters_and_its_init_is_seeded(torch_scenario) -> None:
    sc = torch_scenario({"module": "torch_factories:small_mlp"})
    wl = build(sc)
    before = torch.random.get_rng_state()
    a = wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT))
    assert torch.equal(torch.random.get_rng_state(), before)  # the global torch RNG is left alone
    b = wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT))
    c = wl.init_theta(seeds.rng(sc.seed, 1, seeds.Role.INIT))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert a.dtype == np.float32 and wl.dim == a.size == 64 * 16 + 16 + 16 * 10 + 10
    # the layout is parameters_to_vector's: the first layer's weight (16 x 64) comes first
    wl.kernel.load(a)
    np.testing.assert_array_equal(wl.kernel.module[0].weight.detach().numpy().ravel(), a[:16 * 64])
    assert wl.flops_per_sample == 3 * 2 * (64 * 16 + 16 * 10) and wl.classes == 10  # 3 x forward multiply-adds


@pytest.mark.parametrize("data", ["torch_factories:data_xy", "torch_factories:data_dataset"])
def test_data_factories_are_split_with_the_scenario_seed(torch_scenario, data) -> None:
    sc = torch_scenario({"module": "torch_factories:four_features", "data": data, "test_fraction": 0.25})
    wl = build(sc)
    assert (wl.n_train, wl.n_test) == (180, 60) and wl.classes == 3 and wl.X.dtype == np.float32
    theta = wl.init_theta(np.random.default_rng(0))
    assert 0 <= wl.accuracy(theta) <= 1


def test_a_given_test_set_and_a_custom_loss(torch_scenario) -> None:
    wl = build(torch_scenario({"module": "torch_factories:four_features", "data": "torch_factories:data_split"}))
    assert (wl.n_train, wl.n_test) == (200, 40)
    wl = build(torch_scenario({"module": "torch_factories:one_output", "data": "torch_factories:data_regression",
                               "loss": "torch_factories:half_mse"}))
    assert wl.classes == 0 and wl.y.dtype == np.float32
    theta = np.zeros(wl.dim, dtype=np.float32)  # prediction 0: the loss is half the mean squared target
    assert np.isclose(wl.eval_loss(theta), 0.5 * np.mean(wl.y[wl.eval_idx].astype(np.float64) ** 2), rtol=1e-5)


@pytest.mark.parametrize(("workload", "says"), [
    ({"module": "no_such_pkg.models:make"}, ["workload.module", "cannot import module 'no_such_pkg.models'"]),
    ({"module": "torch_factories:nope"}, ["workload.module", "has no attribute 'nope'"]),
    ({"module": "torch_factories:raises"}, ["workload.module", "the factory raised RuntimeError: no weights today"]),
    ({"module": "torch_factories:not_a_module"}, ["workload.module", "not a torch.nn.Module"]),
    ({"module": "torch_factories:wrong_width"}, ["workload.module", "workload.dataset = 'digits'", "(2, 64)"]),
    ({"module": "torch_factories:three_outputs"}, ["workload.module", "(2, 3)", "10 classes"]),
    ({"module": "torch_factories:four_features", "data": "torch_factories:data_bad"},
     ["workload.data", "returned a str"]),
    ({"module": "torch_factories:four_features", "data": "torch_factories:data_float_labels"},
     ["workload.data", "integer class labels"]),
    ({"module": "torch_factories:tiny", "loss": "l1"}, ["workload.loss = 'l1'", "cross_entropy, mse"]),
])
def test_bad_workloads_name_the_key(torch_scenario, workload, says) -> None:
    with pytest.raises(WorkloadError) as e:
        build(torch_scenario(workload))
    for s in says:
        assert s in str(e.value), str(e.value)


@pytest.mark.parametrize(("workload", "says"), [
    ({"model": "torch"}, "needs `module"),
    ({"model": "mlp", "module": "a:b"}, "only for model = 'torch'"),
    ({"model": "torch", "module": "no_colon"}, "package.module:function"),
    ({"model": "torch", "module": "a:b", "data": "c:d", "dataset": "digits"}, "not both"),
])
def test_scenario_keys_are_checked_when_loaded(workload, says) -> None:
    with pytest.raises(ScenarioError, match="workload") as e:
        loader.from_dict({"workload": workload})
    assert says in str(e.value)


def test_without_torch_the_error_says_how_to_install_it(torch_scenario, monkeypatch) -> None:
    sc = torch_scenario()
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(WorkloadError, match="workload.model = 'torch' needs PyTorch") as e:
        build(sc)
    assert INSTALL in str(e.value) == str(e.value) and INSTALL == "pip install 'simasgd[torch]'"
    with pytest.raises(backends.BackendError, match="backend 'torch' needs PyTorch") as e:
        backends.load("torch").run_once(sc, 0)
    assert INSTALL in str(e.value)


def test_the_cpu_backend_refuses_it_in_one_line(torch_scenario) -> None:
    with pytest.raises(WorkloadError) as e:
        backends.load("cpu").run_once(torch_scenario(), 0)
    msg = str(e.value)
    assert "\n" not in msg and "workload.model = 'torch'" in msg and "sim, serial, torch" in msg and "'cpu'" in msg


@pytest.mark.parametrize("backend", ["sim", "serial"])
def test_sim_and_serial_train_the_users_model(torch_scenario, backend) -> None:
    """Numerics come from the module: the run's first loss is the module's loss at the run's θ0, and it falls."""
    sc = torch_scenario(stop={"max_updates": 300, "eval_every_updates": 50})
    res = backends.load(backend).run_once(sc, 0)
    wl = build(sc)
    run = res.runs[0]
    assert np.isclose(run.initial_loss, wl.eval_loss(wl.init_theta(seeds.rng(sc.seed, 0, seeds.Role.INIT))))
    assert run.updates == 300 and run.final_loss < 0.7 * run.initial_loss


def test_torch_is_an_optional_pinned_extra() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("torch") for d in project["dependencies"])   # `pip install simasgd` pulls no torch
    assert project["optional-dependencies"]["torch"] == ["torch==2.13.0"]     # the CPU build; a range pulls CUDA
