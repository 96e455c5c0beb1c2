"""Flat records of the typed results, for the formats people open directly: CSV, JSON lines, a
pandas DataFrame. Pure: no I/O (the writers are `featstore.store.tabular_io`).

One record (a flat dict of scalars) per row of what the result tabulates:

- an evaluation (`evaluate`, tuned `sweep_all`): one row per method and OOD split
  (`level = "split"`), per method and group (`level = "group"`, the group's unweighted mean,
  DESIGN §4) and per method for the ID split (`level = "id"`: ID accuracy, misclassification
  AUROC, AURC, AUGRC);
- a sweep: one row per setting scored on the val splits (`chosen` marks the chosen one);
- a comparison: one row per split or group, metric and pair (`test = "delong"` for DeLong's
  AUROC test, `"bootstrap"` for the paired bootstrap).

Each metric `m` with an interval `m_ci = [lo, hi]` becomes the columns `m`, `m_lo`, `m_hi`;
mappings (params, settings) become one column each holding their JSON text; lists other
than intervals likewise. Column order: the order in which keys first appear.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featstore.store.fileio import atomic_write_result_json
from featstore.store.tabular_io import columns, output_format, write_rows

Record = dict[str, Any]


def _scalar(value: Any) -> Any:
    """A cell: numbers, strings, booleans and None as they are; anything else as JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, default=str)


def _metrics(values: Mapping[str, Any]) -> Record:
    """`{m: v, m_ci: [lo, hi]}` -> `{m: v, m_lo: lo, m_hi: hi}`; other values as cells."""
    flat: Record = {}
    for key, value in values.items():
        if key.endswith("_ci") and isinstance(value, Sequence) and len(value) == 2:
            stem = key[: -len("_ci")]
            flat[f"{stem}_lo"], flat[f"{stem}_hi"] = value
        elif not isinstance(value, Mapping):
            flat[key] = _scalar(value)
    return flat


def evaluation_records(result: Mapping[str, Any]) -> list[Record]:
    """Rows of an evaluation: per method, its ID row, then its splits, then its groups."""
    rows: list[Record] = []
    for method, m in result["methods"].items():
        head = {"method": method, "params": _scalar(m.get("params", {}))}
        id_metrics = {k: v for k, v in m.items()
                      if k.startswith(("misclassification_auroc", "aurc", "augrc"))}
        rows.append({**head, "level": "id", "name": result.get("id_split"),
                     "id_acc": result.get("id_acc"),
                     **_metrics({"id_acc_ci": result["id_acc_ci"]}
                                if result.get("id_acc_ci") is not None else {}),
                     **_metrics(id_metrics)})
        for level, key in (("split", "splits"), ("group", "groups")):
            for name, values in (m.get(key) or {}).items():
                rows.append({**head, "level": level, "name": name, **_metrics(values)})
    return rows


def sweep_records(result: Mapping[str, Any]) -> list[Record]:
    """Rows of a sweep: one per setting, its val metrics (the mean over the val OOD splits)."""
    chosen = result.get("chosen", {}).get("setting")
    rows: list[Record] = []
    for entry in result["settings"]:
        val = entry.get("val", {})
        mean = val.get("mean", val) if isinstance(val, Mapping) else {}
        rows.append({"method": result["method"], "setting": _scalar(entry.get("setting")),
                     "chosen": entry.get("setting") == chosen,
                     **{f"val_{k}": v for k, v in _metrics(mean).items()}})
    return rows


def comparison_records(result: Mapping[str, Any]) -> list[Record]:
    """Rows of a comparison: per split / group, DeLong's AUROC pairs then the bootstrap's."""
    rows: list[Record] = []
    for level, key in (("split", "splits"), ("group", "groups")):
        for name, tests in (result.get(key) or {}).items():
            for pair in tests.get("delong_auroc", []):
                rows.append({"level": level, "name": name, "test": "delong",
                             "metric": "auroc", **_metrics(pair)})
            for metric, pairs in (tests.get("bootstrap") or {}).items():
                for pair in pairs:
                    rows.append({"level": level, "name": name, "test": "bootstrap",
                                 "metric": metric, **_metrics(pair)})
    return rows


def records(result: Mapping[str, Any]) -> list[Record]:
    """The flat rows of an evaluation, a sweep or a comparison (module docstring); ValueError
    for any other mapping."""
    if "evaluation" in result and "splits" in result:
        return comparison_records(result)
    if "settings" in result and "method" in result:
        return sweep_records(result)
    if "methods" in result and "ood_splits" in result:
        return evaluation_records(result)
    raise ValueError("records: expected an evaluation, a sweep or a comparison result "
                     f"(keys: {', '.join(list(result)[:8])})")


def to_frame(rows: Sequence[Mapping[str, Any]]) -> Any:
    """A pandas DataFrame of `rows` (columns in `columns` order); ImportError naming the
    install command where pandas is not installed."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_frame() needs pandas: pip install pandas "
                          "(or write CSV with `--out FILE.csv`)") from None
    return pd.DataFrame(list(rows), columns=columns(rows))


def write_result(path: str | Path, result: Mapping[str, Any], option: str = "--out") -> Path:
    """Write `result` in the format `path` names (`featstore.store.tabular_io.output_format`):
    its JSON document for .json, its `records` as CSV or JSON lines for .csv / .jsonl."""
    fmt = output_format(path, option)
    if fmt == "json":
        return atomic_write_result_json(path, result)
    return write_rows(path, records(result), fmt)


__all__ = ["Record", "comparison_records", "evaluation_records", "records",
           "sweep_records", "to_frame", "write_result"]
