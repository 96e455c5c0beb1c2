"""`featstore run EXPERIMENT.toml`: an experiment (methods x splits x seeds, tuned on val,
mean ± std, resumable) from one file; `featstore table`: finished experiments' tables read
back from their results.json (the paper's layout); see featstore.workflows.experiments."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from .commands_train import train_progress
from .console import JsonOpt, QuietOpt, emit, log, out, progress_enabled, setup

LayoutOpt = Annotated[str, typer.Option(
    "--layout", help="default: one table per data split, rows metric x group | paper: the "
    "remote-sensing paper's (one table per metric, rows dataset x ratio or group, methods "
    "under their family, top three in bold), also written to OUT/results.paper.md.")]


def print_experiment(result: dict[str, Any], layout: str = "default") -> None:
    """The runner's tables in `layout` (then the flagged methods and the skipped runs) and
    where it wrote."""
    from featstore.workflows.experiments.paper_layout import rich_paper_tables
    from featstore.workflows.experiments.render import rich_notes, rich_tables

    tables = (rich_paper_tables(result) + rich_notes(result) if layout == "paper"
              else rich_tables(result))
    for table in tables:
        out.print(table)
    extra = " and results.paper.md" if layout == "paper" else ""
    out.print(f"results: {Path(result['out']) / 'results.json'}, results.md{extra}  "
              f"({result['wall_s']:.1f} s)", highlight=False)


def paper_file(result: dict[str, Any], layout: str) -> None:
    """With `--layout paper`: OUT/results.paper.md beside the run's results.json."""
    if layout == "paper":
        from featstore.workflows.experiments.paper_layout import PAPER_FILE, write_paper

        write_paper(result, Path(result["out"]) / PAPER_FILE, result["experiment"]["name"])


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
    threads: Annotated[int | None, typer.Option(
        "--threads", min=1, help="Threads every unit computes on, wherever it runs (default: "
        "the run file's threads, else $FEATSTORE_THREADS, else 1); recorded in results.json. "
        "The count, not the CPUs a unit gets, decides the bits.")] = None,
    status: Annotated[Path | None, typer.Option(
        "--status", help="Show each unit of the run in DIR (done, running, interrupted, "
        "stale, failed, pending) and exit.")] = None,
    layout: LayoutOpt = "default",
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
    from featstore.workflows.experiments.paper_layout import check_layout

    check_layout(layout)
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
    runner = make_executor(executor, options, f"experiment {str(experiment)!r} [executor]",
                           progress, workers)
    start = time.perf_counter()
    result = run_experiment(exp, out_, log=log if show else None, train_progress=progress,
                            executor=runner, threads=threads)
    result["seconds"] = time.perf_counter() - start
    paper_file(result, layout)
    emit(result, lambda: print_experiment(result, layout))
    if not any(r["status"] == "ok" for r in result["runs"]):
        from featstore.errors import FeatstoreError

        first = result["skipped"][0] if result["skipped"] else {"reason": "no runs"}
        raise FeatstoreError(f"experiment {str(experiment)!r}: every run was skipped "
                             f"({len(result['runs'])} of {len(result['runs'])}; first: "
                             f"{first['reason']}); see {result['out']}/results.json")


def table(
    results: Annotated[list[str], typer.Argument(
        help="[LABEL=]PATH: a results.json of `featstore run` / `protocol osr`, its output "
        "directory, or a `protocol ten-methods` output directory (all its datasets); "
        "LABEL names the rows (default: the data's or the spec's file name less .toml).")],
    layout: LayoutOpt = "paper",
    out_: Annotated[Path | None, typer.Option(
        "--out", help="Write the tables to this file: Markdown (.md or any other name), or "
        "the aggregate's numbers as .csv / .jsonl rows (dataset, unit, method, group: mean, "
        "std, n of every metric).")] = None,
    reference: Annotated[str | None, typer.Option(
        help="openood-v1.5: OpenOOD's published values beside a `protocol openood` run's "
             "(marked where outside its 95% interval).")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The tables of finished experiments, read back from their results.json (nothing is
    recomputed): the paper's layout (default here) over one or several datasets, or the
    default layout of each; a `protocol openood` run's OpenOOD tables.

    Example: featstore table UCM=runs/ucm AID=runs/aid --out tables.md
    """
    setup(json_, quiet)
    from featstore.workflows.protocols.openood.render import load_run

    runs = [load_run(r.partition("=")[2] or r) for r in results]
    if any(runs) or reference is not None:
        _openood_tables(results, runs, reference, out_)
        return
    from featstore.store.fileio import atomic_write_output
    from featstore.workflows.experiments.paper_layout import (
        check_layout,
        load_datasets,
        paper_markdown,
        paper_tables,
        rich_paper_tables,
    )
    from featstore.workflows.experiments.render import markdown_report, rich_notes, rich_tables

    check_layout(layout)
    rows_format = None
    if out_ is not None and out_.suffix.lower() in (".csv", ".jsonl", ".ndjson"):
        from featstore.store.tabular_io import output_format

        rows_format = output_format(out_)
    datasets = load_datasets(results, layout=layout)
    if layout == "paper":
        text = paper_markdown(datasets)
        shown = rich_paper_tables(datasets) + [t for _, r in datasets for t in rich_notes(r)]
    else:
        text = "\n".join(markdown_report(r) for _, r in datasets)
        shown = [t for _, r in datasets for t in rich_tables(r)]
    if out_ is not None and rows_format is not None:
        from featstore.store.tabular_io import write_rows
        from featstore.workflows.experiments.tabular import aggregate_records

        write_rows(out_, aggregate_records(datasets), rows_format)
    elif out_ is not None:
        atomic_write_output(out_, text)
    doc = {"layout": layout, "datasets": [label for label, _ in datasets], "markdown": text,
           "tables": [{"metric": t.key, "title": t.title, "better": t.better,
                       "columns": [list(c) for c in t.columns],
                       "rows": [{"dataset": r.dataset, "benchmark": r.benchmark,
                                 "cells": [[c.text, c.top] for c in r.cells]}
                                for r in t.rows]}
                      for t in paper_tables(datasets)] if layout == "paper" else None}

    def human() -> None:
        for t in shown:
            out.print(t)
        if out_ is not None:
            out.print(f"written: {out_}", highlight=False)

    emit(doc, human)


def _openood_tables(results: list[str], runs: list[Any], reference: str | None,
                    out_: Path | None) -> None:
    """`featstore table` of `protocol openood` runs: their Markdown, with the reference."""
    from featstore.errors import UsageError
    from featstore.store.fileio import atomic_write_output
    from featstore.workflows.protocols.openood.render import openood_markdown, with_reference

    if not all(runs):
        bad = [r for r, doc in zip(results, runs, strict=True) if not doc]
        raise UsageError(f"{bad[0]!r} is not a `protocol openood` run: --reference and "
                         "OpenOOD's tables need one (OUT/results.json of protocol openood)")
    docs = [with_reference(d, reference) if reference else d for d in runs]
    text = "\n".join(openood_markdown(d) for d in docs)
    if out_ is not None:
        atomic_write_output(out_, text)
    emit({"markdown": text, "runs": docs}, lambda: out.print(text, markup=False,
                                                             highlight=False))


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(table)
