"""MC-Dropout: uncertainty of T stochastic forward passes with dropout on.

Paper: Gal & Ghahramani, "Dropout as a Bayesian Approximation: Representing Model Uncertainty
in Deep Learning", ICML 2016 (the remote-sensing benchmark's eqs. 15-16).

Reads the split extra `mc_logits` (T, N, C) (rows on axis 1) that `featstore extract
--mc-samples T` writes for a model with dropout (`featstore train --method mcdropout`).
With p_t = softmax(mc_logits[t]) and p_mean = (1/T) sum_t p_t (eq. 15), formula as
implemented, per `variant`:

    "entropy"     score = -H(p_mean) = sum_c p_mean_c log p_mean_c      (default; eq. 16)
    "msp"         score = log max_c p_mean_c = log1p(-(1/T) sum_t q_t),
                  q_t = sum_{k != c*} p_t,k, c* = argmax_c p_mean_c
    "logit_mean"  score = log max_c softmax((1/T) sum_t mc_logits[t])_c    (OpenOOD v1.5
                                                                         `dropout_postprocessor`)

"msp" and "logit_mean" score the LOG of the probability (same ranking; exp gives it back):
the probability rounds to 1.0 on confident rows and ties them, the log forms do not (q_t is
summed from the other classes' probabilities, never as 1 - p; "logit_mean" is
`scorers.kernels.softmax.log_max_softmax`; DESIGN §4).

Default "entropy": the benchmark's eq. 16 uncertainty H(p) of the mean prediction (0 log 0 is
taken as 0). Higher = more in-distribution for every variant. No sweep grid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.extra_keys import MC_LOGITS
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import log_max_softmax, softmax
from ..paper import Paper

VARIANTS = ("entropy", "msp", "logit_mean")


def mc_dropout_scores(mc_logits: np.ndarray, variant: str) -> np.ndarray:
    """(n,) float64 scores of (T, n, C) logits of T stochastic passes."""
    t, n, c = mc_logits.shape
    if variant == "logit_mean":
        return log_max_softmax(np.asarray(mc_logits, dtype=np.float64).mean(axis=0))
    p = softmax(np.asarray(mc_logits).reshape(t * n, c)).reshape(t, n, c)
    p_mean = p.mean(axis=0)
    if variant == "msp":
        top = np.argmax(p_mean, axis=1)
        p[:, np.arange(n), top] = 0.0  # q_t: the other classes' probabilities, summed
        return np.log1p(-p.sum(axis=2).mean(axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(p_mean > 0, p_mean * np.log(p_mean), 0.0)
    return plogp.sum(axis=1)


def mc_mean_predictions(mc_logits: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """(n,) int64 class predictions argmax_c p_mean_c, p_mean = (1/T) sum_t softmax(
    mc_logits[t]) (the benchmark's eq. 15: "the means of these samples are used to segment
    the predictions"), in row chunks of (T, chunk, C)."""
    t, n, c = mc_logits.shape
    out = np.empty(n, dtype=np.int64)
    for a in range(0, n, chunk):
        block = np.asarray(mc_logits[:, a:a + chunk])
        m = block.shape[1]
        p = softmax(block.reshape(t * m, c)).reshape(t, m, c)
        out[a:a + m] = np.argmax(p.mean(axis=0), axis=1)
    return out


def mc_id_accuracy(split: SplitLike) -> float:
    """Top-1 accuracy (%) of the MC-mean prediction (`mc_mean_predictions` of the split's
    `mc_logits`: the remote-sensing paper's eq. 15, §2.2.4, MC-Dropout predicts with the mean
    of its T stochastic passes, not the deterministic logits) over the labelled rows (label
    != -1); NaN when none is labelled."""
    pred = mc_mean_predictions(split.extra(MC_LOGITS))
    labels = np.asarray(split.labels)
    keep = labels != -1
    return float(100.0 * np.mean(pred[keep] == labels[keep])) if keep.any() else float("nan")


class MCDropout(Scorer):
    """Negative predictive entropy (or max probability) of the MC-averaged softmax."""

    name = "mcdropout"
    needs = (f"extra:{MC_LOGITS}",)
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {"variant": "entropy"}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("Dropout as a Bayesian Approximation: Representing Model "
                         "Uncertainty in Deep Learning"),
                  authors=("Gal", "Ghahramani"), venue="ICML", year=2016,
                  url="https://arxiv.org/abs/1506.02142", code=None)

    def score_form(self) -> str:
        return "" if self.params["variant"] == "entropy" else "log_prob"

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        self.check_choice(params, "variant", VARIANTS)

    def _score(self, split: SplitLike) -> np.ndarray:
        ds = split.extra(MC_LOGITS)
        if ds.ndim != 3 or split.extra_row_axis(MC_LOGITS) != 1:
            raise FeatstoreError(f"scorer {self.name!r}: extra {MC_LOGITS!r} of split "
                                 f"{split.name!r} must be (T, N, C) with rows on axis 1, got "
                                 f"shape {tuple(ds.shape)}")
        variant = self.params["variant"]
        out = np.empty(split.num_rows, dtype=np.float64)
        for rows, (mc,) in self.chunks(split, f"extra:{MC_LOGITS}"):
            out[rows] = mc_dropout_scores(mc, variant)
        return out
