"""Relation (Kim, Yun & Song, NeurIPS 2023, "Neural Relation Graph: A Unified Framework for
Identifying Label Noise and Outlier Data"), as OpenOOD computes it
(`openood/postprocessors/relation_postprocessor.py` at 3c35632, "borrowed from
snu-mllab/Neural-Relation-Graph").

As implemented, with f = h / sqrt(||h||^2 + 1e-10) (OpenOOD's `normalize`) and p = softmax(l)
for every id/train row j (the bank) and every scored row x:

    r_j(x)   = max(f(x) . f_j, 0) * (p(x) . p_j)             the relation kernel (>= 0)
    score(x) = sum_{j: |r_j(x)| > 0.03} sign(r_j) |r_j(x)|^pow  = sum_{j: r_j > 0.03} r_j^pow

(the edge threshold 0.03 is OpenOOD's `thres` default). `pow` default 1, grid [1, 2, 4, 6,
8] (OpenOOD `configs/postprocessors/relation.yml`). Blocked: each block of scored rows (about
1 MiB of features) meets the bank in chunks of `BANK_CHUNK` rows, so the N_test x N_train
kernel never exists whole; the two products are float32 sgemm (as OpenOOD's float32 torch
matmuls), the kernel values float32, their powers and sums float64. `score_grid` evaluates the
kernel once per (block, bank chunk) for every pow. The bank holds id/train's normalized
features and probabilities as float32 (N_train x (D + C)). Cost: N_test x N_train x (D + C)
multiply-adds, like exact KNN's N_test x N_train x D search plus the C-wide probability
products.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import softmax
from ..paper import Paper

FIT_SPLIT = "id/train"
THRESHOLD = 0.03
EPS = 1e-10
BANK_CHUNK = 2048


def _unit(x: np.ndarray) -> np.ndarray:
    """OpenOOD's normalize: h / sqrt(sum h^2 + 1e-10), in float64, returned as float32."""
    x64 = x.astype(np.float64)
    x64 /= np.sqrt(np.einsum("ij,ij->i", x64, x64) + EPS)[:, None]
    return x64.astype(np.float32)


class Relation(Scorer):
    """Sum of the thresholded relation-graph edges to the id/train rows."""

    name = "relation"
    needs = ("features", "logits", "fit:id/train")
    defaults = {"pow": 1}
    grid = {"pow": [1, 2, 4, 6, 8]}
    paper = Paper(title="Neural Relation Graph: A Unified Framework for Identifying Label "
                        "Noise and Outlier Data",
                  authors=("Kim", "Yun", "Song"), venue="NeurIPS", year=2023,
                  url="https://arxiv.org/abs/2301.12321",
                  code="https://github.com/snu-mllab/Neural-Relation-Graph")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        value = params["pow"]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value) or value <= 0:
            raise UsageError(f"scorer {self.name!r}: pow must be a number > 0 (got {value!r})")

    def _fit(self, store: StoreLike) -> None:
        split = self.fit_split(store, FIT_SPLIT)
        n = split.num_rows
        if n == 0:
            raise FeatstoreError(f"scorer {self.name!r}: split {FIT_SPLIT!r} has no rows")
        self.bank_f = np.empty((n, int(split.dims["features"])), dtype=np.float32)
        self.bank_p = np.empty((n, int(split.dims["logits"])), dtype=np.float32)
        for rows, (x, logits) in self.chunks(split, "features", "logits"):
            self.bank_f[rows] = _unit(x)
            self.bank_p[rows] = softmax(logits)

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        pows = [float({**self.params, **s}["pow"]) for s in settings]
        distinct = sorted(set(pows))

        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            f, p = _unit(x), softmax(logits).astype(np.float32)
            sums = np.zeros((len(distinct), x.shape[0]))
            for lo in range(0, self.bank_f.shape[0], BANK_CHUNK):
                rel = f @ self.bank_f[lo:lo + BANK_CHUNK].T
                np.maximum(rel, 0.0, out=rel)
                rel *= p @ self.bank_p[lo:lo + BANK_CHUNK].T
                edges = np.where(rel > THRESHOLD, rel, 0.0).astype(np.float64)
                for t, q in enumerate(distinct):
                    sums[t] += (edges if q == 1.0 else edges ** q).sum(axis=1)
            return [sums[distinct.index(q)] for q in pows]

        return self.map_rows(split, ("features", "logits"), block, outputs=len(settings))
