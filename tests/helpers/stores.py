"""Stores the tests build as real HDF5 files: `structured_arrays` (Gaussian class clusters
through a ReLU, a head aligned with the class means, a near and a far OOD cluster) and the
smaller purpose-built stores several test files share (extras of training methods, graded
OOD difficulty, too few train rows, no id/val)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from featstore import Store
from featstore.store.extra_keys import odin_name


def structured_arrays(seed: int = 0, num_classes: int = 5, dim: int = 32, n_train: int = 600,
                      n_val: int = 200, n_test: int = 300, n_ood: int = 250) -> dict:
    """Arrays for a structured store: head (W, b) and splits {name: {features, labels}}."""
    rng = np.random.default_rng(seed)
    means = np.maximum(rng.normal(0.0, 2.0, size=(num_classes, dim)), 0.0) + 0.2

    def id_rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(n) % num_classes
        x = np.maximum(means[y] + rng.normal(0.0, 0.8, size=(n, dim)), 0.0)
        return x.astype(np.float32), y.astype(np.int64)

    centered = means - means.mean(axis=0)
    weight = (centered / np.linalg.norm(centered, axis=1, keepdims=True)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=num_classes).astype(np.float32)
    near_mean = means.mean(axis=0)
    far_mean = np.maximum(rng.normal(0.0, 1.0, size=dim), 0.0) * 0.5

    def ood_rows(center: np.ndarray, spread: float, n: int) -> np.ndarray:
        return np.maximum(center + rng.normal(0.0, spread, size=(n, dim)), 0.0).astype(np.float32)

    splits = {}
    for name, n in (("id/train", n_train), ("id/val", n_val), ("id/test", n_test)):
        x, y = id_rows(n)
        splits[name] = {"features": x, "labels": y}
    splits["ood/near/blend"] = {"features": ood_rows(near_mean, 1.0, n_ood)}
    splits["ood/near/blend_val"] = {"features": ood_rows(near_mean, 1.0, n_ood // 2),
                                    "usage": "val"}
    splits["ood/far/faint"] = {"features": ood_rows(far_mean, 0.5, n_ood)}
    return {"head": (weight, bias), "splits": splits}


def other_head_logits(arrays: dict) -> dict:
    """The splits of `arrays` with logits 2 (x @ W.T + b): not the head's output."""
    w, b = arrays["head"]
    return {n: {**a, "logits": 2.0 * (a["features"] @ w.T + b)}
            for n, a in arrays["splits"].items()}


def open_built(path: Path, arrays: dict) -> Store:
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


def float16_c12_store(make_store: Any) -> Store:
    """A 12-class float16 store from `make_store` (D=16; the logit scorers' chunked check)."""
    return make_store("c12", dtype="float16", seed=3, num_classes=12, dim=16, n_train=120,
                      n_val=150, n_test=130, n_ood=90)


#: classes and feature dimension of the training-method stores (`extras_store`)
EXTRAS_C, EXTRAS_D = 4, 6


def extras_store(path: Path, rng: np.random.Generator, extras_fn: Any, n_id: int = 40,
                 n_ood: int = 30) -> Store:
    """A store whose splits carry the extras `extras_fn(n, in_distribution)` returns (random
    features from `rng`, random head, C=4, D=6): id/train, id/val, id/test, ood/far/x."""

    def split(n: int, iid: bool) -> dict:
        out = {"features": rng.normal(size=(n, EXTRAS_D)).astype(np.float32),
               "extras": extras_fn(n, iid)}
        if iid:
            out["labels"] = np.arange(n) % EXTRAS_C
        return out

    w = rng.normal(size=(EXTRAS_C, EXTRAS_D)).astype(np.float32)
    b = rng.normal(size=EXTRAS_C).astype(np.float32)
    splits = {"id/train": split(n_id, True), "id/val": split(n_id, True),
              "id/test": split(n_id, True), "ood/far/x": split(n_ood, False)}
    Store.from_arrays(path, head=(w, b), splits=splits)
    return Store.open(path)


