"""``simasgd calibrate``: measure this machine, write the profile ``machine.preset = "this"`` reads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from simasgd.commands import EXIT_BAD_INPUT, console, user_errors


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


def calibrate(out: Path = typer.Option(Path("profiles/this.toml"), "--out", "-o", help="Profile to write."),
              scenario: Optional[list[Path]] = typer.Option(None, "--scenario", help="Measure this scenario's "
                                                            "workload and batch size (repeatable); default: a fixed set."),
              quick: bool = typer.Option(False, "--quick", help="Short measurements (seconds, for tests)."),
              seed: int = typer.Option(0, "--seed", help="Seed for batches and data."),
              ) -> None:
    """Micro-benchmark this machine (gradient times, copy bandwidth, lock hand-off, CAS, scheduler)."""
    from simasgd import loader

    with user_errors():
        scenarios = [loader.load(p) for p in scenario or []]
    if out.exists() and out.is_dir():
        print(f"error: --out {out}: is a folder; give the profile's file name (e.g. profiles/this.toml)",
              file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT)
    from executors.calibrate import calibrate as measure
    from simasgd.profile import write as write_profile

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
                    f"copy {m['link_bandwidth_gbs']:.1f} GB/s, lock hand-off {profile['locks']['handoff_s'] * 1e9:.0f} ns",
                    markup=False)
