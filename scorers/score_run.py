"""`featstore score` as one call: score splits with one method (defaults clamped to the store
by the one rule of `scorers.adapt`), summarise each split's scores, optionally save them.

`score_stats` is the per-split summary the command prints: n, mean, population std
(`np.std`, ddof 0), min and max of the float64 scores. `save_scores` writes the scores
atomically in the format the file's suffix names: an .npz (one array per split, `/` in split
names as `__`; `featstore.store.fileio.atomic_save_npz`), or one row per scored row as CSV or
JSON lines (`.csv`, `.jsonl`: split, row, id, label, score; `featstore.store.tabular_io`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from featstore.store.fileio import atomic_save_npz
from featstore.store.interfaces import StoreLike
from featstore.store.tabular_io import SCORE_FORMATS, output_format, write_rows

from .evaluate import score_with_defaults
from .registry import resolve


def score_stats(scores: np.ndarray) -> dict[str, float | int]:
    """{"n", "mean", "std" (ddof 0), "min", "max"} of one split's scores."""
    return {"n": int(scores.size), "mean": float(scores.mean()), "std": float(scores.std()),
            "min": float(scores.min()), "max": float(scores.max())}


def save_scores(path: str | Path, scores: Mapping[str, np.ndarray],
                store: StoreLike | None = None) -> Path:
    """Write {split: scores}, atomically, as the suffix of `path` says: an .npz (keys: split
    names with `/` -> `__`; `.npz` appended to a name without a suffix, as np.savez does), or
    .csv / .jsonl rows {split, row, id, label, score} (ids and labels read from `store`,
    required for those)."""
    fmt = output_format(path, "--save", SCORE_FORMATS)
    if fmt == "npz":
        return atomic_save_npz(path, {k.replace("/", "__"): v for k, v in scores.items()})
    if store is None:
        raise ValueError(f"save_scores: {fmt} rows need the store (ids and labels)")
    rows: list[dict[str, Any]] = []
    for name, values in scores.items():
        split = store.split(name)
        ids, labels = np.asarray(split.ids), np.asarray(split.labels)
        rows.extend({"split": name, "row": i, "id": str(ids[i]), "label": int(labels[i]),
                     "score": float(values[i])} for i in range(values.size))
    return write_rows(path, rows, fmt)


def score_store(store: StoreLike, method: str, params: Mapping[str, Any], splits: Sequence[str],
                *, use_cache: bool = True, allow_nonfinite: bool = False,
                save: str | Path | None = None, label: str | None = None) -> dict[str, Any]:
    """Score `splits` with `method` (`score_with_defaults`) and return the command's result:
    {"store" (`label`, default the store's path), "method", "params", "params_used",
    "adjusted", "fit_seconds", "score_seconds", "splits": {split: score_stats},
    "diagnostics" (the fitted scorer's, e.g. an index's recall@K), "saved" (the .npz written,
    or None)}."""
    diagnostics: dict[str, Any] = {}
    if save is not None:
        output_format(save, "--save", SCORE_FORMATS)  # a bad suffix fails before any work
    method = resolve(method)  # the one resolution of the name in this call
    scores, fit_s, score_s, used, adjusted = score_with_defaults(
        store, method, dict(params), list(splits), use_cache, diagnostics, allow_nonfinite)
    if save is not None:
        save_scores(save, scores, store)
    return {"store": str(store.path) if label is None else label, "method": method,
            "params": dict(params), "params_used": used, "adjusted": adjusted,
            "fit_seconds": fit_s, "score_seconds": score_s,
            "splits": {name: score_stats(s) for name, s in scores.items()},
            "diagnostics": diagnostics, "saved": str(save) if save is not None else None}


__all__ = ["save_scores", "score_stats", "score_store"]
