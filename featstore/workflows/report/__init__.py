"""`featstore report`: a self-contained HTML report (plots embedded) and its Markdown twin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from featstore.store.fileio import atomic_write_output
from featstore.store.store import Store
from featstore.workflows.report.collect import ReportData, collect
from featstore.workflows.report.reference import reference_table
from featstore.workflows.report.render import (
    Table,
    figures,
    gscore_tables,
    leaderboard_tables,
    render_html,
    render_markdown,
)
from scorers.stats import BootstrapSpec

_DEFAULT_CI = object()


def write_report(source: str | Path, out: str | Path, *, methods: list[str] | None = None,
                 tune: bool = False, include: list[Path] | None = None,
                 params: dict[str, dict[str, Any]] | None = None,
                 use_cache: bool = True, ci: Any = _DEFAULT_CI,
                 rank_by: str = "mean", tune_rule: str = "featstore",
                 reference: str | None = None) -> tuple[Path, Path]:
    """Write `out` (HTML) and `out` with suffix .md; returns both paths. Files are written to
    a temporary name and renamed, so a failed report leaves no half-written file. With
    `use_cache=False` scores are neither read from nor written to the store's scores.h5.
    `ci`: a scorers.stats.BootstrapSpec for the intervals and paired tests (default: 95%, 1000
    resamples, percentile, seed 0), or None for none. `rank_by`: the leaderboard's order,
    "mean" (of the near and far group AUROCs) or an OOD group's name
    (`featstore.workflows.report.leaderboard`). `tune_rule`: with `tune`, the tuning rule
    (`scorers.sweep`, "openood": OpenOOD's search). `reference` ("openood-v1.5"): a table
    of OpenOOD's published values beside the result's (`report.reference`)."""
    if ci is _DEFAULT_CI:
        ci = BootstrapSpec()
    out = Path(out)
    data = collect(Path(source), methods, tune, include, params, use_cache, ci, tune_rule)
    figs = figures(data)
    tables = leaderboard_tables(data, rank_by) + gscore_tables(data)
    if reference is not None:
        title, header, rows, notes = reference_table(data, reference, _classes(data))
        tables.insert(1, Table(title, header, rows, set(), "reference"))
        data.notes.extend(notes)
    md_path = out.with_suffix(".md")
    image_dir = out.with_name(out.stem + "_files")
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((out, render_html(data, figs, tables, rank_by)),
                       (md_path, render_markdown(data, figs, tables, image_dir, rank_by))):
        atomic_write_output(path, text)   # a unique no-follow temporary, then rename
    return out, md_path


def _classes(data: ReportData) -> int | None:
    """The class count of the result's store, when it can be opened."""
    path = data.result.get("store")
    if path and (Path(path) / "store.json").is_file():
        return len(Store.open(path).classes)
    return None


__all__ = ["ReportData", "collect", "write_report"]
