"""`featstore report`: HTML + Markdown report of an evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from featstore.errors import UsageError

from .common import (
    BootOpt,
    BootSeedOpt,
    CiMethodOpt,
    CiOpt,
    TuneRuleOpt,
    cache_note,
    check_methods,
    check_tune_rule,
    ci_spec,
    method_params,
    open_store,
    require_rows,
)
from .console import JsonOpt, QuietOpt, emit, out, setup, status


def report(
    source: Annotated[Path, typer.Argument(help="A store directory or a results JSON "
                                                 "from `featstore eval --out`.")],
    out_: Annotated[Path, typer.Option("--out", help="HTML file to write (a Markdown "
                                                      "twin goes beside it).")] = Path(
        "report.html"),
    method: Annotated[list[str] | None, typer.Option(
        help="Scorer; repeatable (default: all; one that cannot run on the store is "
             "listed as skipped with its reason). A named scorer that cannot run is an "
             "error.")] = None,
    param: Annotated[list[str] | None, typer.Option(
        help="method.k=v parameter, e.g. knn.K=10; repeatable.")] = None,
    tune: Annotated[bool, typer.Option("--tune", help="Sweep every scorer on val first and "
                                            "plot the sweep curves.")] = False,
    tune_rule: TuneRuleOpt = "featstore",
    reference: Annotated[str | None, typer.Option(
        help="openood-v1.5: OpenOOD's published near/far AUROC beside the leaderboard's "
             "(the benchmark told from the OOD splits of `protocol openood`).")] = None,
    include: Annotated[list[Path] | None, typer.Option(
        help="Extra result JSON to add (gscore evaluate, shift grid); "
             "repeatable.")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache",
                                           help="Do not read/write scores.h5.")] = False,
    rank_by: Annotated[str, typer.Option(
        help="Leaderboard order: 'mean' (of the near and far group AUROCs) or an OOD group "
             "name, e.g. near.")] = "mean",
    ci: CiOpt = 0.95,
    boot: BootOpt = 1000,
    ci_method: CiMethodOpt = "percentile",
    boot_seed: BootSeedOpt = 0,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Leaderboard with 95% stratified-bootstrap intervals, p-value matrices (paired
    bootstrap per group, DeLong per split, Holm-adjusted), mean ranks with Friedman's test
    and critical-difference diagrams, ROC/PR curves, score histograms, sweep curves and
    provenance in one self-contained HTML file (no network needed to view) plus report.md.

    Example: featstore report runs/demo/store --out runs/demo/report.html
    """
    setup(json_, quiet)
    from featstore.workflows.report import write_report

    if method:
        check_methods(method)
    if tune_rule != "featstore" and not tune:
        raise UsageError("--tune-rule chooses how to tune: it needs --tune")
    check_tune_rule(tune_rule, None)
    if reference is not None:
        from featstore.workflows.protocols.openood.published import check_reference

        check_reference(reference)
    params = method_params(param)
    use_cache = not no_cache
    spec = ci_spec(ci, boot, ci_method, boot_seed)
    if (source / "store.json").is_file():
        with open_store(source) as st:
            require_rows(st)
            use_cache = cache_note(st, no_cache)
    with status() as begin:
        begin(f"{'tuning and ' if tune else ''}evaluating "
              f"{', '.join(method) if method else 'every scorer'} for the report")
        html_path, md_path = write_report(source, out_, methods=method, tune=tune,
                                          include=include, params=params,
                                          use_cache=use_cache, ci=spec, rank_by=rank_by,
                                          tune_rule=tune_rule, reference=reference)
    emit({"source": str(source), "html": str(html_path), "markdown": str(md_path)},
         lambda: out.print(f"report: {html_path}  (markdown: {md_path})"))


def register(app: typer.Typer) -> None:
    app.command()(report)
