"""CADRef: class-aware decoupled relative feature error (Ling, Chang, Zhao, Zhao, Chow &
Deng, "CADRef: Robust Out-of-Distribution Detection via Class-Aware Decoupled Relative
Feature Leveraging", CVPR 2025).

Formula as implemented (float64), exactly the authors' `ood_methods/CADRef.py`
(LingAndZero/CADRef at 121f74b), with x the penultimate feature, l the stored logits, c =
argmax_k l_k (first index on ties), m_c the mean feature of the id/train rows PREDICTED as c
(`scorers.fitting.predmeans`, as the authors' `utils/get_stat.py`), s = sign(w_c) the signs
of the head's row c, d = x - m_c:

    E+    = sum_j max(d_j s_j, 0) / ||x||_1        (deviations that raise the class logit)
    E-    = sum_j max(-d_j s_j, 0) / ||x||_1       (deviations that lower it)
    score = -(E+ / S(l) + E- / mean_{id/train} S(l))

S, `logit_score` (the authors' `--logit_method`, default "Energy"): "energy" logsumexp(l),
"msp" max softmax(l) (the probability), "maxlogit" max l, "gen" 1 / sum over the top M
softmax probabilities p of (p (1 - p))^0.1 with M = max(10, C // 10) capped at C (their
`gen`). Higher is more in-distribution. Default sweep grid: the four logit scores (the
authors' four `--logit_method` choices; the paper has no other hyperparameter). ||x||_1 = 0
is clamped to the smallest positive float64; a class no id/train row is predicted as takes
the id/train mean (the authors' code fails there). S is taken as it comes, as the authors
do: a negative or zero energy flips or blows up E+'s weight.

Sharing: E+ and E- come from one fused pass per row (`scorers.kernels.classref`); each
logit score of a grid is one more division. The fit computes the class means and the mean of
its own logit score in one pass; a grid's other logit scores get their id/train means in one
more pass over the logits (summed at once from the per-row values, `fitting.predmeans.
row_total`: the same bits as a fit's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.predmeans import predicted_class_means, row_total
from ..kernels.classref import class_ref_errors
from ..kernels.softmax import gen_entropies, logsumexp, max_softmax
from .caref import CADREF_PAPER

GEN_GAMMA = 0.1


def gen_m(num_classes: int) -> int:
    """The authors' M for GEN: C // 10, at least 10, at most C."""
    return min(num_classes, max(10, num_classes // 10))


def _gen(logits: np.ndarray) -> np.ndarray:
    c = logits.shape[1]
    sums = -gen_entropies(logits, np.array([GEN_GAMMA]), np.array([gen_m(c)]))[:, 0, 0]
    return 1.0 / sums


LOGIT_SCORES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "energy": lambda z: logsumexp(z),
    "msp": lambda z: max_softmax(z),
    "maxlogit": lambda z: np.max(np.asarray(z, dtype=np.float64), axis=1),
    "gen": _gen,
}


class CADRef(Scorer):
    name = "cadref"
    needs = ("features", "logits", "head", "fit:id/train")
    defaults = {"logit_score": "energy"}
    grid = {"logit_score": ["energy", "msp", "maxlogit", "gen"]}
    paper = CADREF_PAPER

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        self.check_choice(params, "logit_score", list(LOGIT_SCORES))

    def _fit(self, store: StoreLike) -> None:
        kind = self.params["logit_score"]
        fitted = predicted_class_means(self, store, {kind: LOGIT_SCORES[kind]})
        self.means = fitted.means
        self.train_logit_means = fitted.stat_means
        self.signs = np.sign(np.asarray(store.head[0], dtype=np.float64))
        self.diagnostics["classes_without_predicted_rows"] = fitted.empty

    def _train_logit_mean(self, kinds: list[str]) -> None:
        """The id/train means of logit scores not fitted yet, in one pass over the logits."""
        missing = [k for k in dict.fromkeys(kinds) if k not in self.train_logit_means]
        if not missing:
            return
        split = self.fit_split(self.fitted_store, "id/train")
        parts: dict[str, list[np.ndarray]] = {k: [] for k in missing}
        for _, (logits,) in self.chunks(split, "logits"):
            for k in missing:
                parts[k].append(LOGIT_SCORES[k](logits))
        self.train_logit_means.update({k: row_total(v) / split.num_rows
                                       for k, v in parts.items()})

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        kinds = [{**self.params, **s}["logit_score"] for s in settings]
        self._train_logit_mean(kinds)

        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            _, e_pos, e_neg = class_ref_errors(x, np.argmax(logits, axis=1), self.means,
                                               self.signs)
            out = []
            for kind in kinds:
                s = LOGIT_SCORES[kind](logits)
                out.append(-(e_pos / s + e_neg / self.train_logit_means[kind]))
            return out

        return self.map_rows(split, ("features", "logits"), block, outputs=len(kinds))
