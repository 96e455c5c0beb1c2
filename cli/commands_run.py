"""`featstore run EXPERIMENT.toml`: an experiment (methods x splits x seeds, tuned on val,
mean ± std, resumable) from one file; see featstore.workflows.experiments."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .commands_train import train_progress
from .console import JsonOpt, QuietOpt, emit, log, out, progress_enabled, setup


def print_experiment(result: dict[str, Any]) -> None:
    """The runner's tables (one per data split, then the skipped runs) and where it wrote."""
    from featstore.workflows.experiments.render import rich_tables

    for table in rich_tables(result):
        out.print(table)
    out.print(f"results: {Path(result['out']) / 'results.json'} and results.md  "
              f"({result['wall_s']:.1f} s)", highlight=False)


def print_status(st: dict[str, Any]) -> None:
    """`run --status`: one line per unit (state, job, time, log) and the counts."""
    for u in st["units"]:
        secs = "" if u["seconds"] is None else f"{u['seconds']:.0f} s"
        extra = f"  {u['error']}" if u["error"] else ""
        if (u.get("attempt") or 1) > 1:
            extra += f"  (attempt {u['attempt']})"
        if u["state"] == "interrupted" and u.get("reason"):
            extra += f"  ({u['reason']}: waits for its requeued job or a rerun)"
        out.print(f"{u['state']:<11} {u['id']:<40} {u['job'] or '':<14} {secs:>8}  "
                  f"log: {u['log']}{extra}", highlight=False, markup=False)
    out.print("  ".join(f"{k}: {v}" for k, v in st["counts"].items())
              + f"  (executor: {st['executor']})", highlight=False)


def run(
    experiment: Annotated[Path | None, typer.Argument(help="Experiment file (TOML).")] = None,
    out_: Annotated[Path | None, typer.Option("--out", help="Output directory (models, "
                                              "stores, results.json, results.md).")] = None,
    executor: Annotated[str | None, typer.Option(
        "--executor", help="Where the units run: local | slurm | ray (default: the run "
        "file's [executor] kind, else local).")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", help="Local executor: run the units in a pool of N processes (default: "
        "the run file's [executor] workers, else 1: one after the other).")] = None,
    status: Annotated[Path | None, typer.Option(
        "--status", help="Show each unit of the run in DIR (done, running, interrupted, "
        "stale, failed, pending) and exit.")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run an experiment: train every (method, data split, seed), extract each model once,
    tune on val splits only, evaluate; one results file with every run and mean ± std.
    A rerun resumes: finished runs are read back, never recomputed. The units run here, on
    Slurm or on Ray (--executor; README "Run on a cluster").

    Example: featstore run experiment.toml --out runs/exp --executor slurm
    """
    setup(json_, quiet)
    from featstore.errors import UsageError

    if status is not None:
        from featstore.workflows.experiments.unitstate import status as unit_status

        st = unit_status(status)
        emit(st, lambda: print_status(st))
        return
    if experiment is None or out_ is None:
        raise UsageError("run: give EXPERIMENT.toml and --out DIR (or --status DIR)")
    from featstore.workflows.experiments import load_experiment, run_experiment
    from featstore.workflows.experiments.executors import executor_options, make_executor

    exp = load_experiment(experiment)
    show = progress_enabled()
    progress = (lambda label: train_progress(True, label)) if show else None
    options = executor_options(experiment)
    if workers is not None:
        options["workers"] = workers
    runner = make_executor(executor, options, f"experiment {str(experiment)!r} [executor]",
                           progress)
    start = time.perf_counter()
    result = run_experiment(exp, out_, log=log if show else None, train_progress=progress,
                            executor=runner)
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
