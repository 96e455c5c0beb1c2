"""What extraction records: the model's own output as the logits, the hooked layer's input or
output as the feature (DESIGN §6).

- `model_logits(output)`: the logits in a forward output: the tensor itself, the first tensor
  of a tuple / list, a dict's `"logits"` or an object's `.logits` (HuggingFace-style outputs).
- `LayerHook`: a forward hook on the head Linear (its input is the feature, its output the
  head's logits) or, without a head, on the feature layer (its input when it is an nn.Linear,
  else its output; a 4-D (N, C, H, W) output is average-pooled to (N, C)). `take(output)`
  returns (features, logits) with the logits taken from the forward output, and with a head
  checks, on every batch, that the head's output IS that output (max |difference| <=
  `HEAD_RTOL` x max(1, max |logit|)); otherwise a one-line FeatstoreError naming the layer and
  the options, never logits that are not the model's.
- `resolve_layers(loaded, crop, device)`: before the store is created, one forward pass on a
  seeded random batch with every candidate Linear hooked; the head is the Linear whose output
  is the model's output (the one named by `--feature-layer` must be it; by default the last
  such Linear called, which need not be the last one defined). Without a head it sets C and D
  from the probe's logits and features.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

from featstore.errors import FeatstoreError
from featstore.extraction.heads import EXTRA_HEADS
from featstore.extraction.models import LoadedModel

#: the head's output and the forward output agree to this fraction of max(1, max |logit|)
#: (they are the same tensor when the head is the model's last operation)
HEAD_RTOL = 1e-4
#: rows of the seeded random probe batch of `resolve_layers`
PROBE_ROWS = 2


def model_logits(output: Any) -> torch.Tensor:
    """The logits in a model's forward output (module docstring); FeatstoreError otherwise."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping) and isinstance(output.get("logits"), torch.Tensor):
        return output["logits"]
    if isinstance(getattr(output, "logits", None), torch.Tensor):
        return output.logits
    if isinstance(output, tuple | list):
        first = next((t for t in output if isinstance(t, torch.Tensor)), None)
        if first is not None:
            return first
    raise FeatstoreError(f"the model's forward output is {type(output).__name__}; expected a "
                         "logits tensor, a tuple starting with one, or an object with .logits")


def _pooled(tensor: torch.Tensor, layer: str) -> torch.Tensor:
    if tensor.ndim == 4:
        return tensor.mean(dim=(2, 3))
    if tensor.ndim != 2:
        raise FeatstoreError(f"feature layer {layer!r} gives shape {tuple(tensor.shape)}; "
                             "expected (batch, D) or a (batch, C, H, W) map (average-pooled): "
                             "name another layer with --feature-layer")
    return tensor


def _gap(head: torch.Tensor, logits: torch.Tensor) -> float | None:
    """max |head - logits| relative to max(1, max |logits|); None when the shapes differ."""
    if head.shape != logits.shape:
        return None
    scale = max(1.0, float(logits.detach().float().abs().max()))
    return float((head.detach().float() - logits.detach().float()).abs().max()) / scale


def linear_names(module: nn.Module) -> list[str]:
    """The candidate heads: nn.Linear layers not inside a training method's extra head."""
    return [n for n, m in module.named_modules() if isinstance(m, nn.Linear)
            and not set(n.split(".")) & set(EXTRA_HEADS)]


def mismatch_error(loaded: LoadedModel, logits: torch.Tensor, head_out: torch.Tensor | None,
                   where: str) -> FeatstoreError:
    """One line: the hooked Linear does not give the model's output, and what to do."""
    name = loaded.head_name
    if head_out is None:
        detail = "is not called in the forward pass"
    elif head_out.shape != logits.shape:
        detail = f"gives {tuple(head_out.shape)}, the model outputs {tuple(logits.shape)}"
    else:
        detail = f"differs from the model's output by {_gap(head_out, logits):.3g} (relative)"
    layers = ", ".join(f"{n} ({m.in_features}->{m.out_features})"
                       for n in linear_names(loaded.module)
                       for m in [loaded.module.get_submodule(n)]) or "none"
    return FeatstoreError(
        f"{where}: head Linear {name!r} {detail}, so its logits are not the model's "
        f"(Linear layers: {layers}); name the Linear whose output the model returns with "
        "--feature-layer, or keep the model's own logits without a head (W, b): "
        "--feature-layer LAYER --no-head")


def run_model(loaded: LoadedModel, images: torch.Tensor, where: str) -> Any:
    """`loaded.module(images)`; an exception raised by the user's network is a FeatstoreError
    naming `where`, the model, the batch shape and the exception's first line (never
    "unexpected")."""
    try:
        return loaded.module(images)
    except Exception as exc:  # the user's code
        name = loaded.provenance.get("name", "the model")
        text = str(exc).strip()
        raise FeatstoreError(f"{where}: model {name!r} on a batch of shape "
                             f"{tuple(images.shape)} raised {type(exc).__name__}: "
                             f"{text.splitlines()[0] if text else ''}") from exc


