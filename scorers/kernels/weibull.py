"""libMR's FitHigh and W_score (Scheirer et al.'s meta-recognition library, which OpenMax's
authors' code and OpenOOD call) without libMR: the two-parameter Weibull maximum-likelihood fit
of the largest values of a sample, shifted as libMR shifts them, and its CDF.

FitHigh(tail), tail = the largest values t_1..t_n of a sample:

    x_i   = t_i + 10000 - min(tail)            (libMR's translate_amount 10000, small_score)
    shape k, scale lam: the Weibull MLE with location 0 of the x_i:
        sum x^k ln x / sum x^k - 1/k - mean(ln x) = 0      (k by Brent's method on y = x/max x,
        lam = (mean x^k)^(1/k)                              ln y = log1p((x - max) / max))

W_score(d) = 1 - exp(-((d + 10000 - min(tail)) / lam)^k), the CDF (exp and log1p forms: k is
large, ~1e4 to 1e5, because the shifted values differ by a few units out of 10000).
Deterministic (a bracketing root finder, no random start). scipy.stats.weibull_min.fit(x,
floc=0) solves the same equation (tests/scorers/test_openmax.py compares), pytorch-ood's
`LibNotMR` maximizes the same likelihood with scipy's exponweib.fit (a simplex search: its
shape agrees to ~1e-6 relative).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from featstore.errors import FeatstoreError

TRANSLATE = 10000.0


@dataclass(frozen=True)
class Weibull:
    """A libMR FitHigh model: W_score(d) = 1 - exp(-((d + shift) / scale)^shape)."""

    shift: float      # 10000 - min(tail)
    shape: float
    scale: float

    def cdf(self, d: np.ndarray) -> np.ndarray:
        """W_score of distances d (float64, any shape)."""
        x = np.asarray(d, dtype=np.float64) + self.shift
        with np.errstate(divide="ignore"):
            log_ratio = np.log1p((x - self.scale) / self.scale)
        return -np.expm1(-np.exp(self.shape * log_ratio))


def fit_high(tail: np.ndarray, what: str = "values") -> Weibull:
    """libMR FitHigh of `tail` (the largest values, any order). FeatstoreError naming `what`
    when the tail has fewer than two distinct values (the likelihood has no maximum)."""
    t = np.asarray(tail, dtype=np.float64)
    shift = TRANSLATE - float(t.min())
    x = t + shift
    top = float(x.max())
    log_y = np.log1p((x - top) / top)
    if t.size < 2 or not np.any(log_y < 0):
        raise FeatstoreError(f"{what}: a Weibull fit needs at least two distinct values in "
                             f"the tail (got {t.size} value(s), {np.unique(t).size} distinct)")
    mean_log = float(log_y.mean())

    def score_eq(k: float) -> float:
        w = np.exp(k * log_y)
        return float((w * log_y).sum() / w.sum()) - 1.0 / k - mean_log

    lo, hi = 1e-3, 1.0
    while score_eq(hi) < 0:
        lo, hi = hi, hi * 4.0
    shape = float(brentq(score_eq, lo, hi, xtol=1e-12, rtol=4 * np.finfo(float).eps,
                         maxiter=500))
    scale = top * float(np.exp(np.log(np.mean(np.exp(shape * log_y))) / shape))
    return Weibull(shift=shift, shape=shape, scale=scale)
