"""The IS-OOD shift commands as one call each (`featstore protocol shift-grid`,
`shift-degrees`, `laid-fit`); the pieces live in `featstore.workflows.protocols.shift`.

`grid_payload` is the JSON of one scorer's grid: its cells (`ShiftGrid.to_json`), the
per-level means of `metric` over the other axis's non-N/A cells (None for an all-N/A level)
and the correlation / sensitivity of those means with the level (`scorers.metrics.
shift_sensitivity`, IS-OOD Table 1)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import InputError, UsageError
from featstore.store.fileio import atomic_save_npy
from featstore.store.interfaces import StoreLike
from featstore.workflows.protocols import shift as sh
from scorers.metrics import OOD_METRIC_NAMES

Begin = Callable[[str], None]


def _no_step(_label: str) -> None:
    return None


def grid_payload(result: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """The JSON of one `shift.shift_grid` result for `metric` (module docstring)."""
    grid = result["grid"]
    means = {axis: [None if math.isnan(x) else float(x) for x in grid.level_means(metric, axis)]
             for axis in ("semantic", "covariate")}
    return {"method": result["method"], "source": result["source"],
            "splits": result["splits"], "edges": result["edges"],
            "outside": result.get("outside", 0), **grid.to_json(), "level_means": means,
            "sensitivity": grid.sensitivity(metric)}


def shift_grids(store: StoreLike, methods: Sequence[str], metric: str = "auroc", *,
                params: Mapping[str, Mapping[str, Any]] | None = None,
                levels: int = sh.DEFAULT_LEVELS, binning: str = "equal",
                min_count: int = sh.DEFAULT_MIN_COUNT,
                degrees: Mapping[str, np.ndarray] | None = None, use_cache: bool = True,
                levels_edges: Mapping[str, Sequence[float]] | None = None,
                begin: Begin = _no_step) -> dict[str, Any]:
    """Every method's shift grid on `store` (`shift.shift_grid`): {"metric", "results":
    [grid_payload, ...]} in `methods` order. `begin(label)` is called before each method.
    A metric outside OOD_METRIC_NAMES or `min_count` < 1 is a UsageError naming the option."""
    if metric not in OOD_METRIC_NAMES:
        raise UsageError(f"--metric {metric!r}: expected one of {', '.join(OOD_METRIC_NAMES)}")
    if min_count < 1:
        raise UsageError(f"--min-count {min_count}: must be >= 1")
    params = params or {}
    payload = []
    for m in methods:
        begin(f"shift grid of {m} on {store.path}")
        result = sh.shift_grid(store, m, params.get(m), levels, binning, min_count, degrees,
                               use_cache=use_cache, levels_edges=levels_edges)
        payload.append(grid_payload(result, metric))
    return {"metric": metric, "results": payload}


def degrees_summary(degrees: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """{split: {"rows", "semantic_mean", "covariate_mean"}} of per-row (sem, cov) degrees."""
    return {n: {"rows": int(len(v)), "semantic_mean": float(v[:, 0].mean()),
                "covariate_mean": float(v[:, 1].mean())} for n, v in degrees.items()}


def load_npy(path: Path, what: str) -> np.ndarray:
    """A finite numeric .npy array (never pickled); InputError naming `what` and the file
    otherwise (a NaN / inf in a LAID matrix or a text-feature file would turn every degree or
    the fit into NaN, written with exit 0)."""
    if not Path(path).is_file():
        raise InputError(f"{what} {str(path)!r}: file not found")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{what} {str(path)!r}: not a .npy array ({exc})") from None
    if arr.dtype.kind not in "iuf":
        raise InputError(f"{what} {str(path)!r}: expected a numeric array, got {arr.dtype}")
    bad = int(np.count_nonzero(~np.isfinite(arr))) if arr.dtype.kind == "f" else 0
    if bad:
        raise InputError(f"{what} {str(path)!r}: {bad} of {arr.size} values are NaN or inf")
    return arr


def store_shift_degrees(store: StoreLike, out: Path, *, laid: Path | None = None,
                        sem_dims: str | None = None, cov_dims: str | None = None,
                        k: int = sh.DEFAULT_K, id_split: str = "id/train",
                        begin: Begin = _no_step) -> dict[str, Any]:
    """Per-row semantic / covariate degrees of every OOD test split of `store` against
    `id_split` (`shift.store_degrees`; `laid` a .npy LAID matrix, or `sem_dims` / `cov_dims`
    'START:END'), saved to `out` (.npz, atomically): {"out", "splits": degrees_summary}."""
    w = load_npy(laid, "--laid") if laid is not None else None
    store.split(id_split)  # a missing reference split: exit 2, naming it
    begin(f"shift degrees of {store.path} against {id_split}")
    deg = sh.store_degrees(store, w, sh.parse_dims(sem_dims), sh.parse_dims(cov_dims), k,
                           id_split)
    sh.save_degrees(out, deg, {n: store.split(n).ids for n in deg})
    return {"out": str(out), "splits": degrees_summary(deg)}


def fit_laid_files(standard: Path, semantic_shift: Path, covariate_shift: Path, out: Path,
                   config: sh.LaidConfig, begin: Begin = _no_step) -> dict[str, Any]:
    """Learn the LAID matrix W from three (N, l) .npy text-feature files (`shift.fit_laid`)
    and save it to `out` (.npy, atomically): {"out", "shape", "orthogonality_error"
    (||W^T W - I||_F), "seconds"}."""
    arrays = [load_npy(p, what) for p, what in ((standard, "--standard"),
                                                (semantic_shift, "--semantic-shift"),
                                                (covariate_shift, "--covariate-shift"))]
    start = time.perf_counter()
    begin(f"fitting LAID ({config.steps} Adam steps)")
    w = sh.fit_laid(arrays[0], arrays[1], arrays[2], config)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_save_npy(out, w)
    orth = float(np.linalg.norm(w.T @ w - np.eye(len(w))))
    return {"out": str(out), "shape": list(w.shape), "orthogonality_error": orth,
            "seconds": time.perf_counter() - start}


__all__ = ["degrees_summary", "fit_laid_files", "grid_payload", "load_npy", "shift_grids",
           "store_shift_degrees"]
