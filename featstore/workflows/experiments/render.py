"""The results of an experiment as tables: one per data split in the remote-sensing paper's
layout (rows: metric x OOD group, then ID accuracy and times; columns: methods; cells mean ±
std over the runs, n when runs are missing), and the list of skipped runs with reasons.
`table_rows` is shared by the terminal (rich, in the CLI) and the Markdown report. A method
whose runs carry sanity flags (`flags`: ID accuracy near chance, a class permutation fitting
far better) is marked `(!)` in every cell, never bolded as best, and its flags are listed."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from featstore.store.formatting import mean_std
from featstore.store.textsafe import markup_text, md_text

#: (key, label, better) of the table's metric rows, the paper's Tables 5-10
METRIC_ROWS = (("auroc", "AUROC", "max"), ("fpr95", "FPR95", "min"),
               ("aupr_in", "AUPR-IN", "max"), ("aupr_out", "AUPR-OUT", "max"))
SCALAR_ROWS = (("id_acc", "ID ACC", "id/test", "max"),
               ("method_s", "time s", "method", "min"),
               ("total_s", "time s", "total", "min"))


def table_rows(result: dict[str, Any], split: str) -> tuple[list[str], list[list[Any]]]:
    """(method names, rows [label, group, (cell text, is best), ...]) of one data split."""
    agg = result["aggregate"][split]
    methods = list(agg)
    runs = max((a["n"] + a["skipped"] for a in agg.values()), default=0)
    groups: list[str] = []
    for a in agg.values():
        groups += [g for g in a["groups"] if g not in groups]
    rows: list[list[Any]] = []
    flagged = [bool(agg[m].get("flags")) for m in methods]

    def add(label: str, group: str, stats: list[dict[str, Any] | None], better: str,
            digits: int = 2) -> None:
        means = [s["mean"] for s, f in zip(stats, flagged, strict=True)
                 if s and s.get("mean") is not None and not f]
        best = (max(means) if better == "max" else min(means)) if means else None
        rows.append([label, group, *[(mean_std(s, digits, runs) + (" (!)" if f else ""),
                                      best is not None and s is not None and not f
                                      and s.get("mean") == best)
                                     for s, f in zip(stats, flagged, strict=True)]])

    for key, label, better in METRIC_ROWS:
        for g in groups:
            add(label, g, [agg[m]["groups"].get(g, {}).get(key) for m in methods], better)
    for key, label, group, better in SCALAR_ROWS:
        add(label, group, [agg[m][key] for m in methods], better,
            1 if key.endswith("_s") else 2)
    return methods, rows


def flagged_methods(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(data split, method, flag) for every sanity flag of the aggregate."""
    return [(split, method, flag) for split, agg in result["aggregate"].items()
            for method, entry in agg.items() for flag in entry.get("flags") or []]


def title(result: dict[str, Any], split: str) -> str:
    exp = result["experiment"]
    seeds = len(exp["seeds"])
    runs = int(exp.get("runs", 1))
    where = "the spec" if split == "spec" else f"OSR {split}"
    over = (f"{runs} training runs x {seeds} class divisions ({runs * seeds} runs)"
            if runs > 1 else f"{seeds} seed(s)")
    tune = (f"tuned on val by {exp['select_by']}" if exp["tune_rule"] == "val"
            else "tuned on val by OpenOOD v1.5's search" if exp["tune_rule"] == "openood"
            else f"tuned on val by {exp['select_by']} over the paper's grids (RS §2.5)"
            if exp["tune_rule"] == "paper" else "default parameters")
    return (f"{exp['name']} — {where}: mean ± std (population) over {over}, in %, "
            f"{tune}; a group's value is the mean over its OOD splits; times in s")


def markdown_report(result: dict[str, Any]) -> str:
    """The whole results file as Markdown (tables, skipped runs, how to reproduce)."""
    exp = result["experiment"]
    lines = [f"# {md_text(exp['name'])}", "",
             f"Architecture {md_text(result['arch'])}; seeds {exp['seeds']}; training "
             f"{md_text(exp['train'] or 'defaults')}; tuning rule {md_text(exp['tune_rule'])}"
             f" (select by {md_text(exp['select_by'])}); wall time {result['wall_s']:.1f} s.",
             ""]
    for split in result["aggregate"]:
        methods, rows = table_rows(result, split)
        lines += [f"## {md_text(title(result, split))}", "",
                  "| metric | group | " + " | ".join(md_text(m) for m in methods) + " |",
                  "|---|---|" + "---:|" * len(methods)]
        for label, group, *cells in rows:
            lines.append(f"| {label} | {md_text(group)} | " + " | ".join(
                f"**{t}**" if best else t for t, best in cells) + " |")
        lines.append("")
    flags = flagged_methods(result)
    if flags:
        lines += ["## Flagged methods (!) — not marked best", ""]
        lines += [f"- {md_text(split)} {md_text(method)}: {md_text(flag)}"
                  for split, method, flag in flags] + [""]
    lines += ["## Skipped runs", ""]
    if result["skipped"]:
        lines += [f"- {md_text(s['split'])} seed {s['seed']} {md_text(s['method'])}: "
                  f"{md_text(s['reason'])}"
                  for s in result["skipped"]]
    else:
        lines.append("none: every run was scored.")
    lines.append("")
    return "\n".join(lines)


def rich_tables(result: dict[str, Any]) -> list[Any]:
    """rich Tables for the terminal: one per data split, then the skipped runs."""
    tables = []
    for split in result["aggregate"]:
        methods, rows = table_rows(result, split)
        t = Table(title=markup_text(title(result, split)), header_style="bold",
                  show_edge=False)
        t.add_column("metric")
        t.add_column("group")
        for m in methods:
            t.add_column(markup_text(m), justify="right")
        for label, group, *cells in rows:
            t.add_row(label, markup_text(group), *[
                f"[bold green]{markup_text(c)}[/]" if best else markup_text(c)
                for c, best in cells])
        tables.append(t)
    return tables + rich_notes(result)


def rich_notes(result: dict[str, Any]) -> list[Any]:
    """The tables under every layout: the flagged methods (when any) and the skipped runs."""
    tables = []
    flags = flagged_methods(result)
    if flags:
        t = Table(title="flagged methods (!): never marked best", header_style="bold red",
                  show_edge=False)
        for col in ("split", "method", "sanity check"):
            t.add_column(col)
        for row in flags:
            t.add_row(*map(markup_text, row))
        tables.append(t)
    skipped = Table(title="skipped runs (not in the means above)", header_style="bold",
                    show_edge=False)
    for col in ("split", "seed", "method", "reason"):
        skipped.add_column(col)
    for s in result.get("skipped") or []:
        skipped.add_row(*map(markup_text, (s["split"], str(s["seed"]), s["method"],
                                           s["reason"])))
    if not result.get("skipped"):
        skipped.add_row("–", "–", "–", "none: every run was scored")
    tables.append(skipped)
    return tables
