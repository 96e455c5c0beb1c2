"""ViM: virtual-logit matching (Wang, Li, Feng, Zhang, "ViM: Out-Of-Distribution with
Virtual-logit Matching", CVPR 2022).

Formula as implemented (float64 values; the projections (x - u) @ NS follow `precision`,
see below), with h the penultimate feature, l the stored logits and (W, b) the head:

    u      = -pinv(W) @ b                                  origin of the feature space (*)
    S      = (1/N) sum_{x in id/train} (x - u)(x - u)^T      uncentered covariance about u
    S      = V diag(lambda) V^T,  lambda_1 >= ... >= lambda_D  (LAPACK dsyevd, as in
                                                      numpy.linalg.eigh)
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
paper's rule, 1000 if D >= 2048, 512 if D >= 768, else D // 2. Default sweep grid: the five
principal dims most common in ViM's and OpenOOD's configs (featstore's reading of the
remote-sensing benchmark's "five most common values", Wang et al. 2024 §2.5, which does not
list them; shared/papers/rs-ood-ten-methods-remote-sensing-2024.txt line 627):

    1000   ViM code (haoqiwang/vim) rule for D >= 2048; OpenOOD v1.5 vim.yml dim_list
     512   ViM code rule for 768 <= D < 2048 (ViT-B/16)
     256   OpenOOD v1.5 vim.yml dim / dim_list; scripts/ood/vim/cifar10_, cifar100_,
           tiny_inat_test_ood_vim.sh (--postprocessor.postprocessor_args.dim 256)
     128   OpenOOD scripts/ood/vim/sweep_osr.py (OSR CIFAR6 / CIFAR50 / TIN20)
      42   OpenOOD's earlier vim.yml dim (commit 37787e9); scripts/ood/vim/
           mnist_test_osr_vim.sh (LeNet)

read as dims of a D = 2048 feature space (`GRID_D`: ResNet-50, the benchmark's backbone and
the largest D they were chosen for). On a smaller D, `fit_grid` scales each by D / 2048
(rounded, >= 1: the share of D kept, as knn scales its K grid to the bank): D = 512 sweeps
[10, 32, 64, 128, 250], D = 64 [1, 4, 8, 16, 31]; the defaults rule then clamps any above
the valid range below (`scorers.adapt`). Under the remote-sensing protocols (`grid_rule =
"paper"`) the five dims are used as they are, clamped only where invalid. An explicit grid
is used as given.

Sharing (DESIGN section 5): the fit does ONE eigendecomposition (the mean max-logit comes from
the covariance pass, `scorers.fitting.principal.fit_principal_space`) and then one pass over
id/train for the mean residual norms of every dim it was told of (the scorer's own, plus those
of `fit(store, grid)`; `mean_residuals`), projecting each row once onto V[:, min(dims):]
(eigenvectors by decreasing eigenvalue), or onto V[:, :max(dims)] when that has fewer columns:
the squared residual norms of all those dims are the squared projections summed per segment
between consecutive dims, accumulated from the smallest-eigenvalue end (or subtracted,
accumulated, from ||x - u||^2: `scorers.kernels.subspace.PrincipalSpace.residual_sq`). A dim
asked for later costs one more such pass. Scoring projects each row block (`map_rows`) once the
same way and reads every requested dim's residual off the same segment sums. (The default
dims [42, ..., 1000] at D = 2048: 1000 columns instead of 2006.)

Where the formula lives: this module (alpha and the score), `scorers.fitting.principal` (the
dim rule shared with `residual`, and the two id/train passes), `scorers.kernels.subspace` (u,
the eigendecomposition, the residual norms), with `scorers.kernels.gram` (the dsyrk Gram sum)
and `scorers.kernels.precision` (the float32 product) beneath.

`precision` ("float32" default | "float64"): "float32" projects in float32 sgemm (the alpha
pass and scoring), always onto the residual side V[:, dim:] (`scorers.kernels.precision`);
S, its eigendecomposition, pinv(W), the squares and sums stay float64.
Scores are within 1e-5 relative of the float64 path on the fidelity stores
(tests/test_precision.py); "float64" is the all-float64 path.

Validity beyond 1 <= dim < D: dim < N (the id/train rows span S, so its rank is at most N),
checked from the store's size; and dim < rank(S) (numerical rank: eigenvalues above max * D *
eps): at dim >= rank the id/train features have no residual, alpha is undefined, and the
principal space would contain arbitrary null-space directions. Both are known before the fit
(the rank from the fitted space itself, `scorers.fitting.principal.shared_space`, which the
fit then uses), so dim's valid range is 1 <= dim <= min(D, N, rank(S)) - 1: a DEFAULT dim
(the paper's rule, a default-grid value) beyond it is clamped to it by the one defaults rule
(`scorers.adapt`: listed in the result's "adjusted" with the rank, a FeatstoreWarning from
`fit`), e.g. D = 63 features of rank 20 sweep [1, 4, 8, 16, 19] (31 -> 19); a dim the
user gave beyond it is a UsageError naming dim, the rank and the valid range, never a NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..fitting.principal import (
    FIT_SPLIT,
    PrincipalScorer,
    check_spanned,
    feature_dim,
    mean_residuals,
    shared_space,
)
from ..kernels.precision import DEFAULT_PRECISION
from ..kernels.softmax import logsumexp
from ..paper import Paper

#: the feature dimension the default dims are for (module docstring)
GRID_D = 2048
# A mean residual below this fraction of the mean ||x - u|| counts as zero (rank <= dim).
_ZERO_RESIDUAL_RTOL = 1e-9


class ViM(PrincipalScorer):
    name = "vim"
    needs = ("features", "logits", "head", "fit:id/train")
    defaults = {"dim": None, "precision": DEFAULT_PRECISION}
    grid = {"dim": [42, 128, 256, 512, 1000]}   # at GRID_D; module docstring for the sources
    needs_residual = True
    paper = Paper(title="ViM: Out-Of-Distribution with Virtual-logit Matching",
                  authors=("Wang", "Li", "Feng", "Zhang"), venue="CVPR", year=2022,
                  url="https://arxiv.org/abs/2203.10807", code="https://github.com/haoqiwang/vim")

    def fit_grid(self, grid: Mapping[str, Any], store: StoreLike
                 ) -> tuple[dict[str, list[Any]], str]:
        """The default dims scaled by D / GRID_D on a store with D < GRID_D (rounded,
        >= 1), with the reason; unchanged at D >= GRID_D."""
        out = {k: list(v) for k, v in grid.items()}
        d = feature_dim(store)
        if "dim" not in out or d >= GRID_D:
            return out, ""
        out["dim"] = [max(1, round(k * d / GRID_D)) for k in out["dim"]]
        return out, (f"ViM's default dims are set for D = {GRID_D}; scaled by this store's "
                     f"D {d}/{GRID_D}")

    def _fit(self, store: StoreLike) -> None:
        d = feature_dim(store)
        dims = {k for k in self.setting_dims([{}, *self.fit_settings], d) if 1 <= k < d}
        self.space, self.mean_max_logit = shared_space(self, store, self.params["precision"])
        self.mean_residual: dict[int, float] = {}   # dim -> mean r(x) over id/train
        self._add_residuals(store, sorted(dims))

    def _add_residuals(self, store: StoreLike, dims: list[int]) -> None:
        """mean_{id/train} r(x) of every dim in `dims` not known yet (one pass for all)."""
        missing = [k for k in dims if k not in self.mean_residual]
        self.mean_residual.update(mean_residuals(self, store, self.space, missing))

    def alpha(self, dim: int) -> float:
        """alpha = mean_{id/train} max_j l_j / mean_{id/train} r(x)."""
        assert self.mean_max_logit is not None
        mean_r = self.mean_residual[dim]
        if not mean_r > _ZERO_RESIDUAL_RTOL * self.space.rms_norm:
            raise UsageError(
                f"scorer {self.name!r}: dim={dim} leaves no residual on {FIT_SPLIT!r} (its "
                f"features span at most {dim} principal directions), so alpha is undefined; "
                f"choose a smaller dim"
            )
        return self.mean_max_logit / mean_r

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        space = self.space
        dims = self.setting_dims(settings, space.basis.shape[0])
        for k in dims:
            check_spanned(space, self.name, k, need_residual=True)
        self._add_residuals(self.fitted_store, dims)
        alphas = [self.alpha(k) for k in dims]
        distinct = sorted(set(dims))
        column = {k: j for j, k in enumerate(distinct)}

        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            tail = space.residual_sq(x, distinct)
            energy = logsumexp(logits)
            return [energy - alpha * np.sqrt(tail[:, column[k]])
                    for k, alpha in zip(dims, alphas, strict=True)]

        return self.map_rows(split, ("features", "logits"), block, outputs=len(settings))
