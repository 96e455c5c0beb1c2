"""KNN: deep nearest neighbours (Sun, Ming, Zhu, Li, ICML 2022, "Out-of-distribution detection
with deep nearest neighbors").

As implemented:

    z = x / (||x||_2 + 1e-10)                         (features, train and test alike)
    bank = { z_i : i in id/train rows }               (all rows, or a random subsample)
    score(x) = - || z - z_(K) ||_2

where z_(K) is the K-th nearest bank row of z in Euclidean distance. The score is the negative
Euclidean distance (not squared). KNN-OOD's and OpenOOD's code return FAISS's IndexFlatL2 value,
the negative *squared* distance; the two are monotonically related, so every ranking metric is
identical, but the numbers are not. FAISS computes squared distances in float32 as
||q||^2 + ||b||^2 - 2 q.b, which rounds to slightly negative values for (near-)duplicates; they
are clipped at 0 before the square root. Distances are therefore accurate to float32 rounding
(relative ~1e-6), and scores are float64.

Parameters (defaults with sources):
- `K` = 50: OpenOOD v1.5 `configs/postprocessors/knn.yml` (postprocessor_args K: 50, the
  paper's CIFAR setting; the paper uses K = 1000 with a 1% bank on ImageNet). Default sweep
  grid K in [50, 100, 200, 500, 1000]: that file's postprocessor_sweep K_list in its
  APS_mode: True version (as kept in OpenOOD v1.5 forks, e.g. BierOne/ood_coverage); the
  later Jingkang50/OpenOOD main sets APS_mode: False with K_list [50]. That grid is for
  CIFAR's 50,000-row banks: on a smaller bank the default grid's K values are scaled by
  bank / 50,000 (`grid_bank`; `scorers.adapt`). Valid: 1 <= K <= bank size.
- `bank_fraction` = 1.0: the share of id/train rows kept in the bank, drawn uniformly without
  replacement with numpy's default_rng(`seed`) (KNN-OOD used a random 1% of ImageNet's
  training set, "alpha"). Valid: 0 < bank_fraction <= 1; bank size = ceil(fraction * N).
- `seed` = 0: the subsample's seed (and IVF k-means seed).
- `index` = "exact": "exact" (IndexFlatL2) | "ivf_flat" | "ivf_pq" | "hnsw", with the
  approximate indexes' parameters at their `scorers.knn_index` defaults (ivf_pq re-ranks its
  10 K best quantized candidates by exact distance, so its distances are exact). With an
  approximate index, fit measures recall@K against exact search on 256 id/val rows
  (`diagnostics`).
- `recall_target` = 0.95 (approximate indexes only): the IVF nprobe / HNSW ef_search is
  calibrated at fit to the smallest width reaching this recall@K on those rows
  (`scorers.neighbours`); null keeps the fixed default width. Valid: 0 < recall_target <= 1.

`score_grid` over K runs one FAISS search per chunk at the largest K of the grid and takes
column K-1 for each K (per bank setting; HNSW groups K values that share a beam width).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..knn_bank import BankStream
from ..knn_index import KnnIndex, l2_normalize
from ..neighbours import BankScorer, bank_stream
from ..paper import Paper


def knn_stream(store: StoreLike, fraction: float, seed: int, chunk_rows: int,
               normalize: bool = True) -> BankStream:
    """The bank rows' id/train features, L2-normalized chunk by chunk as they are read."""
    return bank_stream(store, fraction, seed, chunk_rows, ("features",),
                       l2_normalize if normalize else _as_float32)


def _as_float32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


class KNN(BankScorer):
    """Negative Euclidean distance to the K-th nearest normalized id/train feature."""

    name = "knn"
    needs = ("features", "fit:id/train")
    defaults = {"K": 50, "bank_fraction": 1.0, "seed": 0, "index": "exact", "recall_target": 0.95}
    grid = {"K": [50, 100, 200, 500, 1000]}
    paper = Paper(title="Out-of-distribution detection with deep nearest neighbors",
                  authors=("Sun", "Ming", "Zhu", "Li"), venue="ICML", year=2022,
                  url="https://arxiv.org/abs/2204.06507",
                  code="https://github.com/deeplearning-wisc/knn-ood")
    fraction_param = "bank_fraction"
    grid_bank = 50_000  # the grid's source: OpenOOD's CIFAR configs, 50,000 train rows

    def _build(self, store: StoreLike, params: Mapping[str, Any]) -> KnnIndex:
        bank = knn_stream(store, float(params["bank_fraction"]), int(params["seed"]),
                          self.chunk_rows)
        return KnnIndex(bank, metric="l2", kind=params["index"], seed=int(params["seed"]),
                        query_chunk=self.chunk_rows, **self.index_options(store, params))

    def _scores_for_ks(self, index: KnnIndex, split: SplitLike,
                       ks: list[int]) -> dict[int, np.ndarray]:
        """-(Euclidean distance to the k-th neighbour) for every k in ks, one pass over split."""
        groups = self.search_groups(index, ks)
        out = {k: np.empty(split.num_rows, dtype=np.float64) for k in ks}
        for rows, (feats,) in self.chunks(split, "features"):
            query = l2_normalize(feats)
            for group in groups:
                dist, _ = index.search(query, max(group))
                for k in group:
                    sq = np.maximum(dist[:, k - 1].astype(np.float64), 0.0)
                    out[k][rows] = -np.sqrt(sq)
        return out
