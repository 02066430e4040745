"""What a scenario key means, for the keys whose model carries no description or comment.

``"Model.field"`` → one sentence. A key the model describes itself (``Field(description=...)``
or a comment in the class body) takes that text instead; the docs test fails for a key that has
neither, so a new key cannot reach the reference page undescribed.
"""

from __future__ import annotations

KEY_DOCS: dict[str, str] = {
    "Scenario.name": "the scenario's name: the default results folder is results/<name>-<backend>",
    "Scenario.seed": "the root of every random stream (data, θ₀, timing, sampling); each repeat derives its own",
    "Scenario.repeats": "independent runs, each with its own random streams derived from `seed`; on a backend that "
                        "does not time this machine (sim, serial) they run at once, one process per CPU "
                        "(`simasgd run --jobs`), with the result of a run one after another",
    "MachineConfig.preset": "a named machine ([the preset catalogue](presets.md): each number with its source); "
                            "\"this\" is this machine's calibrated profile (`simasgd calibrate`); a corpus "
                            "machine's name (`corpus/<name>.json.gz`) is that machine's calibrated profile; "
                            "\"v100\", \"h100\" and \"this-gpu\" make the machine a GPU. Keys given beside it "
                            "override the preset's values",
    "MachineConfig.sockets": "CPU packages (NUMA nodes)",
    "MachineConfig.cores_per_socket": "physical cores per socket",
    "MachineConfig.threads_per_core": "hardware threads per core (SMT siblings count as CPUs)",
    "MachineConfig.local_latency_ns": "memory latency from a core to its own socket's memory",
    "MachineConfig.remote_latency_ns": "memory latency from a core to the other socket's memory",
    "MachineConfig.mem_bandwidth_gbs": "memory bandwidth per socket, shared by the transfers in flight",
    "MachineConfig.link_bandwidth_gbs": "bandwidth of the link between sockets",
    "MachineConfig.gflops_per_core": "sustained GFLOP/s of one core, for gradient times derived from a "
                                     "workload's flops",
    "MachineConfig.quantum_s": "the OS scheduler's time slice when threads outnumber CPUs",
    "MachineConfig.context_switch_s": "cost of giving a CPU to another thread",
    "MachineConfig.core_bandwidth_gbs": "what one core can stream (copy loops), whatever the socket offers",
    "MachineConfig.base_ghz": "the base clock that `gflops_per_core` is quoted at (turbo model)",
    "MachineConfig.turbo_ghz": "the clock with 1, 2, … busy cores of a socket (turbo model)",
    "MachineConfig.llc_mb": "last-level cache per socket (shared-cache model)",
    "MachineConfig.l2_kb": "private L2 cache per core",
    "MachineConfig.llc_gbs": "bandwidth of a copy or update served from the last-level cache",
    "MachineConfig.llc_replacement": "how the last-level cache's hit ratio falls once the working set exceeds it: "
                                     "\"random\" in proportion, \"lru\" all at once",
    "WorkersConfig.count": "workers (threads, processes, streams or nodes, by backend)",
    "WorkersConfig.placement": "which CPU each worker runs on: \"uma\" fills socket 0 first, \"numa\" alternates "
                               "sockets, \"os\" leaves it to the scheduler, or a list of logical CPU ids",
    "WorkersConfig.stragglers": "slow workers or transient pauses",
    "StragglerConfig.count": "workers 0 … count − 1 are slow",
    "StragglerConfig.slowdown": "their gradient times are multiplied by this",
    "StragglerConfig.probability": "each gradient of any worker is followed by a pause with this probability",
    "StragglerConfig.pause": "the pause's length (a distribution)",
    "DistSpec.dist": "the distribution's family",
    "DistSpec.mean_s": "the mean of the whole distribution (shifted_exponential: shift + the exponential part)",
    "DistSpec.shift_s": "shifted_exponential: the constant part (≤ mean_s)",
    "DistSpec.sigma": "lognormal: σ of the underlying normal",
    "DistSpec.shape": "gamma: the shape k (coefficient of variation 1/√k)",
    "DistSpec.path": "empirical: a .npy file or a text file of durations in seconds, drawn with replacement",
    "WorkloadConfig.model": "the model trained: a multilayer perceptron, logistic or least-squares regression, "
                            "a small CNN, or your own PyTorch module",
    "WorkloadConfig.layers": "mlp: layer widths, inputs first, classes last",
    "WorkloadConfig.dataset": "\"digits\" ships with scikit-learn; \"mnist:PATH\" a folder of IDX files, "
                              "\"cifar10:PATH\" one of CIFAR-10 binary batches; \"synthetic\" a Gaussian mixture "
                              "shaped by `features`, `classes`, `samples`",
    "WorkloadConfig.batch_size": "rows per gradient (the minibatch B)",
    "WorkloadConfig.dtype": "precision of θ, the data and the arithmetic",
    "WorkloadConfig.sparse": "logreg, least_squares: sparse rows (CSR), synthetic with `density`",
    "WorkloadConfig.density": "synthetic sparse data: the share of non-zero features",
    "WorkloadConfig.features": "synthetic data: features per row",
    "WorkloadConfig.classes": "synthetic data: classes",
    "WorkloadConfig.samples": "synthetic data: rows",
    "WorkloadConfig.test_fraction": "share of the rows held out as the test set (accuracy); datasets with their "
                                    "own test files use those",
    "WorkloadConfig.eval_rows": "training rows the loss is evaluated on (a fixed random subset when there are more)",
    "WorkloadConfig.data": "model = \"torch\": \"package.module:function\" returning your data, instead of `dataset`",
    "WorkloadConfig.loss": "model = \"torch\": \"cross_entropy\", \"mse\" or \"package.module:function\"",
    "TimingConfig.gradient": "a gradient's compute time; left out: from the calibrated profile (preset \"this\") "
                             "or derived from the workload's flops and the machine",
    "TimingConfig.read": "a read (copy) of θ; left out: derived from the machine's memory model",
    "TimingConfig.update": "an update of θ; left out: derived from the machine's memory model",
    "BackoffConfig.kind": "how long a thread waits after a failed lock or CAS attempt",
    "BackoffConfig.initial_s": "the first wait (linear and exponential)",
    "BackoffConfig.max_s": "the longest wait (random: waits are uniform up to it)",
    "OptimizerConfig.lr": "the step size η",
    "OptimizerConfig.momentum": "heavy-ball momentum m: v ← m·v + g, θ ← θ − η·v",
    "StopConfig.max_time_s": "the budget in seconds: simulated seconds for `sim`, wall-clock seconds for "
                             "measuring backends",
    "StopConfig.max_updates": "the budget in applied updates",
    "StopConfig.eval_every_updates": "updates between two loss evaluations (default: max_updates / 200)",
    "StopConfig.explode_factor": "a loss above this × the initial loss counts as crashed",
    "SimConfig.numerics": "apply real gradients in the simulated order (loss curve, updates to ε); "
                          "false: timing only (staleness, throughput), much faster",
    "SimConfig.startup_stagger_s": "worker w starts at w × this (default: all at once)",
    "SimConfig.read_chunks": "an unlocked read or write of θ lands in this many chunks (torn reads with numerics)",
    "CpuConfig.pin": "pin each worker thread to its CPU per `workers.placement`",
    "CpuConfig.join_timeout_s": "how long to wait for the worker threads to stop before reporting them stuck",
    "NetworkConfig.preset": "\"none\": shared memory, no message timed; a named network; or \"this\": the "
                            "calibrated profile's measured transport (`simasgd calibrate --network`). Any key "
                            "given overrides the preset's value",
    "GpuConfig.mode": "\"resident\": one launch, each worker a thread block looping on the device; \"streams\": "
                      "each worker a CUDA stream and a host thread launching its attempts",
    "GpuConfig.threads_per_worker": "threads of a worker's block (resident mode)",
}
