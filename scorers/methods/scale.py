"""SCALE: post-hoc feature scaling (Xu, Chen, Franchi, Ji, Li, "Scaling for Training Time and
Post-hoc Out-of-distribution Detection Enhancement", ICLR 2024).

Formula as implemented (float64), per row h of D penultimate features, mirroring OpenOOD v1.5
`openood/networks/scale_net.py` (`scale`):

    k      = D - int(np.round(D * percentile / 100))    kept count, as in ASH
    s1     = sum(h)
    s2     = sum of the k largest entries of h           (the top (100 - p)% activations)
    h'     = h * exp(s1 / s2)                            (s1 / s2 taken as 0 when s2 == 0)
    score  = logsumexp(h' @ W.T + b) = logsumexp(exp(s1 / s2) * (h @ W.T) + b)

Unlike ASH nothing is pruned: the whole feature is rescaled. Higher is more in-distribution.
`percentile` in (0, 100), default 85 (OpenOOD v1.5 `configs/postprocessors/scale.yml`
`percentile: 85`) and must keep k >= 1. Default sweep grid: OpenOOD v1.5 `scale.yml`
`percentile_list: [65, 70, 75, 80, 85, 90, 95]`.

Sharing: one partial sort per row and chunk (`scorers.kernels.topk.RowSort`: the k_max largest
entries in descending order, k_max the largest kept count of the grid) gives s2 for every
percentile as a cumulative sum of the sorted values, and z = h @ W.T is computed once per
block for all of them; each setting is then logsumexp(exp(s1 / s2) * z + b), (n, C) elementwise.

z without a product: when the store's float32 logits l are the head's output
(`scorers.base.stored_logits_are_head`: x @ W.T + b to 1e-4 of the largest logit on a probe of
256 rows; false for float16 splits, TF32/float16 heads or logits of another head), z = l - b in
float64, which carries the float32 rounding of l (~1e-7 relative; the scale exp(s1 / s2)
multiplies the score and its error alike; a test bounds it at 1e-6 against the float64
formula). Otherwise z = h @ W.T in float64 BLAS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer, ValidRange, head_logits_usable, stored_logits_are_head
from ..fitting.topk import check_keep, percentile_degenerate, percentile_range
from ..kernels.select import check_percentile
from ..kernels.softmax import logsumexp
from ..kernels.topk import RowSort, keep_count
from ..paper import Paper


class Scale(Scorer):
    name = "scale"
    needs = ("features", "head")
    defaults = {"percentile": 85}
    grid = {"percentile": [65, 70, 75, 80, 85, 90, 95]}
    paper = Paper(
                  title=("Scaling for Training Time and Post-hoc Out-of-distribution "
                         "Detection Enhancement"),
                  authors=("Xu", "Chen", "Franchi", "Yao"), venue="ICLR", year=2024,
                  url="https://arxiv.org/abs/2310.00227", code="https://github.com/kai422/SCALE")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_percentile(self.name, "percentile", params["percentile"])
        check_keep(self.name, params["percentile"], store)

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        return {"percentile": percentile_range(store)}

    def degenerate(self, param: str, default: Any, used: Any, params: Mapping[str, Any],
                   store: StoreLike) -> str:
        return percentile_degenerate(default, used, store) if param == "percentile" else ""

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.bias = np.asarray(bias, dtype=np.float64)
        self.logits_are_head = stored_logits_are_head(store)

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        d = self.weight_t.shape[0]
        ks = [keep_count(d, {**self.params, **s}["percentile"]) for s in settings]

        def energies(rs: RowSort, z: np.ndarray) -> list[np.ndarray]:
            return [logsumexp(np.exp(rs.sharpen_ratio(k))[:, None] * z + self.bias)
                    for k in ks]

        if head_logits_usable(split, self.logits_are_head):
            def block_l(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
                return energies(RowSort(x, max(ks)), logits.astype(np.float64) - self.bias)

            return self.map_rows(split, ("features", "logits"), block_l, outputs=len(ks))

        def block(x: np.ndarray) -> list[np.ndarray]:
            rs = RowSort(x, max(ks))
            return energies(rs, rs.x64 @ self.weight_t)

        return self.map_rows(split, ("features",), block, outputs=len(ks))
