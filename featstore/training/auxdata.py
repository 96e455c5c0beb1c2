"""Auxiliary (unlabelled outlier) data for OE and MCD, named in the benchmark spec.

Convention (DESIGN §2/§7): an auxiliary split is a spec split with role `ood` and
`usage = "train"`, by convention named `ood/aux/<name>`, e.g.

    [[split]]
    name = "ood/aux/skimage"
    usage = "train"
    source = { builtin = "patches", images = ["camera", "coins"], part = "train" }

Evaluation never reads it (it reads OOD splits flagged `test`; sweeps read `val`). A method
uses every such split of the spec, or only the one named by its `aux_split` parameter
(`featstore train --method oe --param aux_split=ood/aux/skimage`). The images go through the
same transform as the ID training data and are held in memory; batches are drawn in a seeded
random order (a fresh permutation each pass).
"""

from __future__ import annotations

from typing import Any

import torch

from featstore.errors import UsageError
from featstore.extraction.datasets import TransformedRows, build_transform, rows_from_source


def aux_split_names(spec: Any, name: str | None = None) -> list[str]:
    """Names of the auxiliary splits to use; UsageError when there is none."""
    candidates = [s.name for s in spec.splits if s.role == "ood" and s.usage == "train"]
    if name is not None:
        if name not in candidates:
            raise UsageError(f"aux_split {name!r} is not an OOD split with usage = \"train\" in "
                             f"the spec (candidates: {', '.join(candidates) or 'none'})")
        return [name]
    if not candidates:
        raise UsageError("this method needs auxiliary outlier data: add a split with role ood "
                         "and usage = \"train\" (e.g. name = \"ood/aux/outliers\") to the spec")
    return candidates


def load_aux_images(spec: Any, transform: dict[str, Any], name: str | None = None
                    ) -> torch.Tensor:
    """(N, 3, crop, crop) float tensor of every auxiliary image, transformed."""
    crop = int(transform["crop"])
    tf = build_transform(transform)
    tensors = []
    for split_name in aux_split_names(spec, name):
        split = next(s for s in spec.splits if s.name == split_name)
        rows = rows_from_source(split.source)
        data = TransformedRows(rows, tf, (3, crop, crop))
        for i in range(len(data)):
            tensor, _, row, error = data[i]
            if error:
                raise UsageError(f"{split_name}: cannot read {rows.ids[row]!r}: {error}")
            tensors.append(tensor)
    if not tensors:
        raise UsageError("the auxiliary outlier splits are empty")
    return torch.stack(tensors)


class AuxSampler:
    """Endless seeded random batches of the auxiliary images."""

    def __init__(self, images: torch.Tensor, generator: torch.Generator):
        self.images = images
        self.generator = generator
        self._order = torch.empty(0, dtype=torch.long)
        self._pos = 0

    def __len__(self) -> int:
        return len(self.images)

    def next(self, batch_size: int) -> torch.Tensor:
        """The next `batch_size` images (fewer only if the set is smaller)."""
        batch_size = min(batch_size, len(self.images))
        if self._pos + batch_size > len(self._order):
            self._order = torch.randperm(len(self.images), generator=self.generator)
            self._pos = 0
        idx = self._order[self._pos:self._pos + batch_size]
        self._pos += batch_size
        return self.images[idx]
