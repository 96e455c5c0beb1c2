"""`featstore predict`: a saved detector (`featstore.Detector`) scores new images."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .console import JsonOpt, QuietOpt, emit, out, setup


def print_predictions(result: dict[str, Any]) -> None:
    """One row per image: score and decision, then the counts."""
    table = Table(title=f"{result['scorer']} detector, threshold {result['threshold']:.6g} "
                        "(score >= threshold: in-distribution)", header_style="bold",
                  show_edge=False)
    table.add_column("image", justify="left", overflow="fold")
    table.add_column("score", justify="right", overflow="fold")
    table.add_column("decision", justify="left", overflow="fold")
    for row in result["rows"]:
        table.add_row(row["image"], f"{row['score']:.6g}", "ID" if row["is_id"] else "OOD")
    out.print(table, highlight=False, markup=False)
    out.print(f"{result['num_id']} in-distribution, {result['num_ood']} out-of-distribution",
              highlight=False)


def predict(
    artifact: Annotated[Path, typer.Argument(help="A detector file (Detector.save).")],
    images: Annotated[list[Path], typer.Argument(
        help="Image files, folders of images, or image-list files ('path' or 'path label' "
             "lines).")],
    model: Annotated[str | None, typer.Option(
        "--model", help="Load this model (module:callable or TorchScript file: never loaded "
                        "from the detector by itself); checked against its sha256 and head.")
    ] = None,
    weights: Annotated[Path | None, typer.Option(
        "--weights", help="The weights file, when it moved since extraction.")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda[:N].")] = "auto",
    batch_size: Annotated[int, typer.Option("--batch-size", help="Images per forward.")] = 128,
    workers: Annotated[int, typer.Option("--workers", help="Image decoding processes.")] = 0,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Score images with a saved detector: the store's model, the fitted scorer, the
    threshold; one score and an ID/OOD decision per image.

    Example: featstore predict vim.detector.h5 new_images/ --model mypkg.models:build --json
    """
    setup(json_, quiet)
    from featstore.workflows.detector import predict as run_predict

    result = run_predict(artifact, images, model=model, weights=weights, device=device,
                         batch_size=batch_size, num_workers=workers)
    emit(result, lambda: print_predictions(result))


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
