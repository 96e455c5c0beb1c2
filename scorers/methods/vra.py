"""VRA: variational rectified activation (Xu, Lian, Liu & Tao, NeurIPS 2023, "VRA: Variational
Rectified Activation for Out-of-distribution Detection"), as OpenOOD implements it
(`openood/postprocessors/vra_postprocessor.py` at 3c35632): a two-sided ReAct.

Formula as implemented (float64), with h the penultimate feature and (W, b) the head:

    lo = percentile(all N*D entries of the `percentile_split` features, percentile_low)
    hi = percentile(the same entries, percentile_high)                        ('linear')
    score = logsumexp(clip(h, lo, hi) @ W.T + b)           energy of the clipped features

Higher is more in-distribution. Defaults and grid: OpenOOD `configs/postprocessors/vra.yml`
(`percentile_high: 90`, `percentile_low: 10`; sweep `percentile_high_list: [85, 90, 95, 99]`,
`percentile_low_list: [1, 5, 10, 15]`); percentile_low < percentile_high is required.
`percentile_split` (default "id/train"): OpenOOD takes the percentiles over its ID validation
loader; featstore fits them on id/train for the reason `react` states (id/val chooses the
hyperparameters); `percentile_split="id/val"` reproduces OpenOOD. The percentiles are exact
(`scorers.fitting.percentiles`, as ReAct's).

Where the code differs from the paper: the paper's VRA function sets activations below the
low threshold to 0 and adds an offset gamma between the thresholds (its VRA+ variants learn
more); OpenOOD's code, followed here, only clips to [lo, hi]. pytorch-ood's `VRA` clips each
feature-map element between its own per-element quantiles over the training rows (per
dimension, for pooled features) instead of one pair of scalars; neither form is offered.

Scoring, per block of rows, for the distinct hi_1 < hi_2 < ... and lo values of a grid:

    l            = x @ W.T + b       (the stored float32 logits when they are the head's
                                      output, `scorers.base.stored_logits_are_head`)
    up(hi)       = l - sum_{j: h_j > hi} (h_j - hi) W[:, j]        (clip from above)
    down(lo)     = sum_{j: h_j < lo} (lo - h_j) W[:, j]            (clip from below)
    logits(lo, hi) = up(hi) + down(lo)                      (valid for lo <= hi)

each sum over the few entries outside the band (`scorers.kernels.bands.clip_from_logits`;
the lower side as the upper clip of -h at -lo), float64 sums with W as float32 (exact for a
float32 head): a grid reads each block once and computes up(hi) once per distinct hi and
down(lo) once per distinct lo. A setting whose entries outside [lo, hi] on the split that set
them are too many for the sparse sums to pay (`scorers.kernels.gather.sparse_pays` of
(100 - high + low) / 100) is the dense product clip(h, lo, hi) @ W.T + b instead (the two ways
differ only in the order of the float64 sums); the choice is per setting, so a setting's
scores are the same alone or in a grid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer, head_logits_usable, stored_logits_are_head
from ..fitting.percentiles import SplitPercentiles, check_percentile_split
from ..kernels.bands import clip_from_logits
from ..kernels.gather import exact_f32, sparse_pays
from ..kernels.select import check_percentile
from ..kernels.softmax import logsumexp
from ..paper import Paper


class VRA(Scorer):
    """Energy of the features clipped to [lo, hi] percentiles of the fit split."""

    name = "vra"
    needs = ("features", "head", "fit:id/train")
    defaults = {"percentile_high": 90, "percentile_low": 10, "percentile_split": "id/train"}
    grid = {"percentile_high": [85, 90, 95, 99], "percentile_low": [1, 5, 10, 15]}
    paper = Paper(title="VRA: Variational Rectified Activation for Out-of-distribution "
                        "Detection",
                  authors=("Xu", "Lian", "Liu", "Tao"), venue="NeurIPS", year=2023,
                  url="https://arxiv.org/abs/2302.11716",
                  code="https://github.com/Jingkang50/OpenOOD/blob/main/openood/"
                       "postprocessors/vra_postprocessor.py",
                  note="as OpenOOD implements it: clip to [lo, hi], energy")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        high = check_percentile(self.name, "percentile_high", params["percentile_high"])
        low = check_percentile(self.name, "percentile_low", params["percentile_low"])
        if low >= high:
            raise UsageError(f"scorer {self.name!r}: percentile_low ({params['percentile_low']}"
                             f") must be below percentile_high ({params['percentile_high']})")
        check_percentile_split(self.name, params["percentile_split"], store)

    def _fit(self, store: StoreLike) -> None:
        weight, bias = store.head
        self.weight_t = np.ascontiguousarray(np.asarray(weight, dtype=np.float64).T)
        self.wt = exact_f32(np.asarray(weight).T)        # (D, C), for the sparse sums
        self.bias = np.asarray(bias, dtype=np.float64)
        self.logits_are_head = stored_logits_are_head(store)
        self._percentiles = SplitPercentiles(self, store)
        # the default grid's clip values come out of the same two passes
        split = self.params["percentile_split"]
        ps = {float(p) for k in ("percentile_high", "percentile_low")
              for p in [self.params[k], *self.grid[k]]}
        self._percentiles.get([(split, p) for p in sorted(ps)])
        self.low, self.high = self.clips([self.params])[0]

    def clips(self, settings: list[dict[str, Any]]) -> list[tuple[float, float]]:
        """(lo, hi) per setting (exact percentiles of its split's entries)."""
        keys = [(s["percentile_split"], float(s[k])) for s in settings
                for k in ("percentile_low", "percentile_high")]
        values = self._percentiles.get(keys)
        return [(values[2 * i], values[2 * i + 1]) for i in range(len(settings))]

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        clips = self.clips(full)
        # sparse or dense per setting, from its own percentiles (never from the grid or the
        # scored rows), so that a setting's scores are the same alone or in any grid
        sparse = [sparse_pays((100.0 - float(s["percentile_high"])
                               + float(s["percentile_low"])) / 100.0) for s in full]
        use_logits = any(sparse) and head_logits_usable(split, self.logits_are_head)
        fields = ("features", "logits") if use_logits else ("features",)

        def block(x: np.ndarray, *logits: np.ndarray) -> list[np.ndarray]:
            return self._energies(x, clips, sparse, logits[0] if logits else None)

        return self.map_rows(split, fields, block, outputs=len(settings))

    def _energies(self, x: np.ndarray, clips: list[tuple[float, float]], sparse: list[bool],
                  logits: np.ndarray | None) -> list[np.ndarray]:
        """Energy per (lo, hi) of one block: the sparse settings from the logits (stored, or
        one dense product) by one pass per distinct hi (from above) and per distinct lo (from
        below, as the upper clip of -h at -lo); the others as dense products."""
        x64 = x.astype(np.float64)
        n, c_num = x.shape[0], self.wt.shape[1]
        ups: dict[float, np.ndarray] = {}
        downs: dict[float, np.ndarray] = {}
        if any(sparse):
            top = (np.asarray(logits, dtype=np.float64) if logits is not None
                   else x64 @ self.weight_t + self.bias)
            for lo, hi in (c for c, s in zip(clips, sparse, strict=True) if s):
                if hi not in ups:
                    ups[hi] = np.empty((1, n, c_num))
                    clip_from_logits(x, top, self.wt, np.array([hi]), ups[hi])
                if lo not in downs:       # -sum_{h_j < lo} (lo - h_j) W[:, j]
                    downs[lo] = np.empty((1, n, c_num))
                    clip_from_logits(np.negative(x), np.zeros((n, c_num)), self.wt,
                                     np.array([-lo]), downs[lo])
        return [logsumexp(ups[hi][0] - downs[lo][0]) if s
                else logsumexp(np.clip(x64, lo, hi) @ self.weight_t + self.bias)
                for (lo, hi), s in zip(clips, sparse, strict=True)]
