"""DICE: directed sparsification (Sun, Li, "DICE: Leveraging Sparsification for
Out-of-Distribution Detection", ECCV 2022).

Formula as implemented (float64), with (W, b) the head (C, D) and h the penultimate feature:

    m      = mean of the id/train features                  (D,)
    V      = m[None, :] * W                                  contribution matrix (C, D)
    t      = np.percentile(V, p)                             over all C*D entries ('linear')
    M      = V > t                                           keep the most salient weights
    score  = logsumexp(h @ (W * M).T + b)                    energy of the sparsified head

as in the official DICE code and OpenOOD v1.5 `dice_postprocessor.py` (strict `>`; the bias is
kept). Higher is more in-distribution. `p` is the sparsity percentile in (0, 100), default 90
(OpenOOD v1.5 `configs/postprocessors/dice.yml` `p: 90`; the DICE paper's CIFAR setting).
OpenOOD's own sweep is `p_list: [90]` (APS off), a single setting; the default sweep grid here
is [10, 30, 50, 70, 90], a project choice that spans the sparsity range evenly and contains
OpenOOD's 90.

How the products are computed. The masks are nested: for p > p', M(p) is inside M(p'). With
the grid's settings ordered by decreasing p (increasing kept count), band e of class c = the
weights kept from setting e on but not before, so h @ (W * M(p_e)).T is a running sum over
bands 0..e. Per block of scored rows (transposed, float32: exact for float32 features) and
per class c, the kept weights of c are accumulated band by band into a float64 sum over the
block's rows (`scorers.kernels.bands.masked_running_sums`: one row of h.T per kept weight,
weight in float64), and every setting's logits are read off the running sums (+ b), then
logsumexp. A setting is computed that way when its increment of kept weights over the
previous one pays by the cost model of `scorers.kernels.gather.sparse_pays` (an increment
below C*D / SPARSE_COST weights: p = 90 alone keeps 10%, each step of the default grid adds
20%); otherwise as a dense product with the masked head (W * M).T (float64 BLAS). The choice
depends only on the mask sizes (deterministic); the two ways differ in the order of the
float64 sums only.

Sharing: the mean is one chunked pass at fit; the thresholds of all p not seen yet come from
ONE `np.percentile` call over V's entries and are kept per p by the scorer, as are the dense
masked heads and the band lists of a grid, so a sweep on several splits builds each once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.classstats import train_mean
from ..kernels.bands import WeightBands, masked_running_sums
from ..kernels.gather import sparse_pays
from ..kernels.select import check_percentile
from ..kernels.softmax import logsumexp
from ..paper import Paper


class DICE(Scorer):

    name = "dice"
    needs = ("features", "head", "fit:id/train")
    defaults = {"p": 90}
    grid = {"p": [10, 30, 50, 70, 90]}
    paper = Paper(title="DICE: Leveraging Sparsification for Out-of-Distribution Detection",
                  authors=("Sun", "Li"), venue="ECCV", year=2022,
                  url="https://arxiv.org/abs/2111.09805",
                  code="https://github.com/deeplearning-wisc/dice")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_percentile(self.name, "p", params["p"])

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight = np.asarray(weight, dtype=np.float64)
        self.bias = np.asarray(bias, dtype=np.float64)
        self.mean = train_mean(self, store)
        self.contrib = self.mean[None, :] * self.weight
        self._thresholds: dict[float, float] = {}
        self._kept: dict[float, int] = {}
        self._heads: dict[float, np.ndarray] = {}
        self._bands: dict[tuple[float, ...], WeightBands] = {}
        self.thresholds([float(self.params["p"])])

    def thresholds(self, ps: list[float]) -> list[float]:
        """t = np.percentile(V, p) per p (kept by the scorer; the missing ones from one call),
        and the kept count |V > t| of each."""
        missing = [p for p in dict.fromkeys(ps) if p not in self._thresholds]
        if missing:
            for p, t in zip(missing, np.percentile(self.contrib.ravel(), missing), strict=True):
                self._thresholds[p] = float(t)
                self._kept[p] = int(np.count_nonzero(self.contrib > t))
        return [self._thresholds[p] for p in ps]

    def masked_heads(self, ps: list[float]) -> list[np.ndarray]:
        """(D, C) transposed masked weights (W * (V > t)).T, one per p (kept by the scorer)."""
        for p, t in zip(ps, self.thresholds(ps), strict=True):
            if p not in self._heads:
                self._heads[p] = np.ascontiguousarray((self.weight * (self.contrib > t)).T)
        return [self._heads[p] for p in ps]

    def plan(self, ps: list[float]) -> list[float]:
        """The distinct p computed as running sums (decreasing p, i.e. growing masks; each
        increment of kept weights pays by `sparse_pays`); the others are dense products."""
        self.thresholds(ps)
        size = self.contrib.size
        chain: list[float] = []
        prev = 0
        for p in sorted(set(ps), key=lambda q: (self._kept[q], -q)):
            if sparse_pays((self._kept[p] - prev) / size):
                chain.append(p)
                prev = self._kept[p]
        return chain

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        ps = [float({**self.params, **s}["p"]) for s in settings]
        chain = self.plan(ps)
        dense = [p for p in dict.fromkeys(ps) if p not in chain]
        heads = dict(zip(dense, self.masked_heads(dense), strict=True))
        bands = None
        if chain:
            key = tuple(chain)
            if key not in self._bands:
                self._bands[key] = WeightBands(self.weight, self.contrib, self.thresholds(chain))
            bands = self._bands[key]
        c_num = self.bias.shape[0]
        rows_max = max(1, (1 << 22) // max(1, len(chain) * c_num))   # ~32 MB of sums

        def block(x: np.ndarray) -> list[np.ndarray]:
            energy: dict[float, np.ndarray] = {}
            if dense:
                x64 = x.astype(np.float64)
                for p in dense:
                    energy[p] = logsumexp(x64 @ heads[p] + self.bias)
            if bands is not None:
                n = x.shape[0]
                for p in chain:
                    energy[p] = np.empty(n, dtype=np.float64)
                for lo in range(0, n, rows_max):
                    hi = min(lo + rows_max, n)
                    xt = np.ascontiguousarray(x[lo:hi].T)
                    sums = np.empty((len(chain), c_num, hi - lo), dtype=np.float64)
                    masked_running_sums(xt, bands.indptr, bands.ends, bands.idx, bands.wv,
                                         sums)
                    for e, p in enumerate(chain):
                        energy[p][lo:hi] = logsumexp(sums[e].T + self.bias)
            return [energy[p] for p in ps]

        return self.map_rows(split, ("features",), block, outputs=len(settings))
