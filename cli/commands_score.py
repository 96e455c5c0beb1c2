"""Scoring commands: score, eval."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from featstore.errors import UsageError
from featstore.fileio import atomic_write_result_json

from .common import (
    ALLOW_NONFINITE_HELP,
    BootOpt,
    BootSeedOpt,
    CiMethodOpt,
    CiOpt,
    ThreadsOpt,
    apply_threads,
    cache_note,
    check_methods,
    check_params,
    ci_line,
    ci_spec,
    fit_label,
    fit_splits,
    fmt_ci,
    method_params,
    open_store,
    parse_params,
    require_rows,
)
from .console import JsonOpt, QuietOpt, emit, out, setup, status

__all__ = ["eval_", "parse_params", "print_evaluation", "register", "score"]


def recall_line(diagnostics: dict) -> str | None:
    """'index ivf_flat: recall@50 0.934 against exact search (256 id/val rows)', or None."""
    if "recall_at_k" not in diagnostics:
        return None
    d = diagnostics
    return (f"index {d['index']}: recall@{d['recall_k']} {d['recall_at_k']:.3f} against exact "
            f"search ({d['recall_queries']} {d['recall_split']} rows)")


def _fmt(v: float) -> str:
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.2f}"


def print_evaluation(result: dict, per_split: bool = True) -> None:
    """Group table (AUROC / FPR95 per group, with intervals when the result has them), then
    the per-split table."""
    methods = result["methods"]
    if not methods:
        out.print("no scorer could run on this store")
        print_skipped(result)
        return
    groups = list(next(iter(methods.values()))["groups"])
    table = Table(title=f"OOD detection vs {result['id_split']} (test splits; group = "
                        "unweighted mean)  ·  AUROC↑ / FPR95↓ in %", header_style="bold",
                  show_edge=False)
    table.add_column("method")
    for g in groups:
        table.add_column(f"{g} AUROC", justify="right")
        table.add_column(f"{g} FPR95", justify="right")
    table.add_column("misclf AUROC", justify="right")
    table.add_column("AURC↓", justify="right")
    table.add_column("AUGRC↓", justify="right")
    table.add_column("fit+score s", justify="right")
    best = {(g, m): (max if m == "auroc" else min)(r["groups"][g][m] for r in methods.values())
            for g in groups for m in ("auroc", "fpr95")}
    for name, r in methods.items():
        cells = [name]
        for g in groups:
            for m in ("auroc", "fpr95"):
                v = r["groups"][g][m]
                text = fmt_ci(v, r["groups"][g].get(f"{m}_ci"))
                cells.append(f"[bold green]{text}[/]" if v == best[(g, m)] else text)
        seconds = r["fit_seconds"] + r["score_seconds"]
        cells += [fmt_ci(r.get(k), r.get(f"{k}_ci"))
                  for k in ("misclassification_auroc", "aurc", "augrc")]
        cells.append("cached" if r.get("cached") else f"{seconds:.2f}")
        table.add_row(*cells)
    out.print(table)
    out.print(f"ID accuracy ({result['id_split']}): "
              f"{fmt_ci(result['id_acc'], result.get('id_acc_ci'))}%")
    if (line := ci_line(result)) is not None:
        out.print(line, highlight=False, markup=False)
    for name, r in methods.items():
        if (line := recall_line(r.get("diagnostics", {}))) is not None:
            out.print(f"{name}: {line}")
    if per_split:
        t2 = Table(title="per split  ·  AUROC / FPR95 / AUPR-IN / AUPR-OUT", header_style="bold",
                   show_edge=False)
        t2.add_column("method")
        for s in result["ood_splits"]:
            t2.add_column(s, justify="right")
        for name, r in methods.items():
            t2.add_row(name, *[" / ".join(fmt_ci(r["splits"][s][m], r["splits"][s].get(f"{m}_ci"))
                                          for m in ("auroc", "fpr95", "aupr_in", "aupr_out"))
                               for s in result["ood_splits"]])
        out.print(t2)
    if not result.get("tuned"):
        from .commands_sweep import print_adjusted

        for name, r in methods.items():
            print_adjusted(name, r.get("adjusted", []))
    print_skipped(result)


def print_skipped(result: dict) -> None:
    """The scorers that could not run on this store, each with its one-line reason."""
    skipped = result.get("skipped") or {}
    if not skipped:
        return
    table = Table(title=f"skipped: {len(skipped)} scorer{'s' if len(skipped) != 1 else ''} "
                        "could not run on this store", header_style="bold", show_edge=False)
    table.add_column("scorer")
    table.add_column("reason", overflow="fold")
    for name, why in skipped.items():
        table.add_row(name, why)
    out.print(table)


StoreArg = Annotated[Path, typer.Argument(help="Store directory.")]
NoCacheOpt = Annotated[bool, typer.Option(help="Do not read/write scores.h5.")]
AllowNonfiniteOpt = Annotated[bool, typer.Option(help=ALLOW_NONFINITE_HELP)]
EvalMethodOpt = Annotated[list[str] | None, typer.Option(
    help="Scorer; repeatable (default: all). A named scorer that cannot run on the store is an "
         "error.")]
AllOpt = Annotated[bool, typer.Option("--all", help=(
    "Every registered scorer; one that cannot run on the store is skipped with its reason."))]
MethodParamOpt = Annotated[list[str] | None, typer.Option(
    help="method.k=v parameter, e.g. knn.K=10; repeatable.")]
TuneOpt = Annotated[bool, typer.Option(
    help="Choose each method's setting over its default grid on the val splits (id/val vs OOD "
         "splits flagged usage = \"val\"); report it on test.")]
SelectByOpt = Annotated[str | None, typer.Option(
    help="With --tune: the val metric that chooses (default auroc).")]


def score(
    store: StoreArg,
    method: Annotated[str, typer.Option(help="Scorer name (see `featstore scorers`).")],
    param: Annotated[list[str] | None, typer.Option(help="k=v scorer parameter; "
                                                         "repeatable.")] = None,
    split: Annotated[list[str] | None, typer.Option(help="Split to score; repeatable "
                                                         "(default: all).")] = None,
    save: Annotated[Path | None, typer.Option("--save", help="Write the scores to this "
                                                             ".npz.")] = None,
    no_cache: NoCacheOpt = False,
    allow_nonfinite: AllowNonfiniteOpt = False,
    threads: ThreadsOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Score splits with one method (higher = more in-distribution); cached in scores.h5.

    Example: featstore score runs/demo/store --method knn --param K=10
    """
    setup(json_, quiet)
    apply_threads(threads)
    from scorers.score_run import score_store

    params = parse_params(param)
    check_params(method, params)
    with open_store(store) as st:
        names = split or st.splits()
        for name in names:
            st.split(name)
        require_rows(st, [*names, *(s for s in fit_splits(method) if st.has_split(s))])
        use_cache = cache_note(st, no_cache)
        with status() as begin:
            begin(fit_label(st, method, len(names)))
            result = score_store(st, method, params, names, use_cache=use_cache,
                                 allow_nonfinite=allow_nonfinite, save=save, label=str(store))
    emit(result, lambda: print_score(result))


