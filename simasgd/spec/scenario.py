"""The scenario schema as frozen pydantic models (docs/reference/scenario.md is generated from them).

Loading, overrides and error reporting live in :mod:`simasgd.spec.loader`; this
module only says what a valid scenario is. Keys may be added; the keys of
the scenario format must keep working.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import operator
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from simasgd.spec import algorithms, distributions

PosInt = Annotated[int, Field(ge=1)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


class DistSpec(Section):
    """One timing distribution; ``mean_s`` is the mean of the whole distribution."""

    dist: Literal["deterministic", "exponential", "shifted_exponential", "lognormal", "gamma", "empirical"]
    mean_s: NonNegFloat = 0.0
    shift_s: NonNegFloat = 0.0
    sigma: PosFloat = 0.5
    shape: PosFloat = 2.0
    path: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DistSpec:
        if self.dist == "shifted_exponential" and self.shift_s > self.mean_s:
            raise ValueError("shift_s must be <= mean_s (mean_s is the mean of the whole distribution)")
        if self.dist == "empirical" and not self.path:
            raise ValueError("empirical needs `path` (a .npy file or a text file of durations in seconds)")
        return self

    def build(self, base_dir: Path | None = None) -> distributions.Distribution:
        samples = None
        if self.dist == "empirical":
            p = Path(self.path or "")
            samples = distributions.load_samples(p if p.is_absolute() or base_dir is None else base_dir / p)
        return distributions.make(self.dist, mean_s=self.mean_s, shift_s=self.shift_s,
                                  sigma=self.sigma, shape=self.shape, samples=samples)


class MachineConfig(Section):
    """A machine: a preset, explicit keys, or a preset with some keys overridden."""

    preset: str | None = None
    sockets: PosInt | None = None
    cores_per_socket: PosInt | None = None
    threads_per_core: PosInt | None = None
    local_latency_ns: NonNegFloat | None = None
    remote_latency_ns: NonNegFloat | None = None
    mem_bandwidth_gbs: PosFloat | None = None
    link_bandwidth_gbs: PosFloat | None = None
    gflops_per_core: PosFloat | None = None
    quantum_s: PosFloat | None = None
    context_switch_s: NonNegFloat | None = None
    core_bandwidth_gbs: PosFloat | None = None
    base_ghz: PosFloat | None = None
    turbo_ghz: tuple[PosFloat, ...] | None = None
    llc_mb: NonNegFloat | None = None
    l2_kb: NonNegFloat | None = None
    llc_gbs: NonNegFloat | None = None
    llc_replacement: Literal["random", "lru"] | None = None


class StragglerConfig(Section):
    count: Annotated[int, Field(ge=0)] = 0
    slowdown: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.0
    probability: Annotated[float, Field(ge=0, le=1)] = 0.0
    pause: DistSpec | None = None

    @model_validator(mode="after")
    def _pause_given(self) -> StragglerConfig:
        if self.probability > 0 and self.pause is None:
            raise ValueError("a transient-pause probability needs `pause = {dist = ..., mean_s = ...}`")
        return self


class WorkersConfig(Section):
    count: PosInt = 1
    placement: Literal["uma", "numa", "os"] | list[Annotated[int, Field(ge=0)]] = "os"
    stragglers: StragglerConfig = StragglerConfig()


class WorkloadConfig(Section):
    model: Literal["mlp", "logreg", "least_squares", "cnn", "torch"] = "mlp"
    layers: list[PosInt] | None = None
    dataset: str = "digits"
    batch_size: PosInt = 64
    dtype: Literal["float64", "float32"] = "float64"
    sparse: bool = False
    density: Annotated[float, Field(gt=0, le=1)] = 0.05
    features: PosInt = 784
    classes: Annotated[int, Field(ge=2)] = 10
    samples: Annotated[int, Field(ge=4)] = 10000
    test_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.2
    eval_rows: PosInt = 10000
    # model = "torch" (simasgd/numerics/workloads/torch_model.py): "package.module:factory" returning an nn.Module,
    # optionally a data factory (else `dataset`), and the loss: "cross_entropy" | "mse" | "package.module:fn".
    module: str | None = None
    data: str | None = None
    loss: str | None = None

    @field_validator("module", "data")
    @classmethod
    def _dotted(cls, v: str | None) -> str | None:
        if v is not None and (v.count(":") != 1 or not all(v.split(":"))):
            raise ValueError(f"{v!r}: give \"package.module:function\" (an importable module and a name in it)")
        return v

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, v: str) -> str:
        if v in ("digits", "synthetic") or (v.startswith("mnist:") and len(v) > 6) or \
                (v.startswith("cifar10:") and len(v) > 8):
            return v
        raise ValueError("must be 'digits', 'synthetic', 'mnist:PATH' (a folder of IDX files) or "
                         "'cifar10:PATH' (a folder of CIFAR-10 binary batches)")

    @model_validator(mode="after")
    def _model_keys(self) -> WorkloadConfig:
        if self.layers is not None and len(self.layers) < 2:
            raise ValueError("layers needs at least [inputs, outputs]")
        if self.sparse and self.model not in ("logreg", "least_squares"):
            raise ValueError(f"sparse = true is for logreg and least_squares, not {self.model}")
        torch_keys = sorted(k for k in ("module", "data", "loss") if getattr(self, k) is not None)
        if self.model == "torch" and self.module is None:
            raise ValueError("model = 'torch' needs `module = \"package.module:factory\"` "
                             "(returning a torch.nn.Module)")
        if self.model != "torch" and torch_keys:
            raise ValueError(f"{', '.join(torch_keys)}: only for model = 'torch', not {self.model!r}")
        if self.data is not None and "dataset" in self.model_fields_set:
            raise ValueError("give `data` (a factory) or `dataset` (built in), not both")
        return self


class TimingConfig(Section):
    gradient: DistSpec | None = None
    read: DistSpec | None = None
    update: DistSpec | None = None


class BackoffConfig(Section):
    kind: Literal["none", "linear", "exponential", "random"] = "none"
    initial_s: NonNegFloat = 1e-6
    max_s: NonNegFloat = 1e-4
    # "random" (Ek 2021 §2.2.3, the default): linear and exponential start from a random delay, drawn
    # uniformly in (0, initial_s], and grow from it; "random" backoff draws each delay uniformly in
    # (0, max_s], per thread. "initial": every wait starts at initial_s; "random" draws uniformly in the
    # exponential window (randomised exponential backoff).
    start: Literal["random", "initial"] = "random"


_PARAM_NAMES = frozenset(p.name for d in algorithms.ALGORITHMS.values() for p in d.params)
# Each algorithm parameter's type where the registry's allowed values do not give it (a string parameter
# with ``allowed`` is the Literal of them): an algorithm's own model (ALGORITHM_MODELS) has one optional field
# per parameter its Definition in simasgd/spec/algorithms.py lists, None meaning its default.
PARAM_TYPES: dict[str, Any] = {
    "persistence": float,
    "k": PosInt,
    "backoff": BackoffConfig,
    "backup": Annotated[int, Field(ge=0)],
    "bound": Annotated[int, Field(ge=0)],
    "alpha": Annotated[float, Field(gt=0, le=1)],
    "tau": PosInt,
    "shards": PosInt,
    "onebit": bool,
    "group_size": PosInt,
    "exchange_every": PosInt,
    "partition": bool,
    "local_copy": bool,
}


def param_type(p: algorithms.Param) -> Any:
    """The scenario type of parameter ``p``: its table's type, the Literal of its allowed strings, or its own."""
    if p.name in PARAM_TYPES:
        return PARAM_TYPES[p.name]
    if p.allowed and all(isinstance(a, str) for a in p.allowed):
        return Literal[p.allowed]
    raise TypeError(f"simasgd/spec/scenario.py: no type for algorithm parameter {p.name!r}: add it to PARAM_TYPES")


