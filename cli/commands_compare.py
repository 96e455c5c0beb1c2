"""`featstore compare` (paired tests between scorers) and `featstore rank` (rankings across
OOD sets, seeds or stores)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from featstore.errors import UsageError
from featstore.store.tabular_io import output_format

from .common import (
    BootOpt,
    BootSeedOpt,
    CiMethodOpt,
    CiOpt,
    ThreadsOpt,
    apply_threads,
    check_methods,
    ci_spec,
    method_params,
    open_store,
    require_rows,
)
from .completion import scorer_names
from .console import JsonOpt, QuietOpt, emit, out, setup, status


def _p(v: float) -> str:
    return f"{v:.2g}" if v < 0.001 else f"{v:.3f}"


def print_compare(result: dict) -> None:
    """DeLong per split, then the paired bootstrap per group (AUROC, FPR95), Holm-adjusted."""
    ci = result["ci"]
    out.print(f"paired tests on {result['id_split']} and the OOD test splits; p Holm-adjusted "
              f"across the {len(result['methods'])} methods' pairs; bootstrap: {ci['resamples']}"
              f" common stratified resamples, seed {ci['seed']}", highlight=False)
    t = Table(title="DeLong's test of AUROC (per split)", header_style="bold", show_edge=False)
    for col in ("split", "a", "b", "AUROC a", "AUROC b", "z", "p", "p (Holm)"):
        t.add_column(col, justify="left" if col in ("split", "a", "b") else "right")
    for s, tests in result["splits"].items():
        for r in tests["delong_auroc"]:
            t.add_row(s, r["a"], r["b"], f"{r['auroc_a']:.2f}", f"{r['auroc_b']:.2f}",
                      f"{r['z']:.2f}", _p(r["p"]), _p(r["p_holm"]))
    out.print(t)
    t2 = Table(title=f"paired bootstrap (group means; diff = a - b, {100 * ci['level']:g}% "
                     "interval)", header_style="bold", show_edge=False)
    for col in ("group", "metric", "a", "b", "diff [lo, hi]", "p", "p (Holm)"):
        t2.add_column(col, justify="left" if col in ("group", "metric", "a", "b") else "right")
    for g, tests in result["groups"].items():
        for metric in ("auroc", "fpr95"):
            for r in tests["bootstrap"].get(metric, []):
                lo, hi = r["diff_ci"]
                t2.add_row(g or "(no group)", metric, r["a"], r["b"],
                           f"{r['diff']:+.2f} [{lo:+.1f}, {hi:+.1f}]", _p(r["p"]),
                           _p(r["p_holm"]))
    out.print(t2)


def print_rank(result: dict) -> None:
    t = Table(title=f"average rank by {result['metric']} over {result['n_blocks']} blocks "
                    "(1 = best)", header_style="bold", show_edge=False)
    t.add_column("method")
    t.add_column("mean rank", justify="right")
    for m, r in sorted(result["mean_ranks"].items(), key=lambda kv: kv[1]):
        t.add_row(m, f"{r:.2f}")
    out.print(t)
    out.print(f"Friedman chi2 = {result['friedman_chi2']:.3f}, p = {_p(result['friedman_p'])}; "
              f"Nemenyi critical difference (alpha {result['alpha']}) = "
              f"{result['critical_difference']:.3f}", highlight=False)
    for clique in result["cliques"]:
        out.print("not significantly different: " + ", ".join(clique), highlight=False)


def compare(
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    method: Annotated[list[str], typer.Option(help="Scorer; give two or more.",
                                              autocompletion=scorer_names)],
    param: Annotated[list[str] | None, typer.Option(
        help="method.k=v parameter, e.g. knn.K=10; repeatable.")] = None,
    metric: Annotated[list[str] | None, typer.Option(
        help="Metric for the paired bootstrap; repeatable (default: auroc, fpr95, fpr95_ood, "
             "aupr_in, aupr_out, detection_error).")] = None,
    boot: BootOpt = 1000,
    ci_method: CiMethodOpt = "percentile",
    boot_seed: BootSeedOpt = 0,
    ci: CiOpt = 0.95,
    out_: Annotated[Path | None, typer.Option(
        "--out", help="Write the result to this file: .json (the JSON document), .csv "
        "or .jsonl (one row per method and split / group; docs/RESULTS.md).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache",
                                           help="Do not read/write scores.h5.")] = False,
    threads: ThreadsOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Paired tests between scorers on the same rows: DeLong's test of AUROC per OOD
    split and a paired stratified bootstrap of every metric per split and group, with
    Holm's correction across pairs.

    Example: featstore compare runs/demo/store --method msp --method energy --method knn
    """
    setup(json_, quiet)
    if out_ is not None:
        output_format(out_)  # a bad suffix fails before any work
    apply_threads(threads)
    from scorers.compare import TESTED_METRICS
    from scorers.compare import compare as run_compare

    methods = check_methods(method)
    params = method_params(param)
    spec = ci_spec(ci, boot, ci_method, boot_seed)
    if spec is None:
        raise UsageError("--ci: compare reports intervals of the differences; give a "
                         "level in (0, 1), not 0")
    with open_store(store) as st:
        require_rows(st)
        with status() as begin:
            begin(f"evaluating and bootstrapping {', '.join(methods)}")
            result = run_compare(st, methods, params, spec, not no_cache,
                                 tuple(metric) if metric else TESTED_METRICS)
    if out_ is not None:
        from scorers.tabular import write_result

        write_result(out_, result)
    emit(result, lambda: print_compare(result))


def rank(
    results: Annotated[list[Path], typer.Argument(
        help="Results JSON files from `featstore eval --out` (seeds, stores).")],
    metric: Annotated[str, typer.Option(help="Metric to rank by.")] = "auroc",
    alpha: Annotated[float, typer.Option(help="Level of the Nemenyi test.")] = 0.05,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Average ranks of the methods over every (results file, OOD test split) block,
    Friedman's test and Nemenyi's critical difference.

    Example: featstore rank seed0.json seed1.json seed2.json --metric fpr95
    """
    setup(json_, quiet)
    from scorers.compare import rank_results, read_results

    loaded = read_results(results)
    try:
        result = rank_results(loaded, metric, alpha)
    except ValueError as exc:
        raise UsageError(f"rank: {exc}") from None
    emit(result, lambda: print_rank(result))


def register(app: typer.Typer) -> None:
    app.command()(compare)
    app.command()(rank)
