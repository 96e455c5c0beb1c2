"""`--feature-layers`: views of named modules' outputs, written as split extras at extraction
(DESIGN §2; names in `featstore.store.extra_keys`).

A forward hook on each named module records its output during the ordinary forward pass of a
batch (only that pass: the extra passes of MC-Dropout, ODIN and AdaSCALE are not recorded).
Each module must be called exactly once per forward pass and return a (N, C, H, W) map or a
(N, C) tensor (taken as (N, C, 1, 1)); anything else is a one-line UsageError naming it. From
the output F (float64, per row: C x H*W) the views are

    layer_features/<L>     (N, C)     mean over H*W of F                  (global average pool)
    layer_featurenorm/<L>  (N,)       (1/C) sum_c ||max(F_c, 0)||_2        (FeatureNorm, Yu et
                                      al., CVPR 2023: the channel-wise L2 norm of the ReLU'd
                                      map, averaged over the channels, as the authors'
                                      normratio.py computes it)
    layer_gram/<L>         (N, P, C)  for p = 1..P (`--gram-powers P`, 0: not written):
                                      g_p = sign(r) |r|^(1/p), r = rowsum((F^p) (F^p)^T)
                                      (Sastry & Oore, ICML 2020: the row sums of the p-th order
                                      Gram matrix, as OpenOOD v1.5 `gram_postprocessor.py`
                                      `G_p` computes them; r = F^p (F^p)^T 1 = F^p (sum_c F^p_c),
                                      the same sum in C*H*W instead of C^2*H*W operations)

all stored float32 (the float64 results rounded once).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from featstore.errors import UsageError
from featstore.store.extra_keys import LAYER_FEATURENORM, LAYER_FEATURES, LAYER_GRAM, layer_name


def gram_rowsums(maps: torch.Tensor, powers: int) -> torch.Tensor:
    """(N, C, H*W) float64 -> (N, P, C): sign(r) |r|^(1/p) of the Gram row sums, p = 1..P."""
    out = []
    for p in range(1, powers + 1):
        fp = maps ** p
        rows = torch.matmul(fp, fp.sum(dim=1).unsqueeze(2)).squeeze(2)   # F^p (F^p)^T 1
        out.append(rows.sign() * rows.abs() ** (1.0 / p))
    return torch.stack(out, dim=1)


def layer_arrays(name: str, output: torch.Tensor, gram_powers: int) -> dict[str, np.ndarray]:
    """The views of one module's output for one batch (module docstring)."""
    if output.ndim == 2:
        output = output[:, :, None, None]
    maps = output.detach().to(torch.float64).flatten(2)                   # (N, C, H*W)
    out = {layer_name(LAYER_FEATURES, name): maps.mean(dim=2),
           layer_name(LAYER_FEATURENORM, name): maps.clamp(min=0).norm(dim=2).mean(dim=1)}
    if gram_powers:
        out[layer_name(LAYER_GRAM, name)] = gram_rowsums(maps, gram_powers)
    return {k: v.to(torch.float32).cpu().numpy() for k, v in out.items()}


class LayerViews:
    """Hooks on the named modules; `take()` returns the batch's views (module docstring)."""

    def __init__(self, module: nn.Module, names: tuple[str, ...], gram_powers: int):
        self.names = names
        self.gram_powers = int(gram_powers)
        if self.gram_powers < 0:
            raise UsageError("must be >= 0", param="gram_powers", value=gram_powers)
        if self.gram_powers and not names:
            raise UsageError("--gram-powers: name the modules with --feature-layers")
        known = dict(module.named_modules())
        missing = [n for n in names if n not in known or not n]
        if missing:
            some = ", ".join(n for n in list(known)[1:13] if n) or "none"
            raise UsageError(f"--feature-layers: the model has no module {missing[0]!r} "
                             f"(its modules include: {some}, ...)")
        self.recording = False
        # per module, the views of each recorded call (or why there are none), computed in the
        # hook: a later in-place operation (ReLU(inplace=True), `out += x`) cannot alter them
        self.outputs: dict[str, list[dict[str, np.ndarray] | str]] = {n: [] for n in names}
        self.modules = [known[n] for n in names]
        self.handles: list[Any] = []   # registered by the first `start` (planning needs none)

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if not self.recording:
                return
            if not isinstance(output, torch.Tensor) or output.ndim not in (2, 4):
                shape = (f"shape {tuple(output.shape)}" if isinstance(output, torch.Tensor)
                         else type(output).__name__)
                self.outputs[name].append(f"returns {shape}; expected (batch, C, H, W) or "
                                          "(batch, C)")
            else:
                self.outputs[name].append(layer_arrays(name, output, self.gram_powers))
        return hook

    def start(self) -> None:
        """Record the outputs of the next forward pass (the ordinary one)."""
        if not self.handles:
            self.handles = [m.register_forward_hook(self._hook(n))
                            for n, m in zip(self.names, self.modules, strict=True)]
        for calls in self.outputs.values():
            calls.clear()
        self.recording = True

    def take(self) -> dict[str, np.ndarray]:
        """The views of the recorded pass; stop recording."""
        self.recording = False
        out: dict[str, np.ndarray] = {}
        for name in self.names:
            calls = self.outputs[name]
            if len(calls) != 1:
                raise UsageError(f"--feature-layers: module {name!r} is called {len(calls)} "
                                 "times per forward pass; name a module called once (e.g. a "
                                 "block, not a shared activation)")
            if isinstance(calls[0], str):
                raise UsageError(f"--feature-layers: module {name!r} {calls[0]}")
            out.update(calls[0])
            calls.clear()
        return out

    def meta(self) -> dict[str, Any]:
        return ({"feature_layers": list(self.names), "gram_powers": self.gram_powers}
                if self.names else {})

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
