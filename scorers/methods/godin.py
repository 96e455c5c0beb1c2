"""G-ODIN: scores of the decomposed confidence f_i = h_i / g.

Paper: Hsu, Shen, Jin & Kira, "Generalized ODIN: Detecting Out-of-distribution Image without
Learning from Out-of-distribution Data", CVPR 2020 (the remote-sensing benchmark's eqs. 9-12).

Reads the split extras `godin_h` (N, C) (h, the inner-product head = the stored logits) and
`godin_g` (N,) (g in (0, 1)) that extraction writes for a model with a `godin_g` module
(`featstore train --method godin`). Formula as implemented, per `variant`:

    "softmax"  score = log max_i softmax(h(x) / g(x))_i           (default; the benchmark's eq. 12)
    "h"        score = max_i h_i(x)
    "g"        score = g(x)

Default "softmax": the remote-sensing benchmark (Wang et al. 2024) scores G-ODIN with its
eq. 12, max_i softmax(f(x))_i of the decomposed confidence f_i = h_i / g. The variants "h"
(OpenOOD v1.5 `configs/postprocessors/godin.yml`: `score_func: h   # use h or g`) and "g"
(Hsu et al.'s own scores) are kept as named alternatives. The paper and OpenOOD
also perturb the input (eps = 0.0025 in OpenOOD) before scoring; that needs the network and is
not applied here. "softmax" scores the LOG of eq. 12's probability
(`scorers.kernels.softmax.log_max_softmax`: same ranking, no saturation at 1.0, DESIGN §4).
Higher = more in-distribution for every variant. No sweep grid (variants
are different scores, not a hyperparameter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.store.extra_keys import GODIN_G, GODIN_H
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import log_max_softmax
from ..paper import Paper

VARIANTS = ("h", "g", "softmax")


def godin_scores(h: np.ndarray, g: np.ndarray, variant: str) -> np.ndarray:
    """(n,) float64 scores of h (n, C) and g (n,) for one variant."""
    if variant == "h":
        return np.asarray(h, dtype=np.float64).max(axis=1)
    if variant == "g":
        return np.asarray(g, dtype=np.float64).reshape(-1)
    f = np.asarray(h, dtype=np.float64) / np.asarray(g, dtype=np.float64).reshape(-1, 1)
    return log_max_softmax(f)


class GODIN(Scorer):
    """max softmax(h / g) (default), max_i h_i or g (higher = more ID)."""

    name = "godin"
    needs = (f"extra:{GODIN_H}", f"extra:{GODIN_G}")
    defaults: ClassVar[dict[str, Any]] = {"variant": "softmax"}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("Generalized ODIN: Detecting Out-of-distribution Image "
                         "without Learning from Out-of-distribution Data"),
                  authors=("Hsu", "Shen", "Jin", "Kira"), venue="CVPR", year=2020,
                  url="https://arxiv.org/abs/2002.11297", code=None)

    def score_form(self) -> str:
        return "log_prob" if self.params["variant"] == "softmax" else ""

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        self.check_choice(params, "variant", VARIANTS)

    def _score(self, split: SplitLike) -> np.ndarray:
        variant = self.params["variant"]
        return self.map_rows(split, (f"extra:{GODIN_H}", f"extra:{GODIN_G}"),
                             lambda h, g: godin_scores(h, g, variant))
