"""OptFS: optimal piecewise-constant feature shaping fitted on ID data (Zhao, Xu, Gupta,
Asthana, Zheng & Gould, "Towards Optimal Feature-Shaping Methods for Out-of-Distribution
Detection", ICLR 2024).

Formula as implemented (float64), the authors' `detector/ours.py` (Qinyu-Allen-Zhao/OptFSOOD
at c09a85e), with x the penultimate feature, (W, b) the head and p(x) = argmax of the stored
logits (first index on ties):

    fit (id/train, N rows):
      lo, hi = quantile of all N*D entries at 0.001 and 0.999   (numpy 'linear')
      width  = (hi - lo) / 100;  b_k = np.arange(lo, hi, width), k = 0..K-1 (K = 100 or 101)
      I_k    = (1/N) sum_x sum_{j: b_k <= x_j < b_k + width} w_{p(x), j} x_j
      theta  = 1000 I / ||I||_2
    score:
      x~_j   = theta_k x_j for the bin k of x_j, 0 where x_j is in no bin
      "vanilla": score = w_{p(x)} . x~        (the authors' default, "Ours (V)"; no bias)
      "energy":  score = logsumexp(W x~ + b)  (their `--use_ood_score energy`)

`variant` default "vanilla" (the authors' `eval_ood.py` default); sweep grid: both variants
(the method has no other hyperparameter: 100 bins and the 0.001 quantiles are fixed in the
paper and the code). Differences from their code, none of which moves a number beyond the
float32 rounding of the boundaries: the quantiles and bin edges are float64 here (theirs are
float32 NumPy scalars; an entry within a float32 ulp of an edge may fall in the other bin),
an entry where b_k + width and b_{k+1} differ by an ulp is in one bin here and in both of
their masks, and the quantiles are exact over all entries in bounded memory
(`scorers.kernels.select.exact_percentiles`, two passes) where they load the split whole.
The CADRef authors' transcription (LingAndZero/CADRef `ood_methods/OptFS.py`) scores the
"energy" variant. Higher is more in-distribution.

Passes: the two radix-select passes for lo and hi, one pass for I (`scorers.kernels.
piecewise.add_bin_contributions`); scoring shapes each block once
(`shape_rows`) and a grid's two variants share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.piecewise import add_bin_contributions, shape_rows
from ..kernels.select import exact_percentiles
from ..kernels.softmax import logsumexp
from ..paper import Paper

QUANTILE = 1e-3
BINS = 100
THETA_NORM = 1000.0


class OptFS(Scorer):
    name = "optfs"
    needs = ("features", "logits", "head", "fit:id/train")
    defaults = {"variant": "vanilla"}
    grid = {"variant": ["vanilla", "energy"]}
    paper = Paper(title="Towards Optimal Feature-Shaping Methods for Out-of-Distribution "
                        "Detection",
                  authors=("Zhao", "Xu", "Gupta", "Asthana", "Zheng", "Gould"),
                  venue="ICLR", year=2024, url="https://arxiv.org/abs/2402.00865",
                  code="https://github.com/Qinyu-Allen-Zhao/OptFSOOD")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        self.check_choice(params, "variant", ["vanilla", "energy"])

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight = np.ascontiguousarray(weight, dtype=np.float64)
        self.weight_t = np.ascontiguousarray(self.weight.T)
        self.bias = np.asarray(bias, dtype=np.float64)
        split = self.fit_split(store, "id/train")

        def chunks() -> Iterable[np.ndarray]:
            return (x for _, (x,) in self.chunks(split, "features"))

        lo, hi = exact_percentiles(chunks, [100 * QUANTILE, 100 * (1 - QUANTILE)])
        if not hi > lo:
            raise FeatstoreError(
                f"scorer {self.name!r}: the 0.1% and 99.9% quantiles of split 'id/train' "
                f"are equal ({lo!r}); OptFS needs features that vary")
        self.width = (hi - lo) / BINS
        self.edges = np.arange(lo, hi, self.width, dtype=np.float64)
        sums = np.zeros(self.edges.size)
        for _, (x, logits) in self.chunks(split, "features", "logits"):
            add_bin_contributions(x, np.argmax(logits, axis=1), self.weight, self.edges,
                                  self.width, sums)
        contrib = sums / split.num_rows
        norm = float(np.linalg.norm(contrib))
        if norm == 0.0:
            raise FeatstoreError(f"scorer {self.name!r}: every bin's logit contribution on "
                                 "'id/train' is 0; the shaping is undefined")
        self.theta = contrib / norm * THETA_NORM

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        variants = [{**self.params, **s}["variant"] for s in settings]

        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            shaped = np.empty(x.shape, dtype=np.float64)
            shape_rows(x, self.edges, self.width, self.theta, shaped)
            out: dict[str, np.ndarray] = {}
            if "vanilla" in variants:
                pred = np.argmax(logits, axis=1)
                out["vanilla"] = np.einsum("ij,ij->i", self.weight[pred], shaped)
            if "energy" in variants:
                z = shaped @ self.weight_t
                z += self.bias
                out["energy"] = logsumexp(z)
            return [out[v] for v in variants]

        return self.map_rows(split, ("features", "logits"), block, outputs=len(variants))
