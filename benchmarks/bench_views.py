"""Benchmark: the scorers that read the views of `featstore extract --feature-layers` /
`--adascale-o` (mds_ensemble, gram, featurenorm, oodl with `layer`, adascale_a, adascale_l),
fit + score, each beside the fastest older scorer of its family, back to back in one process.

Run ``python -m benchmarks.bench_views [--rows N] [--dim D] [--store PATH] [--repeats R]``.

Without ``--store``: a synthetic store (numpy PCG64, seed 0) written with
``Store.from_arrays`` under /tmp and deleted after: C = 100 classes; id/train N rows, id/val
N/10, id/test N/2, ood/far/x N/10; features (D) are ReLU'd Gaussian class clusters, the head
the class means; views: layer_features of "mid" (D/4) and "last" (D, the features),
layer_featurenorm of both, layer_gram of "mid" (5 orders), adascale_features/0.05 (the
features plus |N(0, 0.05)| noise, more for OOD). With ``--store``: an existing store (the demo
with ``featstore demo --views``); every pair it supports.

Pairs (new vs the fastest older scorer of its family): mds_ensemble (layers mid, last) vs
mds; gram vs mds (class statistics fitted on id/train); featurenorm vs msp (no fit, one
stored array vs the logits); adascale_a, adascale_l vs scale (SCALE, the static percentile
they adapt); oodl layer=mid vs oodl on the features. Time: wall seconds of fit + score of
id/test and every OOD split, min over ``--repeats`` (default 3), both sides in turn, after one
untimed warm-up of each (Numba compiled, imports done); the score cache is not used.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from featstore import Store

PAIRS: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("mds_ensemble", {}, "mds", {}),
    ("gram", {}, "mds", {}),
    ("featurenorm", {}, "msp", {}),
    ("adascale_a", {}, "scale", {}),
    ("adascale_l", {}, "scale", {}),
    ("oodl", {"layer": "mid"}, "oodl", {}),
]


def synthetic(path: Path, rows: int, dim: int, seed: int = 0) -> Store:
    """The synthetic store of the module docstring."""
    rng = np.random.default_rng(seed)
    classes, mid = 100, max(8, dim // 4)
    centres = np.abs(rng.normal(0.0, 1.0, (classes, dim))).astype(np.float32)
    proj = rng.normal(0.0, 1.0 / np.sqrt(dim), (dim, mid)).astype(np.float32)
    weight = (centres - centres.mean(0)).astype(np.float32)
    bias = np.zeros(classes, np.float32)
    splits: dict[str, dict[str, Any]] = {}
    for name, n in (("id/train", rows), ("id/val", rows // 10), ("id/test", rows // 2),
                    ("ood/far/x", rows // 10)):
        iid = name.startswith("id/")
        y = np.arange(n) % classes
        base = centres[y] if iid else np.abs(rng.normal(0.0, 1.0, (n, dim))).astype(np.float32)
        x = np.maximum(base + rng.normal(0.0, 0.5, (n, dim)).astype(np.float32), 0.0)
        m = np.maximum(x @ proj, 0.0)
        g = np.stack([np.sign(r) * np.abs(r) ** (1.0 / p)
                      for p in range(1, 6) for r in [m ** p * (m ** p).sum(1, keepdims=True)]],
                     axis=1).astype(np.float32)
        moved = x + np.abs(rng.normal(0.0, 0.05 if iid else 0.3, (n, dim))).astype(np.float32)
        extras = {"layer_features/mid": m, "layer_features/last": x,
                  "layer_featurenorm/mid": np.linalg.norm(m, axis=1) / np.sqrt(mid),
                  "layer_featurenorm/last": np.linalg.norm(x, axis=1) / np.sqrt(dim),
                  "layer_gram/mid": g, "adascale_features/0.05": moved}
        splits[name] = {"features": x, "extras": extras, **({"labels": y} if iid else {})}
    return Store.from_arrays(path, head=(weight, bias), splits=splits)


def fit_score_seconds(store: Store, name: str, params: dict[str, Any]) -> float:
    from scorers import get_scorer

    start = time.perf_counter()
    scorer = get_scorer(name, **params).fit(store)
    for split in ["id/test", *store.splits(role="ood")]:
        scorer.score(store.split(split))
    return time.perf_counter() - start


def run(store: Store, repeats: int) -> list[dict[str, Any]]:
    from featstore.errors import FeatstoreError

    rows = []
    for new, new_params, old, old_params in PAIRS:
        try:
            fit_score_seconds(store, new, new_params)
            fit_score_seconds(store, old, old_params)
        except FeatstoreError as exc:
            rows.append({"new": new, "skipped": str(exc).splitlines()[0]})
            continue
        times: dict[str, list[float]] = {"new": [], "old": []}
        for _ in range(repeats):
            times["new"].append(fit_score_seconds(store, new, new_params))
            times["old"].append(fit_score_seconds(store, old, old_params))
        t_new, t_old = min(times["new"]), min(times["old"])
        rows.append({"new": new, "new_params": new_params, "old": old, "old_params": old_params,
                     "new_s": t_new, "old_s": t_old, "ratio": t_new / t_old})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--store", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    tmp = None
    try:
        if args.store is not None:
            store = Store.open(args.store)
        else:
            tmp = Path(tempfile.mkdtemp(prefix="bench_views_"))
            store = synthetic(tmp / "store", args.rows, args.dim)
        print("| scorer | s | older scorer | s | ratio |")
        print("|---|---:|---|---:|---:|")
        for row in run(store, args.repeats):
            if "skipped" in row:
                print(f"| {row['new']} | skipped: {row['skipped']} | | | |")
                continue
            new = row["new"] + "".join(f" {k}={v}" for k, v in row["new_params"].items())
            print(f"| {new} | {row['new_s']:.3f} | {row['old']} | {row['old_s']:.3f} | "
                  f"{row['ratio']:.2f} |")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
