"""Human output of `featstore gscore evaluate` / `gscore gbench STORE...`: the configuration
(printed first, on stderr, and again above the tables), the RMSE tables with 95% intervals,
Gscore's error beside the noise floor, robustness and cross-store tables, the timing line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from featstore.store.formatting import TARGET_TITLE as _TARGET_TITLE
from featstore.store.formatting import cell_number as _num
from featstore.store.formatting import mean_interval as _pm
from featstore.store.textsafe import markup_text

from .console import err, out

_DESCRIBE = (("preset", "preset"), ("ood_splits", "OOD splits"), ("id_pools", "ID pools"),
             ("meta_sets", "meta-sets"), ("models", "models"), ("tau", "tau"),
             ("repeats", "repeats"), ("targets", "targets"), ("correlation", "correlation"),
             ("baselines", "baselines"))


def _config_lines(d: dict, print_: Any) -> None:
    for key, label in _DESCRIBE:
        if key in d:
            print_(f"  {label}: {markup_text(d[key])}")


def announce_config(methods: list[str], targets: list[str]) -> Any:
    """The `announce` callback: the configuration on stderr before any work is done."""
    def announce(d: dict) -> None:
        err.print(f"[bold]gscore evaluate[/]  detectors {markup_text(', '.join(methods))}; "
                  f"targets {markup_text(', '.join(targets))}", highlight=False)
        _config_lines(d, lambda t: err.print(t, highlight=False))
    return announce


def _print_config(res: dict) -> None:
    """The first lines: everything that decided the numbers (JSON `config.describe`)."""
    cfg = res["config"]
    out.print(f"[bold]gscore evaluate[/]  detectors {markup_text(', '.join(cfg['methods']))}; "
              f"targets {markup_text(', '.join(cfg['targets']))}", highlight=False)
    _config_lines(cfg.get("describe") or {}, lambda t: out.print(t, highlight=False))


def print_gscore_evaluation(res: dict) -> None:
    """Table-1/6-style RMSE tables, correlations, robustness and cross-store tables."""
    cfg = res["config"]
    methods, targets = cfg["methods"], cfg["targets"]
    _print_config(res)
    for target in targets:
        title = _TARGET_TITLE[target]
        unit = "rounds" if cfg.get("protocol") == "cv" else "partitions"
        table = Table(title=f"RMSE (%) of predicted {title} on meta-test sets, mean [95% "
                            f"interval] over {cfg['repeats']} {unit} (lower is better)",
                      header_style="bold", show_edge=False)
        table.add_column("Unsup. eval. method")
        for m in methods:
            table.add_column(m, justify="right")
        rows: list[tuple[str, list[Any]]] = []
        base = res.get("baselines") or {}
        for key, label in (("confidence", "Confidence score (baseline)"),
                           ("auto_eval", "Auto evaluation (FD)")):
            cells = [base.get(m, {}).get(target, {}).get(key, {}).get("rmse") for m in methods]
            if any(cells):
                rows.append((label, cells))
        for label, name in res["models"].items():
            rows.append((name, [res["table"].get(m, {}).get(target, {}).get(label, {})
                                .get("rmse") for m in methods]))
        best = []
        for j in range(len(methods)):
            vals = [r[1][j]["mean"] for r in rows if r[1][j] and r[1][j].get("mean") is not None]
            best.append(min(vals) if vals else None)
        for label, cells in rows:
            text = []
            for j, c in enumerate(cells):
                s = _pm(c)
                if c and c.get("mean") is not None and c["mean"] == best[j]:
                    s = f"[bold green]{s}[/]"
                text.append(s)
            table.add_row(label, *text)
        out.print(table)
        _print_noise(res, target, title, unit)
    for target in targets:
        _print_robustness(res, target)
        _print_cross(res, target)
    if res.get("baseline_note"):
        err.print(f"auto-evaluation baseline skipped: {res['baseline_note']}", highlight=False)
    for name, why in (res.get("skipped") or {}).items():
        err.print(f"skipped {name}: {why}", highlight=False)
    for name, fits in (res.get("gmm_fits") or {}).items():
        if fits.get("not_converged") or fits.get("collapsed"):
            err.print(f"warning: {name}: {fits['not_converged']} of {fits['sets']} GMM fits did "
                      f"not converge, {fits['collapsed']} collapsed", highlight=False)
    out.print(timing_line(res), highlight=False)


def timing_line(res: dict) -> str:
    """Where the time went; the parts add up to the total (up to rounding)."""
    sec = res["seconds"]
    parts = ", ".join(f"{label} {sec[k]:.2f}" for k, label in (
        ("drawing_sets", "drawing sets"), ("true_metrics", "true metrics"),
        ("tau_search", "tau search"), ("modelling_and_regression", "modelling + regression"),
        ("baselines", "baselines"), ("other", "other")) if k in sec)
    rest = sec["total"] - sec["scoring"] - sec["protocol"]
    return (f"{res['meta_sets']:,} meta-sets ({res['set_evaluations']:,} set x detector "
            f"evaluations) in {sec['total']:.2f} s = scoring and features "
            f"{sec['scoring']:.2f} s + protocol {sec['protocol']:.2f} s ({parts}) + setup "
            f"{rest:.2f} s")


def _print_noise(res: dict, target: str, title: str, unit: str) -> None:
    """Per variant and detector: RMSE against the sampled targets, against the split-level
    targets, the oracle floor, and the correlations, each mean [95% interval]."""
    cfg = res["config"]
    side = cfg.get("correlation_sets", "meta-test")
    table = Table(title=escape(f"{title}: Gscore's error beside the noise floor, mean [95% "
                               f"interval] over {cfg['repeats']} {unit}; Pearson / Spearman "
                               f"on {side} sets"), header_style="bold", show_edge=False)
    for col in ("Gscore", "detector", "rmse", "rmse_split", "floor", "pearson", "spearman"):
        table.add_column(col, justify="left" if col in ("Gscore", "detector") else "right")
    for label, name in res["models"].items():
        for m in cfg["methods"]:
            c = res["table"].get(m, {}).get(target, {}).get(label, {})
            table.add_row(name, m, _pm(c.get("rmse")), _pm(c.get("rmse_split")),
                          _pm(c.get("floor")), _pm(c.get("pearson"), 3),
                          _pm(c.get("spearman"), 3))
    out.print(table)


def _print_robustness(res: dict, target: str) -> None:
    rob = res.get("robustness") or []
    if not rob:
        return
    methods = res["config"]["methods"]
    labels = list(next(iter(rob))["results"].get(methods[0], {}).get(target, {}))
    for label in labels:
        table = Table(title=f"Robustness, {res['models'].get(label, label)} -> "
                            f"{_TARGET_TITLE[target]}: RMSE (same setting) | RMSE (model fitted "
                            "at the main setting) | Spearman rho, meta-test sets",
                      header_style="bold", show_edge=False)
        table.add_column("IND:OOD")
        table.add_column("size", justify="right")
        table.add_column("ID+OOD", justify="right")
        for m in methods:
            table.add_column(m, justify="right")
        for r in rob:
            cells = []
            for m in methods:
                c = r["results"].get(m, {}).get(target, {}).get(label, {})
                cells.append(f"{_num(c.get('rmse'), '.2f')} | {_num(c.get('rmse_shift'), '.2f')}"
                             f" | {_num(c.get('spearman'), '+.2f')}")
            table.add_row(r["ratio"], str(r["size"] or "max"),
                          f"{r['mean_n_id']:.0f}+{r['mean_n_ood']:.0f}", *cells)
        out.print(table)


def _print_cross(res: dict, target: str) -> None:
    cross = res.get("cross_store") or {}
    if not cross:
        return
    methods = res["config"]["methods"]
    table = Table(title=f"Across stores ({_TARGET_TITLE[target]}): model fitted on one store's "
                        "meta-train sets, tested on another's meta-test sets — RMSE (r)",
                  header_style="bold", show_edge=False)
    table.add_column("Gscore")
    table.add_column("fit -> test")
    for m in methods:
        table.add_column(m, justify="right")
    first = cross.get(methods[0], {}).get(target, {})
    for label, by_a in first.items():
        for a, by_b in by_a.items():
            for b in by_b:
                cells = []
                for m in methods:
                    c = cross.get(m, {}).get(target, {}).get(label, {}).get(a, {}).get(b, {})
                    cells.append(f"{_num(c.get('rmse'), '.2f')} ({_num(c.get('pearson'))})")
                table.add_row(res["models"].get(label, label),
                              f"{Path(a).name} -> {Path(b).name}", *cells)
    out.print(table)
