"""`featstore score` as one call: score splits with one method (defaults clamped to the store
by the one rule of `scorers.adapt`), summarise each split's scores, optionally save them.

`score_stats` is the per-split summary the command prints: n, mean, population std
(`np.std`, ddof 0), min and max of the float64 scores. `save_scores` writes the scores as an
.npz (one array per split, `/` in split names as `__`) atomically
(`featstore.store.fileio.atomic_save_npz`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from featstore.store.fileio import atomic_save_npz
from featstore.store.interfaces import StoreLike

from .evaluate import score_with_defaults
from .registry import resolve


def score_stats(scores: np.ndarray) -> dict[str, float | int]:
    """{"n", "mean", "std" (ddof 0), "min", "max"} of one split's scores."""
    return {"n": int(scores.size), "mean": float(scores.mean()), "std": float(scores.std()),
            "min": float(scores.min()), "max": float(scores.max())}


def save_scores(path: str | Path, scores: Mapping[str, np.ndarray]) -> Path:
    """Write {split: scores} as an .npz (keys: split names with `/` -> `__`; `.npz` appended
    to a name without it, as np.savez does), atomically."""
    return atomic_save_npz(path, {k.replace("/", "__"): v for k, v in scores.items()})


def score_store(store: StoreLike, method: str, params: Mapping[str, Any], splits: Sequence[str],
                *, use_cache: bool = True, allow_nonfinite: bool = False,
                save: str | Path | None = None, label: str | None = None) -> dict[str, Any]:
    """Score `splits` with `method` (`score_with_defaults`) and return the command's result:
    {"store" (`label`, default the store's path), "method", "params", "params_used",
    "adjusted", "fit_seconds", "score_seconds", "splits": {split: score_stats},
    "diagnostics" (the fitted scorer's, e.g. an index's recall@K), "saved" (the .npz written,
    or None)}."""
    diagnostics: dict[str, Any] = {}
    method = resolve(method)  # the one resolution of the name in this call
    scores, fit_s, score_s, used, adjusted = score_with_defaults(
        store, method, dict(params), list(splits), use_cache, diagnostics, allow_nonfinite)
    if save is not None:
        save_scores(save, scores)
    return {"store": str(store.path) if label is None else label, "method": method,
            "params": dict(params), "params_used": used, "adjusted": adjusted,
            "fit_seconds": fit_s, "score_seconds": score_s,
            "splits": {name: score_stats(s) for name, s in scores.items()},
            "diagnostics": diagnostics, "saved": str(save) if save is not None else None}


__all__ = ["save_scores", "score_stats", "score_store"]
