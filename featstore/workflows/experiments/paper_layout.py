"""The remote-sensing paper's table layout (Wang et al., Remote Sensing 16(9):1501, 2024,
Tables 5-16) over experiment results: one table per metric, rows dataset x benchmark, the
method columns grouped under their family, the top three of each row marked.

Tables, in the paper's order: AUROC, FPR@95, AUPR-IN, AUPR-OUT, ID-ACC (percent) and the
computation time in seconds (`method_s` of `aggregate`: the same phases for every row, named
in the table's caption, `aggregate.METHOD_PHASES`: the method's own training, none for a
post-hoc row on the shared `ce` model, + extraction + scoring; the table is left out when no
run recorded it).

Rows: per dataset (a results.json and its label) and per data split of its aggregate:
- OSR results (`[data] osr`): one row per ratio ("7/3"), as Tables 5-10;
- spec / store results: one row per OOD group of the spec, in the spec's order ("simi",
  "near", "far": the group names come from the spec), as Tables 11-14; the ID-ACC and time
  tables have one row per dataset ("ID", and the groups joined by "+"), as Tables 15-16.

Columns: the methods of all datasets, grouped by family (`FAMILIES`, the paper's Table 1:
Post Hoc, Training-Time Regularization, Outlier Exposure, Model Uncertainty), each family in
the order the methods first appear; a method outside the ten rows goes under "Other", last.
A method a dataset did not run is `–` there.

Cells: `mean ± std` (population std, `aggregate.mean_std`) over the row's runs, `(n=k)` when
fewer than the dataset's runs entered. Top three (the paper's bold "top three averages per
benchmark"): per row, the means as printed (rounded to the cell's digits) are ranked in the
metric's direction (higher is better, lower for FPR@95 and time) by standard competition
ranking: a cell is marked when fewer than three cells of its row print a strictly better
mean. Equal printed means share a place, so a tie at third place marks every tied cell (a
row may mark more than three) and the marking never depends on the column order. Missing
cells and methods carrying sanity flags (`(!)`, see `render`) are neither marked nor
counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from featstore.errors import InputError, UsageError
from featstore.specs.labels import check_unique, default_label, split_item
from featstore.store.fileio import atomic_write_output
from featstore.store.formatting import mean_std
from featstore.store.textsafe import markup_text, md_text, one_line
from featstore.workflows.experiments.results_check import check_results

from .aggregate import METHOD_PHASES

#: the output layouts of `featstore run`, `protocol osr` and `protocol ten-methods`
LAYOUTS = ("default", "paper")
#: the paper's Table 1 families of the ten rows (`presets.ten_method_rows`)
FAMILIES = {"MSP": "post hoc", "ViM": "post hoc", "KNN": "post hoc",
            "ConfBranch": "train-time", "LogitNorm": "train-time", "G-ODIN": "train-time",
            "OE": "outlier", "MCD": "outlier", "MC-Dropout": "model unc.",
            "TempScaling": "model unc."}
#: the families' titles in the paper's tables, in its column order; "other": not one of ten
FAMILY_TITLES = {"post hoc": "Post Hoc", "train-time": "Training-Time Regularization",
                 "outlier": "Outlier Exposure", "model unc.": "Model Uncertainty",
                 "other": "Other"}
#: FPR@95's two positive classes (`scorers.metrics`): §2.3 defines FPR@95 as "the proportion
#: of negative samples that are incorrectly predicted by the model when the model has a TPR
#: of 95%" without naming the positive class; its ten methods and AUPR-IN / AUPR-OUT names are
#: OpenOOD v1.5's, whose FPR@95 takes OOD as positive. Both tables are printed, each named
#: (the OOD-positive one when the results carry `fpr95_ood`).
FPR_ID_TITLE = "FPR@95 ID-positive (OOD accepted at 95% ID TPR)"
FPR_OOD_TITLE = "FPR@95 OOD-positive (ID rejected at 95% OOD TPR, OpenOOD v1.5)"
#: (key, title, better, digits, kind) of the tables; kind "group": per OOD group
PAPER_METRICS = (("auroc", "AUROC", "max", 2, "group"),
                 ("fpr95", FPR_ID_TITLE, "min", 2, "group"),
                 ("fpr95_ood", FPR_OOD_TITLE, "min", 2, "group"),
                 ("aupr_in", "AUPR-IN", "max", 2, "group"),
                 ("aupr_out", "AUPR-OUT", "max", 2, "group"),
                 ("id_acc", "ID-ACC", "max", 2, "id"),
                 ("method_s", "Time (s)", "min", 1, "time"))
RESULTS_FILE = "results.json"
#: a ten-methods output directory's list of its datasets' results (`ten_methods_run`)
DATASETS_FILE = "datasets.json"
#: the paper-layout Markdown beside an experiment's results.json
PAPER_FILE = "results.paper.md"


def check_layout(layout: str) -> str:
    """`layout` when it is one of LAYOUTS; UsageError naming the valid ones otherwise."""
    if layout not in LAYOUTS:
        raise UsageError(f"--layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    return layout


@dataclass(frozen=True)
class PaperCell:
    text: str
    top: bool


@dataclass(frozen=True)
class PaperRow:
    dataset: str
    benchmark: str
    cells: list[PaperCell]


@dataclass(frozen=True)
class PaperTable:
    """One metric's table: `columns` are (family title, method) in column order."""

    key: str
    title: str
    better: str
    columns: list[tuple[str, str]]
    rows: list[PaperRow]
    benchmark: str      # the second header: "ratio", "group" or "benchmark" (mixed)

    def spans(self) -> list[tuple[str, int]]:
        """(family title, number of columns) in column order."""
        out: list[tuple[str, int]] = []
        for family, _ in self.columns:
            if out and out[-1][0] == family:
                out[-1] = (family, out[-1][1] + 1)
            else:
                out.append((family, 1))
        return out

    def caption(self) -> str:
        way = "higher" if self.better == "max" else "lower"
        phases = (f" = {' + '.join(METHOD_PHASES)}, every row alike" if self.key == "method_s"
                  else " (a group's value: the mean over its OOD splits)"
                  if self.benchmark == "group" else "")
        return (f"{self.title}{phases} ({way} is better): mean ± std over each row's runs; "
                "the row's top three in bold (ties share a place)")


