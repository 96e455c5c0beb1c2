"""AdaSCALE-A: activation scaling by an adaptive, perturbation-informed percentile (Regmi,
"AdaSCALE: Adaptive Scaling for OOD Detection", arXiv 2025; OpenOOD v1.5
`adascale_postprocessor.py` with `networks/adascale_net.py` `AdaScaleANet`).

Needs the view `adascale_features/<o>` of `featstore extract --adascale-o o` (the penultimate
features of the input with its floor(o C H W) least-salient entries moved by 0.5 sign(grad) of
the top logit) in id/val and every scored split. Formula as implemented (the shared part, the
scale s(x) from the ECDF of Q' on id/val, is `scorers.fitting.adascale`'s docstring):

    score(x) = logsumexp( (h * exp(s(x))) W^T + b )        (float64)

as OpenOOD's `forward_threshold` with `logit_scaling = False` followed by
`torch.logsumexp(output, dim=1)`: the raw feature h (not its ReLU) is multiplied by exp(s),
s computed on max(h, 0). Defaults and grid: OpenOOD `configs/postprocessors/adascale_a.yml`.
"""

from __future__ import annotations

import numpy as np

from ..fitting.adascale import AdaScaleBase


class AdaScaleA(AdaScaleBase):
    """Energy of exp(s) h through the head (higher = more ID)."""

    name = "adascale_a"

    def scaled_logits(self, hw: np.ndarray, bias: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """(h exp(s)) W^T + b = exp(s) (h W^T) + b."""
        return hw * np.exp(scale)[:, None] + bias
