"""The terminal tables of an evaluation (`featstore eval`, `demo`): one line per scorer.

Compact (default): every cell is `value±h`, h = half the width of the bootstrap interval
(`(hi - lo) / 2`; the bounds themselves are in `--json` and `--wide`), or `value [lo, hi]`
where the interval is not symmetric about the value (`featstore.store.formatting.compact`);
columns that do not fit the terminal are dropped lowest priority first and named in a note,
empty columns are hidden, the scorer name is never cut. `--wide`: every column,
`value [lo, hi]`, all four metrics per split.

Conventions in the headers: AUROC↑; FPR95↓ = FPR at 95% TPR with ID as the positive class
(the share of OOD samples accepted at the threshold that keeps 95% of ID samples; OpenOOD
v1.5's OOD-positive variant is `fpr95_ood` in the JSON); all numbers in percent.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from featstore.store.formatting import METRIC_HEADER, compact, with_interval
from featstore.store.textsafe import markup_text

from .common import ci_line
from .console import out
from .tables import Column, hidden_note, print_fitted

CONVENTION = ("all in %; FPR95↓ = FPR at 95% TPR, ID positive (the share of OOD accepted when "
              "95% of ID is kept)\nmisclf = misclassification-detection AUROC↑; AURC↓, AUGRC↓: "
              "selective classification")
BEST = "bold green"


def say(text: str) -> None:
    """A plain line (no markup), wrapped at words to the terminal's width."""
    out.print(text, highlight=False, markup=False, soft_wrap=False)


def _cell(value: float | None, interval: Sequence[float] | None, wide: bool) -> str:
    return with_interval(value, interval) if wide else compact(value, interval)


def _metric_column(header: str, values: list[tuple[float | None, Sequence[float] | None]],
                   wide: bool, priority: int, better: str | None) -> Column:
    """A column of one metric over the scorers; the best value (max / min) in bold green."""
    cells = [_cell(v, ci, wide) for v, ci in values]
    finite = [v for v, _ in values if v is not None and v == v]
    best = (max if better == "max" else min)(finite) if finite and better else None
    styles = [BEST if best is not None and v == best else None for v, _ in values]
    return Column(header, cells, priority=priority, styles=styles)


def group_columns(result: dict, wide: bool) -> list[Column]:
    """method | per group: AUROC↑, FPR95↓ | misclf AUROC↑ | AURC↓ | AUGRC↓ | time."""
    methods = result["methods"]
    rows = list(methods.values())
    groups = list(rows[0]["groups"])
    cols = [Column("method", list(methods), justify="left", priority=0)]
    for g in groups:
        for m, better, prio in (("auroc", "max", 1), ("fpr95", "min", 2)):
            vals = [(r["groups"][g][m], r["groups"][g].get(f"{m}_ci")) for r in rows]
            cols.append(_metric_column(f"{g}\n{METRIC_HEADER[m]}", vals, wide, prio, better))
    for key, better, prio in (("misclassification_auroc", "max", 3), ("aurc", "min", 4),
                              ("augrc", "min", 4)):
        vals = [(r.get(key), r.get(f"{key}_ci")) for r in rows]
        cols.append(_metric_column(METRIC_HEADER[key].replace(" ", "\n"), vals, wide, prio,
                                   better))
    times = ["cached" if r.get("cached") else f"{r['fit_seconds'] + r['score_seconds']:.1f}"
             for r in rows]
    cols.append(Column("fit+score\ns", times, priority=5))
    return cols


def split_columns(result: dict, wide: bool) -> list[Column]:
    """method | one column per OOD test split: `AUROC/FPR95` (wide: the four metrics with
    their intervals). The header is the split name without `ood/`, cut at its '/'."""
    methods = result["methods"]
    cols = [Column("method", list(methods), justify="left", priority=0)]
    for s in result["ood_splits"]:
        name = s.removeprefix("ood/").replace("/", "/\n", 1)
        if wide:
            cells = [" / ".join(_cell(r["splits"][s][m], r["splits"][s].get(f"{m}_ci"), True)
                                for m in ("auroc", "fpr95", "aupr_in", "aupr_out"))
                     for r in methods.values()]
        else:
            cells = ["/".join(compact(r["splits"][s][m]) for m in ("auroc", "fpr95"))
                     for r in methods.values()]
        cols.append(Column(name, cells, priority=1))
    return cols


def _chunks(columns: list[Column], width: int) -> list[list[Column]]:
    """The key column + as many of the others as fit `width`, repeated until all are shown."""
    key, rest = columns[0], columns[1:]
    chunks: list[list[Column]] = []
    while rest:
        chunk = [key, rest.pop(0)]
        while rest and sum(c.width() for c in chunk) + rest[0].width() <= width:
            chunk.append(rest.pop(0))
        chunks.append(chunk)
    return chunks


def print_group_table(result: dict, wide: bool = False) -> None:
    """The one-line-per-scorer group table, the convention, ID accuracy and the interval
    line."""
    has_ci = bool(result.get("ci"))
    title = (f"OOD detection vs {result['id_split']} (test splits; group = unweighted mean of "
             "its splits)")
    hidden = print_fitted(out, group_columns(result, wide), title, wide)
    say(CONVENTION)
    if has_ci and not wide:
        say(f"±h: half the width of the {100 * result['ci']['level']:g}% interval, where it "
            "is symmetric about the value; [lo, hi] where not (all bounds: --wide or --json)")
    if (note := hidden_note(hidden)) is not None:
        say(note)
    acc = with_interval(result["id_acc"], result.get("id_acc_ci"))
    say(f"ID accuracy ({result['id_split']}): {acc}%")
    if (line := ci_line(result)) is not None:
        say(line)


def print_split_table(result: dict, wide: bool = False) -> None:
    """Per OOD test split: AUROC/FPR95 (wide: AUROC / FPR95 / AUPR-IN / AUPR-OUT with
    intervals), in as many tables as the terminal's width needs."""
    cols = split_columns(result, wide)
    what = ("AUROC / FPR95 / AUPR-IN / AUPR-OUT [lo, hi]" if wide
            else "AUROC↑/FPR95↓ (intervals: --wide)")
    if wide:
        print_fitted(out, cols, f"per split  ·  {what}", wide=True)
        return
    for i, chunk in enumerate(_chunks(cols, out.width)):
        print_fitted(out, chunk, f"per split  ·  {what}" if i == 0 else None)


def skipped_table(result: dict) -> Table | None:
    """The scorers that could not run on this store, each with its one-line reason."""
    skipped = result.get("skipped") or {}
    if not skipped:
        return None
    table = Table(title=f"skipped: {len(skipped)} scorer{'s' if len(skipped) != 1 else ''} "
                        "could not run on this store", header_style="bold", show_edge=False)
    table.add_column("scorer", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for name, why in skipped.items():
        table.add_row(markup_text(name), markup_text(why))   # reasons name files, [tables]
    return table
