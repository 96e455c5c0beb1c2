"""Row-wise softmax helpers over logits (N, C), all computed in float64 with
max-subtraction, each in one fused pass per row (`scorers.kernels.rowexp`: a Numba loop with
a vectorized float64 exp within 1 ulp of np.exp; the stored values are never modified and no
float64 copy of the chunk is made). With m = max_j l_j / T, z_j = l_j / T - m, e_j = exp(z_j)
and s = sum_j e_j:

    softmax(l, T)_k   = e_k / s
    logsumexp(l, T)   = m + log s
    max_softmax(l, T) = exp(max_j l_j / T - logsumexp(l, T)) = 1 / s   (e = 1 at the max)
    log_max_softmax(l, T) = log max_softmax(l, T) = -log s = -log1p(r), r = s - 1 summed
                        without the max's e = 1 (so r keeps its digits where s rounds to 1)
    max_softmax_logodds(l, T) = log(p / (1 - p)) of p = max_softmax(l, T), without forming p:
                        (l_(1) - l_(2)) / T - log sum_{k != argmax} exp((l_k - l_(2)) / T)
                        (l_(1), l_(2) the largest and second-largest logits)
    softmax_plogp(l)  = (softmax(l), sum_k p_k log p_k), sum_k p_k log p_k = (sum_k e_k z_k) / s
                        - log s   (log p_k = z_k - log s: an underflowed p_k contributes 0)
    neg_entropy(l)    = sum_k p_k log p_k alone (no probability matrix)
    max_softmax_complement(l) = (argmax, 1 - max_k softmax(l)_k) with 1 - p = r / (1 + r), r the
                        sum of e_j over every j but the first argmax (never 1.0 - 1.0)
    gen_entropies(l, gammas, ms) = GEN's -sum over the top M probabilities of (p (1 - p))^gamma

Inputs of any real dtype: float32 and float64 arrays are used as they are (made contiguous),
other dtypes are widened to float64 first.
"""

from __future__ import annotations

import numpy as np

from . import rowexp


