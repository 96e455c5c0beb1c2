"""FeatureNorm: the norm of a block's feature map (Yu, Shin, Lee, Jun & Lee, "Block Selection
Method for Using Feature Norm in Out-of-distribution Detection", CVPR 2023).

Reads the view `layer_featurenorm/<layer>` that `featstore extract --feature-layers` writes
(featstore/extraction/layer_views.py). Formula as implemented, with A the (C, H, W) output of
the chosen block for input x:

    score(x) = FeatureNorm(x) = (1/C) sum_c || max(A_c, 0) ||_2        (norm over H x W)

the channel-wise L2 norm of the ReLU'd activation map averaged over channels, as the authors'
code computes it (github.com/gist-ailab/block-selection-for-OOD-detection, `normratio.py`:
`torch.norm(F.relu(x), dim=[2,3], p=2).mean(dim=1)`); ID rows have larger norms, so higher
is more ID. The block is a parameter: `layer` (default null: the last layer named in
`--feature-layers`, which is the deepest when they are listed in network order). The paper
chooses it by NormRatio, the ratio of FeatureNorm on ID training images to that on Jigsaw
puzzles made of them; that needs the network on images a store does not hold, so it is not
done here: name the block (the paper's choice for ResNet-18 is the penultimate block,
`layer4.0` in torchvision naming), or sweep `layer` over the stored blocks on val splits.
No fit split; no other hyperparameter, so the default grid is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.errors import UsageError
from featstore.store.extra_keys import LAYER_FEATURENORM, layer_name
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.layers import parse_layers, require_view, resolve_layers
from ..paper import Paper


class FeatureNorm(Scorer):
    """(1/C) sum_c ||relu(A_c)||_2 of the chosen block's map (higher = more ID)."""

    name = "featurenorm"
    needs = (f"extra:{LAYER_FEATURENORM}",)
    defaults: ClassVar[dict[str, Any]] = {"layer": None}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(title=("Block Selection Method for Using Feature Norm in Out-of-distribution "
                         "Detection"),
                  authors=("Yu", "Shin", "Lee", "Jun", "Lee"), venue="CVPR", year=2023,
                  url="https://arxiv.org/abs/2212.02295",
                  code="https://github.com/gist-ailab/block-selection-for-OOD-detection",
                  note="block chosen by the user, not by NormRatio")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        layers = parse_layers(self.name, "layer", params["layer"])
        if layers is not None and len(layers) != 1:
            raise UsageError(f"scorer {self.name!r}: layer={params['layer']!r} must name one "
                             "layer")

    def _fit(self, store: StoreLike) -> None:
        wanted = parse_layers(self.name, "layer", self.params["layer"])
        split = next((n for n in store.splits()
                      if store.split(n).has_extra(LAYER_FEATURENORM)), "id/test")
        self.layer = resolve_layers(self.name, store, LAYER_FEATURENORM, wanted, split)[-1]
        self.view = layer_name(LAYER_FEATURENORM, self.layer)

    def _score(self, split: SplitLike) -> np.ndarray:
        require_view(self.name, split, self.view)
        out = np.empty(split.num_rows, dtype=np.float64)
        for rows, (norms,) in self.chunks(split, f"extra:{self.view}"):
            out[rows] = norms
        return out
