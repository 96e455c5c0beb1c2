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
id/train is often sorted by class). Inner products are float32 (FAISS IndexFlatIP; at K >= bank
size / 10 own sgemm + partition, `scorers.knn_index.exact_ip_values`), summed in float64.

Parameters (defaults with sources):
- `K` = 100 and `alpha` = 0.01: OpenOOD v1.5 `configs/postprocessors/nnguide.yml`
  (postprocessor_args alpha: 0.01, K: 100). Default sweep grid: that file's
  postprocessor_sweep, K_list [100] x alpha_list [0.01]. Valid: 0 < alpha <= 1 and
  1 <= K <= bank size = ceil(alpha * N).
- `seed` = 0: the bank subsample's seed.
- `index` = "exact" (IndexFlatIP) | "ivf_flat" | "ivf_pq" | "hnsw" (`scorers.knn_index`).
- `recall_target` = 0.95: an approximate index's search width is calibrated at fit to this
  recall@K against exact search (`scorers.neighbours`); null: fixed default width.

`score_grid` over K: one FAISS search per chunk at the largest K of each bank setting; the
top-K means for every K come from one cumulative sum of the sorted inner products.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..kernels.softmax import logsumexp
from ..knn_bank import BankStream
from ..knn_index import KnnIndex, l2_normalize
from ..neighbours import BankScorer, bank_stream
from ..paper import Paper


def guide_rows(feats: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """Bank rows of a chunk: normalized features scaled by their energy, float32."""
    x = feats.astype(np.float64)
    z = x / (np.sqrt(np.einsum("ij,ij->i", x, x))[:, None] + 1e-10)
    return (z * logsumexp(logits)[:, None]).astype(np.float32)


def guide_stream(store: StoreLike, alpha: float, seed: int, chunk_rows: int) -> BankStream:
    """The guidance bank, computed chunk by chunk as id/train is read (`guide_rows`)."""
    return bank_stream(store, alpha, seed, chunk_rows, ("features", "logits"), guide_rows)


class NNGuide(BankScorer):
    """Energy times the mean top-K similarity to an energy-scaled id/train bank."""

    name = "nnguide"
    needs = ("features", "logits", "fit:id/train")
    defaults = {"K": 100, "alpha": 0.01, "seed": 0, "index": "exact", "recall_target": 0.95}
    grid = {"K": [100], "alpha": [0.01]}
    paper = Paper(title="Nearest neighbor guidance for out-of-distribution detection",
                  authors=("Park", "Jung", "Teoh"), venue="ICCV", year=2023,
                  url="https://arxiv.org/abs/2309.14888",
                  code="https://github.com/roomo7time/nnguide")
    fraction_param = "alpha"

    def _build(self, store: StoreLike, params: Mapping[str, Any]) -> KnnIndex:
        bank = guide_stream(store, float(params["alpha"]), int(params["seed"]),
                            self.chunk_rows)
        return KnnIndex(bank, metric="ip", kind=params["index"], seed=int(params["seed"]),
                        query_chunk=self.chunk_rows, **self.index_options(store, params))

    def _scores_for_ks(self, index: KnnIndex, split: SplitLike,
                       ks: list[int]) -> dict[int, np.ndarray]:
        """G_K(x) * E(x) for every K in ks, in one pass over the split."""
        groups = self.search_groups(index, ks)
        out = {k: np.empty(split.num_rows, dtype=np.float64) for k in ks}
        for rows, (feats, logits) in self.chunks(split, "features", "logits"):
            query = l2_normalize(feats)
            energy = logsumexp(logits)
            for group in groups:
                sims = index.search_values(query, max(group))
                csum = np.cumsum(sims.astype(np.float64), axis=1)
                for k in group:
                    out[k][rows] = (csum[:, k - 1] / k) * energy
        return out
