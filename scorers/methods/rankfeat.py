"""RankFeat: rank-1 feature removal (Song, Sebe, Wang, "RankFeat: Rank-1 Feature Removal for
Out-of-distribution Detection", NeurIPS 2022).

Needs the final block's feature maps, stored at extraction behind the opt-in flag
`featstore extract --feature-maps` as the split extra `feature_maps` (N, Cmap, H, W), with
Cmap = D (the map whose global average pool is the penultimate feature). Without it, scoring
raises FeatstoreError naming that flag.

Formula as implemented (float64), per sample, with X the (Cmap, H*W) map and (W, b) the head:

    X      = U diag(s) V^T                        (SVD; only the top triplet is needed)
    X'     = X - s_1 u_1 v_1^T                     remove the rank-1 (dominant) component
    h'     = mean over H*W of X'                   global average pooling
    score  = T * logsumexp((h' @ W.T + b) / T)     energy at temperature T

The top singular triplet is computed exactly (no power iteration) from the small Gram matrix:
with v_1 the top eigenvector of X^T X (H*W x H*W, numpy eigh), s_1 u_1 v_1^T = (X v_1) v_1^T,
so h' = mean(X) - (X v_1) * mean(v_1) (the u-side Gram X X^T is used when H*W > Cmap).
This is the paper's Block-4 RankFeat; OpenOOD v1.5's `rankfeat_postprocessor.py` also fuses
the logits of a Block-3 variant, which needs the network's last block and cannot run on a
store. Higher is more in-distribution.

`temperature` T > 0, default 1 (OpenOOD v1.5 `configs/postprocessors/rankfeat.yml`
`temperature: 1`, `accelerate: False`, i.e. exact SVD, no sweep). The default sweep grid is
empty; a grid over T shares the SVD and the logits.

Memory: maps are read in chunks of at most `chunk_rows` rows and about 256 MiB of float64.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import logsumexp
from ..paper import Paper

MAPS = "feature_maps"
_CHUNK_BYTES = 256 << 20


def rank1_removed_pool(maps: np.ndarray) -> np.ndarray:
    """(n, Cmap, H, W) maps -> (n, Cmap) global average pool after removing each sample's
    rank-1 component (top singular triplet of the (Cmap, H*W) matrix)."""
    n, cmap = maps.shape[:2]
    a = maps.reshape(n, cmap, -1).astype(np.float64)
    hw = a.shape[2]
    pooled = a.mean(axis=2)
    if hw <= cmap:
        gram = np.matmul(a.transpose(0, 2, 1), a)                 # (n, HW, HW)
        v = np.linalg.eigh(gram)[1][:, :, -1]                      # top right singular vector
        av = np.matmul(a, v[:, :, None])[:, :, 0]                  # (n, Cmap) = s1 u1
        return pooled - av * v.mean(axis=1)[:, None]
    gram = np.matmul(a, a.transpose(0, 2, 1))                      # (n, Cmap, Cmap)
    u = np.linalg.eigh(gram)[1][:, :, -1]                          # top left singular vector
    ua = np.matmul(u[:, None, :], a)[:, 0, :]                      # (n, HW) = s1 v1
    return pooled - u * ua.mean(axis=1)[:, None]


class RankFeat(Scorer):
    name = "rankfeat"
    needs = ("extra:feature_maps", "head")
    defaults = {"temperature": 1.0}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(title="RankFeat: Rank-1 Feature Removal for Out-of-distribution Detection",
                  authors=("Song", "Sebe", "Wang"), venue="NeurIPS", year=2022,
                  url="https://arxiv.org/abs/2209.08590",
                  code="https://github.com/KingJamesSong/RankFeat")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        t = params["temperature"]
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) \
                or t <= 0:
            raise UsageError(
                f"scorer {self.name!r}: temperature must be a finite number > 0 (got {t!r})"
            )

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.bias = np.asarray(bias, dtype=np.float64)

    def _maps_chunk_rows(self, split: SplitLike) -> int:
        ds = split.extra(MAPS)
        if ds.ndim != 4 or split.extra_row_axis(MAPS) != 0:
            raise FeatstoreError(
                f"scorer {self.name!r}: extra {MAPS!r} of split {split.name!r} must be "
                f"(N, Cmap, H, W) with rows first, got shape {tuple(ds.shape)}"
            )
        d = self.weight_t.shape[0]
        if ds.shape[1] != d:
            raise FeatstoreError(
                f"scorer {self.name!r}: extra {MAPS!r} of split {split.name!r} has "
                f"{ds.shape[1]} channels but the head expects D={d}; RankFeat needs the final "
                "block's map (the one pooled into the penultimate feature)"
            )
        per_row = 8 * 3 * int(np.prod(ds.shape[1:]))
        return max(1, min(self.chunk_rows, _CHUNK_BYTES // max(per_row, 1)))

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        temps = [float({**self.params, **s}["temperature"]) for s in settings]
        out = [np.empty(split.num_rows, dtype=np.float64) for _ in settings]
        rows_per_chunk = self._maps_chunk_rows(split)
        for rows, (maps,) in split.iter_chunks(f"extra:{MAPS}", chunk_rows=rows_per_chunk):
            logits = rank1_removed_pool(maps) @ self.weight_t + self.bias
            for i, t in enumerate(temps):
                out[i][rows] = t * logsumexp(logits, temperature=t)
        return out