def check_rows(feats: torch.Tensor, images: torch.Tensor, loaded: LoadedModel,
               where: str) -> None:
    """FeatstoreError unless the hooked layer gave one row per image."""
    if feats.shape[0] != images.shape[0]:
        raise FeatstoreError(f"{where}: model {loaded.provenance.get('name', 'the model')!r} "
                             f"gave its feature layer {feats.shape[0]} rows for "
                             f"{images.shape[0]} images; it must see one row per image (name "
                             "another layer with --feature-layer)")


class LayerHook:
    """Forward hook on the hooked layer; `take(output)` -> (features, logits) (module doc)."""

    def __init__(self, loaded: LoadedModel):
        self.loaded = loaded
        layer = loaded.feature_module
        self.takes_input = isinstance(layer, nn.Linear)
        self.features: torch.Tensor | None = None
        self.head_out: torch.Tensor | None = None
        self.handle = layer.register_forward_hook(self._hook)
        self.where = "extract"

    def _hook(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        self.features = inputs[0] if self.takes_input else output
        self.head_out = output if self.loaded.head is not None else None

    def take(self, output: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(features, logits) of the forward pass that returned `output`."""
        logits = model_logits(output)
        feats, head_out = self.features, self.head_out
        self.features = self.head_out = None
        if self.loaded.head is not None:
            gap = _gap(head_out, logits) if head_out is not None else None
            if gap is None or gap > HEAD_RTOL:
                raise mismatch_error(self.loaded, logits, head_out, self.where)
        if feats is None:
            raise FeatstoreError(f"{self.where}: feature layer {self.loaded.feature_name!r} was "
                                 "not called during the forward pass; name another with "
                                 "--feature-layer")
        feats = _pooled(feats, self.loaded.feature_name)
        if logits.ndim != 2 or logits.shape[0] != feats.shape[0]:
            raise FeatstoreError(f"{self.where}: the model's output has shape "
                                 f"{tuple(logits.shape)}; expected (batch, classes)")
        return feats, logits

    def close(self) -> None:
        self.handle.remove()


def _probe_batch(crop: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(PROBE_ROWS, 3, crop, crop, generator=gen).to(device)


def resolve_layers(loaded: LoadedModel, crop: int, device: torch.device,
                   explicit: bool) -> None:
    """Check (and with `explicit` False, choose) the head on a probe batch; set C and D
    without a head (module docstring). FeatstoreError naming the layer."""
    images = _probe_batch(crop, device)
    if loaded.head is None:
        hook = LayerHook(loaded)
        hook.where = "probe"
        try:
            with torch.inference_mode():
                feats, logits = hook.take(run_model(loaded, images, "probe"))
        finally:
            hook.close()
        loaded.num_classes, loaded.feature_dim = int(logits.shape[1]), int(feats.shape[1])
        return
    outs: dict[str, torch.Tensor] = {}
    names = linear_names(loaded.module)
    if loaded.head_name not in names:
        names.append(str(loaded.head_name))

    def record(name: str) -> Any:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            outs.pop(name, None)
            outs[name] = output  # re-inserted: dict order is the order of the last calls
        return hook

    handles = [loaded.module.get_submodule(n).register_forward_hook(record(n)) for n in names]
    try:
        with torch.inference_mode():
            logits = model_logits(run_model(loaded, images, "probe"))
    finally:
        for h in handles:
            h.remove()
    matches = [n for n, o in outs.items() if isinstance(o, torch.Tensor)
               and (gap := _gap(o, logits)) is not None and gap <= HEAD_RTOL]
    if loaded.head_name in matches:
        return
    if matches and not explicit:
        name = matches[-1]
        # a Linear: `names` are the Linear layers (the recorded head matched no earlier)
        loaded.set_head(name, cast(nn.Linear, loaded.module.get_submodule(name)))
        return
    raise mismatch_error(loaded, logits, outs.get(str(loaded.head_name)),
                         f"model {loaded.provenance.get('architecture', '?')}")


def head_arrays(loaded: LoadedModel) -> tuple[Any, Any] | None:
    """(W, b) of the head as float32 NumPy arrays (b = 0 for a Linear without bias); None
    without a head."""
    head = loaded.head
    if head is None:
        return None
    weight = head.weight.detach().cpu().float().numpy()
    bias = (head.bias.detach().cpu().float().numpy() if head.bias is not None
            else torch.zeros(head.out_features).numpy())
    return weight, bias


__all__ = ["HEAD_RTOL", "LayerHook", "head_arrays", "linear_names",
           "model_logits", "resolve_layers"]
