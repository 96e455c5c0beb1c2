"""min_k of the cross-entropies q_k = -sum_j p_j a_kj of probability rows p against K log
templates a_k (every a_kj <= 0), exact in float64, with the K-wide product done in float32
(KL matching's score, `scorers.methods.kl_matching`).

    q_ik = -sum_j p_ij a_kj >= 0,   out_i = min_k q_ik

How: one float32 GEMM gives every q32_ik = -(p32 @ A32)_ik (N x C x K sgemm, the only
product of the size of the problem); then only the templates that can still be the minimum
are recomputed in float64, in a fixed order (`exact_min`), and the minimum is taken over them.

Why that is exact: every term p_ij * a_kj has the same sign (p >= 0, a <= 0), so the float32
dot has no cancellation; rounding p and a to float32 (u = 2^-24 each) and summing C terms in
any order gives |q32_ik - q_ik| <= gamma * q_ik + tau with gamma = (C + 2) u / (1 - (C + 2) u)
(the standard bound for a sum of same-signed products), and tau covers the float32 underflow of
products below 2^-126 (at most C * 2^-126 * max|a|). A template k with
q32_ik - gamma q32_ik - tau > min_k' (q32_ik' + gamma q32_ik' + tau) (with gamma taken 2x for
safety) cannot be the minimum, so the float64 minimum over the remaining candidates is the
float64 minimum over all K. The result does not depend on the float32 values beyond that
pruning, so it is deterministic (the same inputs give the same bits, whatever BLAS kernel or
block layout chose the candidates).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_U32 = 2.0 ** -24
_TINY32 = 2.0 ** -126


def prune_bounds(q32: np.ndarray, classes: int, amax: float) -> tuple[float, float]:
    """(relative, absolute) error bound of q32 against the float64 q (see the module
    docstring), with a factor 2 of safety on the relative part."""
    n = classes + 2
    gamma = 2.0 * n * _U32 / (1.0 - n * _U32)
    tau = classes * _TINY32 * max(amax, 1.0)
    return gamma, tau


@njit(cache=True, nogil=True)
def exact_min(probs, log_t, q32, gamma, tau, out):
    """out[i] = min over candidate k of -sum_j probs[i, j] * log_t[k, j] in float64
    (four interleaved sums in index order per candidate: a fixed order); candidates:
    q32[i, k] (1 - gamma) - tau <= min_k' q32[i, k'] (1 + gamma) + tau."""
    n, c = probs.shape
    kk = log_t.shape[0]
    for i in range(n):
        m32 = np.inf
        for k in range(kk):
            v = np.float64(q32[i, k])
            if v < m32:
                m32 = v
        limit = m32 * (1.0 + gamma) + tau
        best = np.inf
        for k in range(kk):
            if np.float64(q32[i, k]) * (1.0 - gamma) - tau <= limit:
                s0 = 0.0
                s1 = 0.0
                s2 = 0.0
                s3 = 0.0
                j = 0
                while j + 4 <= c:
                    s0 -= probs[i, j] * log_t[k, j]
                    s1 -= probs[i, j + 1] * log_t[k, j + 1]
                    s2 -= probs[i, j + 2] * log_t[k, j + 2]
                    s3 -= probs[i, j + 3] * log_t[k, j + 3]
                    j += 4
                while j < c:
                    s0 -= probs[i, j] * log_t[k, j]
                    j += 1
                s = (s0 + s1) + (s2 + s3)
                if s < best:
                    best = s
        out[i] = best


def min_cross_entropy(probs: np.ndarray, log_t: np.ndarray, log_t32_t: np.ndarray,
                      amax: float) -> np.ndarray:
    """(n,) float64 min_k -sum_j probs[i, j] log_t[k, j] for float64 probs (n, C), log
    templates log_t (K, C) float64 <= 0 and their float32 transpose log_t32_t (C, K);
    amax = max |log_t|."""
    q32 = probs.astype(np.float32) @ log_t32_t
    np.negative(q32, out=q32)
    gamma, tau = prune_bounds(q32, probs.shape[1], amax)
    out = np.empty(probs.shape[0])
    exact_min(np.ascontiguousarray(probs), log_t, q32, gamma, tau, out)
    return out
