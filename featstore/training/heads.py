"""Model wrappers of the training-time methods and the extra-head convention (DESIGN §2, §6).

A training-time method wraps a backbone whose final `nn.Linear` is the classifier. That Linear
stays the head featstore hooks at extraction (its input is the stored feature, its weight and
bias the stored head, its output the stored logits), so logits == features @ W.T + b holds for
every method. The method's extra heads are modules of the wrapper with fixed names, each a
function of the penultimate feature (the head's input):

    confidence_head   nn.Linear(D, 1): the confidence logit; c = sigmoid(.)   (ConfBranch)
    godin_g           Linear(D, 1) -> BatchNorm1d(1) -> Sigmoid: g(x) in (0, 1) (G-ODIN)
    head2             nn.Linear(D, C): the second classifier                   (MCD)

`featstore.models.find_head` skips Linear layers inside modules with these names, and
extraction (`extra_head_outputs`) stores their outputs as `extra/confidence` (N,),
`extra/godin_g` (N,), `extra/godin_h` (N, C) (= the logits: G-ODIN's h is the hooked head) and
`extra/head2_logits` (N, C). Any model with modules of these names gets the extras, whether it
was trained by featstore or not.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

EXTRA_HEADS = ("confidence_head", "godin_g", "head2")


def _find_head(backbone: nn.Module, head_layer: str | None) -> tuple[str, nn.Linear]:
    from ..models import find_head

    return find_head(backbone, head_layer)


class MethodNet(nn.Module):
    """A backbone plus extra heads on its penultimate feature.

    `forward(x)` returns the backbone's output, i.e. the classifier head's logits (what
    post-hoc scorers see). `outputs(x)` returns a dict with `logits`, `features` (the head's
    input, captured by a forward hook) and the method's extra outputs (`extra_outputs`)."""

    def __init__(self, backbone: nn.Module, head_layer: str | None = None):
        super().__init__()
        self.backbone = backbone
        name, head = _find_head(backbone, head_layer)
        self.head_layer = name
        self.num_classes = int(head.out_features)
        self.feature_dim = int(head.in_features)
        self._features: torch.Tensor | None = None
        head.register_forward_hook(self._capture)

    @property
    def head(self) -> nn.Linear:
        """The classifier head (the backbone's final Linear)."""
        return self.backbone.get_submodule(self.head_layer)

    def _capture(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        self._features = inputs[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def extra_outputs(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """The method's extra heads applied to the features (none in the base class)."""
        return {}

    def outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.backbone(x)
        features, self._features = self._features, None
        if features is None:
            raise RuntimeError(f"head {self.head_layer!r} was not called by the backbone")
        return {"logits": logits, "features": features, **self.extra_outputs(features)}


def extra_head_outputs(module: nn.Module, features: torch.Tensor,
                       logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Extras of the named extra heads of `module` (see the module docstring), float32."""
    out: dict[str, torch.Tensor] = {}
    n = features.shape[0]
    conf = getattr(module, "confidence_head", None)
    if isinstance(conf, nn.Module):
        out["confidence"] = torch.sigmoid(conf(features).float()).reshape(n)
    godin_g = getattr(module, "godin_g", None)
    if isinstance(godin_g, nn.Module):
        out["godin_g"] = godin_g(features).float().reshape(n)
        out["godin_h"] = logits.float()
    head2 = getattr(module, "head2", None)
    if isinstance(head2, nn.Module):
        out["head2_logits"] = head2(features).float()
    return out


def extra_head_names(module: nn.Module) -> list[str]:
    """Names of the extras `extra_head_outputs` writes for this model, sorted."""
    names = []
    if isinstance(getattr(module, "confidence_head", None), nn.Module):
        names.append("confidence")
    if isinstance(getattr(module, "godin_g", None), nn.Module):
        names += ["godin_g", "godin_h"]
    if isinstance(getattr(module, "head2", None), nn.Module):
        names.append("head2_logits")
    return sorted(names)


def checkpoint_method(obj: Any) -> dict[str, Any] | None:
    """`{"method", "params", "num_classes"}` of a featstore training checkpoint (the trainer's
    format: the object a weights file holds, as loaded with weights_only=True), or None for
    any other weights file."""
    if not (isinstance(obj, dict) and isinstance(obj.get("method"), str)
            and isinstance(obj.get("state_dict"), dict)):
        return None
    config = obj.get("config") if isinstance(obj.get("config"), dict) else {}
    params = config.get("method_params") if isinstance(config.get("method_params"), dict) else {}
    num_classes = obj.get("num_classes")
    return {"method": obj["method"], "params": dict(params),
            "num_classes": int(num_classes) if isinstance(num_classes, int) else None}


def wrap_for_checkpoint(module: nn.Module, info: dict[str, Any]) -> nn.Module:
    """The network a training method built around `module` (extra heads, dropout), so that the
    checkpoint's state dict loads strictly; unchanged for methods that do not wrap."""
    from .methods import TrainContext, get_method

    method = get_method(info["method"])
    ctx = TrainContext(config=None, params=method.resolve_params(info["params"]),
                       device=torch.device("cpu"), generator=torch.Generator(),
                       num_classes=info["num_classes"] or 0)
    return method.wrap(module, ctx)
