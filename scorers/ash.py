"""ASH: activation shaping (Djurisic, Bozanic, Ashok, Liu, "Extremely Simple Activation Shaping
for Out-of-Distribution Detection", ICLR 2023).

Formula as implemented (float64), per row h of D penultimate features, mirroring the official
ASH code (`ash_p`, `ash_b`, `ash_s`, also OpenOOD v1.5 `openood/networks/ash_net.py`, which
applies them to the penultimate feature viewed as (D, 1, 1)):

    k      = D - int(np.round(D * percentile / 100))    kept count (numpy round-half-even)
    keep   = the k largest entries of h (ties at the k-th value: lowest index first; the
             official code's torch.topk leaves that order unspecified)
    s1     = sum(h)
    ash_p: h' = h on keep, 0 elsewhere
    ash_b: h' = s1 / k on keep, 0 elsewhere
    ash_s: h' = (h on keep, 0 elsewhere) * exp(s1 / s2),  s2 = sum of the kept entries
           (s1 / s2 is taken as 0 when s2 == 0, i.e. an all-zero row of non-negative features)
    score  = logsumexp(h' @ W.T + b)                     energy of the shaped features

Higher is more in-distribution. `variant` in {"p", "b", "s"}, default "b" (the variant OpenOOD
v1.5's ASHNet applies); `percentile` in (0, 100), default 90 (OpenOOD v1.5
`configs/postprocessors/ash.yml` `percentile: 90`) and must keep at least one activation
(k >= 1). Default sweep grid: OpenOOD v1.5 `ash.yml` `percentile_list: [65, 70, 75, 80, 85,
90, 95]`.

Sharing: each chunk is sorted ONCE per row (a stable argsort of -h); the rank of every entry
and the cumulative sums of the sorted values serve every percentile of a grid (the mask for k
is `rank < k`, s2 is the k-th cumulative sum; the cumulative sums are only computed when an
ASH-s setting needs them). Only the final product with the head is per setting. `RowSort` is
shared with `scale.py`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from featstore.errors import UsageError

from .base import Scorer, logsumexp
from .react import check_percentile

VARIANTS = ("p", "b", "s")


def keep_count(num_features: int, percentile: float) -> int:
    """k = D - round(D * p / 100), as the official ASH code computes it."""
    return num_features - int(np.round(num_features * percentile / 100.0))


def check_keep(scorer_name: str, percentile: float, store: Any) -> None:
    """The percentile must keep at least one of the store's D activations."""
    if store is None:
        return
    d = int(store.head[0].shape[1])
    if keep_count(d, percentile) < 1:
        raise UsageError(
            f"scorer {scorer_name!r}: percentile {percentile!r} keeps no activation of D={d} "
            f"features (k = D - round(D * percentile / 100) = 0); use a percentile in (0, "
            f"{100.0 * (d - 0.5) / d:g})"
        )


@njit(cache=True)
def _row_ranks(order: np.ndarray) -> np.ndarray:
    """Inverse permutation per row: rank[i, order[i, j]] = j."""
    n, d = order.shape
    rank = np.empty((n, d), dtype=np.int32)
    for i in range(n):
        for j in range(d):
            rank[i, order[i, j]] = j
    return rank


class RowSort:
    """One descending sort per row of a chunk, shared by every percentile of a grid."""

    def __init__(self, x: np.ndarray, with_ranks: bool):
        self.x = x.astype(np.float64)
        self.s1 = self.x.sum(axis=1)
        self._order: np.ndarray | None = None
        self._csum: np.ndarray | None = None
        if with_ranks:
            self._order = np.argsort(-x, axis=1, kind="stable")  # ties: lowest index first
            self.rank = _row_ranks(self._order)

    @property
    def csum(self) -> np.ndarray:
        """csum[:, k-1] = top-k sum; computed on first use (ASH-p and ASH-b never need it)."""
        if self._csum is None:
            if self._order is not None:
                sorted_desc = np.take_along_axis(self.x, self._order, axis=1)
                self._order = None
            else:
                sorted_desc = -np.sort(-self.x, axis=1)
            self._csum = np.cumsum(sorted_desc, axis=1)
        return self._csum

    def top_sum(self, k: int) -> np.ndarray:
        return self.csum[:, k - 1]

    def sharpen_ratio(self, k: int) -> np.ndarray:
        """s1 / s2 with s2 the sum of the top k (0 where s2 == 0)."""
        s2 = self.top_sum(k)
        return np.divide(self.s1, s2, out=np.zeros_like(s2), where=s2 != 0)


def ash_logits(rs: RowSort, variant: str, k: int, weight_t: np.ndarray,
               bias: np.ndarray) -> np.ndarray:
    keep = rs.rank < k
    if variant == "b":
        return (rs.s1 / k)[:, None] * (keep.astype(np.float64) @ weight_t) + bias
    pruned = np.where(keep, rs.x, 0.0)
    z = pruned @ weight_t
    if variant == "s":
        z *= np.exp(rs.sharpen_ratio(k))[:, None]
    return z + bias


class ASH(Scorer):
    name = "ash"
    needs = ("features", "head")
    defaults = {"variant": "b", "percentile": 90}
    grid = {"percentile": [65, 70, 75, 80, 85, 90, 95]}
    paper = ("Djurisic, Bozanic, Ashok, Liu. Extremely Simple Activation Shaping for "
             "Out-of-Distribution Detection. ICLR 2023")

    def check_params(self, params: dict[str, Any], store: Any = None) -> None:
        if params["variant"] not in VARIANTS:
            raise UsageError(
                f"scorer {self.name!r}: variant must be one of {', '.join(VARIANTS)} "
                f"(got {params['variant']!r})"
            )
        check_percentile(self.name, "percentile", params["percentile"])
        check_keep(self.name, params["percentile"], store)

    def _fit(self, store: Any) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.bias = np.asarray(bias, dtype=np.float64)

    def _score(self, split: Any) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        d = self.weight_t.shape[0]
        full = [{**self.params, **s} for s in settings]
        jobs = [(s["variant"], keep_count(d, s["percentile"])) for s in full]
        out = [np.empty(split.num_rows, dtype=np.float64) for _ in settings]
        for rows, (x,) in self.chunks(split, "features"):
            rs = RowSort(x, with_ranks=True)
            for i, (variant, k) in enumerate(jobs):
                out[i][rows] = logsumexp(ash_logits(rs, variant, k, self.weight_t, self.bias))
        return out
