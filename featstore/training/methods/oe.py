"""Outlier Exposure (OE): cross-entropy plus a uniform-posterior term on auxiliary outliers.

Paper: Hendrycks, Mazeika & Dietterich, "Deep Anomaly Detection with Outlier Exposure", ICLR
2019 (the seed benchmark's eq. 13).

Loss as implemented, for an ID batch (x, y) and an outlier batch x' (means over each batch):

    L = CE(f(x), y) + lambda * mean_x' [ -(1/C) sum_c log softmax(f(x'))_c ]
      = CE(f(x), y) + lambda * mean_x' [ logsumexp(f(x')) - mean_c f_c(x') ]

i.e. cross-entropy to the uniform distribution; lambda = 0.5 (the paper's and OpenOOD v1.5
`oe_trainer.py` `lambda_oe: 0.5`). The model is unchanged; scored by any post-hoc scorer (MSP
by default, as in the benchmark).

Auxiliary data: the outliers are a split of the benchmark spec with role `ood` and
`usage = "train"` (by convention under `ood/aux/...`, e.g. `ood/aux/skimage`), which evaluation
never uses (it only reads OOD splits flagged `test`). The trainer takes every such split, or
the one named by `--aux-split`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from featstore.errors import UsageError
from featstore.training.auxdata import AuxSampler, load_aux_images
from featstore.training.methods import StepResult, TrainContext, TrainMethod, register

DEFAULT_LAMBDA = 0.5


def uniform_cross_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean over rows of the cross-entropy between U(C) and softmax(logits)."""
    return (torch.logsumexp(logits, dim=1) - logits.mean(dim=1)).mean()


def oe_loss(logits_in: torch.Tensor, labels: torch.Tensor, logits_out: torch.Tensor | None,
            lam: float = DEFAULT_LAMBDA) -> torch.Tensor:
    """CE on the ID batch + lambda * cross-entropy to uniform on the outlier batch."""
    loss = F.cross_entropy(logits_in, labels)
    if logits_out is not None and len(logits_out):
        loss = loss + lam * uniform_cross_entropy(logits_out)
    return loss


def aux_sampler(ctx: TrainContext) -> AuxSampler:
    """The auxiliary outlier batches of the spec (loaded once, kept in ctx.state)."""
    if "aux" not in ctx.state:
        images = load_aux_images(ctx.spec, ctx.transform, ctx.params.get("aux_split"))
        ctx.state["aux"] = AuxSampler(images, ctx.generator)
    return ctx.state["aux"]


def aux_batch_size(ctx: TrainContext, batch: int) -> int:
    ratio = float(ctx.params["aux_ratio"])
    if not ratio > 0:
        raise UsageError(f"aux_ratio={ratio!r} must be > 0")
    return max(1, int(round(ratio * batch)))


class OutlierExposure(TrainMethod):
    """`featstore train --method oe [--param lambda=0.5 aux_split=ood/aux/x aux_ratio=2]`.

    Each step forwards the ID batch and `aux_ratio` times as many outliers together (one
    forward pass, as the OE code and OpenOOD do; 2 = the OE paper's 128 ID + 256 outliers)."""

    name = "oe"
    paper = ("Hendrycks, Mazeika & Dietterich, Deep Anomaly Detection with Outlier Exposure, "
             "ICLR 2019")
    params = {"lambda": DEFAULT_LAMBDA, "aux_split": None, "aux_ratio": 2.0}

    def prepare(self, model: nn.Module, ctx: TrainContext) -> None:
        aux_sampler(ctx)

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             ctx: TrainContext) -> StepResult:
        outliers = aux_sampler(ctx).next(aux_batch_size(ctx, len(x))).to(x.device)
        logits = model(torch.cat([x, outliers]))
        logits_in, logits_out = logits[:len(x)], logits[len(x):]
        return StepResult(oe_loss(logits_in, y, logits_out, float(ctx.params["lambda"])),
                          logits_in)


register(OutlierExposure())
