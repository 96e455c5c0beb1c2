"""The contract suite's stores: two tiny data sets, as arrays, on which every scorer's needs are
met (`plain`: features, logits, labels, head, id/train, id/val, id/test and one OOD test split;
`extras`: every split extra a training-time method or an extraction flag writes, the
`--feature-layers` and `--adascale-o` views included), written as
real HDF5 stores in float32 and float16 (`contract_stores`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from featstore.store.extra_keys import (
    LAYER_FEATURENORM,
    LAYER_FEATURES,
    LAYER_GRAM,
    adascale_name,
    layer_name,
    odin_name,
)
from featstore.store.store import Store

ID_SPLIT, OOD_SPLIT = "id/test", "ood/far/other"
SCORED = (ID_SPLIT, OOD_SPLIT)
ODIN_PAIRS = ((1000.0, 0.0014), (1000.0, 0.0), (10.0, 0.0028))
LAYERS = ("block1", "block2")
GRAM_POWERS = 5
ADASCALE_O = 0.05


def layer_views(maps: np.ndarray) -> dict[str, np.ndarray]:
    """The `--feature-layers` views of two layers made from (n, C, H, W) maps: `block2` is
    the maps themselves, `block1` their first half of channels, squared (a different map):
    pooled features, FeatureNorm and Gram row sums of orders 1..GRAM_POWERS, by the formulas
    of featstore/extraction/layer_views.py (in NumPy)."""
    out: dict[str, np.ndarray] = {}
    for name, layer in (("block1", maps[:, : maps.shape[1] // 2] ** 2), ("block2", maps)):
        f = layer.reshape(layer.shape[0], layer.shape[1], -1).astype(np.float64)
        grams = []
        for p in range(1, GRAM_POWERS + 1):
            rows = np.einsum("ncs,ns->nc", f ** p, (f ** p).sum(axis=1))
            grams.append(np.sign(rows) * np.abs(rows) ** (1.0 / p))
        out[layer_name(LAYER_FEATURES, name)] = f.mean(axis=2)
        out[layer_name(LAYER_FEATURENORM, name)] = np.sqrt((np.maximum(f, 0) ** 2).sum(2)).mean(1)
        out[layer_name(LAYER_GRAM, name)] = np.stack(grams, axis=1)
    return out


def plain_arrays(seed: int = 0, num_classes: int = 6, dim: int = 48, n_train: int = 600,
                 n_val: int = 120, n_test: int = 150, n_ood: int = 120) -> dict[str, Any]:
    """ID classes live on the first dim - 8 channels (ReLU'd Gaussian clusters, head aligned
    with the centred class means); the OOD rows are active on the last 8 channels only, where
    the head's weights are 0: small, flat logits, features far from every class and outside
    the ID principal space. Every scorer that reads features or logits separates them."""
    rng = np.random.default_rng(seed)
    k = dim - 8
    means = np.zeros((num_classes, dim))
    means[:, :k] = np.maximum(rng.normal(0.0, 2.0, size=(num_classes, k)), 0.0) + 0.3
    centered = means - means.mean(axis=0)
    weight = (centered / np.linalg.norm(centered, axis=1, keepdims=True)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=num_classes).astype(np.float32)
    splits: dict[str, dict[str, Any]] = {}
    for name, n in (("id/train", n_train), ("id/val", n_val), ("id/test", n_test)):
        y = np.arange(n) % num_classes
        x = np.maximum(means[y] + rng.normal(0.0, 0.6, size=(n, dim)), 0.0)
        splits[name] = {"features": x.astype(np.float32), "labels": y}
    ood_mean = np.zeros(dim)
    ood_mean[k:] = 3.0
    x = np.maximum(ood_mean + rng.normal(0.0, 0.5, size=(n_ood, dim)), 0.0)
    splits[OOD_SPLIT] = {"features": x.astype(np.float32)}
    return {"head": (weight, bias), "splits": splits}


def extras_arrays(seed: int = 1, num_classes: int = 4, dim: int = 16, hw: int = 3,
                  n_id: int = 60, n_ood: int = 50) -> dict[str, Any]:
    """Every split extra, built so that ID rows look in-distribution to the method reading it:
    confident, agreeing logits (stored logits, godin_h, head2_logits, the MC passes, the
    ODIN-perturbed logits) with high confidence / g for ID; confident but mutually disagreeing
    ones with low confidence / g for OOD. Feature maps follow RankFeat's premise (an ID map is
    three class-aligned rank-1 terms of comparable strength on disjoint channels and positions;
    an OOD map is one strong rank-1 direction); features are the maps' average pool."""
    rng = np.random.default_rng(seed)
    c, t = num_classes, 4
    means = np.maximum(rng.normal(0.0, 1.5, size=(c, dim)), 0.0) + 0.1
    centered = means - means.mean(axis=0)
    weight = (centered / np.linalg.norm(centered, axis=1, keepdims=True)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=c).astype(np.float32)
    groups, places = np.arange(dim) % 3, np.arange(hw * hw) % 3

    def onehot(y: np.ndarray) -> np.ndarray:
        return np.asarray(4.0 * np.eye(c)[y] + rng.normal(0.0, 0.2, size=(len(y), c)))

    def rows(n: int, iid: bool) -> dict[str, Any]:
        y = np.arange(n) % c
        maps: np.ndarray
        if iid:
            maps = np.zeros((n, dim, hw * hw))
            for g in range(3):
                channel = 3.0 * means[y] * (groups == g) * rng.uniform(0.8, 1.2, (n, dim))
                spatial = (places == g) * rng.uniform(0.5, 1.5, (n, hw * hw))
                maps += channel[:, :, None] * spatial[:, None, :]
        else:
            direction = np.abs(rng.normal(0.0, 1.0, (n, dim)))
            maps = 1.0 * direction[:, :, None] * rng.uniform(0.5, 1.5, (n, hw * hw))[:, None]
        maps += np.abs(rng.normal(0.0, 0.05, size=maps.shape))
        maps = maps.reshape(n, dim, hw, hw).astype(np.float32)
        logits = onehot(y)
        other = (y + 1 + rng.integers(0, c - 1, n)) % c
        mc = np.stack([logits + rng.normal(0.0, 0.2, logits.shape) if iid
                       else onehot((y + k) % c) for k in range(t)])
        extras = {
            "feature_maps": maps,
            "confidence": rng.uniform(0.6, 1.0, n) if iid else rng.uniform(0.0, 0.5, n),
            "godin_h": logits if iid else rng.normal(0.0, 0.5, (n, c)),
            "godin_g": rng.uniform(0.5, 0.95, n) if iid else rng.uniform(0.05, 0.4, n),
            "head2_logits": logits + rng.normal(0.0, 0.1, logits.shape) if iid
            else onehot(other),
            "mc_logits": mc,
            **{odin_name(temp, eps): (1.5 * logits if iid else rng.normal(0.0, 0.5, (n, c)))
               for temp, eps in ODIN_PAIRS},
            **layer_views(maps),
            adascale_name(ADASCALE_O): maps.mean(axis=(2, 3)) * rng.uniform(
                0.95, 1.05, (n, dim)) if iid else maps.mean(axis=(2, 3)) * rng.uniform(
                0.2, 1.8, (n, dim)),
        }
        out: dict[str, Any] = {"features": maps.mean(axis=(2, 3)), "logits": logits,
               "extras": {k: np.asarray(v, dtype=np.float32) for k, v in extras.items()}}
        if iid:
            out["labels"] = y
        return out

    splits = {name: rows(n_id, True) for name in ("id/train", "id/val", "id/test")}
    splits[OOD_SPLIT] = rows(n_ood, False)
    return {"head": (weight, bias), "splits": splits}


BUILDERS: dict[str, Callable[[], dict[str, Any]]] = {"plain": plain_arrays,
                                                     "extras": extras_arrays}


def contract_stores(root: str | Path) -> dict[str, dict[str, Store]]:
    """{dtype: {store name: opened Store}} for float32 and float16, written under `root`."""
    out: dict[str, dict[str, Store]] = {}
    for dtype in ("float32", "float16"):
        out[dtype] = {}
        for name, build in BUILDERS.items():
            arrays = build()
            path = Path(root) / f"{name}_{dtype}"
            Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"], dtype=dtype)
            out[dtype][name] = Store.open(path)
    return out
