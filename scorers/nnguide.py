"""NNGuide: nearest neighbour guidance (Park, Jung, Teoh, ICCV 2023, "Nearest neighbor guidance
for out-of-distribution detection"), following OpenOOD v1.5's `NNGuidePostprocessor`.

As implemented:

    z = x / (||x||_2 + 1e-10)                     (penultimate features)
    E(x) = log sum_c exp(logit_c(x))              (energy confidence, temperature 1)
    bank = { z_i * E(x_i) : i in a random alpha-fraction of id/train }
    G(x) = mean of the K largest inner products <z, b>, b in bank
    score(x) = G(x) * E(x)

Differences from OpenOOD, stated: OpenOOD's normalizer is x / ||x|| + 1e-10 (the epsilon
added after the division, a typo); here the epsilon guards the division as in KNN-OOD's code
(identical up to 1e-10). OpenOOD fills the bank with the first training-loader batches until
they exceed alpha * N rows; here the bank is ceil(alpha * N) rows drawn uniformly without
replacement with numpy's default_rng(`seed`), which does not depend on row order (a store's
id/train is often sorted by class). Inner products are FAISS float32 (IndexFlatIP), summed in
float64.

Parameters (defaults with sources):
- `K` = 100 and `alpha` = 0.01: OpenOOD v1.5 `configs/postprocessors/nnguide.yml`
  (postprocessor_args alpha: 0.01, K: 100). Default sweep grid: that file's
  postprocessor_sweep, K_list [100] x alpha_list [0.01]. Valid: 0 < alpha <= 1 and
  1 <= K <= bank size = ceil(alpha * N).
- `seed` = 0: the bank subsample's seed.
- `index` = "exact" (IndexFlatIP) | "ivf_flat" | "ivf_pq" | "hnsw" (`scorers.knn_index`).

`score_grid` over K: one FAISS search per chunk at the largest K of each bank setting; the
top-K means for every K come from one cumulative sum of the sorted inner products.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .base import Scorer, logsumexp
from .knn_index import INDEX_KINDS, KnnIndex, l2_normalize, subsample_rows, subsample_size

FIT_SPLIT = "id/train"


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def load_guide_bank(store: Any, alpha: float, seed: int, chunk_rows: int) -> np.ndarray:
    """The guidance bank: normalized id/train features scaled by their energy, float32."""
    split = store.split(FIT_SPLIT)
    n = split.num_rows
    rows = subsample_rows(n, alpha, seed)
    size = n if rows is None else rows.size
    bank = np.empty((size, split.dims["features"]), dtype=np.float32)
    filled = 0
    for sl, (feats, logits) in split.iter_chunks("features", "logits", chunk_rows=chunk_rows):
        if rows is not None:
            lo, hi = np.searchsorted(rows, [sl.start, sl.stop])
            pick = rows[lo:hi] - sl.start
            feats, logits = feats[pick], logits[pick]
        if feats.shape[0] == 0:
            continue
        x = feats.astype(np.float64)
        z = x / (np.sqrt(np.einsum("ij,ij->i", x, x))[:, None] + 1e-10)
        bank[filled:filled + z.shape[0]] = z * logsumexp(logits)[:, None]
        filled += z.shape[0]
    assert filled == size
    return bank


class NNGuide(Scorer):
    """Energy times the mean top-K similarity to an energy-scaled id/train bank."""

    name = "nnguide"
    needs = ("features", "logits", "fit:id/train")
    defaults = {"K": 100, "alpha": 0.01, "seed": 0, "index": "exact"}
    grid = {"K": [100], "alpha": [0.01]}
    paper = ("Park, Jung, Teoh. Nearest neighbor guidance for out-of-distribution detection. "
             "ICCV 2023")

    def check_params(self, params: Mapping[str, Any], store: Any = None) -> None:
        k = params["K"]
        if not _is_int(k) or k < 1:
            raise UsageError(f"scorer 'nnguide': K={k!r} must be an integer >= 1")
        alpha = params["alpha"]
        if (not isinstance(alpha, numbers.Real) or isinstance(alpha, bool)
                or not 0.0 < float(alpha) <= 1.0):
            raise UsageError(f"scorer 'nnguide': alpha={alpha!r} must satisfy 0 < alpha <= 1")
        if not _is_int(params["seed"]) or params["seed"] < 0:
            raise UsageError(f"scorer 'nnguide': seed={params['seed']!r} must be an integer >= 0")
        if params["index"] not in INDEX_KINDS:
            raise UsageError(
                f"scorer 'nnguide': index={params['index']!r} is not one of "
                f"{', '.join(INDEX_KINDS)}"
            )
        if store is not None and store.has_split(FIT_SPLIT):
            n = store.split(FIT_SPLIT).num_rows
            size = subsample_size(n, float(alpha))
            if k > size:
                raise UsageError(
                    f"scorer 'nnguide': K={k} is larger than the train bank ({size} rows: "
                    f"{n} rows of {FIT_SPLIT} x alpha {alpha}); valid: 1 <= K <= {size}"
                )

    # ------------------------------------------------------------------ shared work
    def _build(self, store: Any, params: Mapping[str, Any]) -> KnnIndex:
        bank = load_guide_bank(store, float(params["alpha"]), int(params["seed"]),
                               self.chunk_rows)
        return KnnIndex(bank, metric="ip", kind=params["index"], seed=int(params["seed"]),
                        query_chunk=self.chunk_rows)

    def _guided_scores(self, index: KnnIndex, split: Any,
                       ks: list[int]) -> dict[int, np.ndarray]:
        """G_K(x) * E(x) for every K in ks, in one pass over the split."""
        groups: dict[Any, list[int]] = {}
        for k in sorted(set(ks)):
            groups.setdefault(index.search_key(k), []).append(k)
        out = {k: np.empty(split.num_rows, dtype=np.float64) for k in ks}
        for rows, (feats, logits) in self.chunks(split, "features", "logits"):
            query = l2_normalize(feats)
            energy = logsumexp(logits)
            for group in groups.values():
                sims, _ = index.search(query, max(group))
                csum = np.cumsum(sims.astype(np.float64), axis=1)
                for k in group:
                    out[k][rows] = (csum[:, k - 1] / k) * energy
        return out

    # ------------------------------------------------------------------ hooks
    def _fit(self, store: Any) -> None:
        self.index = self._build(store, self.params)
        self.bank_size = self.index.ntotal

    def _score(self, split: Any) -> np.ndarray:
        k = int(self.params["K"])
        return self._guided_scores(self.index, split, [k])[k]

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        bank_keys = ("alpha", "seed", "index")
        full = [{**self.params, **s} for s in settings]
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(full):
            groups.setdefault(tuple(p[key] for key in bank_keys), []).append(i)
        out: list[np.ndarray | None] = [None] * len(settings)
        own = tuple(self.params[key] for key in bank_keys)
        for key, members in groups.items():
            index = self.index if key == own else self._build(self.store, full[members[0]])
            scores = self._guided_scores(index, split, [int(full[i]["K"]) for i in members])
            for i in members:
                out[i] = scores[int(full[i]["K"])]
        return out  # type: ignore[return-value]