def top_three(means: Sequence[float | None], better: str) -> list[bool]:
    """Marks of one row (module docstring): `means` as printed, None for a cell that is
    missing or flagged; a cell is marked when fewer than three cells are strictly better."""
    sign = 1.0 if better == "max" else -1.0
    keys = [None if m is None else sign * m for m in means]
    return [k is not None and sum(1 for o in keys if o is not None and o > k) < 3
            for k in keys]


def columns_of(datasets: Sequence[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """(family title, method) of every method of the results, grouped by family."""
    seen: list[str] = []
    for _, result in datasets:
        for agg in result["aggregate"].values():
            seen += [m for m in agg if m not in seen]
    order = list(FAMILY_TITLES)
    ranked = sorted(seen, key=lambda m: order.index(FAMILIES.get(m, "other")))
    return [(FAMILY_TITLES[FAMILIES.get(m, "other")], m) for m in ranked]


def _row_units(result: Mapping[str, Any], kind: str) -> list[tuple[str, str, str | None]]:
    """(data split, benchmark label, OOD group or None) of one dataset's rows."""
    osr = bool(result["experiment"].get("osr"))
    units: list[tuple[str, str, str | None]] = []
    for split, agg in result["aggregate"].items():
        groups: list[str] = []
        for entry in agg.values():
            groups += [g for g in entry["groups"] if g not in groups]
        if kind != "group":
            label = split if osr else "ID" if kind == "id" else "+".join(groups) or "ID"
            units.append((split, label, None))
        else:
            units += [(split, (split if groups == ["osr"] else f"{split} {g}") if osr else g, g)
                      for g in groups]
    return units


def _stat(entry: Mapping[str, Any] | None, key: str, group: str | None) -> Any:
    if entry is None:
        return None
    if group is None:
        return entry.get(key)
    return entry["groups"].get(group, {}).get(key)


def _printed_mean(stat: Any, digits: int) -> float | None:
    mean = stat.get("mean") if isinstance(stat, Mapping) else None
    return None if mean is None else float(f"{float(mean):.{digits}f}")


def _table(datasets: Sequence[tuple[str, Mapping[str, Any]]], columns: list[tuple[str, str]],
           metric: tuple[str, str, str, int, str]) -> PaperTable | None:
    key, title, better, digits, kind = metric
    rows: list[PaperRow] = []
    recorded = False
    for label, result in datasets:
        for split, bench, group in _row_units(result, kind):
            agg = result["aggregate"][split]
            runs = max((a["n"] + a["skipped"] for a in agg.values()), default=0)
            entries = [agg.get(m) for _, m in columns]
            flagged = [bool(e and e.get("flags")) for e in entries]
            stats = [_stat(e, key, group) for e in entries]
            marks = top_three([None if f else _printed_mean(s, digits)
                               for s, f in zip(stats, flagged, strict=True)], better)
            recorded |= any(_printed_mean(s, digits) is not None for s in stats)
            rows.append(PaperRow(label, bench, [
                PaperCell(mean_std(s, digits, runs) + (" (!)" if f else ""), top)
                for s, f, top in zip(stats, flagged, marks, strict=True)]))
    if (kind == "time" or key == "fpr95_ood") and not recorded:
        return None
    kinds = {bool(r["experiment"].get("osr")) for _, r in datasets}
    head = ("ratio" if kinds == {True} else "group" if kinds == {False} else "benchmark") \
        if kind == "group" else "benchmark"
    return PaperTable(key, title, better, columns, rows, head)


def paper_tables(datasets: Sequence[tuple[str, Mapping[str, Any]]] | Mapping[str, Any]
                 ) -> list[PaperTable]:
    """The tables of the module docstring over [(dataset label, results)] (the runner's
    results dicts, e.g. results.json loaded); one results dict alone is labelled by
    `dataset_label`."""
    if isinstance(datasets, Mapping):
        datasets = [(dataset_label(datasets), datasets)]
    columns = columns_of(datasets)
    tables = [_table(datasets, columns, m) for m in PAPER_METRICS]
    return [t for t in tables if t is not None]


def dataset_label(result: Mapping[str, Any]) -> str:
    """A dataset's default label (`featstore.specs.labels.default_label`): the OSR data's or
    the spec's file name less .toml, else the experiment's name."""
    exp = result["experiment"]
    if exp.get("osr"):
        return default_label(str(exp["osr"]["data"]))
    if exp.get("spec"):
        return default_label(str(exp["spec"]))
    return str(exp.get("name") or "results")


def paper_markdown(datasets: Sequence[tuple[str, Mapping[str, Any]]] | Mapping[str, Any],
                   title: str | None = None) -> str:
    """The tables as Markdown: per table a heading, a header row of family titles (each
    over its first column) and a row of method names, then the rows; top three in bold."""
    lines = [f"# {md_text(title)}", ""] if title else []
    for t in paper_tables(datasets):
        families = []
        for family, span in t.spans():
            families += [md_text(family)] + [""] * (span - 1)
        lines += [f"## {md_text(t.caption())}", "",
                  "| dataset | " + t.benchmark + " | " + " | ".join(families) + " |",
                  "|---|---|" + "---:|" * len(t.columns),
                  "| | | " + " | ".join(f"**{md_text(m)}**" for _, m in t.columns) + " |"]
        for row in t.rows:
            lines.append(f"| {md_text(row.dataset)} | {md_text(row.benchmark)} | " + " | ".join(
                f"**{c.text}**" if c.top else c.text for c in row.cells) + " |")
        lines.append("")
    return "\n".join(lines + _notes(datasets))


def _notes(datasets: Sequence[tuple[str, Mapping[str, Any]]] | Mapping[str, Any]) -> list[str]:
    """Markdown lines: the flagged methods (`(!)`) and the skipped runs of every dataset."""
    if isinstance(datasets, Mapping):
        datasets = [(dataset_label(datasets), datasets)]
    flags = [f"- {md_text(label)} {md_text(split)} {md_text(method)}: {md_text(flag)}"
             for label, result in datasets for split, agg in result["aggregate"].items()
             for method, entry in agg.items() for flag in entry.get("flags") or []]
    lines = ["## Flagged methods (!): never marked", "", *flags, ""] if flags else []
    skipped = [f"- {md_text(label)} {md_text(s['split'])} seed {s['seed']} "
               f"{md_text(s['method'])}: {md_text(s['reason'])}"
               for label, result in datasets for s in result.get("skipped") or []]
    return lines + ["## Skipped runs (not in the means)", "",
                    *(skipped or ["none: every run was scored."]), ""]


def write_paper(datasets: Sequence[tuple[str, Mapping[str, Any]]] | Mapping[str, Any],
                path: str | Path, title: str | None = None) -> Path:
    """`paper_markdown` written to `path` (atomically); returns the path."""
    atomic_write_output(Path(path), paper_markdown(datasets, title))
    return Path(path)


def rich_paper_tables(datasets: Sequence[tuple[str, Mapping[str, Any]]] | Mapping[str, Any]
                      ) -> list[Table]:
    """The tables for the terminal: a two-line header (family over its first column, then
    the method), top three in bold green."""
    out = []
    for t in paper_tables(datasets):
        table = Table(title=markup_text(t.caption()), header_style="bold", show_edge=False)
        table.add_column("dataset")
        table.add_column(t.benchmark)
        first = {sum(n for _, n in t.spans()[:i]) for i in range(len(t.spans()))}
        for i, (family, method) in enumerate(t.columns):
            table.add_column(markup_text(f"{family if i in first else ''}\n{method}"),
                             justify="right")
        for row in t.rows:
            table.add_row(markup_text(row.dataset), markup_text(row.benchmark), *[
                f"[bold green]{markup_text(c.text)}[/]" if c.top else markup_text(c.text)
                for c in row.cells])
        out.append(table)
    return out


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{what} {str(path)!r}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{what} {str(path)!r}: not a readable JSON file "
                         f"({one_line(str(exc))})") from None


def load_results(path: str | Path, layout: str = "default") -> dict[str, Any]:
    """An experiment's results.json (the file, or the output directory holding it), checked
    to hold what `layout`'s renderers read (`results_check`)."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_FILE
    data = _read_json(p, "results")
    if not isinstance(data, dict) or not {"experiment", "aggregate"} <= set(data):
        raise InputError(f"results {str(p)!r}: not the results of `featstore run` (expected "
                         "'experiment' and 'aggregate')")
    check_results(data, f"results {str(p)!r}", full=layout != "paper")
    return data


def load_datasets(items: Iterable[str], what: str = "RESULTS", layout: str = "paper"
                  ) -> list[tuple[str, dict[str, Any]]]:
    """[(label, results)] of `[LABEL=]PATH` items (`featstore.specs.labels`; `what` names the
    argument in errors): PATH a results.json, an output directory holding one, or a `protocol
    ten-methods` output directory (its datasets.json: every dataset, under its own label).
    Without LABEL, the label is `dataset_label`'s. Labels are unique."""
    out: list[tuple[str, dict[str, Any], str]] = []
    for item in items:
        given = split_item(item, what)
        p = Path(given.path)
        if p.is_dir() and (p / DATASETS_FILE).is_file() and not (p / RESULTS_FILE).is_file():
            listed = _read_json(p / DATASETS_FILE, "datasets")
            if not isinstance(listed, dict) or not isinstance(listed.get("datasets"), dict):
                raise InputError(f"datasets {str(p / DATASETS_FILE)!r}: expected "
                                 "{\"datasets\": {label: results path}}")
            for name, rel in listed["datasets"].items():
                if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
                    raise InputError(f"datasets {str(p / DATASETS_FILE)!r}: {name!r} = {rel!r}: "
                                     "expected a path inside its directory")
                out.append((name, load_results(p / rel, layout), item))
            continue
        result = load_results(p, layout)
        out.append((given.label or dataset_label(result), result, item))
    if not out:
        raise UsageError(f"{what}: give at least one results.json (or its directory)")
    check_unique([(label, item) for label, _, item in out], what)
    return [(label, result) for label, result, _ in out]
