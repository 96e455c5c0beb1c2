"""The principal subspace of the id/train features about the head's origin (ViM, Residual),
and the rule for its dimension.

    u      = -pinv(W) @ b                       (`head_origin`: singular values of W below
                                                 max(C, D) * eps(float32) * s_max dropped)
    S      = (1/N) sum_{x in id/train} (x - u)(x - u)^T = V diag(lambda) V^T, lambda decreasing
    r_k(x) = ||(x - u) @ V[:, k:]||_2           the residual outside the top-k space

`PrincipalSpace.fit` makes one chunked pass for S (float64) and one eigendecomposition
(numpy.linalg.eigh); `residual_sq` projects a block once and reads every k of a grid off the
segment sums of the squared projections. `dim` (k): 1 <= dim < min(D, N) before the fit and
dim <= rank(S) (dim < rank(S) where a residual must remain) after it; default None = the ViM
paper's rule (`default_dim`). `eig_cutoff` is the numerical-rank cutoff (scipy pinvh's).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import StoreLike

from ..base import Scorer, ValidRange
from .gram import GramSum
from .precision import Operand, check_precision, matmul


def eig_cutoff(eigvals: np.ndarray, size: int) -> float:
    """max |eigenvalue| * size * eps(float64): scipy pinvh's default cutoff for a symmetric
    matrix of order `size`, below which an eigenvalue counts as zero (numerical rank)."""
    return float(np.abs(eigvals).max(initial=0.0)) * size * float(np.finfo(np.float64).eps)


FIT_SPLIT = "id/train"
# A mean residual below this fraction of the mean ||x - u|| counts as zero (rank <= dim).
_ZERO_RESIDUAL_RTOL = 1e-9


def default_dim(num_features: int) -> int:
    """The ViM paper's principal-space dimension for a D-dimensional feature space."""
    if num_features >= 2048:
        return 1000
    if num_features >= 768:
        return 512
    return num_features // 2


def feature_dim(store: StoreLike) -> int:
    """D, the head's input dimension."""
    return int(store.head[0].shape[1])


def check_dim(scorer_name: str, dim: Any, store: StoreLike | None = None) -> None:
    """`dim` is None (paper rule) or an integer with 1 <= dim < D."""
    if dim is None:
        if store is not None and default_dim(feature_dim(store)) < 1:
            raise UsageError(
                f"scorer {scorer_name!r}: feature dimension D={feature_dim(store)} is too small "
                "for a principal space (need D >= 2)"
            )
        if store is not None:
            check_dim_below_rows(scorer_name, default_dim(feature_dim(store)), store)
        return
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise UsageError(
            f"scorer {scorer_name!r}: dim must be an integer with 1 <= dim < D or None "
            f"(got {dim!r})"
        )
    dim = int(dim)
    if store is None:
        if dim < 1:
            raise UsageError(
                f"scorer {scorer_name!r}: dim must satisfy 1 <= dim < D (got {dim})"
            )
        return
    d = feature_dim(store)
    if not 1 <= dim < d:
        raise UsageError(
            f"scorer {scorer_name!r}: dim must satisfy 1 <= dim < D = {d} (got {dim})"
        )
    check_dim_below_rows(scorer_name, dim, store)


def check_dim_below_rows(scorer_name: str, dim: int, store: StoreLike) -> None:
    """dim < N, the number of id/train rows: S is a sum of N rank-one terms, so its rank is
    at most N, and a principal space of dim >= N directions would hold arbitrary directions
    of S's null space (the residual, and ViM's alpha, would depend on LAPACK's choice of
    them). Checked from the split's size alone, before any fit."""
    if not store.has_split(FIT_SPLIT):
        return
    n = store.split(FIT_SPLIT).num_rows
    if dim >= n:
        d = feature_dim(store)
        raise UsageError(
            f"scorer {scorer_name!r}: dim={dim} is not below the {n} rows of {FIT_SPLIT!r} "
            f"that span the principal space; valid: 1 <= dim < min(D, N) = {min(d, n)}"
        )


def dim_range(store: StoreLike) -> ValidRange:
    """dim's data-dependent range: 1 <= dim < min(D, N) (N = id/train rows; see
    `check_dim_below_rows`); shared by vim and residual."""
    d = feature_dim(store)
    n = store.split(FIT_SPLIT).num_rows if store.has_split(FIT_SPLIT) else d
    degenerate = (f"; DEGENERATE at dim = N - 1 = {n - 1}: the principal space then holds "
                  f"every {FIT_SPLIT} row (their residuals ~0, far below any test row's); the "
                  f"store needs more {FIT_SPLIT} rows than D = {d}") if n <= d else ""
    return ValidRange(1, min(d, n) - 1, f"1 <= dim < min(D, N) = {min(d, n)} (D = {d} "
                                        f"features, N = {n} rows of {FIT_SPLIT!r}){degenerate}")


class PrincipalScorer(Scorer):
    """What vim and residual share about `dim`: the paper's default rule and its range."""

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_dim(self.name, params["dim"], store)
        check_precision(self.name, params["precision"])

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        return {"dim": dim_range(store)}

    def resolve_default(self, param: str, value: Any, store: StoreLike) -> Any:
        return resolve_dim(value, feature_dim(store)) if param == "dim" else value


