"""A store holding the `--feature-layers` and `--adascale-o` views (DESIGN §2), built from
random feature maps of two layers by NumPy transcriptions of featstore/extraction/
layer_views.py's formulas (the extraction itself is checked against torch in
tests/test_extract_views.py), for the reference tests of mds_ensemble, gram, featurenorm,
oodl's `layer` and adascale_a / adascale_l."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from featstore import Store

LAYERS = ("l1", "l2")
POWERS = 3
ADASCALE_O = 0.05
SPLITS = (("id/train", 120), ("id/val", 60), ("id/test", 40), ("ood/far/x", 40))


def gram_rows(f: np.ndarray, powers: int) -> np.ndarray:
    """(n, C, S) maps -> (n, P, C): sign(r) |r|^(1/p), r = rowsum(F^p (F^p)^T)."""
    out = []
    for p in range(1, powers + 1):
        fp = f ** p
        r = np.einsum("ncs,nds->ncd", fp, fp).sum(axis=2)
        out.append(np.sign(r) * np.abs(r) ** (1.0 / p))
    return np.stack(out, axis=1)


def maps_of(rng: np.random.Generator, y: np.ndarray | None, n: int) -> dict[str, np.ndarray]:
    """Layer maps: l1 (n, 6, 3, 3), l2 (n, 100, 2, 2); ID rows shifted by their class, OOD rows
    by a common offset and more spread."""
    out = {}
    for name, (c, s) in (("l1", (6, 9)), ("l2", (100, 4))):
        base = (1.5 * (np.arange(c)[None, :] % 4 == y[:, None]) if y is not None
                else np.full((n, c), 0.6))
        noise = rng.normal(0.0, 0.5 if y is not None else 1.2, (n, c, s))
        out[name] = base[:, :, None] + noise
    return out


def view_arrays(seed: int = 0) -> dict[str, Any]:
    """head (W, b) and splits with features (l2's pool), labels, and every view."""
    rng = np.random.default_rng(seed)
    weight = rng.normal(0.0, 0.3, (4, 100)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, 4).astype(np.float32)
    splits: dict[str, dict[str, Any]] = {}
    for name, n in SPLITS:
        y = np.arange(n) % 4 if name.startswith("id/") else None
        maps = maps_of(rng, y, n)
        extras: dict[str, np.ndarray] = {}
        for layer, f in maps.items():
            extras[f"layer_features/{layer}"] = f.mean(axis=2)
            extras[f"layer_featurenorm/{layer}"] = np.sqrt(
                (np.maximum(f, 0.0) ** 2).sum(axis=2)).mean(axis=1)
            extras[f"layer_gram/{layer}"] = gram_rows(f, POWERS)
        feats = np.maximum(maps["l2"].mean(axis=2), 0.0) + rng.uniform(0, 1e-3, (n, 100))
        moved = feats + np.abs(rng.normal(0.0, 0.05 if y is not None else 0.4, (n, 100)))
        extras[f"adascale_features/{ADASCALE_O:g}"] = moved
        splits[name] = {"features": feats.astype(np.float32),
                        "extras": {k: v.astype(np.float32) for k, v in extras.items()},
                        "maps": maps}
        if y is not None:
            splits[name]["labels"] = y
    return {"head": (weight, bias), "splits": splits}


def view_store(path: Path, seed: int = 0) -> tuple[Store, dict[str, Any]]:
    """The arrays written as a real HDF5 store (logits = the head's output), and the arrays."""
    arrays = view_arrays(seed)
    splits = {k: {f: v for f, v in s.items() if f != "maps"}
              for k, s in arrays["splits"].items()}
    return Store.from_arrays(path, head=arrays["head"], splits=splits), arrays
