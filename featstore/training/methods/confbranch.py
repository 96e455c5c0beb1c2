"""ConfBranch: a learned confidence branch with hints.

Paper: DeVries & Taylor, "Learning Confidence for Out-of-Distribution Detection in Neural
Networks", arXiv:1802.04865, 2018 (the seed benchmark's eqs. 6-7).

Model: the backbone plus `confidence_head = nn.Linear(D, 1)` on the penultimate feature;
c = sigmoid(confidence_head(features)). The backbone's final Linear stays the classifier head.

Loss as implemented (means over the batch), with p = softmax(logits) and both p and c clamped
to [1e-12, 1 - 1e-12] as in the reference code (OpenOOD v1.5 `conf_branch_trainer.py`):

    b     ~ Bernoulli(0.5) per sample (hints are given to half of the batch)
    c'    = b * c + (1 - b)
    p'    = c' * p + (1 - c') * onehot(y)                      (eq. 7)
    L     = -log p'_y + lambda * (-log c)

Budget-adjusted lambda (optional, on by default as in the paper): after each step
lambda <- lambda / 1.01 if budget > L_c else lambda / 0.99, with L_c the batch's mean -log c;
lambda starts at 0.1 and budget beta = 0.3 (the paper's defaults; OpenOOD v1.5
`configs/pipelines/train/train_conf_branch.yml`: `lmbda: 0.1`, `budget: 0.3`, `eps: 1e-12`). With
`budget = None`, lambda stays fixed. Scored by `extra/confidence` (scorers/methods/confbranch.py).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from featstore.extraction.heads import MethodNet
from featstore.training.methods import StepResult, TrainContext, TrainMethod, register

DEFAULT_LAMBDA = 0.1
DEFAULT_BUDGET = 0.3
CLAMP_EPS = 1e-12


def confbranch_loss(logits: torch.Tensor, confidence_logit: torch.Tensor,
                    labels: torch.Tensor, lam: float,
                    hints: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                 torch.Tensor]:
    """(total, task loss -log p'_y, confidence loss -log c), each a batch mean.

    `hints` is the (N,) 0/1 mask b (1: interpolate toward the label with c; 0: c' = 1);
    None gives hints to every sample (b = 1)."""
    p = F.softmax(logits, dim=1).clamp(CLAMP_EPS, 1.0 - CLAMP_EPS)
    c = torch.sigmoid(confidence_logit.reshape(-1)).clamp(CLAMP_EPS, 1.0 - CLAMP_EPS)
    b = torch.ones_like(c) if hints is None else hints.to(c.dtype)
    c_used = (c * b + (1.0 - b)).unsqueeze(1)
    onehot = F.one_hot(labels, num_classes=logits.shape[1]).to(p.dtype)
    p_new = c_used * p + (1.0 - c_used) * onehot
    task = F.nll_loss(torch.log(p_new), labels)
    conf = (-torch.log(c)).mean()
    return task + lam * conf, task, conf


def update_lambda(lam: float, confidence_loss: float, budget: float | None) -> float:
    """The paper's budget rule: lambda / 1.01 when budget > L_c, else lambda / 0.99."""
    if budget is None:
        return lam
    return lam / 1.01 if budget > confidence_loss else lam / 0.99


def sample_hints(n: int, generator: torch.Generator | None = None,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """b ~ Bernoulli(0.5), (n,) float 0/1."""
    return torch.bernoulli(torch.full((n,), 0.5), generator=generator).to(device)


class ConfBranch(TrainMethod):
    """`featstore train --method confbranch [--param lambda=0.1 budget=0.3 hints=true]`.

    `budget = null` keeps lambda fixed; `hints = false` trains without hints (b = 0)."""

    name = "confbranch"
    paper = ("DeVries & Taylor, Learning Confidence for Out-of-Distribution Detection in Neural "
             "Networks, arXiv:1802.04865, 2018")
    params = {"lambda": DEFAULT_LAMBDA, "budget": DEFAULT_BUDGET, "hints": True}

    def prepare(self, model: nn.Module, ctx: TrainContext) -> None:
        ctx.state["lambda"] = float(ctx.params["lambda"])

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             ctx: TrainContext) -> StepResult:
        out = cast(MethodNet, model).outputs(x)
        hints = (sample_hints(len(y), ctx.generator, y.device) if ctx.params["hints"]
                 else torch.zeros(len(y), device=y.device))
        total, _, conf = confbranch_loss(out["logits"], out["confidence_logit"], y,
                                         ctx.state["lambda"], hints)
        ctx.state["confidence_loss"] = float(conf.detach())
        return StepResult(total, out["logits"])

    def after_step(self, model: nn.Module, result: StepResult, ctx: TrainContext) -> None:
        budget = ctx.params["budget"]
        ctx.state["lambda"] = update_lambda(ctx.state["lambda"], ctx.state["confidence_loss"],
                                            None if budget is None else float(budget))
        ctx.metrics["lambda"] = ctx.state["lambda"]
        ctx.metrics["conf_loss"] = ctx.state["confidence_loss"]


register(ConfBranch())
