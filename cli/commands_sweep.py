"""`featstore sweep`: choose a scorer's hyperparameters on val splits, report test metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from featstore.errors import UsageError
from featstore.store.formatting import number
from featstore.store.tabular_io import output_format

from .common import (
    BootOpt,
    BootSeedOpt,
    CiMethodOpt,
    CiOpt,
    ThreadsOpt,
    TuneRuleOpt,
    apply_threads,
    check_params,
    check_tune_rule,
    ci_line,
    ci_spec,
    fit_label,
    fmt_ci,
    open_store,
    parse_params,
    require_rows,
)
from .completion import scorer_names
from .console import JsonOpt, QuietOpt, emit, out, setup, status

_TEST_COLS = (("auroc", "AUROC"), ("fpr95", "FPR95"), ("aupr_in", "AUPR-IN"),
              ("aupr_out", "AUPR-OUT"), ("fpr95_ood", "FPR95(OOD)"),
              ("detection_error", "DetErr"))
_LABELS = dict(_TEST_COLS)


def parse_grid(items: list[str] | None) -> dict[str, list[Any]] | None:
    """`k=v1,v2` items -> {k: [v1, v2]}; each value parsed as JSON, else kept as a string."""
    if not items:
        return None
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        parts = text.split(",")
        if not sep or not key or any(not p.strip() for p in parts):
            raise UsageError(f"--grid {item!r}: expected key=value[,value...], e.g. K=10,20,50")
        if key in grid:
            raise UsageError(f"--grid {key!r} given twice; list its values in one --grid")
        values = []
        for part in parts:
            try:
                values.append(json.loads(part))
            except json.JSONDecodeError:
                values.append(part.strip())
        grid[key] = values
    return grid


def _label(metric: str) -> str:
    return _LABELS.get(metric, metric)


def print_sweep(result: dict) -> None:
    """Every setting (val metrics, test AUROC/FPR95 per group; chosen row highlighted), then
    the chosen setting's test metrics per split and per group."""
    sel = result["select_by"]
    val_metrics = list(dict.fromkeys([sel, "auroc", "fpr95"]))
    test = result["test"]
    groups = list(test["groups"]) if test else []
    arrow = "↑" if result["direction"] == "max" else "↓"
    nval = len(result["val_splits"]["ood"])
    how = (f"chosen by OpenOOD's search (val AUROC, {nval} val OOD split"
           f"{'s' if nval != 1 else ''} pooled, first best in OpenOOD's order)"
           if result.get("rule") == "openood" else
           f"chosen by val {_label(sel)}{arrow} (mean over {nval} val OOD split"
           f"{'s' if nval != 1 else ''} vs {result['val_splits']['id']})")
    table = Table(title=f"sweep {result['method']}  ·  {how}; test columns are reported only",
                  header_style="bold", show_edge=False)
    table.add_column("#", justify="right")
    table.add_column("setting")
    for m in val_metrics:
        table.add_column(f"val {_label(m)}", justify="right")
    for g in groups:
        table.add_column(f"test {g} AUROC", justify="right")
        table.add_column(f"test {g} FPR95", justify="right")
    chosen = result["chosen"]["index"]
    from scorers.sweep import format_setting

    for i, row in enumerate(result["settings"]):
        cells = [f"{'▶ ' if i == chosen else ''}{i}", format_setting(row["setting"])]
        cells += [number(row["val"]["mean"][m]) for m in val_metrics]
        for g in groups:
            cells += [number(row["test"]["groups"][g][m]) for m in ("auroc", "fpr95")]
        table.add_row(*cells, style="bold green" if i == chosen else None)
    out.print(table)
    out.print(f"chosen: {format_setting(result['chosen']['setting'])}  (val {_label(sel)} "
              f"{result['chosen']['val'][sel]:.2f}; fit {result['fit_seconds']:.2f} s, val "
              f"{result['val_seconds']:.2f} s, test {result['test_seconds']:.2f} s)",
              highlight=False)
    if test is None:
        out.print("no id/test or no OOD test split: test metrics not reported")
    else:
        t2 = Table(title=f"chosen setting on test (vs {result['test_splits']['id']}; group = "
                         "unweighted mean)  ·  in %", header_style="bold", show_edge=False)
        t2.add_column("split / group")
        for _, label in _TEST_COLS:
            t2.add_column(label, justify="right")
        for name, metrics in test["splits"].items():
            t2.add_row(name, *[fmt_ci(metrics[m], metrics.get(f"{m}_ci"))
                               for m, _ in _TEST_COLS])
        for g, metrics in test["groups"].items():
            t2.add_row(f"[bold]{g or '(no group)'} (mean)[/]",
                       *[f"[bold]{fmt_ci(metrics[m], metrics.get(f'{m}_ci'))}[/]"
                         for m, _ in _TEST_COLS])
        out.print(t2)
        out.print(" · ".join(f"{label} {fmt_ci(test.get(k), test.get(f'{k}_ci'))}"
                             for k, label in (("misclassification_auroc", "misclf AUROC"),
                                              ("aurc", "AURC↓"), ("augrc", "AUGRC↓"))),
                  highlight=False)
        if (line := ci_line(test)) is not None:
            out.print(line, highlight=False, markup=False)
    print_adjusted(result["method"], result["adjusted"])


