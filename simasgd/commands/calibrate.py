"""``simasgd calibrate``: measure this machine, write the profile ``machine.preset = "this"`` reads."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from simasgd.commands import EXIT_BAD_INPUT, console, user_errors


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


def calibrate(out: Path = typer.Option(Path("profiles/this.toml"), "--out", "-o", help="Profile to write."),
              scenario: list[Path] | None = typer.Option(
                  None, "--scenario",
                  help="Measure this scenario's workload and batch size (repeatable); default: a fixed set."),
              quick: bool = typer.Option(False, "--quick", help="Short measurements (seconds, for tests)."),
              seed: int = typer.Option(0, "--seed", help="Seed for batches and data."),
              gpu: bool = typer.Option(False, "--gpu", help="Measure the GPU instead (numba.cuda): the [gpu] "
                                       "table of machine.preset = \"this-gpu\", added to --out if it exists."),
              network: bool = typer.Option(False, "--network", help="Measure the dist backend's transport instead "
                                           "(gloo on loopback): the [network] table of [network] preset = \"this\", "
                                           "added to --out if it exists."),
              ) -> None:
    """Micro-benchmark this machine (gradient times, copy bandwidth, lock hand-off, CAS, scheduler)."""
    from simasgd.spec import loader

    if gpu:
        _calibrate_gpu(out, quick)
        return
    if network:
        _calibrate_network(out, quick)
        return

    with user_errors():
        scenarios = [loader.load(p) for p in scenario or []]
    if out.exists() and out.is_dir():
        print(f"error: --out {out}: is a folder; give the profile's file name (e.g. profiles/this.toml)",
              file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT)
    from executors.calibration.calibrate import calibrate as measure
    from simasgd.machines.profile import write as write_profile

    err = console(stderr=True)
    base = str(scenario[0].parent) if scenario else None
    with user_errors():
        profile = measure([s.workload for s in scenarios] or None, quick=quick, seed=seed, base_dir=base,
                          log=lambda s: err.print(f"measuring {s} …", markup=False))
    try:
        write_profile(profile, out)
    except OSError as e:
        print(f"error: --out {out}: cannot write the profile ({e.strerror})", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    m = profile["machine"]
    console().print(f"wrote {out} in {profile['calibration']['seconds']:.1f} s: "
                    f"{m['sockets']}×{m['cores_per_socket']} cores, {m['gflops_per_core']:.1f} GFLOP/s per core, "
                    f"copy {m['link_bandwidth_gbs']:.1f} GB/s, "
                    f"lock hand-off {profile['locks']['handoff_s'] * 1e9:.0f} ns",
                    markup=False)
    _placement_note(profile)


def _placement_note(profile: dict) -> None:
    """Where the CPUs were (executors/c2c.py), and a warning when the host moved them during calibration."""
    c2c = profile.get("c2c") or {}
    samples = [float(x) for x in c2c.get("samples_ns") or [] if x]
    if not samples:
        return
    console().print(f"core-to-core hand-off {c2c['latency_ns']:.0f} ns: the placement of the CPUs this profile "
                    f"describes (real runs elsewhere are flagged by compare and show)", markup=False)
    if max(samples) > 2 * min(samples):
        console(stderr=True).print(f"warning: the host moved this machine's CPUs during calibration (hand-offs "
                                   f"{min(samples):.0f}-{max(samples):.0f} ns); the tables that move lines between "
                                   f"CPUs were measured again until they agreed, within up to 3 tries",
                                   markup=False, soft_wrap=True)


def _calibrate_gpu(out: Path, quick: bool) -> None:
    """``--gpu``: the [gpu] table (executors/calibration/gpu.py), merged into the profile at ``out``."""
    import importlib

    from simasgd.machines import profile as fmt
    from simasgd.runs.backends import BackendError

    try:
        gpu = importlib.import_module("executors.calibration.gpu").calibrate(quick=quick)
    except BackendError as e:  # executors.cuda.device.NoDevice: no GPU and no simulator
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    doc = fmt.read(out).to_doc() if out.is_file() else {}
    doc["gpu"] = gpu
    fmt.write(doc, out)
    console().print(f"wrote [gpu] to {out}: {gpu['device']}, {gpu['sms']} SMs, launch "
                    f"{gpu['launch_latency_s'] * 1e6:.1f} µs, {gpu['mem_bandwidth_gbs']:.0f} GB/s", markup=False)


def _calibrate_network(out: Path, quick: bool) -> None:
    """``--network``: the [network] table (executors/dist/calibrate_network.py), merged into the profile at ``out``."""
    import importlib

    from simasgd.machines import profile as fmt

    err = console(stderr=True)
    try:
        net = importlib.import_module("executors.dist.calibrate_network").calibrate(
            quick=quick, log=lambda s: err.print(f"measuring {s} …", markup=False))
    except ModuleNotFoundError as e:  # torch absent: the dist backend's transport is torch.distributed
        print(f"error: calibrate --network needs torch (pip install 'simasgd[torch]'): {e}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    doc = fmt.read(out).to_doc() if out.is_file() else {}
    doc["network"] = net
    fmt.write(doc, out)
    console().print(f"wrote [network] to {out}: {net['transport']}, latency {net['latency_us']:.1f} µs, "
                    f"{net['bandwidth_gbps']:.2f} Gb/s point to point, server link {net['server_bandwidth_gbps']:.2f} "
                    f"Gb/s, a message's handling {net['handling_us']:.1f} µs", markup=False)
    queue = net["server_loop"].get("by_senders")
    if queue:  # the question a many-core host answers (benchmarks/README_dist.md): a push's cost against N
        console().print("the server loop under N senders ([network.server_loop.by_senders], read by nothing yet):",
                        markup=False, soft_wrap=True)
        rows = zip(queue["senders"], queue["messages_per_s"], queue["round_trip_s"], queue["cpu_per_message_s"],
                   queue["main_cpu_per_message_s"], strict=True)
        for n, rate, rt, cpu, main in rows:
            console().print(f"  N {n}: {rate:.0f} pushes/s ({1e6 / rate:.0f} µs each), round trip {rt * 1e6:.0f} µs, "
                            f"server CPU {cpu * 1e6:.0f} µs a push (main thread {main * 1e6:.0f})", markup=False,
                            soft_wrap=True)
    gaps = net["server_loop"]["by_gap"]
    from simasgd.sim.network import wake_of

    wake = wake_of(gaps)
    trips = ", ".join(f"{t * 1e6:.0f}" for t in gaps["round_trip_s"][1:])
    busy = ", ".join(f"{g * 1e6:.0f}" for g in gaps["gap_s"][1:])
    console().print(f"waking from idle ([network.server_loop.by_gap]): the round trip "
                    f"{gaps['round_trip_s'][0] * 1e6:.0f} µs back to back, {trips} µs with the worker busy {busy} "
                    f"µs first: a rank idle past {wake.after_s * 1e6:.0f} µs adds {wake.wake_s * 1e6:.1f} µs to the "
                    f"message it takes", markup=False, soft_wrap=True)
