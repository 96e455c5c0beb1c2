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
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from featstore.errors import UsageError
from featstore.extraction.heads import extra_head_names, extra_head_outputs
from featstore.store.extra_keys import FEATURE_MAPS, MC_LOGITS, ROW_AXES, odin_name

if TYPE_CHECKING:
    from featstore.extraction.extract import ExtractOptions
    from featstore.extraction.models import LoadedModel
    from featstore.extraction.outputs import LayerHook

_DROPOUT = nn.modules.dropout._DropoutNd


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
        return cfg

    @property
    def row_axes(self) -> dict[str, int]:
        return {MC_LOGITS: ROW_AXES[MC_LOGITS]} if self.mc_samples else {}

    def meta(self) -> dict[str, Any]:
        return {"feature_maps_layer": self.map_layer} if self.map_layer else {}

    # ------------------------------------------------------------------ passes
    def before_forward(self, images: torch.Tensor) -> None:
        """Find and hook the feature-map layer on the first batch (when requested)."""
        if not self.feature_maps or self._map_handle is not None:
            return
        self.map_layer = find_feature_map_layer(self.module, self.head, images)
        layer = self.module.get_submodule(self.map_layer)
        self._map_handle = layer.register_forward_hook(self._capture_map)

    def _capture_map(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        self._maps = output.detach()

    def compute(self, hook: LayerHook, images: torch.Tensor, features: torch.Tensor,
                logits: torch.Tensor, first_row: int) -> dict[str, np.ndarray]:
        """The batch's extras as NumPy arrays (call right after the ordinary forward pass)."""
        out: dict[str, np.ndarray] = {}
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

    def close(self) -> None:
        if self._map_handle is not None:
            self._map_handle.remove()
            self._map_handle = None
