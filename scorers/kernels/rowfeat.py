"""Fused per-row passes over penultimate features (N, D), one Numba loop per row, float64
arithmetic on the stored (float32) values: the row-wise L2 normalization of KNN / NNGuide,
SHE's inner product with the predicted class's pattern, NCI's proximity and L1 norm, fDBD's
boundary sum and normalizers (and fDBD's C x C table of inverse boundary distances, built in
one pass over W W^T at fit).

Why a kernel: the NumPy formulations make a float64 copy of the chunk and then one pass per
operation over it (NCI: the copy, x - mu, its norm, the gather W[pred], the row dot, |x|;
SHE and fDBD: a gathered (rows, D) or (rows, C) copy of a class table). Here every row is read
once and the class-table row is indexed in place, so a scorer's score pass costs about the
read of its inputs.

Conventions shared with the NumPy code they replace: the predicted class `pred[i]` is passed in,
computed by numpy's argmax of the logits (first index of the largest; its SIMD pass is 4x a
scalar loop here); sums of a row use
four interleaved float64 accumulators in index order (`_row_sums`: a fixed order, so a row's
result is the same bits whatever block, chunk or thread it is computed in, and it agrees with
NumPy's pairwise sums to ~1e-16 relative).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_TINY = np.finfo(np.float64).tiny


@njit(error_model="numpy")
def _row_sums(x, i, shift, wrow, use_shift, want_sq, want_dot, want_abs):
    """One pass over row i with v_j = x[i, j] - shift[j] (x[i, j] without `use_shift`):
    (sum_j v_j^2, sum_j v_j * wrow[j], sum_j |x[i, j]|) in float64, each with four
    interleaved accumulators in index order; a sum not wanted is 0 and costs nothing (the
    flags are loop-invariant: the compiler unswitches them)."""
    d = x.shape[1]
    s0 = s1 = s2 = s3 = 0.0
    w0 = w1 = w2 = w3 = 0.0
    a0 = a1 = a2 = a3 = 0.0
    j = 0
    while j + 4 <= d:
        u0 = np.float64(x[i, j])
        u1 = np.float64(x[i, j + 1])
        u2 = np.float64(x[i, j + 2])
        u3 = np.float64(x[i, j + 3])
        v0, v1, v2, v3 = u0, u1, u2, u3
        if use_shift:
            v0 -= shift[j]
            v1 -= shift[j + 1]
            v2 -= shift[j + 2]
            v3 -= shift[j + 3]
        if want_sq:
            s0 += v0 * v0
            s1 += v1 * v1
            s2 += v2 * v2
            s3 += v3 * v3
        if want_dot:
            w0 += v0 * wrow[j]
            w1 += v1 * wrow[j + 1]
            w2 += v2 * wrow[j + 2]
            w3 += v3 * wrow[j + 3]
        if want_abs:
            a0 += abs(u0)
            a1 += abs(u1)
            a2 += abs(u2)
            a3 += abs(u3)
        j += 4
    while j < d:
        u0 = np.float64(x[i, j])
        v0 = u0 - shift[j] if use_shift else u0
        s0 += v0 * v0 if want_sq else 0.0
        w0 += v0 * wrow[j] if want_dot else 0.0
        a0 += abs(u0) if want_abs else 0.0
        j += 1
    return (s0 + s1) + (s2 + s3), (w0 + w1) + (w2 + w3), (a0 + a1) + (a2 + a3)


@njit(error_model="numpy")
def _norm(x, i, shift, use_shift):
    """||x[i] - shift||_2 (||x[i]||_2 without `use_shift`), float64."""
    return np.sqrt(_row_sums(x, i, shift, shift, use_shift, True, False, False)[0])


@njit(cache=True, nogil=True, error_model="numpy")
def l2_normalize_rows(x, out):
    """out[i, j] = x[i, j] / sqrt(sum_k x[i, k]^2) (0 for an all-zero row), computed in
    float64, stored in out's dtype (float32 for the banks and queries). No additive epsilon:
    the result does not depend on the rows' scale (features of order 1e-30 normalize like
    the same features of order 1)."""
    empty = np.empty(1)
    for i in range(x.shape[0]):
        norm = _norm(x, i, empty, False)
        denom = norm if norm > 0.0 else 1.0
        for j in range(x.shape[1]):
            out[i, j] = np.float64(x[i, j]) / denom


@njit(cache=True, nogil=True, error_model="numpy")
def pattern_dot_rows(x, pred, patterns, out):
    """SHE: out[i] = x[i] . patterns[pred[i]] (float64)."""
    empty = np.empty(1)
    for i in range(x.shape[0]):
        out[i] = _row_sums(x, i, empty, patterns[pred[i]], False, False, True, False)[1]


@njit(cache=True, nogil=True, error_model="numpy")
def nci_rows(x, pred, weight, mean, proximity_out, l1_out):
    """NCI's two per-row terms, c = pred[i], v = x_i - mean, all in one pass over the row:
    proximity_out[i] = w_c . v / max(||v||_2, tiny) and l1_out[i] = ||x_i||_1 (float64)."""
    for i in range(x.shape[0]):
        sq, dot, l1 = _row_sums(x, i, mean, weight[pred[i]], True, True, True, True)
        proximity_out[i] = dot / max(np.sqrt(sq), _TINY)
        l1_out[i] = l1


@njit(cache=True, nogil=True, error_model="numpy")
def fdbd_rows(x, logits, pred, inv_dist, mean, want_centered, want_plain, boundary_out,
              centered_out, plain_out):
    """fDBD's per-row terms, c = pred[i], C classes:
    boundary_out[i] = sum_j |l_c - l_j| * inv_dist[c, j] / (C - 1) (float64 logits; the
    table's row c is 0 at j = c), and when asked the normalizers
    centered_out[i] = max(||x_i - mean||_2, tiny), plain_out[i] = max(||x_i||_2, tiny)."""
    num_classes = logits.shape[1]
    empty = np.empty(1)
    for i in range(x.shape[0]):
        row = logits[i]
        c = pred[i]
        lc = np.float64(row[c])
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        j = 0
        while j + 4 <= num_classes:
            a0 += abs(lc - np.float64(row[j])) * inv_dist[c, j]
            a1 += abs(lc - np.float64(row[j + 1])) * inv_dist[c, j + 1]
            a2 += abs(lc - np.float64(row[j + 2])) * inv_dist[c, j + 2]
            a3 += abs(lc - np.float64(row[j + 3])) * inv_dist[c, j + 3]
            j += 4
        while j < num_classes:
            a0 += abs(lc - np.float64(row[j])) * inv_dist[c, j]
            j += 1
        boundary_out[i] = ((a0 + a1) + (a2 + a3)) / (num_classes - 1)
        if want_centered:
            centered_out[i] = max(_norm(x, i, mean, True), _TINY)
        if want_plain:
            plain_out[i] = max(_norm(x, i, empty, False), _TINY)


@njit(cache=True, nogil=True, error_model="numpy")
def inverse_boundary_table(gram, sq_norms, same_rtol, out):
    """fDBD's C x C table, one pass over W W^T (float64):
    d2 = (||w_c||^2 + ||w_j||^2) - 2 w_c . w_j and out[c, j] = 1 / sqrt(d2) where
    d2 > same_rtol (||w_c||^2 + ||w_j||^2), else 0 (no boundary between c and j; the
    diagonal always 0); the same operations, in the same order, as the NumPy form."""
    classes = gram.shape[0]
    for c in range(classes):
        for j in range(classes):
            total = sq_norms[c] + sq_norms[j]
            d2 = total - 2.0 * gram[c, j]
            out[c, j] = 1.0 / np.sqrt(d2) if (d2 > same_rtol * total and c != j) else 0.0
