"""MC-Dropout: cross-entropy training with dropout before the classifier head.

Paper: Gal & Ghahramani, "Dropout as a Bayesian Approximation: Representing Model Uncertainty
in Deep Learning", ICML 2016 (the seed benchmark's eqs. 15-16).

Model: the backbone with `head_dropout = nn.Dropout(p)` applied to the head's input (a forward
pre-hook on the final Linear, so the backbone's parameter names do not change); p = 0.5 by
default (OpenOOD v1.5 `configs/pipelines/train/train_dropout.yml` `dropout_p: 0.5`, whose
`forward_with_dropout` also drops the penultimate feature). Loss: mean cross-entropy, as `ce`.

At extraction, `featstore extract --mc-samples T` switches every dropout module of the model to
train mode (BatchNorm stays in eval mode) and stores T stochastic passes as `extra/mc_logits`
(T, N, C); the ordinary (deterministic, dropout off) pass gives features and logits as usual.
Scored by scorers/methods/mcdropout.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from featstore.errors import UsageError
from featstore.extraction.heads import DEFAULT_DROPOUT_P
from featstore.training.methods import TrainContext, TrainMethod, register


def mcdropout_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (dropout acts inside the model)."""
    return F.cross_entropy(logits, labels)


class MCDropout(TrainMethod):
    """`featstore train --method mcdropout [--param p=0.5]`: cross-entropy, dropout on."""

    name = "mcdropout"
    paper = ("Gal & Ghahramani, Dropout as a Bayesian Approximation: Representing Model "
             "Uncertainty in Deep Learning, ICML 2016")
    params = {"p": DEFAULT_DROPOUT_P}

    def wrap(self, model: nn.Module, ctx: TrainContext) -> nn.Module:
        p = ctx.params["p"]
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p < 1.0:
            raise UsageError(f"method 'mcdropout': p={p!r} must lie in [0, 1)")
        return super().wrap(model, ctx)


register(MCDropout())