class AlgorithmConfig(Section):
    """The ``[algorithm]`` table: the base of every algorithm's own model (:data:`ALGORITHM_MODELS`, one per
    registry entry, discriminated on ``name``), each with exactly the parameters its definition lists."""

    name: str

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in algorithms.ALGORITHMS:
            raise ValueError(unknown_algorithm())
        return v

    @field_validator("persistence", mode="before", check_fields=False)
    @classmethod
    def _persistence(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity", "unbounded"):
            return math.inf
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (v != math.inf and (v < 0 or v != int(v))):
            raise ValueError("must be an integer >= 0 or \"inf\"")
        return v

    @field_validator("backoff", mode="before", check_fields=False)
    @classmethod
    def _backoff_shorthand(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v

    @model_validator(mode="before")
    @classmethod
    def _params_belong(cls, data: Any) -> Any:
        # Before the fields: a key this algorithm does not take is named with the ones it takes, not as
        # an unknown key of the table.
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            stray = stray_params(data["name"], {k for k, v in data.items() if v is not None})
            if stray:
                raise ValueError("; ".join(stray))
        return data

    def __getattr__(self, key: str) -> Any:
        # Another algorithm's parameter reads as not given (None), as every parameter did when one class held
        # them all; param() refuses it.
        if key in _PARAM_NAMES:
            return None
        return super().__getattr__(key)  # type: ignore[misc]

    def param(self, key: str) -> Any:
        """The parameter's value, or its registry default when not given."""
        v = getattr(self, key)
        if v is not None:
            return v
        default = next(p.default for p in algorithms.ALGORITHMS[self.name].params if p.name == key)
        if key == "persistence":
            return math.inf if default == "inf" else default
        if key == "backoff":
            return BackoffConfig.model_validate({"kind": default})
        return default


def _algorithm_model(d: algorithms.Definition) -> type[AlgorithmConfig]:
    fields: dict[str, Any] = {"name": (Literal[d.name], ...)}
    fields |= {p.name: (param_type(p) | None, None) for p in d.params}
    model: type[AlgorithmConfig] = create_model(
        "".join(part.capitalize() for part in d.name.split("_")) + "Algorithm", __base__=AlgorithmConfig,
        __doc__=f"``[algorithm]`` with ``name = \"{d.name}\"``: {d.title}.", __module__=__name__, **fields)
    return model


# One model per algorithm of the registry, in its order; the scenario's ``algorithm`` is their union,
# discriminated on ``name``.
ALGORITHM_MODELS: dict[str, type[AlgorithmConfig]] = {n: _algorithm_model(d) for n, d in algorithms.ALGORITHMS.items()}
globals().update({m.__name__: m for m in ALGORITHM_MODELS.values()})  # by name, so pickle finds them (process pools)
if typing.TYPE_CHECKING:
    AnyAlgorithm = AlgorithmConfig
else:
    AnyAlgorithm = Annotated[functools.reduce(operator.or_, ALGORITHM_MODELS.values()), Field(discriminator="name")]


def unknown_algorithm() -> str:
    """What an unknown ``algorithm.name`` is told (the loader reports the union's tag errors with it)."""
    return f"unknown algorithm; allowed: {', '.join(algorithms.names())}"


def stray_params(name: str, given: set[str] | Any) -> list[str]:
    """Messages for parameters given to an algorithm that does not take them."""
    info = algorithms.ALGORITHMS.get(name)
    if info is None:
        return []
    takes = ", ".join(info.param_names) or "no parameters"
    return [f"`{key}` is not a parameter of {name!r} (it takes: {takes})"
            for key in sorted(set(given) - {"name"}) if key not in info.param_names]


class OptimizerConfig(Section):
    lr: PosFloat = 0.005
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    staleness_aware: bool = False  # gradient / max(1, staleness) before the momentum update (update_rule.divisor)


class StopConfig(Section):
    # Stop when the loss <= epsilon × the initial loss; 0 (the default) = no ε target: run to the budget.
    epsilon: Annotated[float, Field(ge=0, le=1)] = 0.0
    max_time_s: PosFloat = 60.0
    max_updates: PosInt = 100_000
    eval_every_updates: PosInt | None = None
    explode_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 10.0

    @property
    def has_target(self) -> bool:
        """An ε stop was asked for (epsilon > 0)."""
        return self.epsilon > 0

    def eval_updates(self) -> int:
        """Updates between loss evaluations: given, or ~200 points over the budget."""
        return self.eval_every_updates or max(1, self.max_updates // 200)


class SimConfig(Section):
    numerics: bool = True
    # The seed of the simulator's timing draws (step durations, backoff delays); unset = the scenario's seed.
    # Another value redraws the machine's timing with the same data, θ₀ and minibatches: the spread of a
    # prediction over its own timing noise (benchmarks/fidelity_ablation.py).
    timing_seed: Annotated[int, Field(ge=0)] | None = None
    startup_stagger_s: NonNegFloat | None = None
    read_chunks: PosInt = 16
    # mutex / rwlock: the read copy takes the lock (Ek 2021 Alg. 2: two acquisitions a cycle);
    # false = the read is a lock-free snapshot, one acquisition a cycle (the machine-repairman queue).
    read_lock: bool = True
    # Coefficient of variation of gradient times derived from flops (gamma); 0 = deterministic.
    gradient_cv: Annotated[float, Field(ge=0, le=10)] = 0.1
    # Reads and updates at the calibrated bandwidth of the model's buffer size where it lives
    # (profile [copy_by_size], simasgd/sim/caches.py); false = one bandwidth for every size.
    cache_model: bool = True
    # The executor whose workers the simulator models (simasgd/spec/traits.py, each backend's TRAITS): how they
    # read (the cpu executor skips a read that would find θ unchanged; torch copies every time), how a lock
    # waiter waits (cpu: spins, 64 pauses between sched_yield calls; torch: sleeps on a futex), whether the
    # loss snapshot is inside the update, and their bookkeeping between cycles. `simasgd compare --backends
    # sim,X` sets it to X where X declares traits.
    traits: Literal["cpu", "torch"] = "cpu"
    # With 2+ workers, reads and updates at the calibrated rates for lines another core wrote last
    # (profile [coherence], simasgd/sim/caches.py); false = the private-buffer rates.
    coherence: bool = True
    # With coherence: a read or update pays another core's rates only when another worker wrote the model
    # since this worker last touched it (simasgd/sim/costs.py LastWriter); false = every step of a
    # multi-worker run does.
    coherence_recency: bool = True
    # With coherence: a read or update of lines valid in this worker's cache and in another's (another worker
    # read them since they were last written) runs at the calibrated rates of such lines (profile
    # [coherence] held_read_gbs, held_update_gbs: each write must first invalidate the other's copy;
    # simasgd/sim/caches.py LastWriter); false = at the private rates.
    held_lines: bool = True
    # A periodic timer that stops every CPU at the same instant (profile [tick], executors/calibration/tick.py:
    # e.g. 250 Hz): the gradient samples' slowest share (hit·median/period) are the calls
    # a tick fell into; a gradient on a CPU at a tick instant is stalled by that tick's draw of their
    # excess, the same on every CPU (simasgd/sim/tick.py; a thread waiting for a time-shared CPU loses
    # nothing to it). Two workers computing at once are slowed together and keep their offset, as
    # measured. False, or no [tick] = the samples drawn as they are.
    timer_tick: bool = True


# [sim] keys since made traits of a backend's executor (simasgd/spec/traits.py): the trait each became. A scenario
# that still sets one is refused by the loader, naming [sim] traits instead.
_BECAME_TRAITS = {"read_elision": "reads", "lock_waiters": "lock_waiters", "spin_before_yield": "lock_waiters",
                  "loss_snapshots": "snapshots", "bookkeeping": "bookkeeping"}
_TRAITS_OF = " or ".join(f'"{t}"' for t in typing.get_args(SimConfig.model_fields["traits"].annotation))
# [sim] switches whose mechanism left the model (docs/model.md): what the simulator does now instead.
_PRUNED = {
    "gradient_interference": "gradients are drawn from the samples timed with as many threads at once",
    "shared_speed": "every gradient draw is independent",
    "write_convoys": "unlocked writers each end on their own time",
    "racing_writes": "an unlocked update runs at the rate of the lines it finds, as any update ([coherence])",
    "leashed_destinations": "Leashed-SGD's pass is timed like any update, by where the model's lines are "
                            "([coherence], held lines)",
    "steps_in_cycle": "reads, updates and Leashed-SGD's pass run at the warm rates of [copy_by_size] on a worker's "
                      "own lines, at [coherence]'s on lines another core wrote",
    "gradient_in_cycle": "gradients are drawn from the samples timed back to back ([gradient.<workload>] "
                         "samples_s; k at once: concurrent.k<k>)",
    "host_noise": "gradients are drawn from their calibrated samples, with the pauses the host made in them",
    "sched_yield": "the scheduler is Linux's EEVDF: a contended spinner's sched_yield forfeits its slice",
    "run_queues": "threads placed by the OS that outnumber the CPUs each join one CPU's run queue, spread "
                  "evenly as Linux's balancer leaves them",
    "socket_model": "a preset's turbo clock and shared last-level cache act wherever the preset gives them "
                    "(base_ghz/turbo_ghz, llc_mb/llc_gbs)",
}
# Keys the format refuses as removed (dotted), each with what to write instead.
REMOVED: dict[str, str] = {
    **{f"sim.{key}": (f"removed: it described the cpu executor even where the simulator predicted another backend; "
                      f"it is now the trait `{trait}` of each backend's executor: choose whose with "
                      f"[sim] traits = {_TRAITS_OF} (docs/model.md, Executor traits)")
       for key, trait in _BECAME_TRAITS.items()},
    **{f"sim.{key}": f"removed from the model: {now}; leave the key out" for key, now in _PRUNED.items()},
}


class CpuConfig(Section):
    pin: bool = True
    join_timeout_s: PosFloat = 30.0
    # When the snapshots' losses are evaluated: "auto" = during the run when the workers leave a CPU
    # free (ε then stops the run), else after it; "after" = always after the run (no evaluation
    # competes with the workers for caches or memory: what fidelity measurements want).
    monitor: Literal["auto", "after"] = "auto"
    # HOGWILD! lost-update probes (an estimate of the updates θ lost): off by default, because the
    # shared probe lines phase-lock concurrent writers (executors/cpu/lockfree.py, hogwild_step).
    hogwild_probes: bool = False


class NetworkConfig(Section):
    """``[network]``: the interconnect of the distributed algorithms (``simasgd/sim/network.py``).

    ``preset``: "none" (shared memory, no message timed) or a named network; any key given overrides
    the preset's value. Gb/s are line rates (bits), latency is one-way."""

    preset: str = "none"
    bandwidth_gbps: PosFloat | None = None         # each worker's NIC
    latency_us: NonNegFloat | None = None          # one-way, per message
    server_bandwidth_gbps: PosFloat | None = None  # the server's NIC (default: bandwidth_gbps)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        from simasgd.machines.networks import PRESETS

        if v not in PRESETS:
            raise ValueError(f"unknown network preset {v!r}; allowed: {', '.join(PRESETS)}")
        return v

    @model_validator(mode="after")
    def _complete(self) -> NetworkConfig:
        if self.preset == "none" and self.bandwidth_gbps is None and (
                self.latency_us is not None or self.server_bandwidth_gbps is not None):
            raise ValueError("preset = \"none\" is shared memory: give bandwidth_gbps (or a preset) for a network")
        return self


class GpuConfig(Section):
    """``[gpu]``: how backend ``gpu`` runs its workers (``executors/gpu``), and what the simulator of a
    GPU models. "resident": one launch, each worker a thread block looping on the device (cuMF_SGD; Ma,
    Rusu & Torres 2019); "streams": each worker a CUDA stream and a host thread launching its attempt as
    one kernel (Lopez et al. 2020 §IV-B)."""

    mode: Literal["resident", "streams"] = "resident"
    threads_per_worker: Annotated[int, Field(ge=32, le=1024, multiple_of=32)] = 128


class SweepConfig(Section):
    # dotted key -> list of values or a range string "start:stop:step" (see simasgd.sweep.grid)
    grid: dict[str, list[Any] | str] = {}
    # "cell": a seed per cell derived from its content; "shared": every cell uses `seed` (see simasgd.sweep.plan)
    seeding: Literal["cell", "shared"] = "cell"

    @field_validator("grid", mode="before")
    @classmethod
    def _flatten(cls, v: Any) -> Any:
        # [sweep.grid.optimizer] lr = [...] means the same as "optimizer.lr" = [...].
        if not isinstance(v, dict):
            return v
        out: dict[str, Any] = {}
        for key, spec in v.items():
            if isinstance(spec, dict):
                out.update({f"{key}.{k}": s for k, s in cls._flatten(spec).items()})
            else:
                out[key] = spec
        return out


class Scenario(Section):
    name: str = "scenario"
    seed: Annotated[int, Field(ge=0)] = 0
    repeats: PosInt = 1
    machine: MachineConfig = MachineConfig()
    workers: WorkersConfig = WorkersConfig()
    workload: WorkloadConfig = WorkloadConfig()
    timing: TimingConfig = TimingConfig()
    algorithm: AnyAlgorithm = ALGORITHM_MODELS["sequential"](name="sequential")
    optimizer: OptimizerConfig = OptimizerConfig()
    stop: StopConfig = StopConfig()
    sim: SimConfig = SimConfig()
    cpu: CpuConfig = CpuConfig()
    network: NetworkConfig | None = None  # optional: left out = shared memory (and the scenario's hash unchanged)
    gpu: GpuConfig | None = None  # optional: left out = resident workers of 128 threads (hash unchanged)
    sweep: SweepConfig = SweepConfig()
    # Where the file was; relative paths (empirical samples, mnist:) resolve against it.
    base_dir: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        a, n = self.algorithm, self.workers.count
        problems = algorithms.check(a.name, a, n)  # the algorithm's definition: worker bounds, k <= n, ...
        if problems:
            raise ValueError("; ".join(problems))
        if self.workers.stragglers.count > n:
            raise ValueError(f"workers.stragglers.count = {self.workers.stragglers.count} exceeds workers.count = {n}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain JSON-able data (``inf`` kept as the string "inf")."""
        return _json_safe(self.model_dump(mode="python", exclude_none=True))

    @property
    def timing_seed(self) -> int:
        """The seed of the simulator's timing draws: ``[sim] timing_seed``, else the scenario's."""
        return self.seed if self.sim.timing_seed is None else self.sim.timing_seed

    @property
    def hash(self) -> str:
        """A stable digest of what was run (the name and repeats excluded)."""
        d = self.to_dict()
        d.pop("name", None)
        d.pop("repeats", None)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    return obj
