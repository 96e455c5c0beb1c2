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
The ||w_c - w_j|| for the chunk's predicted classes come from the Gram form
||w_c||^2 + ||w_j||^2 - 2 w_c . w_j (float64, clamped at 0), so memory stays one chunk x C.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from featstore.errors import UsageError

from .base import Scorer
from .dice import train_mean

_TINY = np.finfo(np.float64).tiny
_SAME_CLASS_RTOL = 1e-12


class FDBD(Scorer):
    name = "fdbd"
    needs = ("features", "logits", "head", "fit:id/train")
    defaults = {"distance_as_normalizer": True}
    grid = {"distance_as_normalizer": [True, False]}
    paper = ("Liu, Qin. Fast Decision Boundary based Out-of-Distribution Detector. "
             "ICML 2024")

    def check_params(self, params: dict[str, Any], store: Any = None) -> None:
        value = params["distance_as_normalizer"]
        if not isinstance(value, (bool, np.bool_)):
            raise UsageError(
                f"scorer {self.name!r}: distance_as_normalizer must be True or False "
                f"(got {value!r})"
            )
        if store is not None and store.head[0].shape[0] < 2:
            raise UsageError(f"scorer {self.name!r} needs at least 2 classes")

    def _fit(self, store: Any) -> None:
        weight, _ = store.head
        self.weight = np.asarray(weight, dtype=np.float64)
        self.sq_norms = np.einsum("cd,cd->c", self.weight, self.weight)
        self.mean = train_mean(self, store)

    def _score(self, split: Any) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        num_classes = self.weight.shape[0]
        flags = [bool({**self.params, **s}["distance_as_normalizer"]) for s in settings]
        out = [np.empty(split.num_rows, dtype=np.float64) for _ in settings]
        for rows, (x, logits) in self.chunks(split, "features", "logits"):
            x64 = x.astype(np.float64)
            l64 = logits.astype(np.float64)
            pred = np.argmax(l64, axis=1)
            gap = np.abs(l64 - l64[np.arange(len(pred)), pred][:, None])
            w_pred = self.weight[pred]
            dist2 = self.sq_norms[pred][:, None] + self.sq_norms[None, :] \
                - 2.0 * (w_pred @ self.weight.T)
            floor = _SAME_CLASS_RTOL * (self.sq_norms[pred][:, None] + self.sq_norms[None, :])
            dist = np.sqrt(np.maximum(dist2, 0.0))
            terms = np.divide(gap, dist, out=np.zeros_like(gap), where=dist2 > floor)
            terms[np.arange(len(pred)), pred] = 0.0
            boundary = terms.sum(axis=1) / (num_classes - 1)
            norms = {}
            for flag in set(flags):
                ref = x64 - self.mean if flag else x64
                norms[flag] = np.maximum(np.linalg.norm(ref, axis=1), _TINY)
            for i, flag in enumerate(flags):
                out[i][rows] = boundary / norms[flag]
        return out
