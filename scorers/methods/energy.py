"""Energy score (negative free energy).

Paper: Liu, Wang, Owens & Li, "Energy-based Out-of-distribution Detection", NeurIPS 2020.

Formula as implemented, for logits l in R^C and temperature T > 0:

    score(x) = -E(x; T) = T * logsumexp(l / T) = T * log sum_k exp(l_k / T)

in float64 with max-subtraction (`scorers.kernels.softmax.logsumexp`). Default T = 1 (the
paper's choice and OpenOOD v1.5 `configs/postprocessors/ebo.yml`
`postprocessor_args.temperature: 1`).
Default sweep grid: T in [1, 10, 100, 1000], OpenOOD v1.5 `ebo.yml`
`postprocessor_sweep.temperature_list`. `score_grid` reads each chunk of logits once and
evaluates one logsumexp per temperature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any, ClassVar

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.softmax import logsumexp
from ..paper import Paper


def check_temperature(scorer: str, value: Any, param: str = "temperature") -> None:
    """UsageError unless `value` is a finite real number > 0 (shared by energy and odin)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise UsageError(
            f"scorer {scorer!r}: {param}={value!r} is not a number (valid: a finite number > 0)"
        )
    if not math.isfinite(float(value)) or float(value) <= 0:
        raise UsageError(
            f"scorer {scorer!r}: {param}={value!r} is out of range (valid: a finite number > 0)"
        )


def energy_scores(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Row-wise T * logsumexp(l / T), float64."""
    return float(temperature) * logsumexp(logits, float(temperature))


class TemperatureScorer(Scorer):
    """Base of logit scorers with one `temperature` parameter: `kernel(logits, T)` per chunk;
    a grid reads every chunk once and evaluates every temperature on it."""

    needs = ("logits",)

    def kernel(self, logits: np.ndarray, temperature: float) -> np.ndarray:
        raise NotImplementedError

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_temperature(self.name, params["temperature"])

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        temps = [float({**self.params, **s}["temperature"]) for s in settings]
        return self.map_rows(split, ("logits",),
                             lambda logits: [self.kernel(logits, t) for t in temps],
                             outputs=len(temps))


class Energy(TemperatureScorer):
    """Negative energy T * logsumexp(l / T) (higher = more ID)."""

    name = "energy"
    defaults: ClassVar[dict[str, Any]] = {"temperature": 1.0}
    grid: ClassVar[dict[str, list[Any]]] = {"temperature": [1, 10, 100, 1000]}
    paper = Paper(title="Energy-based Out-of-distribution Detection",
                  authors=("Liu", "Wang", "Owens", "Li"), venue="NeurIPS", year=2020,
                  url="https://arxiv.org/abs/2010.03759",
                  code="https://github.com/wetliu/energy_ood")

    def kernel(self, logits: np.ndarray, temperature: float) -> np.ndarray:
        return energy_scores(logits, temperature)
