"""`featstore run EXPERIMENT.toml`: an experiment (methods x splits x seeds, tuned on val,
mean ± std, resumable) from one file; see featstore.experiments."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .commands_train import train_progress
from .console import JsonOpt, QuietOpt, emit, log, out, progress_enabled, setup


def print_experiment(result: dict[str, Any]) -> None:
    """The runner's tables (one per data split, then the skipped runs) and where it wrote."""
    from featstore.experiments.render import rich_tables

    for table in rich_tables(result):
        out.print(table)
    out.print(f"results: {Path(result['out']) / 'results.json'} and results.md  "
              f"({result['wall_s']:.1f} s)", highlight=False)


def run(
    experiment: Annotated[Path, typer.Argument(help="Experiment file (TOML).")],
    out_: Annotated[Path, typer.Option("--out", help="Output directory (models, stores, "
                                                     "results.json, results.md).")],
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run an experiment: train every (method, data split, seed), extract each model once,
    tune on val splits only, evaluate; one results file with every run and mean ± std.
    A rerun resumes: finished runs are read back, never recomputed.

    Example: featstore run experiment.toml --out runs/exp
    """
    setup(json_, quiet)
    from featstore.experiments import load_experiment, run_experiment

    exp = load_experiment(experiment)
    show = progress_enabled()
    start = time.perf_counter()
    result = run_experiment(exp, out_, log=log if show else None,
                            train_progress=(lambda label: train_progress(True, label))
                            if show else None)
    result["seconds"] = time.perf_counter() - start
    emit(result, lambda: print_experiment(result))
    if not any(r["status"] == "ok" for r in result["runs"]):
        from featstore.errors import FeatstoreError

        first = result["skipped"][0] if result["skipped"] else {"reason": "no runs"}
        raise FeatstoreError(f"experiment {str(experiment)!r}: every run was skipped "
                             f"({len(result['runs'])} of {len(result['runs'])}; first: "
                             f"{first['reason']}); see {result['out']}/results.json")


def register(app: typer.Typer) -> None:
    app.command()(run)
