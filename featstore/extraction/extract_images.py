"""Features and logits of loose images (paths, folders, image lists) with a loaded model,
computed exactly as `featstore extract` computes a split's: the same decode
(`datasets.TransformedRows`: PIL, RGB), the same transform (`datasets.build_transform` of the
store's recorded [transform]), the same forward under `torch.inference_mode()` with the hook
of extraction (`outputs.LayerHook`: the hooked layer gives the feature, the model's own forward
output the logits, checked against the head; `outputs.resolve_layers` checks the layers
first), batch by batch in file order, float32 on the CPU.

Inputs, in the order given: an image file (by its suffix, `datasets.IMAGE_EXTENSIONS`); a
folder (its images as `featstore extract` reads an ImageFolder: class sub-folders sorted, then
files sorted; or a flat folder's files sorted); any other file is an image list (`path label`,
`path`, or FACETS lines; paths relative to the list's folder). A row is named by its path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from featstore.errors import InputError, UsageError
from featstore.extraction.datasets import (
    IMAGE_EXTENSIONS,
    TRANSFORM_ERROR,
    RowSource,
    TransformedRows,
    _open_image,
    build_transform,
    imagefolder_files,
    parse_image_list,
)
from featstore.extraction.extract import check_transform
from featstore.extraction.models import LoadedModel
from featstore.extraction.outputs import LayerHook, resolve_layers


def image_paths(inputs: str | Path | Sequence[str | Path]) -> list[Path]:
    """The image files named by `inputs` (module docstring), in order; InputError naming a
    missing path, an empty folder or a bad list line."""
    items = [inputs] if isinstance(inputs, str | Path) else list(inputs)
    if not items:
        raise UsageError("no images given: name image files, folders or image-list files")
    paths: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            paths += imagefolder_files(str(path))[0]  # real names (ids escape non-UTF-8)
        elif path.is_file() and path.suffix.lower() in IMAGE_EXTENSIONS:
            paths.append(path)
        elif path.is_file():
            paths += [path.parent / rel for rel, _ in parse_image_list(str(path))]
        else:
            raise InputError(f"image input {str(path)!r}: no such file or folder")
    return paths


def image_outputs(loaded: LoadedModel, transform: dict[str, Any], paths: Sequence[Path], *,
                  device: torch.device, batch_size: int = 128, num_workers: int = 0,
                  amp: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(features (N, D) float32, logits (N, C) float32) of the images at `paths`, as
    extraction computes them (module docstring); an unreadable image is an InputError naming
    it (nothing is skipped)."""
    if batch_size < 1:
        raise UsageError("must be >= 1", param="batch_size", value=batch_size)
    check_transform(transform)
    crop = int(transform["crop"])
    ids = [str(p) for p in paths]
    rows = RowSource(ids, np.full(len(ids), -1), lambda i: _open_image(Path(ids[i])),
                     {"images": len(ids)})
    loader = DataLoader(TransformedRows(rows, build_transform(transform), (3, crop, crop)),
                        batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=device.type == "cuda")
    resolve_layers(loaded, crop, device, explicit=True)
    feats_out: list[np.ndarray] = []
    logits_out: list[np.ndarray] = []
    hook = LayerHook(loaded)
    hook.where = "predict"
    try:
        for images, _, index, errors in loader:
            bad = [k for k, e in enumerate(errors) if e]
            if bad:
                k = bad[0]
                what = "the transform fails on" if errors[k].startswith(TRANSFORM_ERROR) \
                    else "cannot read"
                raise InputError(f"{what} image {ids[int(index[k])]!r} ({errors[k]})")
            images = images.to(device, non_blocking=True)
            if device.type == "cuda":
                images = images.contiguous(memory_format=torch.channels_last)
            with torch.inference_mode(), torch.autocast(device.type, enabled=amp):
                output = loaded.module(images)
            feats, logits = hook.take(output)
            feats_out.append(feats.float().cpu().numpy())
            logits_out.append(logits.float().cpu().numpy())
    finally:
        hook.close()
    dim, classes = loaded.feature_dim, loaded.num_classes
    if not feats_out:
        return np.zeros((0, dim), np.float32), np.zeros((0, classes), np.float32)
    return np.concatenate(feats_out), np.concatenate(logits_out)
