"""One split's arrays as a store holds them: the one validation and normalization shared by
`Store.write_split` (on disk) and `featstore.ArrayStore` (in memory), so the same arrays give
the same values, hence the same scores, either way.

`prepare_split` checks shapes against the head and returns: features cast to `dtype`
(float32 | float16), logits float32 (computed as float32 features @ W.T + b when absent),
labels int64 (-1 when absent; ID/CSID labels in [-1, C - 1]), ids as str (the row index when
absent), extras as given with their row axis (0, or 1 for (T, N, ...) arrays). NumPy arrays,
anything `np.asarray` takes, or torch tensors (converted with `.detach().cpu().numpy()`,
without importing torch) are accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from featstore.errors import UsageError
from featstore.store.layout import FEATURE_DTYPES
from featstore.store.manifest import USAGES, default_usage
from featstore.store.names import parse_split_name
from featstore.store.values import check_float16_range


def to_numpy(value: ArrayLike) -> np.ndarray:
    """A NumPy array of `value`; a torch tensor (anything with `detach` and `cpu`) is moved to
    the CPU first, so a CUDA or autograd tensor works as well as an array."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def prepare_head(head: tuple[Any, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(W, b) as contiguous float32 (C, D) and (C,); UsageError on other shapes or on NaN /
    inf in either (every scorer that reads the head would turn them into NaN scores)."""
    weight = np.ascontiguousarray(to_numpy(head[0]), dtype=np.float32)
    bias = np.ascontiguousarray(to_numpy(head[1]), dtype=np.float32)
    if weight.ndim != 2 or bias.shape != (weight.shape[0],):
        raise UsageError(
            f"head: expected weight (C, D) and bias (C,), got {weight.shape} and {bias.shape}"
        )
    bad = int(np.count_nonzero(~np.isfinite(weight)) + np.count_nonzero(~np.isfinite(bias)))
    if bad:
        raise UsageError(f"head: {bad} values of the weight / bias are NaN or inf; every "
                         "scorer that reads the head would turn them into NaN scores")
    return weight, bias


@dataclass
class SplitArrays:
    """A split's validated arrays (see the module docstring)."""

    name: str
    usage: str
    features: np.ndarray
    logits: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    row_axes: dict[str, int] = field(default_factory=dict)


_INT64_MAX = int(np.iinfo(np.int64).max)


def _labels(name: str, labels: ArrayLike | None, n: int, classes: int, role: str) -> np.ndarray:
    labels = np.full(n, -1, dtype=np.int64) if labels is None else to_numpy(labels)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise UsageError(f"split {name!r}: labels must be (N={n},) integers, got {labels.shape} "
                         f"{labels.dtype}")
    if labels.size and labels.dtype.kind == "u" and int(labels.max()) > _INT64_MAX:
        # a uint64 2**64 - 1 would wrap to -1 (unknown) and silently leave the accuracy
        raise UsageError(f"split {name!r}: label {int(labels.max())} does not fit int64 "
                         f"(labels must lie in [-1, {classes - 1}])")
    labels = labels.astype(np.int64)
    if role != "ood" and ((labels < -1) | (labels >= classes)).any():
        raise UsageError(f"split {name!r}: labels must lie in [-1, {classes - 1}]")
    return labels


def prepare_split(name: str, head: tuple[np.ndarray, np.ndarray] | None, *, features: ArrayLike,
                  logits: ArrayLike | None = None, labels: ArrayLike | None = None,
                  ids: ArrayLike | None = None,
                  extras: Mapping[str, Any] | None = None, usage: str | None = None,
                  dtype: str = "float32") -> SplitArrays:
    """Validate and normalize one split's arrays (module docstring); UsageError naming the
    split and what was expected. `head` None (an ArrayStore without a head): logits are
    required and their width is the class count."""
    parsed = parse_split_name(name)
    usage = usage or default_usage(name)
    if usage not in USAGES:
        raise UsageError(f"split {name!r}: usage {usage!r} is not one of {USAGES}")
    if dtype not in FEATURE_DTYPES:
        raise UsageError(f"dtype {dtype!r} is not one of {FEATURE_DTYPES}")
    feats = to_numpy(features)
    if feats.ndim != 2:
        raise UsageError(f"split {name!r}: features must be (N, D), got shape {feats.shape}")
    if head is not None and feats.shape[1] != head[0].shape[1]:
        raise UsageError(f"split {name!r}: features have D={feats.shape[1]} but the head "
                         f"expects D={head[0].shape[1]} (head weight {tuple(head[0].shape)})")
    if not np.issubdtype(feats.dtype, np.floating):
        raise UsageError(f"split {name!r}: features must be floating, got {feats.dtype}")
    if dtype == "float16":
        check_float16_range(name, "features", feats)
    n = feats.shape[0]
    if logits is None:
        if head is None:
            raise UsageError(f"split {name!r}: logits are required when there is no head")
        logits = feats.astype(np.float32) @ head[0].T + head[1]
    logits = to_numpy(logits).astype(np.float32, copy=False)
    classes = head[0].shape[0] if head is not None else (logits.shape[1] if logits.ndim == 2
                                                         else -1)
    if logits.shape != (n, classes):
        raise UsageError(f"split {name!r}: logits must be (N={n}, C={classes}), got "
                         f"{logits.shape}")
    ids = np.arange(n).astype(str) if ids is None else to_numpy(ids).astype(str)
    if ids.shape != (n,):
        raise UsageError(f"split {name!r}: ids must be (N={n},), got {ids.shape}")
    extras_np = {k: to_numpy(v) for k, v in (extras or {}).items()}
    for key, arr in extras_np.items():
        if arr.ndim == 0 or n not in arr.shape[:2]:
            raise UsageError(f"split {name!r}: extra {key!r} shape {arr.shape} has no row axis"
                             f" of length N={n}")
    return SplitArrays(name, usage, feats.astype(dtype, copy=False), logits,
                       _labels(name, labels, n, classes, parsed.role), ids, extras_np,
                       {k: (0 if a.shape[0] == n else 1) for k, a in extras_np.items()})
