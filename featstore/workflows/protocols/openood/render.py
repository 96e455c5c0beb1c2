"""The Markdown of a `protocol openood` run (`OUT/table.md`, `featstore table OUT`): per tuning
mode the summary (near / far AUROC and OpenOOD's FPR@95 with featstore's intervals, the
setting), with the reference column beside the primary mode's AUROC when asked, then OpenOOD's
per-dataset table of every method; read back from `OUT/results.json`, nothing recomputed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from featstore.errors import InputError
from featstore.store.formatting import MISSING, setting_text, with_interval
from featstore.store.textsafe import md_text

from .published import CAUSES, check_reference, reference_rows
from .table import COLUMNS


def load_run(path: str | Path) -> dict[str, Any] | None:
    """The results.json of a `protocol openood` run (a directory or the file), or None when
    `path` holds another kind of result."""
    p = Path(path)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file():
        return None
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{str(p)!r}: not a readable results.json ({exc})") from None
    if isinstance(doc, dict) and "openood_name" in doc and "modes" in doc:
        return doc
    return None


def with_reference(doc: Mapping[str, Any], reference: str) -> dict[str, Any]:
    """`doc` with the reference rows of `reference` beside its primary mode's summary."""
    check_reference(reference)
    rows = reference_rows(doc["modes"][doc["primary"]]["summary"], doc["benchmark"])
    return {**doc, "reference": {"name": reference, "causes": list(CAUSES), "rows": rows}}


def _summary(rows: list[dict[str, Any]], ref: bool) -> list[str]:
    head = ["method", "near AUROC", "far AUROC"]
    if ref:
        head += ["near AUROC (OpenOOD v1.5)", "far AUROC (OpenOOD v1.5)"]
    head += ["near FPR@95", "far FPR@95", "setting"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [md_text(r["method"])]
        cells += [with_interval(r[f"{g}_auroc"], r[f"{g}_auroc_ci"]) for g in ("near", "far")]
        if ref:
            for g in ("near", "far"):
                pub = r.get(f"{g}_auroc_published")
                cells.append(MISSING if pub is None else
                             f"{pub:.2f}{' **outside**' if r[f'{g}_auroc_outside'] else ''}")
        cells += [with_interval(r[f"{g}_fpr95"], r[f"{g}_fpr95_ci"]) for g in ("near", "far")]
        cells.append(md_text(setting_text(r.get("chosen") or r.get("params"), "–")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _method_table(method: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"`{md_text(method)}`", "", "| | " + " | ".join(COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append(f"| {md_text(r['row'])} | " + " | ".join(
            with_interval(r[c], r.get(f"{c}_ci")) for c in COLUMNS) + " |")
    return lines + [""]


def openood_markdown(doc: Mapping[str, Any]) -> str:
    """The whole page (module docstring)."""
    ref = doc.get("reference")
    lines = [f"# OpenOOD v1.5 {md_text(doc['benchmark'])} "
             f"({'full-spectrum and ' if doc.get('fsood') else ''}standard OOD)", "",
             "FPR@95 is OpenOOD's (OOD positive: ID rejected at 95% OOD caught); intervals "
             "are featstore's 95% stratified bootstrap.", ""]
    for mode, report in doc["modes"].items():
        primary = mode == doc["primary"]
        lines += [f"## {md_text(mode)} tuning{' (main)' if primary else ''}", ""]
        rows = ref["rows"] if ref and primary else report["summary"]
        lines += _summary(rows, bool(ref and primary)) + [""]
        if ref and primary:
            lines += ["**outside**: the published value lies outside your 95% interval. "
                      "Likely causes:", ""] + [f"- {c}" for c in ref["causes"]] + [""]
        for method, table in report["tables"].items():
            lines += _method_table(method, table)
        for method, table in (report.get("fsood_tables") or {}).items():
            lines += _method_table(f"{method} (full-spectrum)", table)
    for name, why in (doc.get("left_out") or {}).items():
        lines.append(f"- left out: {md_text(name)}: {md_text(why)}")
    return "\n".join(lines).rstrip() + "\n"
