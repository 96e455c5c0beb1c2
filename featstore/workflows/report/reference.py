"""The report's published-reference table (`featstore report --reference openood-v1.5`): per
scorer, near and far AUROC with their intervals and OpenOOD v1.5's published values beside
them (`featstore.workflows.protocols.openood.published`), `outside` where a published value
lies outside the interval, and the likely causes of a gap as the table's note."""

from __future__ import annotations

from featstore.store.formatting import MISSING, with_interval
from featstore.workflows.protocols.openood.published import (
    CAUSES,
    check_reference,
    infer_benchmark,
    reference_rows,
)
from featstore.workflows.protocols.openood.table import summary_row
from featstore.workflows.report.collect import ReportData


def reference_table(data: ReportData, reference: str, num_classes: int | None
                    ) -> tuple[str, list[str], list[list[str]], list[str]]:
    """(title, header, rows, notes) of the reference table; the benchmark is told from the
    result's OOD splits and `num_classes` (`published.infer_benchmark`)."""
    check_reference(reference)
    res = data.result
    bench = infer_benchmark(res["ood_splits"], num_classes)
    summary = [summary_row(m, entry) for m, entry in res["methods"].items()]
    rows = []
    for r in reference_rows(summary, bench):
        cells = [r["method"]]
        for g in ("near", "far"):
            pub = r[f"{g}_auroc_published"]
            cells += [with_interval(r[f"{g}_auroc"], r[f"{g}_auroc_ci"]),
                      MISSING if pub is None else
                      f"{pub:.2f}{' outside' if r[f'{g}_auroc_outside'] else ''}"]
        cells.append(r["source"] or MISSING)
        rows.append(cells)
    header = ["scorer", "near AUROC", "near (OpenOOD v1.5)", "far AUROC", "far (OpenOOD v1.5)",
              "source"]
    notes = ["outside: the published value lies outside this result's interval; likely "
             "causes:", *CAUSES]
    return f"OpenOOD v1.5 published results ({bench})", header, rows, notes
