"""FACETS' results (Recalcati, Garcea, Piano, Lamberti & Morra, DSAA 2023, §VI Tables VI and
VII) over one store per dataset (e.g. the WordNet T40 / T45 / T50 or tier T1 / T2
assignments of `featstore protocol wordnet|tiers`, each extracted into its own store): per
dataset and OOD group, per method, the cell "FPR@95%TPR / Detection Error / AUROC" (percent;
`scorers.metrics`), and the misclassification-detection cell of each dataset's ID test split
(Table VII; `scorers.misclassification`, with its warning under 20 errors). The best value of
each metric per row is marked (lowest FPR and detection error, highest AUROC; ties all
marked, as Table VI's caption says). Methods a store cannot score are listed with the reason,
never dropped silently.

Pooled, as the paper: a dataset's OOD set is one set of rows (§IV, Tables II-V: each dataset
lists its OOD sources and one "Total", e.g. T1's 7,530 SUN + 16,100 ImageNet-val + 50,232
ImageNet-train OOD rows; Table VI has one cell per dataset), so each cell is the metric of
id/test against the group's OOD test splits CONCATENATED (`scorers.evaluate.pooled_groups`:
each source weighs its row count, 10 / 22 / 68 % for T1), not the mean over the splits
(featstore's `groups`, where each source weighs the same); with intervals, the bootstrap
resamples each split within the pool. Both layouts say "pooled" in their title.

Layouts: `markdown_table` (featstore's: one row per dataset x OOD group, the
misclassification row under each dataset's OOD rows) and `paper_markdown` (Tables VI and VII
as the paper prints them: Table VI one row per dataset, one "FPR / DE / AUROC" cell per
method; Table VII the misclassification cells, one row per dataset; a store with several OOD
groups gets one row per group, named "dataset group").

"Detection Error" is `detection_error_tpr95`: 0.5 (1 - TPR(t*)) + 0.5 FPR(t*) at the threshold
t* of FPR@95%TPR (the highest score keeping >= 95% of the ID rows), at the TPR it ACHIEVES
there. The paper gives no formula (§VI); its cells fit this one: where t* keeps 95% of the ID
rows it is 2.5 + FPR95 / 2 (e.g. MSP InterDataset 86.85 / 45.91), and where a coarse score
overshoots (OODL Baseline 0.37 / 1.61, below 2.5 + 0.37 / 2) the achieved TPR (97.15%) gives
the printed value. ODIN's min-over-thresholds `detection_error` is kept in each cell's JSON
beside it, not printed. The columns carry the paper's method names (`PAPER_NAMES`, Table VI's
header): MSP = `msp`; TS = `odin` at T = 1000 without input perturbation (the paper cites
ODIN [21] for TS and names no temperature; T = 1000 is ODIN's, featstore's reading, and its
TS column tracks MLV, as softmax at T = 1000 does); MLV = `mls`; ODIN = `odin_perturbed`; IP
TS MLV = `ip_ts_mlv`; OODL = `oodl`. A method outside the map is labelled with its scorer
name.

Tuning on validation sets, as the paper (../shared/papers/facets-realistic-ood-benchmark-
dsaa-2023.md): its methods use OOD samples "mainly [for] parameter selection" (§III.B),
ODIN's hyperparameters are T and eps (§III.B), OODL's the kernel approximation, nu and the
layer (§III.B), and "both ID and OOD samples may be necessary for hyperparameter tuning.
Separate validation and test sets for each setup were established" (§IV, after Table V;
every table is "(val/test)"). It names no grid and no criterion, so (featstore's choice) each
method with hyperparameters is tuned over its scorer's default grid (`featstore scorers`:
ODIN and IP TS MLV T x eps among the stored perturbed pairs, OODL nu) on `id/val` against the
store's OOD splits flagged usage val, by `select_by` (AUROC unless told) on the val OOD splits
POOLED (one val set per dataset, as the test cells), through featstore's one tuner
(`scorers.sweep.sweep_all`, test splits scored only after the choice). TS stays at T = 1000,
its definition (`PAPER_PARAMS` and a user's `params` are fixed, outside the grid); MSP and MLV
have no hyperparameter. A store without `id/val` or without a val OOD split is scored at the
default parameters and its "tuning" entry says so with the reason (printed under the table);
`tune=False` scores every store at the defaults. OODL's kernel approximation and layer are not
tuned (the store holds one feature layer; `approx` stays at its default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featstore.store.fileio import atomic_write_output
from featstore.store.interfaces import StoreLike
from featstore.store.textsafe import md_text
from scorers.evaluate import evaluate
from scorers.sweep import VAL_ID_SPLIT, format_setting, sweep_all

CELL_METRICS = (("fpr95", "min"), ("detection_error_tpr95", "min"), ("auroc", "max"))
#: Also kept in each cell's JSON (not printed): ODIN's min-over-thresholds detection error.
EXTRA_CELL_KEYS = ("detection_error",)
#: The paper's columns, in its order: scorer name -> Table VI's method name.
PAPER_NAMES: dict[str, str] = {"msp": "MSP", "odin": "TS", "mls": "MLV",
                               "odin_perturbed": "ODIN", "ip_ts_mlv": "IP TS MLV",
                               "oodl": "OODL"}
#: TS is softmax at ODIN's temperature, T = 1000 (Liang et al. 2018), without perturbation.
PAPER_PARAMS: dict[str, dict[str, Any]] = {"odin": {"temperature": 1000.0}}
_KEYS = tuple(k for k, _ in CELL_METRICS) + EXTRA_CELL_KEYS
#: The tables' title and the sentence that says how a group's cell is formed.
TITLE = "FACETS layout: FPR@95%TPR ↓ / Detection Error ↓ / AUROC ↑"
GROUP_NOTE = ("Each OOD cell is pooled: id/test against the group's OOD test splits "
              "concatenated (FACETS §IV, one OOD set per dataset); Detection Error at the TPR "
              "achieved at the 95%-TPR threshold.")


def column_label(method: str) -> str:
    """The paper's name of a scorer's column (`PAPER_NAMES`), else the scorer name."""
    return PAPER_NAMES.get(method, method)


def facets_params(methods: Sequence[str],
                  params: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The parameters each method runs with: `PAPER_PARAMS` overridden by `params` (methods
    at their defaults left out)."""
    used = {m: {**PAPER_PARAMS.get(m, {}), **dict((params or {}).get(m, {}))}
            for m in methods}
    return {m: p for m, p in used.items() if p}


