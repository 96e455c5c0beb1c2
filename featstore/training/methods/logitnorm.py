"""LogitNorm: cross-entropy on L2-normalised logits.

Paper: Wei, Xie, Cheng, Feng, An & Li, "Mitigating Neural Network Overconfidence with Logit
Normalization", ICML 2022 (the seed benchmark's eq. 8).

Loss as implemented, for logits f in R^C and label y (mean over the batch):

    L(f, y) = -log softmax(f / (tau * (||f||_2 + 1e-7)))_y

tau = 0.04 by default (OpenOOD v1.5 `configs/pipelines/train/train_logitnorm.yml`
`trainer_args.tau: 0.04`, the paper's CIFAR-10 setting). The 1e-7 in the norm is the official
code's. The model is unchanged (no extra head): stored logits are the raw f, and a LogitNorm
model is scored by any post-hoc scorer (MSP by default, as in the benchmark).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from featstore.errors import UsageError
from featstore.training.methods import StepResult, TrainContext, TrainMethod, register

DEFAULT_TAU = 0.04
NORM_EPS = 1e-7


def logitnorm_loss(logits: torch.Tensor, labels: torch.Tensor,
                   tau: float = DEFAULT_TAU) -> torch.Tensor:
    """Mean over the batch of -log softmax(f / (tau * ||f||_2))_y."""
    if tau <= 0:
        raise ValueError(f"logitnorm: tau must be > 0 (got {tau!r})")
    norms = torch.linalg.vector_norm(logits, ord=2, dim=-1, keepdim=True) + NORM_EPS
    return F.cross_entropy(logits / (norms * tau), labels)


class LogitNorm(TrainMethod):
    """`featstore train --method logitnorm [--param tau=0.04]`."""

    name = "logitnorm"
    paper = ("Wei, Xie, Cheng, Feng, An & Li, Mitigating Neural Network Overconfidence with "
             "Logit Normalization, ICML 2022")
    params = {"tau": DEFAULT_TAU}

    def resolve_params(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        params = super().resolve_params(overrides)
        tau = params["tau"]
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not tau > 0:
            raise UsageError(f"method 'logitnorm': tau={tau!r} must be a number > 0")
        return params

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             ctx: TrainContext) -> StepResult:
        logits = model(x)
        return StepResult(logitnorm_loss(logits, y, float(ctx.params["tau"])), logits)


register(LogitNorm())
