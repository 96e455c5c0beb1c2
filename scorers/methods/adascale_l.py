"""AdaSCALE-L: logit scaling by an adaptive, perturbation-informed percentile (Regmi,
"AdaSCALE: Adaptive Scaling for OOD Detection", arXiv 2025; OpenOOD v1.5
`adascale_postprocessor.py` with `networks/adascale_net.py` `AdaScaleLNet`).

Needs the view `adascale_features/<o>` of `featstore extract --adascale-o o` in id/val and
every scored split. Formula as implemented (the scale s(x) from the ECDF of Q' on id/val is
`scorers.fitting.adascale`'s docstring):

    score(x) = logsumexp( (h W^T + b) * s(x)^2 )           (float64)

as OpenOOD's `forward_threshold` with `logit_scaling = True` (`logits_cls *= scale ** 2.0`)
followed by `torch.logsumexp(output, dim=1)`. Defaults and grid: OpenOOD
`configs/postprocessors/adascale_l.yml`.
"""

from __future__ import annotations

import numpy as np

from ..fitting.adascale import AdaScaleBase


class AdaScaleL(AdaScaleBase):
    """Energy of the head's logits times s^2 (higher = more ID)."""

    name = "adascale_l"

    def scaled_logits(self, hw: np.ndarray, bias: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """(h W^T + b) s^2."""
        return (hw + bias) * (scale ** 2)[:, None]