def facets_table(stores: Sequence[tuple[str, Any]], methods: Sequence[str],
                 params: Mapping[str, Mapping[str, Any]] | None = None,
                 use_cache: bool = True, tune: bool = True,
                 select_by: str = "auroc") -> dict[str, Any]:
    """{"methods", "labels": {method: paper name}, "params", "group_form": "pooled", "rows":
    [{"dataset", "kind"
    ("ood" | "misclassification"), "group", "cells": {method: {fpr95, detection_error_tpr95,
    auroc, detection_error} | None}, "best": {metric: [methods]}, "warnings": {method:
    text}}], "skipped": {dataset: {method: reason}}, "tuning": {dataset: `tuning`}}.
    `params` override `PAPER_PARAMS` (fixed, never tuned). With `tune`, each store with val
    splits is tuned on them (module docstring). Each store's rows are `facets_dataset`'s
    (independent: an executor may run them apart, `featstore.workflows.experiments.
    workflows`), put together by `assemble_table`."""
    used = facets_params(methods, params)
    return assemble_table(methods, used, [(label, *facets_dataset(label, store, methods, used,
                                                                  use_cache, tune, select_by))
                                          for label, store in stores])


def untuned_reason(store: StoreLike) -> str | None:
    """Why a store cannot be tuned on validation splits (None: it can)."""
    missing = ([] if store.has_split(VAL_ID_SPLIT) else [f"no {VAL_ID_SPLIT} split"]) + (
        [] if store.splits(role="ood", usage="val") else ["no OOD split flagged usage val"])
    return " and ".join(missing) or None


