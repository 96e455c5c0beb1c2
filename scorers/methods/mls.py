"""Maximum logit score (MLS / MaxLogit).

Paper: Hendrycks, Basart, Mazeika, Zou, Kwon, Mostajabi, Steinhardt & Song, "Scaling
Out-of-Distribution Detection for Real-World Settings", ICML 2022.

Formula as implemented, for logits l in R^C:

    score(x) = max_k l_k

(the unnormalised logit, as float64). No hyperparameters, so no grid (OpenOOD v1.5
`configs/postprocessors/mls.yml` has none either).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.store.interfaces import SplitLike

from ..base import Scorer
from ..paper import Paper


class MaxLogit(Scorer):
    """Maximum logit: max_k l_k (higher = more ID)."""

    name = "mls"
    needs = ("logits",)
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(title="Scaling Out-of-Distribution Detection for Real-World Settings",
                  authors=("Hendrycks", "Basart", "Mazeika", "Zou", "Kwon", "Mostajabi",
                           "Steinhardt", "Song"),
                  venue="ICML", year=2022, url="https://arxiv.org/abs/1911.11132",
                  code="https://github.com/hendrycks/anomaly-seg")

    def _score(self, split: SplitLike) -> np.ndarray:
        return self.map_rows(split, ("logits",), lambda logits: logits.max(axis=1))
