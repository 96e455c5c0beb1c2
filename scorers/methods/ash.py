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

How the product is computed. The shaped feature is a per-row scalar times a pruned vector, so

    h' @ W.T = scale * sum_{j in keep} a_j W[:, j]      ash_p: a = h, scale = 1
                                                         ash_b: a = 1, scale = s1 / k
                                                         ash_s: a = h, scale = exp(s1 / s2)

Each chunk's rows are sorted ONCE (numpy's sort of -h, values only): the k-th largest value
of a row gives its kept set for every k of a grid, and s2 for every k is a cumulative sum of
the sorted values (in descending order). The kept sets are nested, so `band_order` lists each
row's kept entries band by band (band e = kept at the e-th smallest k of the grid but not at
the one before; index order within a band). Then, per setting, either
- sparse: the sum over the kept entries is accumulated row by row in that order (four rows of
  W.T per pass, `scorers.kernels.gather.gather_add`/`gather_sum`), W held as float32 (exact:
  the head is stored in float32) and the sum in float64. A grid accumulates ONE running sum
  per row, adding each further band of entries as the percentile decreases,
  and reads every setting's logits off it (scale * sum + b, then logsumexp); or
- dense: the pruned (n, D) matrix times W.T with BLAS (float64),
whichever the cost model in `sparse_pays` picks: a kept entry costs about SPARSE_COST times its
share of the dense product (a row-wise gather of W rows against OpenBLAS dgemm on one core),
so a kept count joins the running sum when its increment over the previous one in the sum is
below D / SPARSE_COST entries, and is a dense product otherwise (one setting alone: sparse
when k < D / SPARSE_COST). The choice depends only on D and the kept counts, so results are
deterministic; the two ways differ only in the order of the float64 sums (about 1e-15
relative). The kernels live in `scorers.kernels`: `topk` (`RowSort`, `band_order`,
`running_energies`, `plan_chain`; RowSort is shared with `scale.py`) and `gather`
(`sparse_pays`, `exact_f32`, the gather sums).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer, ValidRange
from ..fitting.topk import check_keep, percentile_degenerate, percentile_range
from ..kernels.gather import exact_f32
from ..kernels.select import check_percentile
from ..kernels.softmax import logsumexp
from ..kernels.topk import RowSort, keep_count, plan_chain, running_energies
from ..paper import Paper

VARIANTS = ("p", "b", "s")


class ASH(Scorer):
    name = "ash"
    needs = ("features", "head")
    defaults = {"variant": "b", "percentile": 90}
    grid = {"percentile": [65, 70, 75, 80, 85, 90, 95]}
    paper = Paper(title="Extremely Simple Activation Shaping for Out-of-Distribution Detection",
                  authors=("Djurisic", "Bozanic", "Ashok", "Liu"), venue="ICLR", year=2023,
                  url="https://arxiv.org/abs/2209.09858", code="https://github.com/andrijazz/ash")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        if params["variant"] not in VARIANTS:
            raise UsageError(
                f"scorer {self.name!r}: variant must be one of {', '.join(VARIANTS)} "
                f"(got {params['variant']!r})"
            )
        check_percentile(self.name, "percentile", params["percentile"])
        check_keep(self.name, params["percentile"], store)

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        return {"percentile": percentile_range(store)}

    def degenerate(self, param: str, default: Any, used: Any, params: Mapping[str, Any],
                   store: StoreLike) -> str:
        return percentile_degenerate(default, used, store) if param == "percentile" else ""

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.wt = exact_f32(np.asarray(weight).T)        # (D, C), for the sparse sums
        self.bias = np.asarray(bias, dtype=np.float64)
        self._wt64: np.ndarray | None = None

    @property
    def weight_t(self) -> np.ndarray:
        """(D, C) float64 W.T for the dense products (made on first use)."""
        if self._wt64 is None:
            self._wt64 = np.ascontiguousarray(self.wt, dtype=np.float64)
        return self._wt64

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        d = self.wt.shape[0]
        full = [{**self.params, **s} for s in settings]
        jobs = [(s["variant"], keep_count(d, s["percentile"])) for s in full]
        chain = plan_chain([k for _, k in jobs], d)
        ends = np.array(sorted(chain), dtype=np.int64)
        sparse = [i for i, (_, k) in enumerate(jobs) if k in chain]
        set_end = np.array([int(np.searchsorted(ends, jobs[i][1])) for i in sparse],
                           dtype=np.int64)
        set_acc = np.array([1 if jobs[i][0] == "b" else 0 for i in sparse], dtype=np.int64)
        k_max = max(k for _, k in jobs)

        def block(x: np.ndarray) -> list[np.ndarray]:
            rs = RowSort(x, k_max)
            order = rs.order([k for _, k in jobs])
            scales = [self._scale(rs, variant, k) for variant, k in jobs]
            out: list[np.ndarray] = [np.empty(0)] * len(jobs)
            if sparse:
                got = running_energies(x, order, self.wt, self.bias, ends, set_end, set_acc,
                                       np.stack([scales[i] for i in sparse]))
                for row, i in enumerate(sparse):
                    out[i] = got[row]
            for i, (variant, k) in enumerate(jobs):
                if k in chain:
                    continue
                keep = np.zeros(x.shape, dtype=bool)
                np.put_along_axis(keep, order[:, :k], True, axis=1)
                if variant == "b":
                    z = keep.astype(np.float64) @ self.weight_t
                else:
                    z = np.where(keep, rs.x64, 0.0) @ self.weight_t
                z *= scales[i][:, None]
                z += self.bias
                out[i] = logsumexp(z)
            return out

        return self.map_rows(split, ("features",), block, outputs=len(jobs))

    @staticmethod
    def _scale(rs: RowSort, variant: str, k: int) -> np.ndarray:
        """The per-row factor of the pruned sum: 1 (p), s1 / k (b), exp(s1 / s2) (s)."""
        if variant == "p":
            return np.ones_like(rs.s1)
        if variant == "b":
            return rs.s1 / k
        return np.exp(rs.sharpen_ratio(k))
