"""GEN: generalized entropy score.

Paper: Liu, Lochman & Zach, "GEN: Pushing the Limits of Softmax-Based Out-of-Distribution
Detection", CVPR 2023.

Formula as implemented, for logits l in R^C, p = softmax(l) sorted in decreasing order
p_(1) >= p_(2) >= ... >= p_(C), gamma > 0 and M >= 1:

    score(x) = -G_gamma(p) = - sum_{j=1}^{min(M, C)} p_(j)^gamma * (1 - p_(j))^gamma

(the generalized entropy over the top-M probabilities; higher = more ID). M above C is clipped
to C, i.e. all classes are used; this is what the paper's reference code and OpenOOD's
`probs_sorted[:, -M:]` do, and it lets the default M = 100 run on a 10-class model.
Defaults gamma = 0.1, M = 100 (the paper's ImageNet setting; OpenOOD v1.5
`configs/postprocessors/gen.yml` `postprocessor_args`). Default sweep grid: OpenOOD v1.5
`gen.yml` `postprocessor_sweep`: gamma in [0.01, 0.1, 0.5, 1, 2, 5, 10], M in
[10, 50, 100, 200, 500, 1000] (M values above C collapse onto M = C).

Computed per row in one Numba pass (`scorers.kernels.rowexp.gen_rows`): the softmax
p_j = e_j / s (e_j = exp(l_j - max l), s = sum e, float64), a selection of the top min(M, C)
entries, lq = log(p (1 - p)) once per selected entry, and per gamma one exp pass
(p (1 - p))^gamma = exp(gamma lq) over them, summed in float64.
`score_grid` shares the work: per row, one exp pass and nested selections of the top M for
every distinct M of the grid (the largest first, then within it) and the logs; per distinct
gamma, one exp pass over the top max(M) entries, whose running sums at each M give every M.

No saturation: the largest probability's 1 - p is r / (1 + r), r the other classes'
exponentials summed without the max's exp(0) = 1 (not 1.0 - p, which is 0 once the top-logit
gap exceeds ~36.7), and a p (1 - p) below 1e-300 (p rounded to 1.0, or exp(z) underflowed) is
carried as its logarithm, so each term exp(gamma log(p (1 - p))) is exact until it underflows
itself: rows keep their order at logits x 300 where the plain formula loses every term but
the largest (tests/scorers/test_softmax_saturation.py, against mpmath).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import gen_entropies
from ..paper import Paper


def gen_scores(logits: np.ndarray, gammas: list[float], ms: list[int]) -> list[np.ndarray]:
    """-sum of p^g (1-p)^g over the top-min(M, C) softmax probabilities, per (g, M) pair:
    one call of `scorers.kernels.softmax.gen_entropies` over the distinct gammas and the
    distinct clipped M (decreasing)."""
    c = int(np.shape(logits)[1])
    distinct_g = sorted(set(gammas))
    distinct_m = sorted({min(m, c) for m in ms}, reverse=True)
    table = gen_entropies(logits, np.array(distinct_g), np.array(distinct_m))
    return [table[:, distinct_g.index(g), distinct_m.index(min(m, c))]
            for g, m in zip(gammas, ms, strict=True)]


class GEN(Scorer):
    """Negative generalized entropy of the top-M softmax probabilities (higher = more ID)."""

    name = "gen"
    needs = ("logits",)
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {"gamma": 0.1, "M": 100}
    grid: ClassVar[dict[str, list[Any]]] = {
        "gamma": [0.01, 0.1, 0.5, 1, 2, 5, 10],
        "M": [10, 50, 100, 200, 500, 1000],
    }
    paper = Paper(title="GEN: Pushing the Limits of Softmax-Based Out-of-Distribution Detection",
                  authors=("Liu", "Lochman", "Zach"), venue="CVPR", year=2023,
                  url="https://openaccess.thecvf.com/content/CVPR2023/html/Liu_GEN_Pushing_the_Limits_of_Softmax-Based_Out-of-Distribution_Detection_CVPR_2023_paper.html",
                  code="https://github.com/XixiLiu95/GEN")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        gamma, m = params["gamma"], params["M"]
        if (isinstance(gamma, bool) or not isinstance(gamma, Real)
                or not math.isfinite(float(gamma)) or float(gamma) <= 0):
            raise UsageError(
                f"scorer {self.name!r}: gamma={gamma!r} is out of range "
                "(valid: a finite number > 0)"
            )
        if isinstance(m, bool) or not isinstance(m, Integral) or int(m) < 1:
            raise UsageError(
                f"scorer {self.name!r}: M={m!r} is out of range (valid: an integer >= 1; "
                "values above the number of classes C use all C classes)"
            )

    def score_form(self) -> str:
        return "unsaturated"  # scores cached by the saturating computation are not read back

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        merged = [{**self.params, **s} for s in settings]
        gammas = [float(p["gamma"]) for p in merged]
        ms = [int(p["M"]) for p in merged]
        return self.map_rows(split, ("logits",),
                             lambda logits: gen_scores(logits, gammas, ms), outputs=len(merged))
