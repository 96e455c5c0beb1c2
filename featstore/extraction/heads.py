"""The classifier head and the extra heads of training-time methods (DESIGN §2, §6).

The classifier head is the final `nn.Linear` of a model in module order (or the one named by
`--feature-layer`): its input is the stored feature, its weight and bias the stored head, its
output the stored logits (`find_head`).

A training-time method wraps a backbone whose final `nn.Linear` is the classifier. That Linear
stays the head featstore hooks at extraction, so logits == features @ W.T + b holds for every
method. The method's extra heads are modules of the wrapper with fixed names, each a function
of the penultimate feature (the head's input):

    confidence_head   nn.Linear(D, 1): the confidence logit; c = sigmoid(.)   (ConfBranch)
    godin_g           Linear(D, 1) -> BatchNorm1d(1) -> Sigmoid: g(x) in (0, 1) (G-ODIN)
    head2             nn.Linear(D, C): the second classifier                   (MCD)

MC-Dropout wraps without an extra head: dropout(p) on the head's input (`DropoutNet`).
`find_head` skips Linear layers inside modules with these names, and extraction
(`extra_head_outputs`) stores their outputs as `extra/confidence` (N,), `extra/godin_g` (N,),
`extra/godin_h` (N, C) (= the logits: G-ODIN's h is the hooked head) and `extra/head2_logits`
(N, C). Any model with modules of these names gets the extras, whether it was trained by
featstore or not.

`METHOD_NETS` is the one map from a training method's name to the network it trains around a
backbone: the training methods (`featstore.training.methods`) build their networks with it, and
`wrap_for_checkpoint` rebuilds the same network when a `featstore train` checkpoint is loaded
for extraction, so loading a model never needs the training code. This module sits in the
models layer (tests/test_layers.py): it imports nothing of featstore but the errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from featstore.errors import UsageError

EXTRA_HEADS = ("confidence_head", "godin_g", "head2")
#: MC-Dropout's default dropout probability on the head's input
DEFAULT_DROPOUT_P = 0.5


def article(word: str) -> str:
    """'a' or 'an' before `word` (by its first letter)."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def find_head(module: nn.Module, feature_layer: str | None = None) -> tuple[str, nn.Linear]:
    """The classifier head: the named Linear, or the last nn.Linear in module order that is not
    inside an extra head of a training-time method (`confidence_head`, `godin_g`, `head2`)."""
    named = dict(module.named_modules())
    if feature_layer is not None:
        if feature_layer not in named:
            linears = [n for n, m in named.items() if isinstance(m, nn.Linear)]
            raise UsageError(
                f"no such module (nn.Linear layers: {', '.join(linears) or 'none'})",
                param="feature_layer", value=feature_layer)
        layer = named[feature_layer]
        if not isinstance(layer, nn.Linear):
            raise UsageError(
                f"is {article(type(layer).__name__)} {type(layer).__name__}, expected the "
                "nn.Linear whose input is the penultimate feature", param="feature_layer",
                value=feature_layer)
        return feature_layer, layer
    linears = [(n, m) for n, m in named.items() if isinstance(m, nn.Linear)
               and not set(n.split(".")) & set(EXTRA_HEADS)]
    if not linears:
        raise UsageError(
            f"model {type(module).__name__} has no nn.Linear classifier head (e.g. a 1x1-conv "
            "classifier)", change={"feature_layer": "LAYER"},
            effect="naming the layer whose output is the feature (e.g. the pooling before the "
                   "classifier): featstore then stores its output and the model's own logits, "
                   "with no head (W, b)")
    return linears[-1]


class MethodNet(nn.Module):
    """A backbone plus extra heads on its penultimate feature.

    `forward(x)` returns the backbone's output, i.e. the classifier head's logits (what
    post-hoc scorers see). `outputs(x)` returns a dict with `logits`, `features` (the head's
    input, captured by a forward hook) and the method's extra outputs (`extra_outputs`)."""

    def __init__(self, backbone: nn.Module, head_layer: str | None = None):
        super().__init__()
        self.backbone = backbone
        name, head = find_head(backbone, head_layer)
        self.head_layer = name
        self.num_classes = int(head.out_features)
        self.feature_dim = int(head.in_features)
        self._features: torch.Tensor | None = None
        head.register_forward_hook(self._capture)

    @property
    def head(self) -> nn.Linear:
        """The classifier head (the backbone's final Linear)."""
        return cast(nn.Linear, self.backbone.get_submodule(self.head_layer))

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


