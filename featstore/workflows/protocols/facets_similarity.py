"""FACETS' semantic-similarity analysis of predictions (Recalcati et al., DSAA 2023, §V, Figs.
2-3): how close, in WordNet, the ID class the classifier predicts is to an image's ground-truth
class. "The similarity score between the ground truth class and the predicted class was
computed as the average of the Wu-Palmer and the Path similarity metrics" (§V); Fig. 2
averages it per ground-truth class, Fig. 3 per predicted ID class (its 10 best and worst).

As implemented (`prediction_similarity`): each row of the chosen splits has a ground-truth
class (`facets_graph.row_classes`: its label's class, else its image's folder; looked up in
WordNet by the folder's last component, `sun/f/fountain` -> `fountain`) and a predicted ID
class (argmax of its logits). Class names are resolved to noun synsets by
`wordnet.resolve_classes` (a user mapping, a synset name or wnid, ImageNet's names, then with
`auto_map` the first noun sense); a class resolving to several synsets takes the best pair.
sim(a, b) = (path(a, b) + wup(a, b)) / 2 (`wordnet.synset_similarity`). Rows whose either
class is unmapped are counted and left out, never scored 0. Results: per ground-truth node
(`<source>:<class>`, as the confusion graph's) and per predicted ID class, the mean sim and
the row count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from featstore.workflows.protocols import wordnet as wnp
from featstore.workflows.protocols.facets_graph import ClassedStore, row_classes, source_name


def pair_similarity(a: Sequence[Any], b: Sequence[Any], max_depth: int) -> float:
    """max over the synset pairs of (path + wup) / 2."""
    best = 0.0
    for x in a:
        for y in b:
            s = wnp.synset_similarity(x, y, max_depth)
            best = max(best, (s["path"] + s["wup"]) / 2.0)
    return best


def prediction_similarity(store: ClassedStore, splits: Sequence[str] | None = None,
                          mapping: Mapping[str, Sequence[str]] | None = None,
                          auto_map: bool = False, wn: Any | None = None) -> dict[str, Any]:
    """{"by_truth": {node: {"sim", "rows"}}, "by_predicted": {ID class: {"sim", "rows"}},
    "unmapped": sorted class names, "rows_scored", "rows_skipped"} over `splits` (default:
    every OOD split)."""
    wn = wn or wnp.load_wordnet()
    depth = wnp.noun_max_depth(wn)
    names = list(store.classes)
    chosen = list(splits) if splits is not None else store.splits(role="ood")
    rows: list[tuple[str, str, str]] = []
    for split in chosen:
        pred = np.argmax(np.asarray(store.split(split).logits), axis=1)
        src = source_name(split)
        rows += [(f"{src}:{t}", PurePosixPath(t).name or t, names[int(p)])
                 for t, p in zip(row_classes(store, split), pred, strict=True)]
    lookups = sorted({r[1] for r in rows} | {r[2] for r in rows})
    resolved = wnp.resolve_classes(lookups, mapping, auto_map, wn)
    cache: dict[tuple[str, str], float] = {}
    truth: dict[str, list[float]] = defaultdict(list)
    predicted: dict[str, list[float]] = defaultdict(list)
    skipped = 0
    for node, t, p in rows:
        if t not in resolved.synsets or p not in resolved.synsets:
            skipped += 1
            continue
        if (t, p) not in cache:
            cache[(t, p)] = pair_similarity(resolved.synsets[t], resolved.synsets[p], depth)
        truth[node].append(cache[(t, p)])
        predicted[p].append(cache[(t, p)])

    def summary(d: Mapping[str, list[float]]) -> dict[str, dict[str, float]]:
        return {k: {"sim": float(np.mean(v)), "rows": len(v)} for k, v in sorted(d.items())}

    return {"by_truth": summary(truth), "by_predicted": summary(predicted),
            "unmapped": sorted(resolved.unmapped), "rows_scored": len(rows) - skipped,
            "rows_skipped": skipped}


def best_and_worst(by: Mapping[str, Mapping[str, float]], k: int = 10
                   ) -> tuple[list[str], list[str]]:
    """The `k` classes of highest and of lowest mean similarity (Fig. 3's 10 best / worst;
    ties by name)."""
    order = sorted(by, key=lambda c: (-by[c]["sim"], c))
    return order[:k], sorted(by, key=lambda c: (by[c]["sim"], c))[:k]


__all__ = ["best_and_worst", "pair_similarity", "prediction_similarity"]
