"""Flat rows of finished experiments for `featstore table --out FILE.csv | FILE.jsonl`: the
numbers of their `aggregate` (mean, std and count over runs, nothing recomputed), one row per
dataset, row unit (the aggregate's key: a spec, the stores, an OSR ratio), method and level:

- `level = "id"`: the method's ID-side statistics (ID accuracy, misclassification AUROC, the
  seconds of each phase), `name` empty;
- `level = "group"`: one OOD group's metrics, `name` the group.

Each statistic `s` with `{mean, std, n}` becomes the columns `s_mean`, `s_std`, `s_n`; the row
also carries the method's `runs` (n) and `skipped` counts. Pure: the writer is
`featstore.store.tabular_io`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _stats(values: Mapping[str, Any]) -> dict[str, Any]:
    """`{s: {mean, std, n}}` -> `{s_mean, s_std, s_n}` (other entries left out)."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and "mean" in value:
            flat.update({f"{key}_{k}": value.get(k) for k in ("mean", "std", "n")})
    return flat


def aggregate_records(datasets: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The rows of the module docstring for each (label, results.json) of `datasets`."""
    rows: list[dict[str, Any]] = []
    for label, result in datasets:
        for unit, methods in (result.get("aggregate") or {}).items():
            for method, entry in methods.items():
                head = {"dataset": label, "unit": unit, "method": method,
                        "runs": entry.get("n"), "skipped": entry.get("skipped")}
                rows.append({**head, "level": "id", "name": "", **_stats(entry)})
                for group, metrics in (entry.get("groups") or {}).items():
                    rows.append({**head, "level": "group", "name": group, **_stats(metrics)})
    return rows


__all__ = ["aggregate_records"]
