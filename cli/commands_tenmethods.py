"""`featstore protocol ten-methods`: the remote-sensing benchmark's ten OOD methods on the
user's own simi / near / far benchmarks (one spec per dataset), R training runs, the paper's
tables; registered on `featstore protocol` (`cli.commands_protocol.protocol_app`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .commands_protocol import (
    MethodParamOpt,
    OsrAugmentOpt,
    OsrBatchOpt,
    OsrEpochsOpt,
    OsrLrOpt,
    OsrPresetOpt,
    OutDirOpt,
    protocol_app,
)
from .commands_run import LayoutOpt, print_experiment
from .commands_train import train_progress
from .common import method_params
from .console import JsonOpt, QuietOpt, emit, log, out, progress_enabled, setup
from .executor_opts import ExecutorConfigOpt, ExecutorOpt, WorkersOpt, make_cli_executor


def ten_methods(
    spec: Annotated[list[str], typer.Option(
        "--spec", help="[LABEL=]bench.toml: a dataset's benchmark spec (id/train, id/val, "
        "id/test, OOD test splits ood/<group>/<name>: the groups, e.g. simi, near, far, come "
        "from the spec; OOD val splits to tune on); repeatable, one per dataset. LABEL names "
        "its rows and OUT/LABEL (default: the file name less .toml).")],
    out_: OutDirOpt,
    runs: Annotated[int, typer.Option(
        help="Training runs per dataset (seeds 0..R-1): the paper's 7.")] = 7,
    methods: Annotated[str, typer.Option(
        help="Comma-separated: 'all' (the ten rows: MSP, ViM, KNN, ConfBranch, LogitNorm, "
             "G-ODIN, OE, MCD, MC-Dropout, TempScaling) or some of them, or any post-hoc "
             "scorer (on the ce model).")] = "all",
    arch: Annotated[str, typer.Option(
        help="Architecture: a torchvision name or module:callable (the paper: "
             "resnet50).")] = "resnet50",
    preset: OsrPresetOpt = None,
    epochs: OsrEpochsOpt = None,
    lr: OsrLrOpt = None,
    batch_size: OsrBatchOpt = None,
    augment: OsrAugmentOpt = None,
    aux: Annotated[Path | None, typer.Option(
        help="ImageFolder of auxiliary outliers for OE / MCD (or a spec split with role ood "
             "and usage = \"train\").")] = None,
    no_tune: Annotated[bool, typer.Option(
        "--no-tune", help="Score at default parameters instead of tuning ViM and KNN on each "
                          "spec's id/val vs its OOD splits flagged usage val (RS §2.5).")
    ] = False,
    param: MethodParamOpt = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N]")] = "auto",
    executor: ExecutorOpt = None,
    executor_config: ExecutorConfigOpt = None,
    workers: WorkersOpt = None,
    layout: LayoutOpt = "default",
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The remote-sensing benchmark's ten OOD methods (Wang et al. 2024, Tables 11-16) on
    your own simi / near / far benchmarks.

    Per dataset, every method trained --runs times (seeds 0..R-1, the
    remote-sensing preset, ResNet-50), extracted, tuned on the OOD val splits by AUROC
    (KNN's K; ViM's principal dim; MCD by eq. 14), evaluated per OOD group of
    the spec; mean ± std over the runs. Everything is checked before the first training
    step; a rerun resumes. Writes OUT/LABEL/ (experiment.toml, results.json, results.md)
    per dataset and OUT/results.paper.md (the paper's layout: rows dataset x group).

    Example: featstore protocol ten-methods --spec UCM=ucm.toml --spec AID=aid.toml --aux
    outliers/ --runs 7 --out runs/rs --layout paper
    """
    setup(json_, quiet)
    from featstore.workflows.experiments.osr_run import osr_train_settings
    from featstore.workflows.experiments.paper_layout import check_layout
    from featstore.workflows.experiments.ten_methods_run import run_ten_methods_bench

    check_layout(layout)
    params = method_params(param)
    train = osr_train_settings(False, preset, epochs, lr, batch_size, augment)
    show = progress_enabled()
    runner = make_cli_executor(executor, executor_config, workers, "protocol ten-methods")
    result = run_ten_methods_bench(spec, out_, runs=runs, methods=methods, params=params,
                                   train=train, arch=arch, aux=aux, tune=not no_tune,
                                   device=device, log=log if show else None, executor=runner,
                                   train_progress=(lambda label: train_progress(True, label))
                                   if show else None)
    emit(result, lambda: _print(result, layout))
    if not any(r["status"] == "ok" for res in result["datasets"].values()
               for r in res["runs"]):
        from featstore.errors import FeatstoreError

        raise FeatstoreError(f"protocol ten-methods: every run was skipped; see "
                             f"{result['out']}/*/results.json")


def _print(result: dict[str, Any], layout: str) -> None:
    """The paper's tables over every dataset (then each dataset's flagged methods and
    skipped runs), or each dataset's default tables; where the paper layout was written."""
    from featstore.workflows.experiments.paper_layout import rich_paper_tables
    from featstore.workflows.experiments.render import rich_notes

    datasets = list(result["datasets"].items())
    if layout == "paper":
        for table in rich_paper_tables(datasets):
            out.print(table)
        for _, r in datasets:
            for table in rich_notes(r):
                out.print(table)
    else:
        for _, r in datasets:
            print_experiment(r)
    out.print(f"paper layout: {result['paper']}  ({result['seconds']:.1f} s)",
              highlight=False)


def register(app: typer.Typer) -> None:
    protocol_app.command("ten-methods")(ten_methods)
