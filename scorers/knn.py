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
  later Jingkang50/OpenOOD main sets APS_mode: False with K_list [50]. Valid:
  1 <= K <= bank size.
- `bank_fraction` = 1.0: the share of id/train rows kept in the bank, drawn uniformly without
  replacement with numpy's default_rng(`seed`) (KNN-OOD used a random 1% of ImageNet's
  training set, "alpha"). Valid: 0 < bank_fraction <= 1; bank size = ceil(fraction * N).
- `seed` = 0: the subsample's seed (and IVF k-means seed).
- `index` = "exact": "exact" (IndexFlatL2) | "ivf_flat" | "ivf_pq" | "hnsw", with the
  approximate indexes' parameters at their `scorers.knn_index` defaults.

`score_grid` over K runs one FAISS search per chunk at the largest K of the grid and takes
column K-1 for each K (per bank setting; HNSW groups K values that share a beam width).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .base import Scorer
from .knn_index import INDEX_KINDS, KnnIndex, l2_normalize, subsample_rows, subsample_size

FIT_SPLIT = "id/train"


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def load_bank(store: Any, fraction: float, seed: int, chunk_rows: int,
              normalize: bool = True) -> np.ndarray:
    """The (L2-normalized) id/train features of the bank rows as float32, read in chunks.

    Rows: all of id/train, or `subsample_rows(N, fraction, seed)` (sorted)."""
    split = store.split(FIT_SPLIT)
    n = split.num_rows
    rows = subsample_rows(n, fraction, seed)
    size = n if rows is None else rows.size
    bank = np.empty((size, split.dims["features"]), dtype=np.float32)
    filled = 0
    for sl, (feats,) in split.iter_chunks("features", chunk_rows=chunk_rows):
        if rows is not None:
            lo, hi = np.searchsorted(rows, [sl.start, sl.stop])
            feats = feats[rows[lo:hi] - sl.start]
        if feats.shape[0] == 0:
            continue
        bank[filled:filled + feats.shape[0]] = l2_normalize(feats) if normalize else feats
        filled += feats.shape[0]
    assert filled == size
    return bank


class KNN(Scorer):
    """Negative Euclidean distance to the K-th nearest normalized id/train feature."""

    name = "knn"
    needs = ("features", "fit:id/train")
    defaults = {"K": 50, "bank_fraction": 1.0, "seed": 0, "index": "exact"}
    grid = {"K": [50, 100, 200, 500, 1000]}
    paper = ("Sun, Ming, Zhu, Li. Out-of-distribution detection with deep nearest neighbors. "
             "ICML 2022")

    def check_params(self, params: Mapping[str, Any], store: Any = None) -> None:
        k = params["K"]
        if not _is_int(k) or k < 1:
            raise UsageError(f"scorer 'knn': K={k!r} must be an integer >= 1")
        frac = params["bank_fraction"]
        if (not isinstance(frac, numbers.Real) or isinstance(frac, bool)
                or not 0.0 < float(frac) <= 1.0):
            raise UsageError(
                f"scorer 'knn': bank_fraction={frac!r} must satisfy 0 < bank_fraction <= 1"
            )
        if not _is_int(params["seed"]) or params["seed"] < 0:
            raise UsageError(f"scorer 'knn': seed={params['seed']!r} must be an integer >= 0")
        if params["index"] not in INDEX_KINDS:
            raise UsageError(
                f"scorer 'knn': index={params['index']!r} is not one of "
                f"{', '.join(INDEX_KINDS)}"
            )
        if store is not None and store.has_split(FIT_SPLIT):
            n = store.split(FIT_SPLIT).num_rows
            size = subsample_size(n, float(frac))
            if k > size:
                raise UsageError(
                    f"scorer 'knn': K={k} is larger than the train bank ({size} rows: "
                    f"{n} rows of {FIT_SPLIT} x bank_fraction {frac}); valid: 1 <= K <= {size}"
                )

    # ------------------------------------------------------------------ shared work
    def _build(self, store: Any, params: Mapping[str, Any]) -> KnnIndex:
        bank = load_bank(store, float(params["bank_fraction"]), int(params["seed"]),
                         self.chunk_rows)
        return KnnIndex(bank, metric="l2", kind=params["index"], seed=int(params["seed"]),
                        query_chunk=self.chunk_rows)

    def _kth_scores(self, index: KnnIndex, split: Any, ks: list[int]) -> dict[int, np.ndarray]:
        """-(Euclidean distance to the k-th neighbour) for every k in ks, one pass over split."""
        groups: dict[Any, list[int]] = {}
        for k in sorted(set(ks)):
            groups.setdefault(index.search_key(k), []).append(k)
        out = {k: np.empty(split.num_rows, dtype=np.float64) for k in ks}
        for rows, (feats,) in self.chunks(split, "features"):
            query = l2_normalize(feats)
            for group in groups.values():
                dist, _ = index.search(query, max(group))
                for k in group:
                    sq = np.maximum(dist[:, k - 1].astype(np.float64), 0.0)
                    out[k][rows] = -np.sqrt(sq)
        return out

    # ------------------------------------------------------------------ hooks
    def _fit(self, store: Any) -> None:
        self.index = self._build(store, self.params)
        self.bank_size = self.index.ntotal

    def _score(self, split: Any) -> np.ndarray:
        k = int(self.params["K"])
        return self._kth_scores(self.index, split, [k])[k]

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        bank_keys = ("bank_fraction", "seed", "index")
        full = [{**self.params, **s} for s in settings]
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(full):
            groups.setdefault(tuple(p[key] for key in bank_keys), []).append(i)
        out: list[np.ndarray | None] = [None] * len(settings)
        own = tuple(self.params[key] for key in bank_keys)
        for key, members in groups.items():
            index = self.index if key == own else self._build(self.store, full[members[0]])
            scores = self._kth_scores(index, split, [int(full[i]["K"]) for i in members])
            for i in members:
                out[i] = scores[int(full[i]["K"])]
        return out  # type: ignore[return-value]