def print_adjusted(method: str, adjusted: list[dict]) -> None:
    """One line per default clamped to the store (`scorers.adapt`): it changes the numbers,
    so it is part of the result (stdout), not a warning."""
    from scorers.adapt import describe

    for a in adjusted:
        out.print(f"{method}: adjusted to this store: {describe(a)}", highlight=False,
                  soft_wrap=False)


def print_tuned(result: dict) -> None:
    """Below the tuned leaderboard: each method's chosen setting and its val metric."""
    from scorers.sweep import format_setting

    sel = result["select_by"]
    table = Table(title=f"settings chosen on val ({result['val_splits']['id']} vs "
                        f"{', '.join(result['val_splits']['ood'])}; by {_label(sel)})",
                  header_style="bold", show_edge=False)
    for col in ("method", "chosen setting", f"val {_label(sel)}", "settings", "adjusted"):
        table.add_column(col, justify="left" if col in ("method", "chosen setting") else "right")
    for name, r in result["methods"].items():
        fixed = [f"{k}={v} (fixed)" for k, v in r.get("fixed", {}).items()]
        setting = ", ".join(([format_setting(r["chosen"])] if r["chosen"] else []) + fixed)
        table.add_row(name, setting or format_setting({}), number(r["val"][sel]),
                      str(r["settings_scored"]), str(len(r["adjusted"])))
    out.print(table)
    for name, r in result["methods"].items():
        print_adjusted(name, r["adjusted"])


def sweep_cmd(
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    method: Annotated[str, typer.Option(help="Scorer name (see `featstore scorers`).",
                                        autocompletion=scorer_names)],
    grid: Annotated[list[str] | None, typer.Option(
        help="k=v1,v2,... values to sweep (JSON per value); repeatable. Default: the scorer's "
             "default grid, minus settings invalid for this store.")] = None,
    param: Annotated[list[str] | None, typer.Option(
        help="k=v fixed scorer parameter; repeatable.")] = None,
    select_by: Annotated[str, typer.Option(
        help="Val metric that chooses: auroc, aupr_in, aupr_out, ap_in, ap_out, fpr95, "
             "fpr95_ood, detection_error.")] = "auroc",
    tune_rule: TuneRuleOpt = "featstore",
    out_: Annotated[Path | None, typer.Option(
        "--out", help="Write the result to this file: .json (the JSON document), .csv "
        "or .jsonl (one row per method and split / group; docs/RESULTS.md).")] = None,
    ci: CiOpt = 0.95,
    boot: BootOpt = 1000,
    ci_method: CiMethodOpt = "percentile",
    boot_seed: BootSeedOpt = 0,
    threads: ThreadsOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Choose a scorer's hyperparameters on the val splits (id/val vs the OOD splits
    flagged usage = "val"), then report the chosen setting's test metrics (with 95%
    stratified-bootstrap intervals; --ci 0 turns them off). The scorer is fitted once;
    every setting shares the work; test splits never choose.

    Example: featstore sweep runs/demo/store --method knn --grid K=1,5,10,50 --select-by fpr95
    """
    setup(json_, quiet)
    if out_ is not None:
        output_format(out_)  # a bad suffix fails before any work
    apply_threads(threads)
    from scorers.sweep import check_grid, check_select_by, sweep

    try:
        check_select_by(select_by)
    except UsageError as exc:
        raise UsageError(f"--select-by: {exc}") from None
    check_tune_rule(tune_rule, select_by)
    grid_ = parse_grid(grid)
    params = parse_params(param)
    spec = ci_spec(ci, boot, ci_method, boot_seed)
    check_params(method, params)
    if grid_:
        check_grid(method, params, grid_, "--grid")
    with open_store(store) as st:
        require_rows(st)
        with status() as begin:
            begin(fit_label(st, method, verb="sweeping"))
            result = sweep(st, method, grid_, select_by, params, ci=spec, rule=tune_rule)
    if out_ is not None:
        from scorers.tabular import write_result

        write_result(out_, result)
    emit(result, lambda: print_sweep(result))


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