def random_logits(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """(n, EXTRAS_C) float32 Gaussian logits times `scale`."""
    return (rng.normal(size=(n, EXTRAS_C)) * scale).astype(np.float32)


#: the generator `odin_extras` draws from (one per session, as the ODIN tests share it)
ODIN_RNG = np.random.default_rng(7)
#: the (T, eps) pairs `odin_extras` stores
ODIN_GRID = [(1000.0, 0.0014), (1000.0, 0.0), (10.0, 0.0028)]


def odin_extras(n, iid):
    """The extras of one split: an ODIN-perturbed logit matrix per (T, eps) of ODIN_GRID
    (`random_logits` from ODIN_RNG, scale 3 for ID rows, 0.5 for OOD rows)."""
    return {odin_name(t, e): random_logits(ODIN_RNG, n, 3.0 if iid else 0.5)
            for t, e in ODIN_GRID}


def few_train_rows_store(path) -> Store:
    """`structured_arrays(seed=0)` with only 12 id/train rows (D = 32)."""
    arrays = structured_arrays(seed=0)
    splits = dict(arrays["splits"])
    splits["id/train"] = {k: v[:12] for k, v in splits["id/train"].items()}
    return Store.from_arrays(path, head=arrays["head"], splits=splits)


def store_without_id_val(path) -> Store:
    """id/train, id/test and an OOD split, no id/val (C=3, D=5)."""
    rng = np.random.default_rng(0)
    c, d = 3, 5
    head = (rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32))
    splits = {
        "id/train": {"features": rng.normal(size=(40, d)), "labels": np.arange(40) % c},
        "id/test": {"features": rng.normal(size=(30, d)), "labels": np.arange(30) % c},
        "ood/far/noise": {"features": rng.normal(size=(20, d))},
    }
    return Store.from_arrays(path, head=head, splits=splits)


def graded_store(path, seed: int = 0, n_ood: int = 8, rows: int = 120, sha: str | None = None):
    """id/* splits of the structured fixture plus `n_ood` OOD splits of graded difficulty
    (blends of ID features and a far cluster), in three groups."""
    arrays = structured_arrays(seed=seed, n_train=300, n_val=150, n_test=240, n_ood=rows)
    splits = {k: v for k, v in arrays["splits"].items() if k.startswith("id/")}
    rng = np.random.default_rng(seed + 100)
    train = arrays["splits"]["id/train"]["features"]
    far = np.maximum(rng.normal(0.0, 1.0, size=train.shape[1]), 0.0)
    for j, alpha in enumerate(np.linspace(0.0, 0.95, n_ood)):
        base = train[rng.integers(0, len(train), rows)]
        x = alpha * base + (1 - alpha) * far + rng.normal(0, 0.8, size=base.shape)
        splits[f"ood/g{j % 3}/s{j}"] = {"features": np.maximum(x, 0).astype(np.float32)}
    prov = {"sha256": sha} if sha else None
    Store.from_arrays(path, head=arrays["head"], splits=splits, provenance=prov)
    return Store.open(path)


def rank_deficient_store(path, rank: int) -> Store:
    """D = 63 features of rank `rank` >= 12: rows in a random `rank`-dim subspace (bias 0, so
    the origin u = 0 and S has that rank), coordinates of std 3 * 0.9^j along its basis
    (so the principal directions come in that order); C = 10, id/train 300 rows, id/val and
    id/test 80 (labels i % C); one val and one test OOD split, 80 rows each, shifted by 1.5
    along directions 6..11 (so ViM's residual sees the shift at small dims only)."""
    rng = np.random.default_rng(rank)
    d, c = 63, 10
    basis = np.linalg.qr(rng.normal(size=(d, rank)))[0]          # (63, rank) orthonormal
    weight = rng.normal(size=(c, d)).astype(np.float32)
    std = 3.0 * 0.9 ** np.arange(rank)

    def rows(n, shift=0.0):
        z = rng.normal(size=(n, rank)) * std
        z[:, 6:12] += shift
        return (z @ basis.T).astype(np.float32)

    splits = {name: {"features": rows(n), "labels": np.arange(n) % c}
              for name, n in (("id/train", 300), ("id/val", 80), ("id/test", 80))}
    splits |= {"ood/near/v": {"features": rows(80, 1.5), "usage": "val"},
               "ood/near/t": {"features": rows(80, 1.5)}}
    return Store.from_arrays(path, head=(weight, np.zeros(c, np.float32)), splits=splits)


def class_direction_store(path: Path, sizes: dict[str, int], seed: int = 0, dim: int = 8,
                          num_classes: int = 3) -> Store:
    """A store whose ID classes are directions in feature space (class k's rows: its centre,
    N(0, I) of length ~sqrt(dim), plus unit noise) read by a head whose rows are the centres,
    and whose OOD rows are noise near no centre (the README quickstart's data: the methods
    separate). `sizes`: split name -> rows; an `ood/...` name ending in `_val` is flagged
    usage "val"."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_classes, dim))
    splits: dict[str, dict] = {}
    for name, n in sizes.items():
        if name.startswith("ood/"):
            splits[name] = {"features": rng.normal(size=(n, dim)).astype(np.float32)}
            if name.endswith("_val"):
                splits[name]["usage"] = "val"
        else:
            y = rng.integers(0, num_classes, n)
            splits[name] = {"features": (centers[y] + rng.normal(size=(n, dim)))
                            .astype(np.float32), "labels": y}
    return Store.from_arrays(path, head=(centers.astype(np.float32),
                                         np.zeros(num_classes, np.float32)), splits=splits)
