"""pytorch-ood's own on-disk cache (issue 19, decision 1): a pytorch-ood user keeps the arrays
a detector needs as tensors saved with ``torch.save``, one file per (split, field), and its
timed job starts with ``torch.load`` of exactly the tensors it needs (page cache warm, as
featstore's HDF5 reads are).

``write_cache(store, cache_dir)`` writes every split's features, logits and labels of a store
as such files; ``load(cache_dir, split, field)`` reads one back (``weights_only=True``);
``warm_page_cache(paths)`` reads files once so that both sides start from a warm page cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

FIELDS = ("features", "logits", "labels")


def cache_file(cache_dir: str | Path, split: str, field: str) -> Path:
    """The file holding `field` of `split` ("id/test" -> ``id__test.logits.pt``)."""
    return Path(cache_dir) / f"{split.replace('/', '__')}.{field}.pt"


def write_cache(store: Any, cache_dir: str | Path) -> int:
    """torch.save every split's features, logits (float32) and labels (int64) of `store`
    into `cache_dir`; returns the bytes written."""
    import torch

    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    total = 0
    for name in store.splits():
        split = store.split(name)
        for field in FIELDS:
            arr = np.ascontiguousarray(split.read(field))
            path = cache_file(cache_dir, name, field)
            torch.save(torch.from_numpy(arr), path)
            total += path.stat().st_size
    return total


def load(cache_dir: str | Path, split: str, field: str) -> Any:
    """The tensor `field` of `split` from the cache (torch.load, weights_only)."""
    import torch

    return torch.load(cache_file(cache_dir, split, field), weights_only=True)


def warm_page_cache(paths: Iterable[Path]) -> int:
    """Read every regular file under `paths` once (16 MiB blocks); returns the bytes read."""
    total = 0
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            with open(path, "rb") as f:
                while block := f.read(16 << 20):
                    total += len(block)
    return total
