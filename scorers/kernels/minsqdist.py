"""min_k ||z_i - c_k||^2 over K centers, exact in float64, with the K-wide product done in
float32 (the class term of MDS and RMDS, `scorers.kernels.classstats.ClassMahalanobis`).

    d_ik = ||z_i||^2 - 2 z_i . c_k + ||c_k||^2,   out_i = min_k d_ik

How: one float32 GEMM gives every g_ik = fl32(z_i) . fl32(c_k) (N x r x K sgemm, the only
product of the size of the problem), so d32_ik = ||z_i||^2 - 2 g_ik + ||c_k||^2 (the squares
in float64); then only the centers that can still be the nearest are measured in float64,
directly as sum_j (z_ij - c_kj)^2 in a fixed order (`exact_min_sq`: no cancellation), and the
minimum is taken over them.

Why that is exact: rounding z and c to float32 (u = 2^-24 each) and summing r products in any
order gives |g_ik - z_i . c_k| <= gamma_{r+2} sum_j |z_ij c_kj| <= gamma_{r+2} ||z_i|| ||c_k||
(Cauchy-Schwarz; gamma_n = n u / (1 - n u), the standard bound for a float dot product), plus
at most r 2^-126 for products that underflow in float32. So |d32_ik - d_ik| <= e_ik =
2 (2 gamma_{r+2} ||z_i|| ||c_k|| + tau) (a factor 2 of safety, as in `scorers.kernels.
mincross`) + 1e-12 (||z_i||^2 + ||c_k||^2) for the float64 assembly. A center with
d32_ik - e_ik > min_k' (d32_ik' + e_ik') cannot be the nearest, so the float64 minimum over
the remaining candidates is the float64 minimum over all K. A non-finite d32 (a product that
overflowed float32) makes its center a candidate. The result does not depend on the float32
values beyond that pruning, so it is deterministic: the same inputs give the same bits,
whatever BLAS kernel or block layout chose the candidates.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_U32 = 2.0 ** -24
_TINY32 = 2.0 ** -126


def error_terms(dim: int) -> tuple[float, float]:
    """(gamma, tau) of the module docstring for dot products of length `dim`, the factor 2
    of safety included."""
    n = dim + 2
    gamma = 2.0 * n * _U32 / (1.0 - n * _U32)
    tau = 2.0 * dim * _TINY32
    return gamma, tau


@njit(cache=True, nogil=True, error_model="numpy")
def exact_min_sq(z, centers, g32, quad, center_sq, center_norm, gamma, tau, out):
    """out[i] = min over candidate k of sum_j (z[i, j] - centers[k, j])^2 in float64 (four
    interleaved sums in index order per candidate); candidates: see the module docstring."""
    n, r = z.shape
    kk = centers.shape[0]
    est = np.empty(kk)
    err = np.empty(kk)
    for i in range(n):
        zn = math.sqrt(quad[i])
        limit = np.inf
        for k in range(kk):
            est[k] = quad[i] - 2.0 * np.float64(g32[i, k]) + center_sq[k]
            err[k] = (2.0 * gamma * zn * center_norm[k] + tau
                      + 1e-12 * (quad[i] + center_sq[k]))
            hi = est[k] + err[k]
            if hi < limit:  # NaN / inf estimates never lower the limit
                limit = hi
        best = np.inf
        for k in range(kk):
            if not (est[k] - err[k] <= limit) and math.isfinite(est[k]):
                continue
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            j = 0
            while j + 4 <= r:
                a0 = z[i, j] - centers[k, j]
                a1 = z[i, j + 1] - centers[k, j + 1]
                a2 = z[i, j + 2] - centers[k, j + 2]
                a3 = z[i, j + 3] - centers[k, j + 3]
                s0 += a0 * a0
                s1 += a1 * a1
                s2 += a2 * a2
                s3 += a3 * a3
                j += 4
            while j < r:
                a0 = z[i, j] - centers[k, j]
                s0 += a0 * a0
                j += 1
            s = (s0 + s1) + (s2 + s3)
            if s < best:
                best = s
        out[i] = best


class PrunedMinSq:
    """min_k ||z - c_k||^2 for blocks of rows z against fixed centers c (K, r), float64."""

    def __init__(self, centers: np.ndarray):
        self.centers = np.ascontiguousarray(centers, dtype=np.float64)
        self.centers32_t = np.ascontiguousarray(self.centers.T, dtype=np.float32)
        self.center_sq = np.einsum("kr,kr->k", self.centers, self.centers)
        self.center_norm = np.sqrt(self.center_sq)
        self.gamma, self.tau = error_terms(self.centers.shape[1])

    def __call__(self, z: np.ndarray) -> np.ndarray:
        """(n,) float64 min_k ||z_i - c_k||^2 of float64 rows z (n, r)."""
        z = np.ascontiguousarray(z, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            g32 = z.astype(np.float32) @ self.centers32_t
        quad = np.einsum("ir,ir->i", z, z)
        out = np.empty(z.shape[0])
        exact_min_sq(z, self.centers, g32, quad, self.center_sq, self.center_norm,
                     self.gamma, self.tau, out)
        return out
