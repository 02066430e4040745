"""``simasgd plot``: the figures of a results folder or a compare folder."""

from __future__ import annotations

from pathlib import Path

import typer

from simasgd.commands import console, output_folder, user_errors


def register(app: typer.Typer) -> None:
    app.command("plot")(plot)


def plot(folder: Path = typer.Argument(..., help="A results folder, a compare folder, or a folder of results folders."),
         figures: Path | None = typer.Option(None, "--figures", "-f",
                                                help="Where to write figures (default FOLDER/figures)."),
         svg: bool = typer.Option(False, "--svg", help="Also write SVG next to each PNG."),
         out: Path | None = typer.Option(None, "--out", "-o", hidden=True, help="Old name of --figures."),
         ) -> None:
    """Draw staleness histograms (pooled, per worker), loss curves, time-to-ε boxes, updates/s vs threads."""
    from simasgd.evaluation import plots

    with user_errors():
        if not folder.exists():
            from simasgd.runs.results import ResultsError

            raise ResultsError(f"{folder}: no such folder")
        target = figures or out
        if target is not None:
            output_folder(target, "--figures")  # before the drawing: seconds of work, then nowhere to put it
        written = plots.plot_folder(folder, target, svg)
    con = console()
    for p in written:
        con.print(str(p), markup=False)
