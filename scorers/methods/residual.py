"""Residual: the norm of the feature's residual outside the principal subspace, the baseline of
the ViM paper (Wang, Li, Feng, Zhang, "ViM: Out-Of-Distribution with Virtual-logit Matching",
CVPR 2022, section 3 / Table "Residual").

Formula as implemented (float64 values; the products follow `precision`, "float32" default
or "float64", exactly as `vim`'s), with the same fitted space as `vim`
(`scorers.fitting.principal.fit_principal_space`, one implementation; its arrays are
`scorers.kernels.subspace.PrincipalSpace`):

    u     = -pinv(W) @ b
    S     = (1/N) sum_{x in id/train} (x - u)(x - u)^T = V diag(lambda) V^T, lambda decreasing
    score = -||(x - u) @ V[:, dim:]||_2

Higher is more in-distribution. `dim`: 1 <= dim < min(D, N) with N the id/train rows, and
dim <= rank(S), the numerical rank of S (beyond it the top-`dim` space holds arbitrary
null-space directions, `scorers.fitting.principal.check_rank`); default None = the ViM
paper's rule (1000 if D >= 2048, 512 if D >= 768, else D // 2). rank(S) is known before the
fit (`scorers.fitting.principal.shared_space`, the space the fit then uses), and the rule is
ViM's (`PrincipalScorer`): a DEFAULT dim (the paper's rule, a default-grid value) above the
rank is clamped to rank(S) - 1 by the one defaults rule (`scorers.adapt`: the used value in
`params`, the change in "adjusted" with the rank, a FeatstoreWarning from `fit`), leaving a
residual on id/train (at dim = rank(S) every id/train residual is 0, and so is every row's
where the features themselves are rank-deficient, e.g. dead units: a score of rounding
noise); a dim the user gave above the rank is a UsageError at fit naming the rank, and one
equal to it is scored. OpenOOD v1.5's `residual.yml` fixes `dim: 512` and has no sweep; the
default sweep grid here is OpenOOD v1.5 `vim.yml`'s `dim_list: [256, 1000]` (valid only for
D > 1000; `vim`'s own grid is five dims scaled to D). OpenOOD fits this baseline on its ID
validation loader; here, like ViM, on id/train.

Sharing: one eigendecomposition at fit; one projection per block onto V[:, min(dims):] (or
onto V[:, :max(dims)] when that has fewer columns), every dim's residual read off the squared
projections summed per segment between consecutive dims (`PrincipalSpace.residual_sq`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..fitting.principal import PrincipalScorer, check_spanned, shared_space
from ..kernels.precision import DEFAULT_PRECISION
from ..paper import Paper


class Residual(PrincipalScorer):
    name = "residual"
    needs = ("features", "head", "fit:id/train")
    defaults = {"dim": None, "precision": DEFAULT_PRECISION}
    grid = {"dim": [256, 1000]}
    paper = Paper(title="ViM: Out-Of-Distribution with Virtual-logit Matching",
                  authors=("Wang", "Li", "Feng", "Zhang"), venue="CVPR", year=2022,
                  url="https://arxiv.org/abs/2203.10807", code="https://github.com/haoqiwang/vim",
                  note="Residual baseline")

    def _fit(self, store: StoreLike) -> None:
        self.space, _ = shared_space(self, store, self.params["precision"])

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        space = self.space
        dims = self.setting_dims(settings, space.basis.shape[0])
        for k in dims:
            check_spanned(space, self.name, k, need_residual=False)
        distinct = sorted(set(dims))
        column = {k: j for j, k in enumerate(distinct)}

        def block(x: np.ndarray) -> list[np.ndarray]:
            tail = space.residual_sq(x, distinct)
            return [-np.sqrt(tail[:, column[k]]) for k in dims]

        return self.map_rows(split, ("features",), block, outputs=len(dims))
