"""The principal subspace of a set of feature rows about an origin (ViM, Residual): arrays in,
arrays out.

    u      = -pinv(W) @ b                       (`head_origin`: singular values of W below
                                                 max(C, D) * eps(float32) * s_max dropped)
    S      = (1/N) sum_x (x - u)(x - u)^T = V diag(lambda) V^T, lambda decreasing
    r_k(x) = ||(x - u) @ V[:, k:]||_2           the residual outside the top-k space

`PrincipalSpace.from_upper(u, S, N)` is one eigendecomposition of the float64 covariance its
caller summed (`scorers.fitting.principal` streams the id/train rows through
`kernels.gram.GramSum`), done in the memory of the sum (`eigh_upper`: LAPACK dsyevd, the
driver of numpy.linalg.eigh, on the upper triangle; the eigenvectors are then put in
decreasing order and C order in place, `_descending_c`): no D x D copy in or out;
`residual_sq` projects a block once and reads every k of a grid off the segment sums of the
squared projections. `eig_cutoff` is the numerical-rank cutoff (scipy pinvh's).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.linalg.lapack import dsyevd

from .precision import Operand, matmul

#: the largest order whose dsyevd workspace (1 + 6n + 2n^2) fits a 32-bit LAPACK integer
LAPACK32_MAX_ORDER = 32766


def eig_cutoff(eigvals: np.ndarray, size: int) -> float:
    """max |eigenvalue| * size * eps(float64): scipy pinvh's default cutoff for a symmetric
    matrix of order `size`, below which an eigenvalue counts as zero (numerical rank)."""
    return float(np.abs(eigvals).max(initial=0.0)) * size * float(np.finfo(np.float64).eps)


def head_origin(weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """u = -pinv(W) @ b in float64, singular values sigma at float32 noise level dropped
    (sigma <= max(C, D) * eps32 * sigma_max). pinv from the eigendecomposition of the smaller
    Gram matrix instead of an SVD of W (cheaper, and the same u to 7e-15 relative on a
    1000 x 2048 head): with W W^T = U diag(lam) U^T (C <= D), pinv(W) b =
    W^T U diag(1 / lam) U^T b over lam = sigma^2 above the cutoff squared; with C > D the same
    through W^T W. Near the cutoff (sigma / sigma_max ~ 2e-4) lam is exact to ~2e-9
    relative, far below the fidelity bar."""
    w = np.asarray(weight, dtype=np.float64)
    b = np.asarray(bias, dtype=np.float64)
    wide = w.shape[0] <= w.shape[1]
    lam, vec = np.linalg.eigh(w @ w.T if wide else w.T @ w)
    lam_max = float(lam.max()) if lam.size else 0.0
    cutoff = (max(w.shape) * float(np.finfo(np.float32).eps)) ** 2 * lam_max
    inv = np.divide(1.0, lam, out=np.zeros_like(lam), where=lam > cutoff)
    if wide:
        return -(w.T @ (vec @ (inv * (vec.T @ b))))
    return -(vec @ (inv * (vec.T @ (w.T @ b))))


class PrincipalSpace:
    """The fitted arrays of a principal subspace: origin u, eigenbasis V (columns by
    decreasing eigenvalue), eigenvalues, the numerical rank of S and sqrt(trace S)."""

    def __init__(self, origin: np.ndarray, basis: np.ndarray, eigvals: np.ndarray,
                 num_rows: int, rms_norm: float, precision: str = "float64"):
        self.origin = origin            # (D,) u = -pinv(W) b
        self.basis = basis              # (D, D) eigenvectors, columns by decreasing eigenvalue
        self.precision = precision      # of the products (`kernels.precision`)
        self.basis_op = Operand(basis, precision)
        self.eigvals = eigvals          # (D,) decreasing
        self.num_rows = num_rows
        self.rms_norm = rms_norm        # sqrt(mean ||x - u||^2) over the rows = sqrt(trace S)
        # numerical rank of S: eigenvalues above max * D * eps(float64) (pinvh's cutoff)
        self.rank = int(np.count_nonzero(eigvals > eig_cutoff(eigvals, eigvals.size)))

    @classmethod
    def from_upper(cls, origin: np.ndarray, upper: np.ndarray, num_rows: int,
                   precision: str = "float64") -> PrincipalSpace:
        """The space of S (D x D float64, about `origin`, over `num_rows` rows) held in the
        upper triangle of the Fortran-order `upper` (`GramSum.upper_matrix`), which it
        consumes: one `eigh_upper` in place, the eigenpairs reversed to decreasing order
        (the basis C-contiguous, in the same memory)."""
        rms_norm = float(np.sqrt(max(np.trace(upper), 0.0)))
        eigvals, eigvecs = eigh_upper(upper)              # ascending
        return cls(origin, _descending_c(eigvecs), eigvals[::-1].copy(), num_rows, rms_norm,
                   precision)

    def residual_sq(self, x: np.ndarray, dims: list[int]) -> np.ndarray:
        """(n, len(dims)) for `dims` ascending: column j is ||(x - u) @ V[:, dims[j]:]||^2,
        from whichever projection has fewer columns (V is orthonormal, so both are exact):
        - residual side (D - dims[0] columns): the squared projections onto V[:, dims[0]:]
          summed per segment [dims[j], dims[j+1]) and accumulated from the last
          (smallest-eigenvalue) segment back;
        - principal side (dims[-1] columns, when dims[-1] < D - dims[0]):
          ||x - u||^2 - ||(x - u) @ V[:, :dims[j]]||^2, the principal energies accumulated
          per segment [dims[j-1], dims[j]) from the first, clipped at 0 (the difference of
          two float64 sums: exact to ~1e-16 * ||x - u||^2, far below a residual that matters,
          since dim < rank(S)); float64 precision only: with float32 products the
          difference would carry ~1e-7 of ||x - u||^2, so "float32" always takes the
          residual side.
        The projection is `kernels.precision.matmul` (float32 sgemm in "float32"); the
        squares and segment sums are float64."""
        xc = x.astype(np.float64)
        xc -= self.origin
        d = self.basis.shape[0]
        if self.precision == "float64" and dims[-1] < d - dims[0]:
            q = xc @ self.basis[:, :dims[-1]]
            q *= q
            seg = np.add.reduceat(q, [0, *dims[:-1]], axis=1)
            total = np.einsum("ij,ij->i", xc, xc)
            return np.maximum(total[:, None] - np.cumsum(seg, axis=1), 0.0)
        q = matmul(xc, self.basis_op.columns(dims[0]))
        q *= q
        seg = np.add.reduceat(q, [k - dims[0] for k in dims], axis=1)
        return np.cumsum(seg[:, ::-1], axis=1)[:, ::-1]


def eigh_upper(upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy.linalg.eigh of the symmetric matrix held in the upper triangle of the
    Fortran-order float64 `upper`, in place: LAPACK dsyevd (divide and conquer, the driver
    numpy.linalg.eigh calls) reads that triangle only and overwrites `upper` with the
    eigenvectors. Returns (eigenvalues ascending, eigenvectors as columns: `upper` itself
    when it was Fortran-contiguous). numpy.linalg.LinAlgError where dsyevd does not
    converge, as numpy's. SciPy's LAPACK takes 32-bit sizes: above `LAPACK32_MAX_ORDER`
    (dsyevd's workspace, 1 + 6n + 2n^2 doubles, would overflow them) the triangle is
    mirrored and numpy.linalg.eigh (64-bit sizes) decomposes it instead."""
    if upper.shape[0] > LAPACK32_MAX_ORDER:
        full = np.triu(upper) + np.triu(upper, 1).T
        return np.linalg.eigh(full)
    eigvals, eigvecs, info = dsyevd(upper, compute_v=1, lower=0, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"Eigenvalues did not converge (LAPACK dsyevd info={info})")
    return eigvals, eigvecs


def _descending_c(eigvecs: np.ndarray) -> np.ndarray:
    """np.ascontiguousarray(eigvecs[:, ::-1]) for a square Fortran-order `eigvecs`, made in
    its own memory (which it consumes): viewed as the C-order array A = eigvecs.T (row k =
    eigenvector k), the rows are reversed, then A is transposed in place."""
    if not eigvecs.flags.f_contiguous:
        return np.ascontiguousarray(eigvecs[:, ::-1])
    a = eigvecs.T
    _flip_rows_transpose(a)
    return a


@njit(cache=True, nogil=True)
def _flip_rows_transpose(a):
    """a <- (a[::-1, :])^T in place, for a square C-order a (row swaps, then a transpose in
    64 x 64 tiles)."""
    n = a.shape[0]
    for r in range(n // 2):
        for c in range(n):
            t = a[r, c]
            a[r, c] = a[n - 1 - r, c]
            a[n - 1 - r, c] = t
    for ib in range(0, n, 64):
        for jb in range(ib, n, 64):
            for i in range(ib, min(ib + 64, n)):
                for j in range(max(jb, i + 1), min(jb + 64, n)):
                    t = a[i, j]
                    a[i, j] = a[j, i]
                    a[j, i] = t