def print_score(result: dict) -> None:
    """The per-split summary table, timings, an index's recall and clamped defaults."""
    method, params = result["method"], result["params"]
    table = Table(title=f"{method} {params or ''} (higher = more ID)", show_edge=False,
                  header_style="bold")
    for col in ("split", "n", "mean", "std", "min", "max"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for name, s in result["splits"].items():
        table.add_row(name, str(s["n"]), *(f"{s[k]:.4g}" for k in ("mean", "std", "min", "max")))
    out.print(table)
    out.print(f"fit {result['fit_seconds']:.2f} s, score {result['score_seconds']:.2f} s")
    if (line := recall_line(result["diagnostics"])) is not None:
        out.print(line)
    from .commands_sweep import print_adjusted

    print_adjusted(method, result["adjusted"])


def eval_(
    store: StoreArg,
    method: EvalMethodOpt = None,
    all_: AllOpt = False,
    param: MethodParamOpt = None,
    out_: Annotated[Path | None, typer.Option("--out", help="Write results JSON.")] = None,
    no_cache: NoCacheOpt = False,
    per_split: Annotated[bool, typer.Option(help="Also print the per-split table.")] = True,
    tune: TuneOpt = False,
    select_by: SelectByOpt = None,
    allow_nonfinite: AllowNonfiniteOpt = False,
    ci: CiOpt = 0.95,
    boot: BootOpt = 1000,
    ci_method: CiMethodOpt = "percentile",
    boot_seed: BootSeedOpt = 0,
    threads: ThreadsOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """OOD metrics of scorers on every OOD test split vs id/test, group means, ID accuracy,
    misclassification AUROC, AURC and AUGRC, timings; every metric with its 95%
    stratified-bootstrap interval (--ci 0 turns them off). With --tune, each method's
    hyperparameters are first chosen on the val splits (`featstore sweep` for every method).

    Example: featstore eval runs/demo/store --method msp --method vim --out results.json
    """
    setup(json_, quiet)
    apply_threads(threads)
    from scorers.evaluate import evaluate
    from scorers.sweep import check_select_by, sweep_all

    params = method_params(param)
    spec = ci_spec(ci, boot, ci_method, boot_seed)
    methods = None if all_ or not method else check_methods(method)
    strict = methods is not None  # a scorer named by --method must run
    if select_by is not None and not tune:
        raise UsageError("--select-by chooses hyperparameters: it needs --tune")
    if tune:
        check_select_by(select_by or "auroc")
    with open_store(store) as st:
        require_rows(st)
        use_cache = cache_note(st, no_cache)
        n_scored = 1 + len(st.splits(role="ood", usage="test"))
        with status() as begin:
            def step(name: str) -> None:
                begin(("tuning " if tune else "") + fit_label(st, name, n_scored))

            if tune:
                result = sweep_all(st, methods, params, select_by or "auroc", progress=step,
                                   strict=strict, ci=spec)
            else:
                result = evaluate(st, methods, params, use_cache=use_cache, progress=step,
                                  strict=strict, allow_nonfinite=allow_nonfinite, ci=spec)
    if out_ is not None:
        atomic_write_result_json(out_, result)
    emit(result, lambda: print_eval(result, per_split, tune))


def print_eval(result: dict, per_split: bool, tune: bool) -> None:
    print_evaluation(result, per_split=per_split)
    if tune:
        from .commands_sweep import print_tuned

        print_tuned(result)


def register(app: typer.Typer) -> None:
    app.command()(score)
    app.command("eval")(eval_)
