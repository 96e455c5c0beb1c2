"""ConfBranch: the learned confidence of a confidence-branch model.

Paper: DeVries & Taylor, "Learning Confidence for Out-of-Distribution Detection in Neural
Networks", arXiv:1802.04865, 2018 (the remote-sensing benchmark's eq. 6: S(x) = c).

Formula as implemented: score(x) = c(x) = sigmoid(confidence_head(features(x))), read from the
split extra `confidence` (N,) that extraction writes for a model with a `confidence_head`
(`featstore train --method confbranch`). Higher confidence = more in-distribution. No
hyperparameters (DeVries & Taylor also perturb the input along grad log c; OpenOOD v1.5
`conf_branch.yml` does not), so no grid.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.extra_keys import CONFIDENCE
from featstore.store.interfaces import SplitLike

from ..base import Scorer
from ..paper import Paper


class ConfBranch(Scorer):
    """The confidence branch's output c in (0, 1) (higher = more ID)."""

    name = "confbranch"
    needs = (f"extra:{CONFIDENCE}",)
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("Learning Confidence for Out-of-Distribution Detection in "
                         "Neural Networks"),
                  authors=("DeVries", "Taylor"), venue="arXiv", year=2018,
                  url="https://arxiv.org/abs/1802.04865",
                  code="https://github.com/uoguelph-mlrg/confidence_estimation")

    def _score(self, split: SplitLike) -> np.ndarray:
        ds = split.extra(CONFIDENCE)
        if ds.shape != (split.num_rows,):
            raise FeatstoreError(f"scorer {self.name!r}: extra {CONFIDENCE!r} of split "
                                 f"{split.name!r} must be (N={split.num_rows},), got {ds.shape}")
        out = np.empty(split.num_rows, dtype=np.float64)
        for rows, (conf,) in self.chunks(split, f"extra:{CONFIDENCE}"):
            out[rows] = conf
        return out
