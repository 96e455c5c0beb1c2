"""ViM: virtual-logit matching (Wang, Li, Feng, Zhang, "ViM: Out-Of-Distribution with
Virtual-logit Matching", CVPR 2022).

Formula as implemented (all in float64), with h the penultimate feature, l the stored logits
and (W, b) the head:

    u      = -pinv(W) @ b                                  origin of the feature space (*)
    S      = (1/N) sum_{x in id/train} (x - u)(x - u)^T      uncentered covariance about u
    S      = V diag(lambda) V^T,  lambda_1 >= ... >= lambda_D  (numpy.linalg.eigh)
    NS     = V[:, dim:]                                     complement of the top-`dim` space
    r(x)   = ||(x - u) @ NS||_2                             residual norm
    alpha  = mean_{id/train} max_j l_j / mean_{id/train} r(x)
    score  = logsumexp(l) - alpha * r(x)                    (energy minus the virtual logit)

which is the paper's `-vlogit + energy` (also OpenOOD v1.5's `VIMPostprocessor`); higher is more
in-distribution. The logits are the stored ones (the network's output), both for alpha and for
the energy; OpenOOD recomputes them as `h @ W.T + b`, which is the same up to float32 rounding.

(*) pinv treats singular values of W below max(C, D) * eps(float32) * s_max as zero: the head
is stored in float32, so smaller ones are rounding noise of an exactly rank-deficient head
(e.g. rows that sum to zero), and keeping them would throw u out to ~1/eps and ruin the
conditioning of S. For a full-rank head this is numpy's pinv.

`dim` (the principal-space dimension) must satisfy 1 <= dim < D. Default (`dim=None`): the ViM
paper's rule, 1000 if D >= 2048, 512 if D >= 768, else D // 2. Default sweep grid: OpenOOD v1.5
`configs/postprocessors/vim.yml`, `dim_list: [256, 1000]` (both need D > 1000 to be valid; pass
an explicit grid on smaller feature spaces).

Sharing (DESIGN section 5): the fit does ONE eigendecomposition and projects each id/train row
once onto all eigenvectors sorted by decreasing eigenvalue; the squared residual norm for every
dim is a reverse cumulative sum of the squared projections, so alpha is known for every dim
after one pass. Scoring projects each row block (`map_rows`) once onto V[:, min(dims):] and
reads every requested dim's residual off the same reverse cumulative sum. `residual.py` reuses
`PrincipalSpace` (one implementation).

If the id/train features have (numerically) no residual beyond `dim` (rank <= dim), alpha is
undefined: that is a UsageError naming dim, never a NaN.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError

from .base import Scorer, logsumexp

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


def feature_dim(store: Any) -> int:
    """D, the head's input dimension."""
    return int(store.head[0].shape[1])


def check_dim(scorer_name: str, dim: Any, store: Any = None) -> None:
    """`dim` is None (paper rule) or an integer with 1 <= dim < D."""
    if dim is None:
        if store is not None and default_dim(feature_dim(store)) < 1:
            raise UsageError(
                f"scorer {scorer_name!r}: feature dimension D={feature_dim(store)} is too small "
                "for a principal space (need D >= 2)"
            )
        return
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise UsageError(
            f"scorer {scorer_name!r}: dim must be an integer with 1 <= dim < D or None "
            f"(got {dim!r})"
        )
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


