"""fDBD: fast decision-boundary distance (Liu, Qin, "Fast Decision Boundary based
Out-of-Distribution Detector", ICML 2024).

Formula as implemented (float64), with h the penultimate feature, l the stored logits,
(W, b) the head (C, D), c = argmax_j l_j (first index on ties) and mu the id/train mean feature:

    D_j(h) = |l_c - l_j| / ||w_c - w_j||_2                distance to the c/j decision boundary
    score  = (1 / (C - 1)) * sum_{j != c} D_j(h) / ||h - mu||_2     (distance_as_normalizer)
    score  = (1 / (C - 1)) * sum_{j != c} D_j(h) / ||h||_2          (otherwise)

Higher is more in-distribution. The 1 / (C - 1) average is the paper's; the official code and
OpenOOD v1.5 `fdbd_postprocessor.py` take the plain sum over j (a constant factor C - 1: the
same ranking and metrics). `distance_as_normalizer` (bool), default True (the paper's
regularizer, OpenOOD v1.5 `configs/postprocessors/fdbd.yml`); default sweep grid: OpenOOD v1.5
`fdbd.yml` `distance_as_normalizer_list: [True, False]` (OpenOOD picks the normalizer on
validation data, a slight departure from the paper that it documents).

Degenerate cases, never NaN: a class j whose weight row (numerically) equals w_c, i.e.
||w_c - w_j||^2 <= 1e-12 (||w_c||^2 + ||w_j||^2), has no boundary with c and contributes 0; a
zero normalizer norm is clamped to the smallest positive float64.

Sharing: both normalizers and the boundary sum are computed once per chunk for the whole grid.
The C x C table of 1 / ||w_c - w_j|| is computed once at fit from the Gram form
||w_c||^2 + ||w_j||^2 - 2 w_c . w_j (float64, clamped at 0); scoring gathers its row per
predicted class (no per-chunk product with W), in one fused pass per row with both
normalizers (`scorers.kernels.rowfeat.fdbd_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.classstats import train_mean
from ..kernels.rowfeat import fdbd_rows, inverse_boundary_table
from ..paper import Paper

_SAME_CLASS_RTOL = 1e-12


class FDBD(Scorer):
    name = "fdbd"
    needs = ("features", "logits", "head", "fit:id/train")
    min_classes = 2
    defaults = {"distance_as_normalizer": True}
    grid = {"distance_as_normalizer": [True, False]}
    paper = Paper(title="Fast Decision Boundary based Out-of-Distribution Detector",
                  authors=("Liu", "Qin"), venue="ICML", year=2024,
                  url="https://arxiv.org/abs/2312.11536",
                  code="https://github.com/litianliu/fDBD-OOD")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        value = params["distance_as_normalizer"]
        if not isinstance(value, (bool, np.bool_)):
            raise UsageError(
                f"scorer {self.name!r}: distance_as_normalizer must be True or False "
                f"(got {value!r})"
            )
        if store is not None and store.head[0].shape[0] < 2:
            raise UsageError(f"scorer {self.name!r} needs at least 2 classes")

    def _fit(self, store: StoreLike) -> None:
        weight, _ = store.head
        w = np.asarray(weight, dtype=np.float64)
        sq_norms = np.einsum("cd,cd->c", w, w)
        # 1 / ||w_c - w_j|| per class pair, 0 where c and j share no boundary (c == j included)
        self.inv_dist = np.empty((w.shape[0], w.shape[0]))
        inverse_boundary_table(w @ w.T, sq_norms, _SAME_CLASS_RTOL, self.inv_dist)
        self.mean = train_mean(self, store)

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        flags = [bool({**self.params, **s}["distance_as_normalizer"]) for s in settings]

        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            rows = x.shape[0]
            boundary = np.empty(rows)
            norms = {True: np.empty(rows), False: np.empty(rows)}
            fdbd_rows(x, logits, logits.argmax(axis=1), self.inv_dist, self.mean,
                      True in flags, False in flags, boundary, norms[True], norms[False])
            return [boundary / norms[flag] for flag in flags]

        return self.map_rows(split, ("features", "logits"), block, outputs=len(flags))
