"""MCD: two classifier heads trained to disagree on unlabelled data.

Paper: Yu & Aizawa, "Unsupervised Out-of-Distribution Detection by Maximum Classifier
Discrepancy", ICCV 2019 (the seed benchmark's eq. 14).

Model: the backbone (its final Linear is head 1, the classifier featstore hooks) plus
`head2 = nn.Linear(D, C)` on the same penultimate feature. Stored: logits (head 1) and
`extra/head2_logits`.

Loss as implemented (means over each batch), with H the entropy of the softmax:

    supervised:   L_s = CE(f1(x), y) + CE(f2(x), y)
    discrepancy:  d(x_u) = mean_u [ H(p1(x_u)) - H(p2(x_u)) ]                 (eq. 14)
    fine-tuning:  L = L_s + lambda * max(0, margin - d(x_u))

The first `warmup_fraction` of the epochs train L_s only (the paper pre-trains both heads on
labelled data), then every step adds the discrepancy term on a batch of the unlabelled split
(the OE auxiliary split: role `ood`, `usage = "train"`). Defaults lambda = 1, margin = 1.2,
warmup 0.9 of the epochs (OpenOOD v1.5 `configs/pipelines/train/train_mcd.yml`: `lambda_oe: 1`,
`margin: 1.2`, `start_epoch_ft: 90` of 100). H is taken over the classes of each row as eq. 14
defines (OpenOOD's `mcd_trainer.entropy` takes softmax over dim 0, the batch). In the
fine-tuning steps the ID and unlabelled batches go through the network in ONE forward pass (as
OE does; OpenOOD's MCD uses two), so BatchNorm's running statistics see the same mixture as its
batch statistics; with two passes, half of the running-statistics updates come from outliers
alone, which cost the demo 30 points of ID accuracy. Scored by the discrepancy of the two
heads' softmax outputs (scorers/methods/mcd.py).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from featstore.errors import UsageError
from featstore.extraction.heads import MethodNet
from featstore.training.methods import StepResult, TrainContext, TrainMethod, register
from featstore.training.methods.oe import aux_batch_size, aux_sampler

DEFAULT_LAMBDA = 1.0
DEFAULT_MARGIN = 1.2
DEFAULT_WARMUP_FRACTION = 0.9


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """(N,) entropy of softmax(logits), -sum_c p_c log p_c."""
    logp = F.log_softmax(logits, dim=1)
    return -(logp.exp() * logp).sum(dim=1)


def discrepancy(logits1: torch.Tensor, logits2: torch.Tensor) -> torch.Tensor:
    """Eq. 14 averaged over the batch: mean[H(p1) - H(p2)]."""
    return (entropy(logits1) - entropy(logits2)).mean()


def mcd_loss(logits1: torch.Tensor, logits2: torch.Tensor, labels: torch.Tensor,
             unlabelled1: torch.Tensor | None = None, unlabelled2: torch.Tensor | None = None,
             lam: float = DEFAULT_LAMBDA, margin: float = DEFAULT_MARGIN) -> torch.Tensor:
    """L_s, plus lambda * max(0, margin - d) when unlabelled logits of both heads are given."""
    loss = F.cross_entropy(logits1, labels) + F.cross_entropy(logits2, labels)
    if unlabelled1 is not None and unlabelled2 is not None and len(unlabelled1):
        loss = loss + lam * F.relu(margin - discrepancy(unlabelled1, unlabelled2))
    return loss


class MCD(TrainMethod):
    """`featstore train --method mcd [--param lambda=1 margin=1.2 warmup_fraction=0.9
    aux_split=ood/aux/x aux_ratio=1]`."""

    name = "mcd"
    paper = ("Yu & Aizawa, Unsupervised Out-of-Distribution Detection by Maximum Classifier "
             "Discrepancy, ICCV 2019")
    params = {"lambda": DEFAULT_LAMBDA, "margin": DEFAULT_MARGIN,
              "warmup_fraction": DEFAULT_WARMUP_FRACTION, "aux_split": None, "aux_ratio": 1.0}

    def prepare(self, model: nn.Module, ctx: TrainContext) -> None:
        frac = float(ctx.params["warmup_fraction"])
        if not 0.0 <= frac < 1.0:
            raise UsageError(f"method 'mcd': warmup_fraction={frac!r} must lie in [0, 1)")
        epochs = int(ctx.config.epochs)
        ctx.state["finetune_from"] = min(int(round(frac * epochs)), epochs - 1)
        aux_sampler(ctx)

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             ctx: TrainContext) -> StepResult:
        net = cast(MethodNet, model)
        if ctx.epoch < ctx.state["finetune_from"]:
            out = net.outputs(x)
            return StepResult(mcd_loss(out["logits"], out["head2_logits"], y), out["logits"])
        u = aux_sampler(ctx).next(aux_batch_size(ctx, len(x))).to(x.device)
        out = net.outputs(torch.cat([x, u]))        # one pass: shared BatchNorm statistics
        n = len(x)
        l1, l2 = out["logits"][:n], out["head2_logits"][:n]
        u1, u2 = out["logits"][n:], out["head2_logits"][n:]
        ctx.metrics["discrepancy"] = float(discrepancy(u1.detach(), u2.detach()))
        loss = mcd_loss(l1, l2, y, u1, u2, float(ctx.params["lambda"]),
                        float(ctx.params["margin"]))
        return StepResult(loss, l1)


register(MCD())
