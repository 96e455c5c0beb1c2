"""Per-row histograms on a fixed grid and their smoothed symmetric KL divergence to a
reference density (WeiPer+KLD, Granz et al., NeurIPS 2024).

`hist_edges(lo, hi, n)`: the n + 1 edges lo + (i / n)(hi + 1e-8 - lo) (the authors'
`linspace(min, max + eps)`); bin i is [e_i, e_{i+1}); a value outside [e_0, e_n) is in no bin.
`add_row_hist(values, edges, out)` adds each row's bin counts into out (n_rows, n_bins), float64
(the caller divides by the row's value count: the fraction of the row's values per bin, bins
outside dropped WITHOUT renormalizing, as the authors' `density[1:-1] / density.sum()`).
`sym_kl_rows(q, p, size, eps, out)`: for each row q_i, the uniform moving average of width
`size` over the bins (window [t - (size-1)//2, t + size - 1 - (size-1)//2], edges replicated:
torch's Conv1d padding='same', padding_mode='replicate'), then q' = (q_s + eps) / sum and, with
p' = (p + eps) / sum (the reference, not smoothed), KL(p'||q') + KL(q'||p') =
sum_t (p'_t - q'_t)(log p'_t - log q'_t).
"""

from __future__ import annotations

import numpy as np
from numba import njit

EDGE_PAD = 1e-8


def hist_edges(lo: float, hi: float, n_bins: int) -> np.ndarray:
    """(n_bins + 1,) float64 edges lo + (i / n_bins) (hi + 1e-8 - lo)."""
    steps = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    return lo + steps * (hi + EDGE_PAD - lo)


@njit(cache=True, nogil=True)
def add_row_hist(values, edges, out):
    """out[i, k] += #{j: edges[k] <= values[i, j] < edges[k + 1]} (float64 counts)."""
    n, m = values.shape
    nb = edges.shape[0] - 1
    lo = edges[0]
    hi = edges[nb]
    step = (hi - lo) / nb
    for i in range(n):
        for j in range(m):
            v = np.float64(values[i, j])
            if not (v >= lo) or not (v < hi):
                continue
            k = int((v - lo) / step)
            k = min(max(k, 0), nb - 1)
            while k > 0 and v < edges[k]:
                k -= 1
            while k + 1 < nb and v >= edges[k + 1]:
                k += 1
            out[i, k] += 1.0


@njit(cache=True, nogil=True)
def sym_kl_rows(q, p, size, eps, out):
    """out[i] = symmetric KL between (p + eps) normalized and the width-`size` moving average
    of q[i] (replicated edges) + eps, normalized."""
    n, nb = q.shape
    left = (size - 1) // 2
    pn = p + eps
    pn = pn / pn.sum()
    logp = np.log(pn)
    qs = np.empty(nb)
    for i in range(n):
        total = 0.0
        for t in range(nb):
            acc = 0.0
            for m in range(size):
                u = min(max(t - left + m, 0), nb - 1)
                acc += q[i, u]
            qs[t] = acc / size + eps
            total += qs[t]
        kl = 0.0
        for t in range(nb):
            qt = qs[t] / total
            kl += (pn[t] - qt) * (logp[t] - np.log(qt))
        out[i] = kl