def head_origin(weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """u = -pinv(W) @ b in float64, singular values at float32 noise level dropped."""
    w = np.asarray(weight, dtype=np.float64)
    u_, s, vt = np.linalg.svd(w, full_matrices=False)
    cutoff = max(w.shape) * float(np.finfo(np.float32).eps) * (s.max() if s.size else 0.0)
    s_inv = np.divide(1.0, s, out=np.zeros_like(s), where=s > cutoff)
    return -(vt.T @ (s_inv * (u_.T @ np.asarray(bias, dtype=np.float64))))


def resolve_dim(dim: Any, num_features: int) -> int:
    return default_dim(num_features) if dim is None else int(dim)


class PrincipalSpace:
    """Fitted state shared by `vim` and `residual`: origin, sorted eigenbasis, and (for ViM)
    the id/train mean residual norm for every dim and the mean max-logit."""

    def __init__(self, origin: np.ndarray, basis: np.ndarray, eigvals: np.ndarray,
                 num_rows: int):
        self.origin = origin            # (D,) u = -pinv(W) b
        self.basis = basis              # (D, D) eigenvectors, columns by decreasing eigenvalue
        self.eigvals = eigvals          # (D,) decreasing
        self.num_rows = num_rows
        self.mean_residual: np.ndarray | None = None   # (D,) mean r_d over id/train, d = 0..D-1
        self.mean_max_logit: float | None = None

    @classmethod
    def fit(cls, scorer: Scorer, store: Any, with_alpha: bool) -> PrincipalSpace:
        """Two chunked passes over id/train (covariance; then projections if `with_alpha`)."""
        weight, bias = store.head
        origin = head_origin(weight, bias)
        d = weight.shape[1]
        split = scorer.fit_split(store, FIT_SPLIT)
        cov = np.zeros((d, d), dtype=np.float64)
        n = 0
        for _, (x,) in scorer.chunks(split, "features"):
            xc = x.astype(np.float64) - origin
            cov += xc.T @ xc
            n += xc.shape[0]
        if n == 0:
            raise FeatstoreError(f"scorer {scorer.name!r}: split {FIT_SPLIT!r} has no rows to fit")
        cov /= n
        eigvals, eigvecs = np.linalg.eigh(cov)            # ascending
        state = cls(origin, np.ascontiguousarray(eigvecs[:, ::-1]), eigvals[::-1].copy(), n)
        if with_alpha:
            sum_r = np.zeros(d, dtype=np.float64)
            sum_max_logit = 0.0
            for _, (x, logits) in scorer.chunks(split, "features", "logits"):
                sum_r += np.sqrt(state.residual_sq(x, 0)).sum(axis=0)
                sum_max_logit += float(logits.astype(np.float64).max(axis=1).sum())
            state.mean_residual = sum_r / n
            state.mean_max_logit = sum_max_logit / n
        return state

    def residual_sq(self, x: np.ndarray, start: int) -> np.ndarray:
        """(n, D - start): column j is ||(x - u) @ V[:, start + j:]||^2, i.e. the squared
        residual norm for dim = start + j (reverse cumulative sum of squared projections,
        smallest-eigenvalue terms first)."""
        q = (x.astype(np.float64) - self.origin) @ self.basis[:, start:]
        q *= q
        return np.cumsum(q[:, ::-1], axis=1)[:, ::-1]

    def alpha(self, scorer_name: str, dim: int) -> float:
        assert self.mean_residual is not None and self.mean_max_logit is not None
        mean_r = float(self.mean_residual[dim])
        if not mean_r > _ZERO_RESIDUAL_RTOL * float(self.mean_residual[0]):
            raise UsageError(
                f"scorer {scorer_name!r}: dim={dim} leaves no residual on {FIT_SPLIT!r} (its "
                f"features span at most {dim} principal directions), so alpha is undefined; "
                f"choose a smaller dim"
            )
        return self.mean_max_logit / mean_r


class ViM(Scorer):
    name = "vim"
    needs = ("features", "logits", "head", "fit:id/train")
    defaults = {"dim": None}
    grid = {"dim": [256, 1000]}
    paper = ("Wang, Li, Feng, Zhang. ViM: Out-Of-Distribution with Virtual-logit Matching. "
             "CVPR 2022")

    def check_params(self, params: dict[str, Any], store: Any = None) -> None:
        check_dim(self.name, params["dim"], store)

    def _fit(self, store: Any) -> None:
        self.state = PrincipalSpace.fit(self, store, with_alpha=True)

    def _score(self, split: Any) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        state = self.state
        d = state.basis.shape[0]
        dims = [resolve_dim({**self.params, **s}["dim"], d) for s in settings]
        alphas = [state.alpha(self.name, k) for k in dims]
        start = min(dims)

        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            tail = state.residual_sq(x, start)
            energy = logsumexp(logits)
            return [energy - alpha * np.sqrt(tail[:, k - start])
                    for k, alpha in zip(dims, alphas, strict=True)]

        return self.map_rows(split, ("features", "logits"), block, outputs=len(settings))
