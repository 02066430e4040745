"""``simasgd import-peer``: the C++ reference framework's JSON as a results folder."""

from __future__ import annotations

from pathlib import Path

import typer

from simasgd.commands import user_errors
from simasgd.commands.run import OverrideOpt


def register(app: typer.Typer) -> None:
    app.command("import-peer")(import_peer)


def import_peer(file: Path = typer.Argument(..., help="JSON printed by dcs-chalmers/shared-memory-sgd."),
                out: Path = typer.Option(..., "--out", "-o", help="Results folder to write."),
                scenario: Path | None = typer.Option(None, "--scenario", help="The scenario the peer ran "
                                                        "(makes the result comparable with `simasgd compare`)."),
                overrides: list[str] = OverrideOpt,
                updates_per_epoch: int | None = typer.Option(None, "--updates-per-epoch", min=1,
                                                                help="Rounds per epoch (-s of the peer)."),
                ) -> None:
    """Import a peer run (backend `peer`): staleness histogram, CAS retries, loss per epoch."""
    from simasgd.commands.inspect import print_summary
    from simasgd.runs import peer
    from simasgd.spec import loader

    with user_errors():
        sc = loader.load(scenario, overrides) if scenario is not None else None
        result = peer.import_file(file, sc, out, updates_per_epoch)
    print_summary(result, out)
