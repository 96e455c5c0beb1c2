"""Scoring commands: score, eval."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from featstore.errors import UsageError
from featstore.store.tabular_io import output_format

from .common import (
    ALLOW_NONFINITE_HELP,
    BootOpt,
    BootSeedOpt,
    CiMethodOpt,
    CiOpt,
    ThreadsOpt,
    TuneRuleOpt,
    apply_threads,
    cache_note,
    check_methods,
    check_params,
    check_tune_rule,
    ci_spec,
    fit_label,
    fit_splits,
    method_params,
    open_store,
    parse_params,
    relabel_outcomes,
    require_rows,
)
from .completion import scorer_names, split_names
from .console import JsonOpt, QuietOpt, emit, out, setup, status
from .eval_tables import print_group_table, print_split_table, skipped_table

__all__ = ["eval_", "parse_params", "print_evaluation", "register", "score"]


def recall_line(diagnostics: dict) -> str | None:
    """'index ivf_flat: recall@50 0.934 against exact search (256 id/val rows)', or None."""
    if "recall_at_k" not in diagnostics:
        return None
    d = diagnostics
    return (f"index {d['index']}: recall@{d['recall_k']} {d['recall_at_k']:.3f} against exact "
            f"search ({d['recall_queries']} {d['recall_split']} rows)")


def print_evaluation(result: dict, per_split: bool = True, wide: bool = False) -> None:
    """Group table (one line per scorer: AUROC / FPR95 per group with compact intervals), the
    per-split table, clamped defaults and the skipped scorers (`cli.eval_tables`)."""
    methods = result["methods"]
    if not methods:
        out.print("no scorer could run on this store")
        print_skipped(result)
        return
    print_group_table(result, wide)
    for name, r in methods.items():
        if (line := recall_line(r.get("diagnostics", {}))) is not None:
            out.print(f"{name}: {line}", soft_wrap=False)
    if per_split:
        print_split_table(result, wide)
    if not result.get("tuned"):
        from .commands_sweep import print_adjusted

        for name, r in methods.items():
            print_adjusted(name, r.get("adjusted", []))
    print_skipped(result)


def print_skipped(result: dict) -> None:
    """The scorers that could not run on this store, each with its one-line reason."""
    if (table := skipped_table(result)) is not None:
        out.print(table)


StoreArg = Annotated[Path, typer.Argument(help="Store directory.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not read/write scores.h5.")]
AllowNonfiniteOpt = Annotated[bool, typer.Option("--allow-nonfinite", help=ALLOW_NONFINITE_HELP)]
EvalMethodOpt = Annotated[list[str] | None, typer.Option(
    help="Scorer; repeatable (default: all). A named scorer that cannot run on the store is an "
         "error.", autocompletion=scorer_names)]
AllOpt = Annotated[bool, typer.Option("--all", help=(
    "Every registered scorer; one that cannot run on the store is skipped with its reason."))]
MethodParamOpt = Annotated[list[str] | None, typer.Option(
    help="method.k=v parameter, e.g. knn.K=10; repeatable.")]
TuneOpt = Annotated[bool, typer.Option(
    "--tune",
    help="Choose each method's setting over its default grid on the val splits (id/val vs OOD "
         "splits flagged usage = \"val\"); report it on test.")]
WideOpt = Annotated[bool, typer.Option(
    "--wide", help="Every column at full width, intervals as [lo, hi], all four metrics per "
                   "split (default: fit the terminal, one line per scorer).")]
SelectByOpt = Annotated[str | None, typer.Option(
    help="With --tune: the val metric that chooses (default auroc).")]
EnsembleOpt = Annotated[list[Path] | None, typer.Option(
    "--ensemble", help="Another store of the same rows (another seed or model), matched by "
                       "ids; repeatable. Scores the deep ensemble of STORE and these: mean "
                       "softmax (MSP, entropy), mutual information, variation ratio.")]


def score(
    store: StoreArg,
    method: Annotated[str, typer.Option(help="Scorer name (see `featstore scorers`).",
                                        autocompletion=scorer_names)],
    param: Annotated[list[str] | None, typer.Option(help="k=v scorer parameter; "
                                                         "repeatable.")] = None,
    split: Annotated[list[str] | None, typer.Option(help="Split to score; repeatable "
                                                         "(default: all).",
                                                    autocompletion=split_names)] = None,
    save: Annotated[Path | None, typer.Option(
        "--save", help="Write the scores to this file: .npz (one array per split), .csv or "
        ".jsonl (one row per scored row: split, row, id, label, score).")] = None,
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
    method = check_params(method, params)  # the registered name from here on
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
    out_: Annotated[Path | None, typer.Option(
        "--out", help="Write the result to this file: .json (the JSON document), .csv "
        "or .jsonl (one row per method and split / group; docs/RESULTS.md).")] = None,
    no_cache: NoCacheOpt = False,
    per_split: Annotated[bool, typer.Option(help="Also print the per-split table.")] = True,
    tune: TuneOpt = False,
    select_by: SelectByOpt = None,
    tune_rule: TuneRuleOpt = "featstore",
    allow_nonfinite: AllowNonfiniteOpt = False,
    ci: CiOpt = 0.95,
    boot: BootOpt = 1000,
    ci_method: CiMethodOpt = "percentile",
    boot_seed: BootSeedOpt = 0,
    threads: ThreadsOpt = None,
    wide: WideOpt = False,
    ensemble: EnsembleOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """OOD metrics of scorers on every OOD test split vs id/test, group means, ID accuracy,
    misclassification AUROC, AURC and AUGRC, timings; every metric with its 95%
    stratified-bootstrap interval (--ci 0 turns them off). With --tune, each method's
    hyperparameters are first chosen on the val splits (`featstore sweep` for every method).

    Example: featstore eval runs/demo/store --method msp --method vim --out results.json
    (ensemble: featstore eval runs/seed0/store --ensemble runs/seed1/store --ensemble
    runs/seed2/store)
    """
    setup(json_, quiet)
    if out_ is not None:
        output_format(out_)  # a bad suffix fails before any work
    apply_threads(threads)
    from scorers.evaluate import evaluate
    from scorers.sweep import check_select_by, sweep_all

    params = method_params(param)
    spec = ci_spec(ci, boot, ci_method, boot_seed)
    if ensemble:
        if method or all_ or tune or param:
            raise UsageError("--ensemble scores the ensemble's four scores: it takes no "
                             "--method, --all, --param or --tune")
        result = _ensemble_result([store, *ensemble], spec)
        _write_and_emit(result, out_, lambda: print_eval(result, per_split, False, wide))
        return
    methods = None if all_ or not method else check_methods(method)
    strict = methods is not None  # a scorer named by --method must run
    if select_by is not None and not tune:
        raise UsageError("--select-by chooses hyperparameters: it needs --tune")
    if tune_rule != "featstore" and not tune:
        raise UsageError("--tune-rule chooses how to tune: it needs --tune")
    if tune:
        check_select_by(select_by or "auroc")
        check_tune_rule(tune_rule, select_by)
    with open_store(store) as st:
        require_rows(st)
        use_cache = cache_note(st, no_cache)
        n_scored = 1 + len(st.splits(role="ood", usage="test"))
        with status() as begin:
            lines: dict[str, int] = {}

            def step(name: str) -> None:
                begin(fit_label(st, name, n_scored, "tuning" if tune else ""))
                lines[name] = begin.last

            if tune:
                result = sweep_all(st, methods, params, select_by or "auroc", progress=step,
                                   strict=strict, ci=spec, rule=tune_rule)
            else:
                result = evaluate(st, methods, params, use_cache=use_cache, progress=step,
                                  strict=strict, allow_nonfinite=allow_nonfinite, ci=spec)
            relabel_outcomes(begin, lines, result)
    _write_and_emit(result, out_, lambda: print_eval(result, per_split, tune, wide))


def _write_and_emit(result: Any, out_: Path | None, human: Any) -> None:
    """`--out` in the format its suffix names (`scorers.tabular.write_result`), then the
    result on the terminal (or as JSON)."""
    if out_ is not None:
        from scorers.tabular import write_result

        write_result(out_, result)
    emit(result, human)


def print_eval(result: dict, per_split: bool, tune: bool, wide: bool = False) -> None:
    print_evaluation(result, per_split=per_split, wide=wide)
    if tune:
        from .commands_sweep import print_tuned

        print_tuned(result)


def register(app: typer.Typer) -> None:
    app.command()(score)
    app.command("eval")(eval_)


def _ensemble_result(paths: list[Path], spec: Any) -> Any:
    """`scorers.ensemble.evaluate_ensemble` on the opened stores."""
    from contextlib import ExitStack

    from scorers.ensemble import evaluate_ensemble

    with ExitStack() as stack:
        stores = [stack.enter_context(open_store(p)) for p in paths]
        with status() as begin:
            return evaluate_ensemble(stores, spec, progress=lambda name: begin(name))
