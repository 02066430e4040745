"""``simasgd``: a thin CLI of subcommands. Each command group lives in ``simasgd/commands/``."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Simulate and measure asynchronous parallel SGD: staleness, throughput, time to ε.")

# One module per command group; each exposes ``register(app)``. Heavy imports happen inside commands.
COMMAND_MODULES = ("run", "inspect", "peer", "plot", "compare", "sweep", "calibrate")

for _name in COMMAND_MODULES:
    importlib.import_module(f"simasgd.commands.{_name}").register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
