"""The `extra/<name>` arrays written at extraction (DESIGN §2, §6; names in `extra_keys`).

Per batch, after the ordinary forward pass (whose head hook gives features and logits):

- extra heads (always, when the model has them; `featstore.extraction.heads`): `confidence`,
`godin_g`,
  `godin_h`, `head2_logits`, computed from the hooked penultimate features;
- `--feature-maps`: `feature_maps` (N, Cmap, H, W) in the feature dtype, the output of the
  last module that returns a 4-D tensor with H*W > 1 before the head is called (for a CNN, the
  input of the global pooling). The layer is found once per split by a dry forward pass over
  the split's first batch with a forward hook on every module, then captured by one hook;
- `--mc-samples T`: `mc_logits` (T, N, C), T forward passes with every dropout module in train
  mode (BatchNorm stays in eval mode). Each batch's passes run under a private RNG seeded from
  the split name and the batch's first row, so a resumed extraction writes the same values;
- `--odin-grid`: `odin_logits/<T>_<eps>` (N, C), ODIN input perturbation (Liang et al., ICLR
  2018) with autograd, batched: per T one backward pass of sum_i log max_c softmax(f(x_i)/T)_c
  with respect to the input, then per eps one forward pass of

      x' = x - (eps / std_c) * sign(-grad_x log max_c softmax(f(x) / T)_c)

  where std_c is the transform's per-channel std, so eps is a step in [0, 1] pixel units, as
  in the ODIN code (and OpenOOD v1.5 `odin_postprocessor.py`), which divide the signed
  gradient by the normalisation std. f is the model's output (the stored logits).
- `--feature-layers`: `layer_features/<L>`, `layer_featurenorm/<L>` and (`--gram-powers P`)
  `layer_gram/<L>` of the named modules' outputs in the ordinary pass
  (`featstore.extraction.layer_views`);
- `--adascale-o`: `adascale_features/<o>` (N, D), AdaSCALE's perturbation (Regmi et al., 2025;
  OpenOOD v1.5 `adascale_postprocessor.py` `perturb`) with autograd, batched: one backward
  pass of g = grad_x sum_i max_c f(x_i)_c, then per o one forward pass of

      x' = x + ADASCALE_STEP * sign(g) * m,   m = 1 on the floor(o * C*H*W) entries of each
                                              row with the smallest |g| (torch.topk, as
                                              OpenOOD), 0 elsewhere

  in the normalised input space (OpenOOD's step 0.5, not divided by the std), storing the
  penultimate features of x' (the features the head hook takes).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from featstore.errors import UsageError
from featstore.extraction.heads import extra_head_names, extra_head_outputs
from featstore.extraction.layer_views import LayerViews
from featstore.store.extra_keys import (
    FEATURE_MAPS,
    MC_LOGITS,
    ROW_AXES,
    adascale_name,
    odin_name,
)

if TYPE_CHECKING:
    from featstore.extraction.extract import ExtractOptions
    from featstore.extraction.models import LoadedModel
    from featstore.extraction.outputs import LayerHook

_DROPOUT = nn.modules.dropout._DropoutNd
#: AdaSCALE's perturbation step in normalised input units (OpenOOD v1.5 `perturb`: 0.5)
ADASCALE_STEP = 0.5


def find_feature_map_layer(module: nn.Module, head: nn.Module, images: torch.Tensor) -> str:
    """Name of the last module whose output is (N, C, H, W) with H*W > 1 before `head` runs."""
    seen: list[str] = []
    state = {"head_called": False}

    def make(name: str, mod: nn.Module):
        def hook(m: nn.Module, inputs: tuple, output: Any) -> None:
            if state["head_called"]:
                return
            if m is head:
                state["head_called"] = True
            elif (isinstance(output, torch.Tensor) and output.ndim == 4
                  and output.shape[2] * output.shape[3] > 1):
                seen.append(name)
        return hook

    handles = [m.register_forward_hook(make(n, m)) for n, m in module.named_modules() if n]
    try:
        with torch.inference_mode():
            module(images)
    finally:
        for h in handles:
            h.remove()
    if not seen:
        raise UsageError("--feature-maps: no module returns a 4-D (N, C, H, W) map with H*W > 1 "
                         "before the head (TorchScript models cannot be hooked)")
    return seen[-1]


class ExtraOutputs:
    """Computes one split's extras batch by batch (see the module docstring)."""

    def __init__(self, loaded: LoadedModel, opts: ExtractOptions, transform: dict[str, Any],
                 split_name: str):
        self.module: nn.Module = loaded.module
        self.head: nn.Module = loaded.feature_module
        self.split_name = split_name
        self.heads = extra_head_names(self.module)
        self.mc_samples = int(getattr(opts, "mc_samples", 0) or 0)
        self.odin_grid = [(float(t), float(e)) for t, e in (getattr(opts, "odin_grid", ()) or ())]
        self.feature_maps = bool(getattr(opts, "feature_maps", False))
        self.adascale_o = tuple(float(o) for o in (getattr(opts, "adascale_o", ()) or ()))
        self.layers = LayerViews(self.module, tuple(getattr(opts, "feature_layers", ()) or ()),
                                 int(getattr(opts, "gram_powers", 0) or 0))
        self.map_dtype = np.dtype(opts.dtype)
        self.amp = bool(opts.amp)
        self.std = torch.tensor([float(s) for s in transform["std"]]).view(1, -1, 1, 1)
        self.dropouts = [m for m in self.module.modules() if isinstance(m, _DROPOUT)]
        if self.mc_samples and not self.dropouts:
            raise UsageError(f"--mc-samples {self.mc_samples}: the model has no dropout layer; "
                             "train one with `featstore train --method mcdropout`")
        self.map_layer: str | None = None
        self._maps: torch.Tensor | None = None
        self._map_handle: torch.utils.hooks.RemovableHandle | None = None

    @property
    def config(self) -> dict[str, Any]:
        """What this extraction adds to the split's fingerprint (empty: nothing extra)."""
        cfg: dict[str, Any] = {}
        if self.heads:
            cfg["heads"] = self.heads
        if self.mc_samples:
            cfg["mc_samples"] = self.mc_samples
        if self.odin_grid:
            cfg["odin_grid"] = [list(p) for p in self.odin_grid]
        if self.feature_maps:
            cfg["feature_maps"] = True
        cfg.update(self.layers.meta())
        if self.adascale_o:
            cfg["adascale_o"] = list(self.adascale_o)
            cfg["adascale_step"] = ADASCALE_STEP
        return cfg

    @property
    def row_axes(self) -> dict[str, int]:
        return {MC_LOGITS: ROW_AXES[MC_LOGITS]} if self.mc_samples else {}

    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"feature_maps_layer": self.map_layer} if self.map_layer else {}
        meta.update(self.layers.meta())
        if self.adascale_o:
            meta["adascale_step"] = ADASCALE_STEP
        return meta

    # ------------------------------------------------------------------ passes
    def before_forward(self, images: torch.Tensor) -> None:
        """Record the named layers in the coming forward pass; find and hook the feature-map
        layer on the first batch (when requested)."""
        if self.feature_maps and self._map_handle is None:
            self.map_layer = find_feature_map_layer(self.module, self.head, images)
            layer = self.module.get_submodule(self.map_layer)
            self._map_handle = layer.register_forward_hook(self._capture_map)
        if self.layers.names:   # after the feature-map search's dry pass: not recorded
            self.layers.start()

    def _capture_map(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        self._maps = output.detach()

    def compute(self, hook: LayerHook, images: torch.Tensor, features: torch.Tensor,
                logits: torch.Tensor, first_row: int) -> dict[str, np.ndarray]:
        """The batch's extras as NumPy arrays (call right after the ordinary forward pass)."""
        out: dict[str, np.ndarray] = self.layers.take() if self.layers.names else {}
        if self.feature_maps:
            maps, self._maps = self._maps, None
            if maps is None:
                raise UsageError(f"--feature-maps: layer {self.map_layer!r} was not called")
            out[FEATURE_MAPS] = maps.float().cpu().numpy().astype(self.map_dtype)
        if self.heads:
            with torch.inference_mode(), torch.autocast(images.device.type, enabled=self.amp):
                heads = extra_head_outputs(self.module, features, logits)
            out.update({k: v.cpu().numpy() for k, v in heads.items()})
        if self.mc_samples:
            out[MC_LOGITS] = self._mc_logits(hook, images, first_row).cpu().numpy()
        if self.odin_grid:
            out.update({k: v.cpu().numpy() for k, v in self._odin_logits(hook, images).items()})
        if self.adascale_o:
            out.update({k: v.cpu().numpy() for k, v in self._adascale(hook, images).items()})
        return out

    def _seed(self, first_row: int) -> int:
        digest = hashlib.sha256(f"{self.split_name}:{first_row}".encode()).digest()
        return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)

    def _mc_logits(self, hook: LayerHook, images: torch.Tensor, first_row: int) -> torch.Tensor:
        devices = [images.device] if images.device.type == "cuda" else []
        passes = []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self._seed(first_row))
            for m in self.dropouts:
                m.train()
            try:
                for _ in range(self.mc_samples):
                    with torch.inference_mode(), torch.autocast(images.device.type,
                                                                enabled=self.amp):
                        output = self.module(images)
                    passes.append(hook.take(output)[1].float())
            finally:
                for m in self.dropouts:
                    m.eval()
        return torch.stack(passes)

    def _odin_logits(self, hook: LayerHook, images: torch.Tensor) -> dict[str, torch.Tensor]:
        std = self.std.to(images.device)
        out: dict[str, torch.Tensor] = {}
        temps = list(dict.fromkeys(t for t, _ in self.odin_grid))
        for temp in temps:
            x = images.detach().clone().requires_grad_(True)
            with torch.enable_grad():
                logits = hook.take(self.module(x))[1].float()
                objective = torch.log_softmax(logits / temp, dim=1).max(dim=1).values.sum()
                (grad,) = torch.autograd.grad(objective, x)
            step = torch.sign(grad) / std          # -sign(-grad) / std
            for t, eps in self.odin_grid:
                if t != temp:
                    continue
                with torch.inference_mode():
                    output = self.module(images.detach() + eps * step)
                out[odin_name(temp, eps)] = hook.take(output)[1].float()
        return out

    def _adascale(self, hook: LayerHook, images: torch.Tensor) -> dict[str, torch.Tensor]:
        x = images.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            logits = hook.take(self.module(x))[1].float()
            (grad,) = torch.autograd.grad(logits.max(dim=1).values.sum(), x)
        batch, channels, height, width = images.shape
        abs_grad = grad.abs().view(batch, -1)
        step = torch.sign(grad)
        out: dict[str, torch.Tensor] = {}
        for o in self.adascale_o:
            count = int(channels * height * width * o)    # as OpenOOD: int() of the product
            mask = torch.zeros_like(abs_grad)
            if count:
                smallest = torch.topk(abs_grad, count, dim=1, largest=False).indices
                mask.scatter_(1, smallest, 1.0)
            moved = images.detach() + ADASCALE_STEP * step * mask.view_as(images)
            with torch.inference_mode():
                feats, _ = hook.take(self.module(moved))
            out[adascale_name(o)] = feats.float()
        return out

    def close(self) -> None:
        self.layers.close()
        if self._map_handle is not None:
            self._map_handle.remove()
            self._map_handle = None
