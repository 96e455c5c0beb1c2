"""Row-wise softmax helpers over logits (N, C), all computed in float64 with
max-subtraction (a float64 copy of the chunk; the stored values are never modified):

    softmax(l, T)_k   = exp(l_k / T - m) / sum_j exp(l_j / T - m),   m = max_j l_j / T
    logsumexp(l, T)   = m + log sum_j exp(l_j / T - m)
    max_softmax(l, T) = exp(max_j l_j / T - logsumexp(l, T))
    softmax_plogp(l)  = (softmax(l), sum_k p_k log p_k) from one exp pass
"""

from __future__ import annotations

import numpy as np


def _scaled_copy(logits: np.ndarray, temperature: float) -> np.ndarray:
    """A float64 copy of logits / T (one pass; division by T = 1 is exact, so skipped)."""
    z = np.array(logits, dtype=np.float64)  # always a copy: the callers work in place
    if temperature != 1.0:
        z /= temperature
    return z


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax(logits / T), computed in float64 with max-subtraction."""
    z = _scaled_copy(logits, temperature)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def softmax_plogp(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(softmax(l), sum_k p_k log p_k) per row from ONE exp pass, float64: with z = l - max(l),
    e = exp(z), s = sum(e): p = e / s and log p = z - log s, so sum_k p_k log p_k =
    (sum_k e_k z_k) / s - log s (a probability that underflows contributes 0)."""
    z = _scaled_copy(logits, 1.0)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1)
    plogp = np.einsum("ij,ij->i", e, z) / s - np.log(s)
    e /= s[:, None]
    return e, plogp


def logsumexp(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise log sum_j exp(l_j / T), in float64 with max-subtraction."""
    z = _scaled_copy(logits, temperature)
    m = z.max(axis=1)
    z -= m[:, None]
    np.exp(z, out=z)
    return m + np.log(z.sum(axis=1))


def max_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise max_k softmax(l / T)_k = exp(max(l) / T - logsumexp(l / T)), float64.

    For T > 0, max(l / T) == max(l) / T exactly (division is monotone and correctly rounded),
    and the max of the stored values widened to float64 is the widened max, so no float64 copy
    of the chunk is made for it. Shared by `msp`, `odin`, `odin_perturbed`, `temp_scaling`,
    `godin` and `mcdropout`.
    """
    lmax = np.asarray(logits).max(axis=1).astype(np.float64) / temperature
    return np.exp(lmax - logsumexp(logits, temperature))