def tuned_scores(store: StoreLike, methods: Sequence[str],
                 used: Mapping[str, Mapping[str, Any]], use_cache: bool, tune: bool,
                 select_by: str) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The store's evaluation and its "tuning" entry: with `tune` and val splits,
    `sweep_all` (each method's chosen setting on val, its test metrics) and {"tuned": True,
    "select_by", "val_splits", "methods": {method: {"setting" (the chosen grid values),
    "params" (every parameter used), "val" (the chosen setting's pooled val metric), "grid",
    "adjusted"}}}; else `evaluate` at `used` and {"tuned": False, "reason"}."""
    reason = untuned_reason(store) if tune else "not asked (tune=False)"
    if reason is not None:
        return (evaluate(store, list(methods), dict(used), use_cache=use_cache),
                {"tuned": False, "reason": reason})
    res = sweep_all(store, list(methods), dict(used), select_by=select_by, select_on="pooled")
    chosen = {m: {"setting": r["chosen"], "params": r["params"], "val": r["val"][select_by],
                  "grid": r["grid"], "adjusted": r["adjusted"]}
              for m, r in res["methods"].items()}
    return res, {"tuned": True, "select_by": select_by, "val_splits": res["val_splits"],
                 "methods": chosen}


def facets_dataset(label: str, store: StoreLike, methods: Sequence[str],
                   used: Mapping[str, Mapping[str, Any]], use_cache: bool = True,
                   tune: bool = True, select_by: str = "auroc"
                   ) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, Any]]:
    """One store's rows of the table (its OOD groups, then its misclassification row), the
    methods it could not score ({method: reason}) and its "tuning" entry (`tuned_scores`)."""
    rows: list[dict[str, Any]] = []
    res, tuning = tuned_scores(store, methods, used, use_cache, tune, select_by)
    scored = res["methods"]
    groups: list[str] = []
    for m in scored.values():
        groups += [g for g in m["pooled"] if g not in groups]
    for g in groups:
        cells = {m: ({k: scored[m]["pooled"][g][k] for k in _KEYS}
                     if m in scored else None) for m in methods}
        rows.append({"dataset": label, "kind": "ood", "group": g, "cells": cells,
                     "best": _best(cells), "warnings": {}})
    cells, warnings = {}, {}
    for m in methods:
        mis = scored.get(m, {}).get("misclassification")
        cells[m] = ({k: mis[k] for k in _KEYS} if mis else None)
        if mis and mis.get("warning"):
            warnings[m] = mis["warning"]
        elif m in scored and not mis:
            warnings[m] = "misclassification metrics undefined (no error or no correct row)"
    rows.append({"dataset": label, "kind": "misclassification", "group": "id/test",
                 "cells": cells, "best": _best(cells), "warnings": warnings})
    return rows, dict(res["skipped"] or {}), tuning


def assemble_table(methods: Sequence[str], used: Mapping[str, Any],
                   parts: Sequence[tuple[str, list[dict[str, Any]], Mapping[str, str],
                                         Mapping[str, Any]]]) -> dict[str, Any]:
    """The table of `facets_table` from each dataset's (label, rows, skipped, tuning), in
    order."""
    rows = [r for _, part_rows, _, _ in parts for r in part_rows]
    skipped = {label: dict(sk) for label, _, sk, _ in parts if sk}
    return {"methods": list(methods), "labels": {m: column_label(m) for m in methods},
            "params": dict(used), "group_form": "pooled", "rows": rows, "skipped": skipped,
            "tuning": {label: dict(t) for label, _, _, t in parts}}


def tuning_notes(table: Mapping[str, Any]) -> list[str]:
    """One line per dataset: the parameters each tuned column chose on val (methods with a
    grid), or why its columns are at the default parameters."""
    lines = []
    for label, t in table.get("tuning", {}).items():
        if not t["tuned"]:
            lines.append(f"{label}: not tuned ({t['reason']}): every column at its default "
                         "parameters")
            continue
        picks = [f"{column_label(m)} {format_setting(c['setting'])}"
                 for m, c in t["methods"].items() if c["grid"]]
        lines.append(f"{label}: tuned on {t['val_splits']['id']} vs "
                     f"{', '.join(t['val_splits']['ood'])} by {t['select_by']}: "
                     + ("; ".join(picks) if picks else "no column has a grid"))
    return lines


def _best(cells: Mapping[str, Mapping[str, float] | None]) -> dict[str, list[str]]:
    out = {}
    for key, better in CELL_METRICS:
        vals = {m: c[key] for m, c in cells.items() if c is not None}
        if vals:
            top = max(vals.values()) if better == "max" else min(vals.values())
            out[key] = [m for m, v in vals.items() if v == top]
    return out


def cell_text(cell: Mapping[str, float] | None, best: Mapping[str, list[str]], method: str,
              mark: tuple[str, str]) -> str:
    """'FPR / DetErr / AUROC' with the best values wrapped in `mark` (open, close)."""
    if cell is None:
        return "–"
    parts = []
    for key, _ in CELL_METRICS:
        text = f"{cell[key]:.2f}"
        parts.append(f"{mark[0]}{text}{mark[1]}" if method in best.get(key, []) else text)
    return " / ".join(parts)


def markdown_table(table: dict[str, Any]) -> str:
    """The table as Markdown (best values bold), then warnings and skipped methods."""
    methods = table["methods"]
    lines = [f"# {TITLE} (in %)", "", GROUP_NOTE, "",
             "| dataset | rows | " + " | ".join(md_text(column_label(m)) for m in methods)
             + " |",
             "|---|---|" + "---|" * len(methods)]
    for r in table["rows"]:
        what = ("misclassification (id/test)" if r["kind"] == "misclassification"
                else f"OOD {r['group']}")
        lines.append(f"| {md_text(r['dataset'])} | {md_text(what)} | " + " | ".join(
            cell_text(r["cells"][m], r["best"], m, ("**", "**")) for m in methods) + " |")
    return "\n".join(lines + _notes(table)) + "\n"


def _notes(table: dict[str, Any]) -> list[str]:
    notes = [f"- {md_text(line)}" for line in tuning_notes(table)]
    notes += [f"- {md_text(r['dataset'])} {md_text(m)}: {md_text(w)}" for r in table["rows"]
              for m, w in r["warnings"].items()]
    notes += [f"- {md_text(d)} {md_text(m)}: skipped ({md_text(why)})"
              for d, ms in table["skipped"].items() for m, why in ms.items()]
    return ["", "Notes:", ""] + notes if notes else []


def paper_rows(table: Mapping[str, Any], kind: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(row label, row) of one of the paper's tables: kind "ood" (Table VI: one row per
    dataset, "dataset group" when a store has several OOD groups) or "misclassification"
    (Table VII)."""
    rows = [r for r in table["rows"] if r["kind"] == kind]
    multi = {d for d in {r["dataset"] for r in rows}
             if sum(r["dataset"] == d for r in rows) > 1}
    return [(f"{r['dataset']} {r['group']}" if r["dataset"] in multi else r["dataset"], r)
            for r in rows]


def paper_markdown(table: dict[str, Any]) -> str:
    """The paper's layout (§VI): Table VI (OOD detection, one row per dataset) and Table VII
    (misclassification detection on id/test, one row per dataset), each "FPR / DE / AUROC"
    cell per method, the best bold; then the notes."""
    methods = table["methods"]
    head = ["| dataset | " + " | ".join(md_text(column_label(m)) for m in methods) + " |",
            "|---|" + "---|" * len(methods)]
    lines = [f"# {TITLE} (in %)", "", GROUP_NOTE, ""]
    for title, kind in (("Table VI: OOD detection", "ood"),
                        ("Table VII: misclassification detection (id/test)",
                         "misclassification")):
        lines += [f"## {title}", "", *head]
        lines += [f"| {md_text(label)} | " + " | ".join(
            cell_text(r["cells"][m], r["best"], m, ("**", "**")) for m in methods) + " |"
            for label, r in paper_rows(table, kind)]
        lines.append("")
    return "\n".join(lines[:-1] + _notes(table)) + "\n"


def write_markdown_table(path: Path, table: dict[str, Any], layout: str = "rows") -> Path:
    """Write `markdown_table(table)` (layout "rows") or `paper_markdown(table)` (layout
    "paper") to `path` (its folder created), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = paper_markdown(table) if layout == "paper" else markdown_table(table)
    return atomic_write_output(path, text)
