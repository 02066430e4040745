"""``simasgd``: a thin CLI of subcommands. Each command group lives in ``simasgd/commands/``."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Simulate and measure asynchronous parallel SGD: staleness, throughput, time to ε.")

# One module per command group; each exposes ``register(app)``. Heavy imports happen inside commands.
COMMAND_MODULES = ("run", "config", "inspect", "peer", "plot", "compare", "sweep", "calibrate", "corpus")

for _name in COMMAND_MODULES:
    importlib.import_module(f"simasgd.commands.{_name}").register(app)


def _print_version(value: bool) -> None:
    if value:
        from simasgd.commands import version

        print(f"simasgd {version()}")
        raise typer.Exit()


@app.callback()
def _options(show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                               help="Print simasgd's version and exit.")) -> None:
    """Simulate and measure asynchronous parallel SGD: staleness, throughput, time to ε."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
