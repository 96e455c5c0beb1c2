"""Class statistics of feature rows, in float64, chunk by chunk: column sums (the mean
feature of DICE, fDBD, NCI: `add_column_sums`), per-class sums (`add_class_sums`: MDS, RMDS, KL
matching; and `add_class_sums_by_correctness`: the correctly and wrongly classified rows apart,
SHE), covariances kept as a matrix or as their rows (`Scatter`), their whitening factors (L
with L L^T = pinvh(covariance), `whitener`) and the class-conditional Mahalanobis distance
min_k (x - mu_k)^T P (x - mu_k) (`ClassMahalanobis`). The passes that stream a store's
id/train rows through them are `scorers.fitting.classstats`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
from numba import njit

from featstore.errors import FeatstoreError

from .minsqdist import PrunedMinSq
from .precision import Operand, matmul
from .subspace import eig_cutoff


def add_class_sums(sums: np.ndarray, counts: np.ndarray, values: np.ndarray,
                   labels: np.ndarray) -> None:
    """sums[k] += the rows of `values` labelled k (float64), counts[k] += their number, for
    labels in [0, len(counts)); rows with another label are skipped. One pass, row after row
    (`add_labelled_rows`), no sorted or float64 copy of the chunk."""
    add_labelled_rows(values, np.asarray(labels, dtype=np.int64), sums, counts)


@njit(cache=True, nogil=True)
def add_labelled_rows(x, labels, sums, counts):
    """Per row i with 0 <= labels[i] < C: sums[labels[i]] += x[i] in float64 and
    counts[labels[i]] += 1, in row order."""
    c_num = counts.shape[0]
    for i in range(x.shape[0]):
        y = labels[i]
        if y < 0 or y >= c_num:
            continue
        counts[y] += 1
        acc = sums[y]
        for j in range(x.shape[1]):
            acc[j] += np.float64(x[i, j])


@njit(cache=True, nogil=True)
def add_class_sums_by_correctness(x, pred, labels, correct_sums, correct_counts, wrong_sums,
                                  wrong_counts):
    """Per labelled row i (0 <= label < C): correct_sums[label] += x[i] when pred[i] equals
    the label, else wrong_sums[label] += x[i] (and the matching count); float64, in row
    order, one pass, no copies. A class's sum over all its rows is correct + wrong; where it
    has no correct row, that is wrong_sums itself (0 + s is s exactly)."""
    n, d = x.shape
    c_num = correct_sums.shape[0]
    for i in range(n):
        y = labels[i]
        if y < 0 or y >= c_num:
            continue
        if pred[i] == y:
            correct_counts[y] += 1
            acc = correct_sums[y]
        else:
            wrong_counts[y] += 1
            acc = wrong_sums[y]
        for j in range(d):
            acc[j] += np.float64(x[i, j])


@njit(cache=True, nogil=True)
def add_column_sums(x, out):
    """out[j] += sum_i x[i, j] in float64, row after row (the order of numpy's
    x.astype(float64).sum(axis=0) on a C-contiguous chunk), without the float64 copy."""
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[j] += np.float64(x[i, j])


@dataclass
class Scatter:
    """The covariance (1/n) sum_i r_i r_i^T of n rows r_i, kept as the D x D matrix, or,
    when n < D, as the n x D rows themselves (smaller than the matrix; its pseudo-inverse then
    comes from their thin SVD, `whitener_from_rows`)."""

    count: int
    matrix: np.ndarray | None = None   # (D, D) float64: sum_i r_i r_i^T / n
    rows: np.ndarray | None = None     # (n, D) float64: the r_i
    source: str = ""                   # the split of the rows (named by the error message)

    def whitener(self) -> np.ndarray:
        """L with L L^T = pinvh of the covariance (`whitener` or `whitener_from_rows`). The
        D x D matrix is consumed (the eigensolver works in its memory: a fit's peak holds one
        D x D matrix less); call it once."""
        if self.rows is not None:
            return whitener_from_rows(self.rows, self.count, self.source)
        assert self.matrix is not None, "Scatter.whitener: the matrix was consumed"
        matrix, self.matrix = self.matrix, None
        return whitener(matrix, overwrite=True, source=self.source)


def whitener(cov: np.ndarray, overwrite: bool = False, source: str = "") -> np.ndarray:
    """L (D x r) with L L^T = the symmetric pseudo-inverse of a covariance, as sklearn's
    EmpiricalCovariance.precision_ (scipy pinvh): with cov = V diag(s) V^T (LAPACK syevd via
    scipy.linalg.eigh(driver="evd"); with `overwrite`, in cov's memory, which it destroys),
    keep the r eigenpairs with s > max|s| * D * eps(float64) (pinvh's default cutoff; a
    covariance is positive semi-definite, so the eigenvalues it drops and pinvh keeps would be
    rounding-negative ones beyond that cutoff) and return L = V_kept diag(1 / sqrt(s_kept)).
    scipy's own pinvh goes through a slower eigensolver (evr); L L^T equals it to rounding
    (tests/scorers/test_mds.py checks against pinvh)."""
    s, v = scipy.linalg.eigh(cov, overwrite_a=overwrite, driver="evd", check_finite=False)
    return _whitener_from_eig(s, v, cov.shape[0], source)


def whitener_from_rows(rows: np.ndarray, count: int, source: str = "") -> np.ndarray:
    """`whitener(rows.T @ rows / count)` without forming or eigendecomposing the D x D
    matrix: with the thin SVD rows = U diag(sigma) V^T (n x D, n < D: O(n^2 D) instead of
    eigh's O(D^3)), the covariance's eigenpairs are (sigma^2 / count, V) plus zeros; the same
    cutoff (max * D * eps) applies and L has r <= n columns. The SVD gets the small
    eigenvalues more accurately than eigh of the formed matrix (no squaring)."""
    _, sigma, vt = np.linalg.svd(rows, full_matrices=False)
    return _whitener_from_eig(sigma * sigma / count, vt.T, rows.shape[1], source)


def _whitener_from_eig(s: np.ndarray, v: np.ndarray, size: int, source: str) -> np.ndarray:
    """V_kept diag(1 / sqrt(s_kept)) over s > max|s| * size * eps (size: the order D).
    FeatstoreError (naming the rows' `source` split when given) when no eigenvalue is kept (a
    zero covariance: every row equal to its mean): every Mahalanobis distance would be 0 and
    every score equal, a 50.00 AUROC that measures nothing."""
    keep = s > eig_cutoff(s, size)
    if not keep.any() or not np.any(s > 0):
        where = f"split {source!r}: " if source else ""
        raise FeatstoreError(f"{where}the features' covariance is zero (every row equals its "
                             "mean): Mahalanobis scores would all be equal")
    return v[:, keep] / np.sqrt(s[keep])


def whitened(feats: np.ndarray, center: np.ndarray, whiten: Operand) -> np.ndarray:
    """(x - center) L as float64: the shift in float64, the product by
    `kernels.precision.matmul` (float32 sgemm when `whiten` is a float32 operand)."""
    x = feats.astype(np.float64)
    x -= center
    return matmul(x, whiten)


class ClassMahalanobis:
    """min_k (x - mu_k)^T P (x - mu_k) in chunks, with P = L L^T (`whitener`) and x, mu_k
    shifted by `center`: with z = (x - center) L and z_k = (mu_k - center) L (r columns,
    r = rank of the covariance), the distance is ||z - z_k||^2. The whitening product z
    follows `precision`; z_k is float64. The class term: with `pruned_classes` (default),
    float32 products z . z_k prune the classes under a proven error bound and the remaining
    distances are summed in float64 (`scorers.kernels.minsqdist`: the float64 minimum, to
    float64 rounding); without, ||z||^2 - 2 z . z_k + ||z_k||^2 all in float64 BLAS."""

    def __init__(self, means: np.ndarray, whiten: np.ndarray, center: np.ndarray,
                 precision: str = "float64", pruned_classes: bool = True):
        self.center = center
        self.whiten = whiten                                     # (D, r)
        self.whiten_op = Operand(whiten, precision)
        self.z_mu = (means - center) @ whiten                    # (C', r)
        self.z_mu_sq = np.einsum("kr,kr->k", self.z_mu, self.z_mu)
        self.pruned = PrunedMinSq(self.z_mu) if pruned_classes else None

    def whitened(self, feats: np.ndarray) -> np.ndarray:
        """(x - center) L, float64 (`whitened`)."""
        return whitened(feats, self.center, self.whiten_op)

    def min_sq(self, feats: np.ndarray) -> np.ndarray:
        z = self.whitened(feats)
        if self.pruned is not None:
            return self.pruned(z)
        quad = np.einsum("ir,ir->i", z, z)
        md = quad[:, None] - 2.0 * (z @ self.z_mu.T) + self.z_mu_sq[None, :]
        return md.min(axis=1)
