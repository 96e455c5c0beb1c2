"""Training methods: one small pluggable unit per method, registered by name.

A method says how to build the network it trains (`wrap`), what one optimisation step's loss
is (`step`), what to do after the step (`after_step`, e.g. a schedule of a loss weight), and
what the checkpoint holds (`export`, `head_layout`). The trainer (`featstore.training.trainer`)
is generic: data, optimiser, schedule, seeding, progress and the checkpoint are its job.

Adding a method = adding a module to this package that calls `register(...)` with an instance
of a `TrainMethod` subclass; every module here is imported on the first lookup, so no list is
kept twice:

    class LogitNorm(TrainMethod):
        name = "logitnorm"
        paper = "Wei et al., ICML 2022"
        params = {"tau": 0.04}

        def step(self, model, x, y, ctx):
            logits = model(x)
            return StepResult(logitnorm_loss(logits, y, ctx.params["tau"]), logits)

    register(LogitNorm())

`ctx` (a `TrainContext`) carries the config, the method's parameters (defaults overridden by
`TrainConfig.method_params`), the device, a seeded `torch.Generator` for the method's own
randomness, the spec, the input transform, the epoch and step counters, and `state`/`metrics`
dicts: `metrics` values are shown next to loss and accuracy in the progress bar.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from featstore.errors import UsageError
from featstore.extraction.heads import EXTRA_HEADS, find_head, method_net


@dataclass
class StepResult:
    """One step's loss (a scalar tensor with grad) and the ID logits used for accuracy."""

    loss: torch.Tensor
    logits: torch.Tensor


@dataclass
class TrainContext:
    """What a method may read (and keep state in) during training."""

    config: Any
    params: dict[str, Any]
    device: torch.device
    generator: torch.Generator
    num_classes: int
    spec: Any = None
    transform: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    step: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class TrainMethod:
    """Base class: plain cross-entropy on an unchanged model. Subclasses override parts."""

    name: str = ""
    paper: str = ""
    #: default hyperparameters; `TrainConfig.method_params` may override these keys only
    params: dict[str, Any] = {}

    def resolve_params(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        """Defaults updated by `overrides`; an unknown key is a UsageError naming valid ones."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.params))
        if unknown:
            valid = ", ".join(sorted(self.params)) or "none"
            raise UsageError(f"method {self.name!r}: unknown parameter {unknown[0]!r} "
                             f"(valid: {valid})")
        for key, value in overrides.items():
            default = self.params[key]
            if value is None:  # None switches a feature off where a method allows it
                ok = True
            elif isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, int | float):  # a number: of its kind, finite
                ok = (isinstance(value, int | float) and not isinstance(value, bool)
                      and math.isfinite(value))
            else:
                ok = True
            if not ok:
                kind = "true or false" if isinstance(default, bool) else "a finite number"
                raise UsageError(f"method {self.name!r}: parameter {key} = {value!r}: "
                                 f"expected {kind}")
        return {**self.params, **overrides}

    def wrap(self, model: nn.Module, ctx: TrainContext) -> nn.Module:
        """The network to train: the method's network around the backbone
        (`featstore.extraction.heads.METHOD_NETS`: extra heads, dropout), else the backbone
        unchanged."""
        return method_net(self.name, model, ctx.params)

    def prepare(self, model: nn.Module, ctx: TrainContext) -> None:
        """Called once before the first step (e.g. to load auxiliary outlier data)."""

    def step(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
             ctx: TrainContext) -> StepResult:
        """Loss of one batch; default: mean cross-entropy -log softmax(f(x))_y."""
        logits = model(x)
        return StepResult(F.cross_entropy(logits, y), logits)

    def after_step(self, model: nn.Module, result: StepResult, ctx: TrainContext) -> None:
        """Called after each optimiser step (e.g. a loss-weight schedule)."""

    def param_groups(self, model: nn.Module, ctx: TrainContext) -> Any:
        """What the optimiser trains: parameters or SGD parameter groups (e.g. a group
        without weight decay); default: every parameter with the config's weight decay."""
        return model.parameters()

    def export(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The state dict saved in the checkpoint (loadable by `featstore extract`)."""
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}

    def head_layout(self, model: nn.Module) -> dict[str, Any]:
        """How the checkpoint's head is laid out: the classifier Linear and any extra heads."""
        name, head = find_head(model)
        extra = [n for n in EXTRA_HEADS
                 if isinstance(getattr(model, n, None), nn.Module)]
        return {"head": name, "in_features": int(head.in_features),
                "out_features": int(head.out_features), "extra_heads": extra}


_REGISTRY: dict[str, TrainMethod] = {}
_DISCOVERED = False


def register(method: TrainMethod) -> TrainMethod:
    """Add a method instance to the registry (called at import time by its module)."""
    if not isinstance(method, TrainMethod) or not method.name:
        raise TypeError("register() takes a TrainMethod instance with a name")
    known = _REGISTRY.get(method.name)
    if known is not None and type(known) is not type(method):
        raise RuntimeError(f"training method {method.name!r} registered twice")
    _REGISTRY[method.name] = method
    return method


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    _DISCOVERED = True


def list_methods() -> list[str]:
    """Names of the registered training methods, sorted."""
    _discover()
    return sorted(_REGISTRY)


def get_method(name: str) -> TrainMethod:
    """The registered method `name`; UsageError naming the valid ones otherwise."""
    _discover()
    if name not in _REGISTRY:
        raise UsageError(f"unknown training method (valid: {', '.join(sorted(_REGISTRY))})",
                         param="method", value=name)
    return _REGISTRY[name]
