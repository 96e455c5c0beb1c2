"""AdaSCALE-A and AdaSCALE-L's shared scorer (Regmi et al., 2025; OpenOOD v1.5
`adascale_postprocessor.py`): the id/val fit of the perturbation statistic's ECDF and the
adaptive scale of each row (kernels: `scorers.kernels.adascale`). The two methods differ only
in where the scale s enters the energy (`AdaScaleBase.scaled_logits`).

Per row, with h the penultimate features, h' those of the perturbed input (the view
`adascale_features/<o>`, featstore/extraction/extract_extras.py), D = dim h:

    k1' = int(D k1 / 100), k2' = int(D k2 / 100)
    Q'(x) = sum_{j in top_k1'(h)} max(h'_j, 0) + lmbda sum_{j in top_k2'(h)} |h_j - h'_j|
    p(x)  = p_min + (1 - ECDF_val(Q'(x))) (p_max - p_min)       ECDF of Q' on id/val rows
    s(x)  = sum_j max(h_j, 0) / (sum of the k largest max(h_j, 0)), k = D - round(D p(x) / 100)

The id/val sample is `num_samples` rows drawn by numpy default_rng(seed).permutation (OpenOOD:
torch.randperm, unseeded). Parameters (OpenOOD `configs/postprocessors/adascale_a.yml` and
`adascale_l.yml`): percentile "p_min:p_max" = "75:85", k1 = 5, k2 = 1 (percent of D), lmbda =
10, o = 0.05 (the stored perturbation), num_samples = 5000; the default grid is OpenOOD's
`percentile_list` (36 pairs from 60 to 99). A grid shares h, h', Q' per (k1, k2, lmbda, o),
the sum and the sorted top of max(h, 0) (up to the largest k of the grid's lowest p_min) and
h W^T; the top-k sets are partitions, O(D) per row (`scorers.kernels.adascale`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.extra_keys import ADASCALE_GROUP, adascale_name, stored_layers
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.adascale import (
    adaptive_scales,
    ecdf_upper,
    kept_counts,
    perturbation_stat,
    top_cumsum,
)
from ..kernels.softmax import logsumexp
from ..neighbours import is_int
from ..paper import Paper

FIT_SPLIT = "id/val"
_LOWS = (60, 65, 70, 75, 80, 85, 90, 95)
PERCENTILE_GRID = [f"{lo}:{hi}" for lo in _LOWS for hi in (*_LOWS, 99) if hi > lo]
_STAT_KEYS = ("k1", "k2", "lmbda", "o")

PAPER = Paper(title="AdaSCALE: Adaptive Scaling for OOD Detection",
              authors=("Regmi",), venue="arXiv",
              year=2025, url="https://arxiv.org/abs/2503.08023",
              code="https://github.com/sudarshanregmi/AdaSCALE")


def parse_percentile(name: str, value: Any) -> tuple[float, float]:
    """"75:85" or [75, 85] -> (75.0, 85.0) with 0 < p_min <= p_max < 100."""
    parts = value.split(":") if isinstance(value, str) else value
    try:
        lo, hi = (float(p) for p in parts)
    except (TypeError, ValueError):
        lo = hi = float("nan")
    if not 0 < lo <= hi < 100:
        raise UsageError(f"scorer {name!r}: percentile={value!r} must be 'p_min:p_max' with "
                         "0 < p_min <= p_max < 100, e.g. '75:85'")
    return lo, hi


class AdaScaleBase(Scorer):
    """Energy of the adaptively scaled head (subclasses place the scale)."""

    needs = ("features", "head", f"extra:{ADASCALE_GROUP}", "fit:id/val")
    defaults: ClassVar[dict[str, Any]] = {"percentile": "75:85", "k1": 5, "k2": 1,
                                          "lmbda": 10.0, "o": 0.05, "num_samples": 5000,
                                          "seed": 0}
    grid: ClassVar[dict[str, list[Any]]] = {"percentile": PERCENTILE_GRID}
    paper = PAPER

    def scaled_logits(self, hw: np.ndarray, bias: np.ndarray, scale: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        parse_percentile(self.name, params["percentile"])
        for key in ("k1", "k2"):
            if not isinstance(params[key], int | float) or isinstance(params[key], bool) \
                    or not 0 <= params[key] <= 100:
                raise UsageError(f"scorer {self.name!r}: {key}={params[key]!r} must be a "
                                 "percent of D in [0, 100]")
        lmbda, o = params["lmbda"], params["o"]
        if isinstance(lmbda, bool) or not isinstance(lmbda, int | float) or \
                not np.isfinite(lmbda) or lmbda < 0:
            raise UsageError(f"scorer {self.name!r}: lmbda={lmbda!r} must be a number >= 0")
        if isinstance(o, bool) or not isinstance(o, int | float) or not 0 < o < 1:
            raise UsageError(f"scorer {self.name!r}: o={o!r} must be in (0, 1)")
        for key in ("num_samples", "seed"):
            if not is_int(params[key]) or params[key] < (1 if key == "num_samples" else 0):
                raise UsageError(f"scorer {self.name!r}: {key}={params[key]!r} must be an "
                                 f"integer >= {1 if key == 'num_samples' else 0}")

    def _view(self, split: SplitLike, o: float) -> str:
        name = adascale_name(o)
        if not split.has_extra(name):
            held = ", ".join(stored_layers(split.extra_names(), ADASCALE_GROUP)) or "none"
            raise FeatstoreError(f"scorer {self.name!r}: split {split.name!r} has no AdaSCALE "
                                 f"view at o={o:g} (stored o: {held})", need=f"extra:{name}",
                                 how=f"extract with `ExtractOptions(adascale_o=({o:g},))`")
        return f"extra:{name}"

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.bias = np.asarray(bias, dtype=np.float64)
        self.dim = int(self.weight_t.shape[0])
        split = store.split(FIT_SPLIT)
        perm = np.random.default_rng(int(self.params["seed"])).permutation(split.num_rows)
        self.sample = np.sort(perm[:int(self.params["num_samples"])])
        self._fits: dict[tuple, np.ndarray] = {}
        self._fit_stat(self.params)

    def _ks(self, params: Mapping[str, Any]) -> tuple[int, int]:
        return int(self.dim * params["k1"] / 100), int(self.dim * params["k2"] / 100)

    def _fit_stat(self, params: Mapping[str, Any]) -> np.ndarray:
        """The sorted Q' of the id/val sample for the setting's (k1, k2, lmbda, o)."""
        key = tuple(params[k] for k in _STAT_KEYS)
        if key not in self._fits:
            split = self.fitted_store.split(FIT_SPLIT)
            k1, k2 = self._ks(params)
            parts = []
            for rows, (h, moved) in self.chunks(split, "features",
                                                self._view(split, float(params["o"]))):
                lo, hi = np.searchsorted(self.sample, [rows.start, rows.stop])
                pick = self.sample[lo:hi] - rows.start
                parts.append(perturbation_stat(h[pick].astype(np.float64),
                                               moved[pick].astype(np.float64), k1, k2,
                                               float(params["lmbda"])))
            self._fits[key] = np.sort(np.concatenate(parts))
        return self._fits[key]

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        groups: dict[float, list[int]] = {}
        for i, p in enumerate(full):
            groups.setdefault(float(p["o"]), []).append(i)
        out: list[np.ndarray] = [np.empty(0)] * len(full)
        for o, members in groups.items():
            params = [full[i] for i in members]
            fits = [self._fit_stat(p) for p in params]

            def block(h32: np.ndarray, moved32: np.ndarray,
                      params: list = params, fits: list = fits) -> list[np.ndarray]:
                h, moved = h32.astype(np.float64), moved32.astype(np.float64)
                x = np.maximum(h, 0.0)
                bounds = [parse_percentile(self.name, p["percentile"]) for p in params]
                widest = int(kept_counts(x.shape[1], np.array([min(b[0] for b in bounds)]))[0])
                cumsum, total = top_cumsum(x, widest), x.sum(axis=1)
                hw = h @ self.weight_t
                stats: dict[tuple, np.ndarray] = {}
                scores = []
                for p, fitted, (lo, hi) in zip(params, fits, bounds, strict=True):
                    key = tuple(p[k] for k in _STAT_KEYS)
                    if key not in stats:
                        k1, k2 = self._ks(p)
                        stats[key] = ecdf_upper(fitted, perturbation_stat(
                            h, moved, k1, k2, float(p["lmbda"])))
                    counts = kept_counts(x.shape[1], lo + stats[key] * (hi - lo))
                    scale = adaptive_scales(total, cumsum, counts)
                    scores.append(logsumexp(self.scaled_logits(hw, self.bias, scale)))
                return scores

            results = self.map_rows(split, ("features", self._view(split, o)), block,
                                    outputs=len(members))
            for i, res in zip(members, results, strict=True):
                out[i] = res
        return out
