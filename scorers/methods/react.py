"""ReAct: rectified activations (Sun, Guo, Li, "ReAct: Out-of-distribution Detection With
Rectified Activations", NeurIPS 2021).

Formula as implemented (float64), with h the penultimate feature and (W, b) the head:

    c     = percentile(all N*D entries of the `percentile_split` features, p)   ('linear')
    score = logsumexp(min(h, c) @ W.T + b)                 energy of the clipped features

Higher is more in-distribution. `percentile` p in (0, 100), default 90 (ReAct paper; OpenOOD
v1.5 `configs/postprocessors/react.yml` `percentile: 90`). `percentile_split` (default
"id/train"): the split whose activations set c. Sources, checked in their code: the ReAct
authors' `compute_threshold.py` (deeplearning-wisc/react at 2aa35d9) takes the 90th percentile
of the pooled features of the first ~2000 images of the ImageNet VALIDATION loader, and OpenOOD
v1.5 (`react_postprocessor.py` at 3c35632) the percentile over its whole ID validation loader.
featstore picks id/train: in a store id/val is the split on which sweeps CHOOSE
hyperparameters (DESIGN §4), and fitting c on it as well would let the same rows fit the
statistic and judge the setting; id/train is also present wherever a features scorer can fit.
Pass `percentile_split="id/val"` to reproduce the authors' / OpenOOD's convention. Default
sweep grid: OpenOOD v1.5 `react.yml` `percentile_list: [85, 90, 95, 99]`.

The threshold is exact and memory-bounded: it equals
`np.percentile(all_entries.astype(np.float64), p)` (numpy's default 'linear' method, the
interpolation done in float64 from the two exact order statistics), found by a two-pass radix
select over the float32 bit patterns (pass 1: a 65536-bin histogram of the high 16 bits of
the order-preserving keys; pass 2: a histogram of the low 16 bits within the bins that hold the
needed ranks; `scorers.kernels.select.exact_percentiles`). Memory is one chunk plus the
histograms, whatever N*D is; NaN features are an error. Fit computes the clip values of
`percentile` AND of the default grid in the same two passes (a few more bins in pass 2), and
keeps pass 1's histogram per split, so a sweep over the default grid reads the fit split no
further and any other percentile costs one pass.

Scoring, per block of rows of the scored split (`map_rows`), for the distinct clip values
c_0 < c_1 < ... of a grid:

    logits(c_0) = min(h, c_0) @ W.T + b                    dense (float64 BLAS), as one setting
    logits(c_t) = logits(c_0) + sum_{b < t} Y_b + (c_t - c_0) * sum_{b >= t} U_b,   t >= 1
    Y_b = sum_{j in band b} (h_j - c_0) W[:, j],   U_b = sum_{j in band b} W[:, j]

with band b of a row = its entries in (c_b, c_{b+1}] (the last band: above the largest c):
min(h_j, c_t) - c_0 is h_j - c_0 in the bands below t and c_t - c_0 in the others. Only the
entries above c_0 are touched (e.g. ~15% for the default grid's 85th percentile), row by row
in float64 with W held as float32 (exact for a float32 head)
(`scorers.kernels.bands.clip_band_logits`). Where that does not pay by the cost model of
`scorers.kernels.gather.sparse_pays` (e.g. a low percentile whose c_0 leaves most
entries above it), the lowest clip values are dense products too and the band sums start from
a higher anchor (`plan_anchor`, from the block's counts; deterministic); the two ways differ
only in the order of the float64 sums.

From the stored logits: when the store's float32 logits are the head's output
(`scorers.base.stored_logits_are_head`: x @ W.T + b to 1e-4 of the largest logit on a probe of
256 rows; false for float16 splits, TF32/float16 heads or logits of another head), a setting
whose clip value leaves few entries above it on the split that set it (`logits_pay`:
(1 - p/100) * SPARSE_COST < 1, i.e. p > 66.7; decided per setting, never from the scored rows)
is computed without a product, as

    logits(c) = l - sum_{j: h_j > c} (h_j - c) W[:, j]          (l the stored logits)

in one descending pass over the bands above the lowest such clip value
(`scorers.kernels.bands.clip_from_logits`, float64 sums, W as float32). Its scores carry the
float32 rounding of the stored logits (~1e-7 relative; a test bounds them at 1e-6 against the
float64 formula); the same setting gives the same scores alone or in any grid (1e-15 apart).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer, head_logits_usable, stored_logits_are_head
from ..fitting.percentiles import SplitPercentiles, check_percentile_split
from ..kernels.bands import clip_band_logits, clip_from_logits, plan_anchor
from ..kernels.gather import exact_f32, sparse_pays
from ..kernels.select import check_percentile
from ..kernels.softmax import logsumexp
from ..paper import Paper


def logits_pay(percentile: float) -> bool:
    """Is a setting cheaper from the stored logits than as a dense product, by `sparse_pays`
    for the fraction of entries above its clip value on the split that set it (1 - p/100)?
    Decided per setting, never from the scored rows, so that a row's score does not depend
    on the rows scored with it."""
    return sparse_pays(1.0 - float(percentile) / 100.0)



class ReAct(Scorer):

    name = "react"
    needs = ("features", "head", "fit:id/train")
    defaults = {"percentile": 90, "percentile_split": "id/train"}
    grid = {"percentile": [85, 90, 95, 99]}
    paper = Paper(title="ReAct: Out-of-distribution Detection With Rectified Activations",
                  authors=("Sun", "Guo", "Li"), venue="NeurIPS", year=2021,
                  url="https://arxiv.org/abs/2111.12797",
                  code="https://github.com/deeplearning-wisc/react")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_percentile(self.name, "percentile", params["percentile"])
        check_percentile_split(self.name, params["percentile_split"], store)

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.wt = exact_f32(np.asarray(weight).T)        # (D, C), for the sparse sums
        self.bias = np.asarray(bias, dtype=np.float64)
        self.logits_are_head = stored_logits_are_head(store)
        self._percentiles = SplitPercentiles(self, store)
        # The default grid's clip values come out of the same two passes (a few more bins of
        # pass 2's histogram): a sweep over the default grid reads id/train no further.
        own = float(self.params["percentile"])
        extra = [{**self.params, "percentile": p} for p in self.grid["percentile"]
                 if float(p) != own]
        self.threshold = self.thresholds([self.params, *extra])[0]

    def thresholds(self, settings: list[dict[str, Any]]) -> list[float]:
        """Clip value per setting; every missing percentile of a split from one pass over it
        (pass 1's histogram of each split is kept, so later percentiles cost one pass:
        `scorers.fitting.percentiles`)."""
        return self._percentiles.get([(s["percentile_split"], float(s["percentile"]))
                                      for s in settings])

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        clips = self.thresholds(full)
        cs = sorted(set(clips))
        if head_logits_usable(split, self.logits_are_head):
            from_logits = {c for c, s in zip(clips, full, strict=True)
                           if logits_pay(s["percentile"])}

            def block_l(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
                energy = self._energies(x, cs, logits, from_logits)
                return [energy[c] for c in clips]

            return self.map_rows(split, ("features", "logits"), block_l, outputs=len(settings))

        def block(x: np.ndarray) -> list[np.ndarray]:
            energy = self._energies(x, cs)
            return [energy[c] for c in clips]

        return self.map_rows(split, ("features",), block, outputs=len(settings))

    def _dense(self, x64: np.ndarray, c: float) -> np.ndarray:
        z = np.minimum(x64, c) @ self.weight_t
        z += self.bias
        return z

    def _energies(self, x: np.ndarray, cs: list[float], logits: np.ndarray | None = None,
                  from_logits: set[float] | None = None) -> dict[float, np.ndarray]:
        """Energy of every clip value in `cs` (ascending) for one block of rows: those in
        `from_logits` from the stored logits (`clip_from_logits`); the others as dense
        products up to the anchor chosen by `plan_anchor` (from the block's counts), the rest
        from `clip_band_logits` (the block is widened to float64 only for those)."""
        energy: dict[float, np.ndarray] = {}
        if logits is not None and from_logits:
            low = [c for c in cs if c in from_logits]
            z = np.empty((len(low), x.shape[0], self.wt.shape[1]), dtype=np.float64)
            clip_from_logits(x, np.asarray(logits, dtype=np.float64), self.wt,
                              np.array(low, dtype=np.float64), z)
            for t, c in enumerate(low):
                energy[c] = logsumexp(z[t])
            cs = [c for c in cs if c not in from_logits]
            if not cs:
                return energy
        x64 = x.astype(np.float64)
        if len(cs) == 1:
            energy[cs[0]] = logsumexp(self._dense(x64, cs[0]))
            return energy
        counts = [int(np.count_nonzero(x64 > c)) for c in cs]
        a = plan_anchor(counts, x64.size)
        energy.update({c: logsumexp(self._dense(x64, c)) for c in cs[:a]})
        rest = np.array(cs[a:], dtype=np.float64)
        n, c_num = x.shape[0], self.wt.shape[1]
        block = max(1, (1 << 22) // max(1, (len(rest) - 1) * c_num))
        for c in rest:
            energy[float(c)] = np.empty(n, dtype=np.float64)
        for lo in range(0, n, block):
            hi = min(lo + block, n)
            anchor = self._dense(x64[lo:hi], rest[0])
            energy[float(rest[0])][lo:hi] = logsumexp(anchor)
            if len(rest) > 1:
                z = np.empty((len(rest) - 1, hi - lo, c_num), dtype=np.float64)
                clip_band_logits(x[lo:hi], anchor, self.wt, rest, z)
                for t in range(1, len(rest)):
                    energy[float(rest[t])][lo:hi] = logsumexp(z[t - 1])
        return energy