def head_origin(weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """u = -pinv(W) @ b in float64, singular values sigma at float32 noise level dropped
    (sigma <= max(C, D) * eps32 * sigma_max). pinv from the eigendecomposition of the smaller
    Gram matrix instead of an SVD of W (0.27 against 1.10 CPU s for a 1000 x 2048 head, the
    same u to 7e-15 relative): with W W^T = U diag(lam) U^T (C <= D), pinv(W) b =
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


def resolve_dim(dim: Any, num_features: int) -> int:
    return default_dim(num_features) if dim is None else int(dim)


class PrincipalSpace:
    """Fitted state shared by `vim` and `residual`: origin, sorted eigenbasis, and (for ViM)
    the id/train mean max-logit and mean residual norm of each dim asked for."""

    def __init__(self, origin: np.ndarray, basis: np.ndarray, eigvals: np.ndarray,
                 num_rows: int, rms_norm: float, precision: str = "float64"):
        self.origin = origin            # (D,) u = -pinv(W) b
        self.basis = basis              # (D, D) eigenvectors, columns by decreasing eigenvalue
        self.precision = precision      # of the products (`kernels.precision`)
        self.basis_op = Operand(basis, precision)
        self.eigvals = eigvals          # (D,) decreasing
        self.num_rows = num_rows
        self.rms_norm = rms_norm        # sqrt(mean ||x - u||^2) over id/train = sqrt(trace S)
        self.mean_residual: dict[int, float] = {}   # dim -> mean r(x) over id/train
        self.mean_max_logit: float | None = None
        # numerical rank of S: eigenvalues above max * D * eps(float64) (pinvh's cutoff)
        self.rank = int(np.count_nonzero(eigvals > eig_cutoff(eigvals, eigvals.size)))

    def check_spanned(self, scorer_name: str, dim: int, need_residual: bool) -> None:
        """The top-`dim` space is determined by S: dim <= rank(S); and, when the id/train rows
        must keep a residual (ViM's alpha), dim < rank(S). Beyond the rank the principal space
        would take arbitrary null-space directions of S (LAPACK's choice, not the data's)."""
        limit = self.rank - 1 if need_residual else self.rank
        if dim > limit:
            what = ("leaves no residual on" if need_residual
                    else "is more than the principal directions spanned by")
            raise UsageError(
                f"scorer {scorer_name!r}: dim={dim} {what} {FIT_SPLIT!r} (its covariance "
                f"about u has numerical rank {self.rank}: eigenvalues above max * D * eps); "
                f"valid: 1 <= dim <= {limit}"
            )

    @classmethod
    def fit(cls, scorer: Scorer, store: StoreLike, alpha_dims: list[int] | None = None
            ) -> PrincipalSpace:
        """One chunked pass over id/train for S (and the mean max-logit when `alpha_dims` is
        given), the eigendecomposition, then one pass for the mean residual norms of
        `alpha_dims` (see `ensure_residuals`)."""
        weight, bias = store.head
        origin = head_origin(weight, bias)
        d = weight.shape[1]
        split = scorer.fit_split(store, FIT_SPLIT)
        fields = ("features", "logits") if alpha_dims is not None else ("features",)
        precision = scorer.params.get("precision", "float64")  # of the projections
        gram = GramSum(d)
        sum_max_logit = 0.0
        n = 0
        for _, arrays in scorer.chunks(split, *fields):
            xc = arrays[0].astype(np.float64)
            xc -= origin
            gram.add(xc)
            n += xc.shape[0]
            if alpha_dims is not None:
                sum_max_logit += float(arrays[1].max(axis=1).astype(np.float64).sum())
        if n == 0:
            raise FeatstoreError(f"scorer {scorer.name!r}: split {FIT_SPLIT!r} has no rows to fit")
        cov = gram.matrix(n)
        eigvals, eigvecs = np.linalg.eigh(cov)            # ascending
        state = cls(origin, np.ascontiguousarray(eigvecs[:, ::-1]), eigvals[::-1].copy(), n,
                    float(np.sqrt(max(np.trace(cov), 0.0))), precision)
        if alpha_dims is not None:
            state.mean_max_logit = sum_max_logit / n
            state.ensure_residuals(scorer, store, alpha_dims)
        return state

    def ensure_residuals(self, scorer: Scorer, store: StoreLike, dims: list[int]) -> None:
        """mean_{id/train} r(x) for every dim in `dims` not known yet, from ONE chunked pass
        that projects each row onto V[:, min(missing):] (`residual_sq`)."""
        missing = sorted({k for k in dims if k not in self.mean_residual})
        if not missing:
            return
        split = scorer.fit_split(store, FIT_SPLIT)
        sums = np.zeros(len(missing), dtype=np.float64)
        for _, (x,) in scorer.chunks(split, "features"):
            sums += np.sqrt(self.residual_sq(x, missing)).sum(axis=0)
        for k, total in zip(missing, sums, strict=True):
            self.mean_residual[k] = float(total) / self.num_rows

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

    def alpha(self, scorer_name: str, dim: int) -> float:
        assert self.mean_max_logit is not None
        mean_r = self.mean_residual[dim]
        if not mean_r > _ZERO_RESIDUAL_RTOL * self.rms_norm:
            raise UsageError(
                f"scorer {scorer_name!r}: dim={dim} leaves no residual on {FIT_SPLIT!r} (its "
                f"features span at most {dim} principal directions), so alpha is undefined; "
                f"choose a smaller dim"
            )
        return self.mean_max_logit / mean_r


def setting_dims(scorer: Scorer, settings: list[dict[str, Any]], num_features: int
                 ) -> list[int]:
    """The principal dimension of each setting (the scorer's own dim where a setting has
    none), resolved by the paper rule where None."""
    return [resolve_dim({**scorer.params, **s}["dim"], num_features) for s in settings]
