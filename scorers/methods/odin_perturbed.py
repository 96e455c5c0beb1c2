"""ODIN with input perturbation, from logits of perturbed inputs stored at extraction.

Paper: Liang, Li & Srikant, "Enhancing The Reliability of Out-of-distribution Image Detection
in Neural Networks", ICLR 2018.

`featstore extract --odin-grid "T:eps[,eps...]"` stores, per (T, eps), the logits l' of the
perturbed input x' = x - (eps / std) * sign(-grad_x log max_c softmax(f(x) / T)_c) as the split
extra `odin_logits/<T>_<eps>` (N, C) (featstore/extraction/extract_extras.py). Formula as
implemented:

    score(x) = log max_c softmax(l'(x) / T)_c = max_c l'_c / T - logsumexp(l' / T)
             = -log1p(sum_{c != argmax} exp(l'_c / T - max_j l'_j / T))

in float64 (`scorers.kernels.softmax.log_max_softmax`): the log of ODIN's probability, same
ranking, no saturation at 1.0 (DESIGN §4, as `odin`), with T = `temperature` and
eps = `epsilon`, which must name a stored pair.
Defaults T = 1000, eps = 0.0014 (OpenOOD v1.5 `configs/postprocessors/odin.yml`:
`temperature: 1000`, `noise: 0.0014`). Default sweep grid: OpenOOD's `postprocessor_sweep`
(T in [1, 10, 100, 1000], noise in [0.0014, 0.0028]); with a store, settings that are not
stored are invalid (`check_params`), so a sweep keeps the stored ones. `score_grid(split)`
without a grid scores every pair stored in the split. With eps = 0 the score equals the
`odin` scorer's at the same T.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any, ClassVar

import numpy as np

from featstore.errors import UsageError
from featstore.store.extra_keys import ODIN_GROUP, odin_name, parse_odin_name
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Grid, Scorer
from ..kernels.softmax import log_max_softmax
from ..paper import Paper
from .energy import check_temperature

ID_SPLIT = "id/test"


def stored_pairs(split: SplitLike) -> list[tuple[float, float]]:
    """(T, eps) pairs stored in a split, in name order."""
    pairs = [parse_odin_name(n) for n in split.extra_names()]
    return [p for p in pairs if p is not None]


def _fmt_pairs(pairs: list[tuple[float, float]]) -> str:
    return ", ".join(f"T={t:g} eps={e:g}" for t, e in pairs) or "none"


class ODINPerturbed(Scorer):
    """log max softmax(l' / T) of the stored ODIN-perturbed logits l' (higher = more ID)."""

    name = "odin_perturbed"
    needs = (f"extra:{ODIN_GROUP}",)
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {"temperature": 1000.0, "epsilon": 0.0014}
    grid: ClassVar[dict[str, list[Any]]] = {"temperature": [1, 10, 100, 1000],
                                            "epsilon": [0.0014, 0.0028]}
    paper = Paper(
                  title=("Enhancing The Reliability of Out-of-distribution Image "
                         "Detection in Neural Networks"),
                  authors=("Liang", "Li", "Srikant"), venue="ICLR", year=2018,
                  url="https://arxiv.org/abs/1706.02690",
                  code="https://github.com/facebookresearch/odin", note="with input perturbation")

    def score_form(self) -> str:
        return "log_prob"

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_temperature(self.name, params["temperature"])
        eps = params["epsilon"]
        if isinstance(eps, bool) or not isinstance(eps, Real) or not math.isfinite(eps) \
                or eps < 0:
            raise UsageError(f"scorer {self.name!r}: epsilon={eps!r} is out of range (valid: a "
                             "finite number >= 0)")
        if store is not None and store.has_split(ID_SPLIT):
            self._require_pair(store.split(ID_SPLIT), params["temperature"], float(eps))

    def _require_pair(self, split: SplitLike, temperature: float, epsilon: float) -> str:
        name = odin_name(temperature, epsilon)
        if not split.has_extra(name):
            raise UsageError(
                f"scorer {self.name!r}: split {split.name!r} has no ODIN-perturbed logits at "
                f"temperature={temperature:g}, epsilon={epsilon:g} (stored: "
                f"{_fmt_pairs(stored_pairs(split))})", need=f"extra:{name}",
                how=f"extract them with `ExtractOptions(odin_grid=(({temperature:g}, "
                    f"{epsilon:g}),))`")
        return name

    def _score_pair(self, split: SplitLike, temperature: float, epsilon: float) -> np.ndarray:
        name = self._require_pair(split, temperature, epsilon)
        out = np.empty(split.num_rows, dtype=np.float64)
        for rows, (logits,) in self.chunks(split, f"extra:{name}"):
            out[rows] = log_max_softmax(logits, float(temperature))
        return out

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_pair(split, self.params["temperature"], self.params["epsilon"])

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        return [self._score_pair(split, p["temperature"], p["epsilon"])
                for p in ({**self.params, **s} for s in settings)]

    def score_grid(self, split: SplitLike, grid: Grid | None = None,
                   force: bool = False) -> list[tuple[dict[str, Any], np.ndarray]]:
        """Every setting of `grid`; without a grid, every (T, eps) pair stored in `split`."""
        if grid is not None:
            return super().score_grid(split, grid, force)
        self._check_split(split, force)
        return [({"temperature": t, "epsilon": e}, self._score_pair(split, t, e))
                for t, e in stored_pairs(split)]
