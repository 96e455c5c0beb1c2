"""G-ODIN: decomposed confidence f_i(x) = h_i(x) / g(x).

Paper: Hsu, Shen, Jin & Kira, "Generalized ODIN: Detecting Out-of-distribution Image without
Learning from Out-of-distribution Data", CVPR 2020 (the seed benchmark's eqs. 9-11).

Model (DeConf-I, the inner-product h of eq. 11):

    h_i(x) = w_i^T f_p(x) + b_i          the backbone's final Linear (the head featstore hooks)
    g(x)   = sigmoid(BN(w_g^T f_p(x) + b_g))      module `godin_g`: Linear(D,1), BN1d, Sigmoid
    f_i(x) = h_i(x) / g(x)               the training logits

Loss as implemented: mean over the batch of cross-entropy on f: -log softmax(h / g)_y.

Store convention (DESIGN §2): the stored logits are h (the hooked head's output, so
logits == features @ W.T + b holds), `extra/godin_h` repeats h and `extra/godin_g` holds g;
f = h / g is recomputable from the two. scorers/methods/godin.py scores max_i h_i (default, OpenOOD
v1.5 `godin.yml` `score_func: h`), g, or max softmax(h / g) (the benchmark's eq. 12).

h is trained without weight decay, as OpenOOD v1.5 `godin_trainer.py` does (a separate
optimizer for h without it): `no_weight_decay(model)` names those parameters and
`GODIN.param_groups` gives them an SGD group with weight_decay 0.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from featstore.extraction.heads import GodinNet
from featstore.training.methods import StepResult, TrainContext, TrainMethod, register


def godin_logits(h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """f = h / g, g broadcast over classes."""
    return h / g.reshape(-1, 1)


def godin_loss(h: torch.Tensor, g: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of -log softmax(h / g)_y."""
    return F.cross_entropy(godin_logits(h, g), labels)


def no_weight_decay(model: GodinNet) -> list[str]:
    """Parameter names of h (the head), trained without weight decay as in the paper."""
    return [f"backbone.{model.head_layer}.weight", f"backbone.{model.head_layer}.bias"]


class GODIN(TrainMethod):
    """`featstore train --method godin`: cross-entropy on f = h / g."""

    name = "godin"
    paper = ("Hsu, Shen, Jin & Kira, Generalized ODIN: Detecting Out-of-distribution Image "
             "without Learning from Out-of-distribution Data, CVPR 2020")
    params: dict[str, Any] = {}

    def param_groups(self, model: nn.Module, ctx: TrainContext) -> Any:
        """h (the head) without weight decay, every other parameter with the config's."""
        skip = set(no_weight_decay(cast(GodinNet, model)))
        named = list(model.named_parameters())
        return [{"params": [p for n, p in named if n not in skip]},
                {"params": [p for n, p in named if n in skip], "weight_decay": 0.0}]

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             ctx: TrainContext) -> StepResult:
        out = cast(GodinNet, model).outputs(x)
        f = godin_logits(out["logits"], out["godin_g"])
        return StepResult(F.cross_entropy(f, y), f)


register(GODIN())