def _rows(logits: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 / float64 2-D view of logits (a copy only if needed)."""
    arr = np.asarray(logits)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"logits must be (rows, classes) with classes >= 1, got {arr.shape}")
    return np.ascontiguousarray(arr)


def _max_and_sumexp(logits: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    x = _rows(logits)
    mt = np.empty(x.shape[0])
    s = np.empty(x.shape[0])
    rowexp.max_and_sumexp(x, float(temperature), mt, s)
    return mt, s


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax(logits / T) = e_k / s, float64 (N, C)."""
    x = _rows(logits)
    p = np.empty(x.shape, dtype=np.float64)
    rowexp.softmax_rows(x, float(temperature), p, np.empty(0), False)
    return p


def softmax_plogp(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(softmax(l), sum_k p_k log p_k) per row from ONE exp pass, float64: p = e / s and
    sum_k p_k log p_k = (sum_k e_k z_k) / s - log s (a probability that underflows
    contributes 0)."""
    x = _rows(logits)
    p = np.empty(x.shape, dtype=np.float64)
    plogp = np.empty(x.shape[0])
    rowexp.softmax_rows(x, 1.0, p, plogp, True)
    return p, plogp


def neg_entropy(logits: np.ndarray) -> np.ndarray:
    """Row-wise sum_k p_k log p_k = (sum_k e_k z_k) / s - log s of p = softmax(l), float64,
    without forming p."""
    x = _rows(logits)
    out = np.empty(x.shape[0])
    rowexp.neg_entropy_rows(x, out)
    return out


def logsumexp(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise log sum_j exp(l_j / T) = m + log s, float64."""
    mt, s = _max_and_sumexp(logits, temperature)
    return mt + np.log(s)


def max_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise max_k softmax(l / T)_k = 1 / s (the exponential of the max is exp(0) = 1),
    float64. Shared by `msp`, `odin`, `odin_perturbed`, `temp_scaling`, `godin` and
    `mcdropout`."""
    _, s = _max_and_sumexp(logits, temperature)
    return 1.0 / s


def log_max_softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise log max_k softmax(l / T)_k = -log sum_j exp((l_j - max_k l_k) / T) =
    -log1p(r), float64, with r = sum_{j != argmax} exp((l_j - max_k l_k) / T) summed without
    the max's own term (one fused pass per row, `rowexp.log_max_softmax_rows`). Ranks exactly
    like `max_softmax` (log is increasing) but never saturates where 1 / s rounds to 1.0
    (top-logit gap above ~36.7 T): rows stay distinct until r underflows (gap ~745 T). The
    score of `msp`, `odin`, `odin_perturbed`, `godin` and `mcdropout` (logit_mean)."""
    x = _rows(logits)
    out = np.empty(x.shape[0])
    rowexp.log_max_softmax_rows(x, float(temperature), out)
    return out


def max_softmax_logodds(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise log-odds log(p / (1 - p)) of p = max_k softmax(l / T)_k, float64, computed as

        (l_(1) - l_(2)) / T - log sum_{k != argmax} exp((l_k - l_(2)) / T)

    (1 - p = sum_{k != argmax} softmax_k; the sum holds exp(0) = 1 at l_(2), so it never
    underflows). A strictly increasing function of p that keeps its order where p itself
    rounds to 1.0 (T -> 0, huge logits): `temp_scaling`'s score. Ties at
    the maximum give a finite value <= 0 (p <= 1/2). Needs at least two classes."""
    x = np.array(_rows(logits), dtype=np.float64)
    if x.shape[1] < 2:
        raise ValueError(f"the max-softmax log-odds needs at least 2 classes, got {x.shape[1]}")
    t = float(temperature)
    rows = np.arange(x.shape[0])
    top = np.argmax(x, axis=1)
    m1 = x[rows, top].copy()
    x[rows, top] = -np.inf
    m2 = x.max(axis=1)
    x -= m2[:, None]
    x /= t
    np.exp(x, out=x)
    return (m1 - m2) / t - np.log(x.sum(axis=1))


def max_softmax_complement(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise (argmax, 1 - max_k softmax(l)_k), float64: 1 - p = r / (1 + r) with r =
    sum_{j != argmax} exp(l_j - max l) summed without the max's own exp(0) = 1, so it keeps
    its digits where p rounds to 1.0 (1.0 - p would be 0): exact to a few ulp until r
    underflows (top-logit gap ~745). The first argmax on ties (the others are in r)."""
    x = np.array(_rows(logits), dtype=np.float64)
    rows = np.arange(x.shape[0])
    top = np.argmax(x, axis=1)
    x -= x[rows, top][:, None]
    np.exp(x, out=x)
    x[rows, top] = 0.0
    r = x.sum(axis=1)
    return top, r / (1.0 + r)


def gen_entropies(logits: np.ndarray, gammas: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """(N, len(gammas), len(ms)) float64: -sum over the top ms[q] softmax probabilities p of
    (p (1 - p))^gammas[g] (`rowexp.gen_rows`); gammas distinct and > 0, ms distinct,
    decreasing, each in [1, C]."""
    x = _rows(logits)
    g = np.asarray(gammas, dtype=np.float64)
    m = np.asarray(ms, dtype=np.int64)
    c = x.shape[1]
    if m.ndim != 1 or not m.size or m[0] > c or m[-1] < 1 or np.any(np.diff(m) >= 0):
        raise ValueError(f"GEN's M values must be distinct, decreasing and in [1, {c}] "
                         f"(the number of classes), got {m.tolist()}")
    if g.ndim != 1 or not np.all(g > 0) or len(set(g.tolist())) != g.size:
        raise ValueError(f"GEN's gammas must be distinct and > 0, got {g.tolist()}")
    out = np.empty((x.shape[0], g.size, m.size))
    rowexp.gen_rows(x, g, m, out)
    return out