class ConfBranchNet(MethodNet):
    """Backbone + `confidence_head` (Linear(D, 1) -> confidence logit)."""

    def __init__(self, backbone: nn.Module, head_layer: str | None = None):
        super().__init__(backbone, head_layer)
        self.confidence_head = nn.Linear(self.feature_dim, 1)

    def extra_outputs(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"confidence_logit": self.confidence_head(features).squeeze(1)}


class GodinNet(MethodNet):
    """Backbone (h = its final Linear) + `godin_g` = sigmoid(BN(Linear(D, 1)))."""

    def __init__(self, backbone: nn.Module, head_layer: str | None = None):
        super().__init__(backbone, head_layer)
        self.godin_g = nn.Sequential(nn.Linear(self.feature_dim, 1), nn.BatchNorm1d(1),
                                     nn.Sigmoid())

    def extra_outputs(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"godin_g": self.godin_g(features).squeeze(1)}


class MCDNet(MethodNet):
    """Backbone (head 1 = its final Linear) + `head2` = Linear(D, C)."""

    def __init__(self, backbone: nn.Module, head_layer: str | None = None):
        super().__init__(backbone, head_layer)
        self.head2 = nn.Linear(self.feature_dim, self.num_classes)

    def extra_outputs(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"head2_logits": self.head2(features)}


class DropoutNet(MethodNet):
    """Backbone with dropout(p) on its head's input."""

    def __init__(self, backbone: nn.Module, p: float = DEFAULT_DROPOUT_P,
                 head_layer: str | None = None):
        super().__init__(backbone, head_layer)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"mcdropout: p must lie in [0, 1) (got {p!r})")
        self.head_dropout = nn.Dropout(p)
        self.head.register_forward_pre_hook(self._drop)

    def _drop(self, module: nn.Module, inputs: tuple) -> tuple:
        return (self.head_dropout(inputs[0]), *inputs[1:])


def _backbone_unchanged(backbone: nn.Module, params: dict[str, Any]) -> nn.Module:
    """Methods that change the loss or the data only (ce, logitnorm, oe) train the backbone
    as it is."""
    return backbone


#: training method name -> the network it trains around a backbone, built from the method's
#: resolved parameters. Every training method is listed (tests/test_training_methods.py checks
#: the names against the training registry), so a checkpoint naming any other method is refused
#: rather than loaded into a network it was not trained as.
METHOD_NETS: dict[str, Callable[[nn.Module, dict[str, Any]], nn.Module]] = {
    "ce": _backbone_unchanged,
    "confbranch": lambda backbone, params: ConfBranchNet(backbone),
    "godin": lambda backbone, params: GodinNet(backbone),
    "logitnorm": _backbone_unchanged,
    "mcd": lambda backbone, params: MCDNet(backbone),
    "mcdropout": lambda backbone, params: DropoutNet(
        backbone, float(params.get("p", DEFAULT_DROPOUT_P))),
    "oe": _backbone_unchanged,
}


def method_net(method: str, backbone: nn.Module, params: dict[str, Any]) -> nn.Module:
    """The network training method `method` trains around `backbone` (`METHOD_NETS`);
    UsageError naming the valid methods for any other name."""
    build = METHOD_NETS.get(method)
    if build is None:
        raise UsageError(f"unknown training method {method!r} "
                         f"(valid: {', '.join(sorted(METHOD_NETS))})")
    return build(backbone, params)


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
    config = obj.get("config")
    config = config if isinstance(config, dict) else {}
    params = config.get("method_params")
    params = params if isinstance(params, dict) else {}
    num_classes = obj.get("num_classes")
    return {"method": obj["method"], "params": dict(params),
            "num_classes": int(num_classes) if isinstance(num_classes, int) else None}


def wrap_for_checkpoint(module: nn.Module, info: dict[str, Any]) -> nn.Module:
    """The network a training method built around `module` (extra heads, dropout), so that the
    checkpoint's state dict (`checkpoint_method(...)` = `info`) loads strictly; unchanged for
    methods that do not wrap. The checkpoint records the method's resolved parameters."""
    return method_net(info["method"], module, info["params"])
