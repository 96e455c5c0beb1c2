"""IP TS MLV: the maximum logit of the input-perturbed, temperature-scaled logits (FACETS).

Recalcati, Garcea, Piano, Lamberti & Morra, "Toward a Realistic Benchmark for
Out-of-Distribution Detection", DSAA 2023 (Table VI column "IP TS MLV [21]"): ODIN's input
perturbation and temperature scaling (Liang, Li & Srikant, ICLR 2018) with the maximum logit
value (MLV, Hendrycks et al., ICML 2022) as the score instead of the softmax.

The perturbed logits are the ones `featstore extract --odin-grid "T:eps[,eps...]"` stores per
(T, eps) as `extra/odin_logits/<T>_<eps>`: l' = f(x') with x' = x - (eps / std) *
sign(-grad_x log max_c softmax(f(x) / T)_c) (featstore/extraction/extract_extras.py, ODIN's
perturbation). Formula as implemented, in float64:

    score(x) = max_c l'_c(x) / T

Dividing by T > 0 does not change the order of the scores (the AUROC, FPR95 and detection
error equal those of max_c l'_c), but keeps the score the temperature-scaled logit the name
says. T = `temperature` and eps = `epsilon` must name a stored pair; defaults T = 1000,
eps = 0.0014 and the sweep grid are `odin_perturbed`'s (OpenOOD v1.5's ODIN config; FACETS
states no values). With eps = 0 the score is `mls` / T of the unperturbed logits.
"""

from __future__ import annotations

import numpy as np

from featstore.store.interfaces import SplitLike

from ..paper import Paper
from .odin_perturbed import ODINPerturbed


class IPTSMLV(ODINPerturbed):
    """max_c l'_c / T of the stored ODIN-perturbed logits l' (higher = more ID)."""

    name = "ip_ts_mlv"
    min_classes = 1  # the max logit stays informative with one class (not a softmax)
    paper = Paper(title="Toward a Realistic Benchmark for Out-of-Distribution Detection",
                  authors=("Recalcati", "Garcea", "Piano", "Lamberti", "Morra"), venue="DSAA",
                  year=2023, url="https://doi.org/10.1109/DSAA60987.2023.10302486", code=None,
                  note="IP TS MLV; perturbation of Liang, Li & Srikant, ICLR 2018")

    def _score_pair(self, split: SplitLike, temperature: float, epsilon: float) -> np.ndarray:
        name = self._require_pair(split, temperature, epsilon)
        out = np.empty(split.num_rows, dtype=np.float64)
        for rows, (logits,) in self.chunks(split, f"extra:{name}"):
            # the row max of the stored float32 values, widened: equal to the max of the
            # widened values (widening is exact and monotone), without a float64 copy
            out[rows] = np.asarray(logits).max(axis=1).astype(np.float64) / float(temperature)
        return out
