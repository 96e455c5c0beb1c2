"""ODIN, temperature-scaling part only (no input perturbation).

Paper: Liang, Li & Srikant, "Enhancing The Reliability of Out-of-distribution Image Detection
in Neural Networks", ICLR 2018.

Formula as implemented, for logits l in R^C and temperature T > 0:

    score(x) = log max_k softmax(l / T)_k = max_k l_k / T - logsumexp(l / T)
             = -log1p(sum_{k != argmax} exp(l_k / T - max_j l_j / T))

in float64, as the last form (`scorers.kernels.softmax.log_max_softmax`, one fused pass per
row). The LOG of ODIN's probability: same ranking (exp(score) gives the probability back), but
no saturation: the probability rounds to 1.0 once the top-logit gap exceeds ~36.7 T (at small
T, e.g. T = 1 on a confident model, many rows tie), the log form separates rows up to gaps of
~745 T (DESIGN §4).
Default T = 1000 (the paper's choice; OpenOOD v1.5 `configs/postprocessors/odin.yml`
`postprocessor_args.temperature: 1000`). Default sweep grid:
T in [1, 10, 100, 1000], OpenOOD v1.5 `odin.yml` `postprocessor_sweep.temperature` (OpenOOD
also sweeps the perturbation magnitude `noise` in [0.0014, 0.0028], which does not apply here).
`score_grid` reads each chunk of logits once and evaluates one such pass per temperature.

This scorer works from the stored logits, so it omits ODIN's input perturbation
x' = x - eps * sign(-grad_x log S_yhat(x; T)). The full method needs a backward pass through the
network, i.e. logits of perturbed inputs written at extraction (the `extra:` arrays of ODIN-
perturbed logits per (T, eps), DESIGN §2); it is a separate scorer, `odin_perturbed`
(later issue). With eps = 0 the two coincide.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..kernels.softmax import log_max_softmax
from ..paper import Paper
from .energy import TemperatureScorer


class ODIN(TemperatureScorer):
    """Log of the temperature-scaled maximum softmax log max_k softmax(l / T)_k (higher = more
    ID)."""

    name = "odin"
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {"temperature": 1000.0}
    grid: ClassVar[dict[str, list[Any]]] = {"temperature": [1, 10, 100, 1000]}
    paper = Paper(
                  title=("Enhancing The Reliability of Out-of-distribution Image "
                         "Detection in Neural Networks"),
                  authors=("Liang", "Li", "Srikant"), venue="ICLR", year=2018,
                  url="https://arxiv.org/abs/1706.02690",
                  code="https://github.com/facebookresearch/odin",
                  note="temperature scaling only; no input perturbation")

    def score_form(self) -> str:
        return "log_prob"

    def kernel(self, logits: np.ndarray, temperature: float) -> np.ndarray:
        return log_max_softmax(logits, temperature)
