"""FACETS' confusion graph (Recalcati et al., DSAA 2023, §V "Preliminary analysis", the
graph behind Fig. 4): which class the classifier predicts for the images of each ground-truth
class of the OOD (and other) splits of a store.

The paper's graph: "Each class is depicted as an individual node, and the presence of an edge
from node a to node b indicates that at least one image of class a was predicted as class b
... the weight of each edge in the graph shows the strength of the connection" (§V). As
implemented (`confusion_graph`):

- a row's ground-truth node is `<source>:<class>`: `<source>` is its split's name without the
  role (`ood/t1/sun` -> `t1/sun`); `<class>` is `store.classes[label]` for a labelled row,
  else the parent folder of its id (the image's class folder: `sun/f/fountain/x.jpg` ->
  `sun/f/fountain`... its directory path, the paper's `sun:/f/fountain`);
- its predicted node is `id:<class>`, the ID class of argmax of its logits;
- weight(a -> b) = the number of rows of node a predicted as b.

Pruning, the paper's steps in its order (each optional, all on by default): self-loops
(a labelled ID row predicted as its own class: "accurate classifications"); "edges
originating from Places365 (val)", i.e. from the store's ID splits (`drop_id_sources`: left
are the edges "connecting classes from different datasets"); "associations between classes
sharing identical names" (the ground-truth class's last path component equal to the
predicted class's, compared exactly as the paper does: its Fig. 4 shows that an underscore
or another word order keeps two names apart); edges of weight below `min_weight` ("edges
with low weights ... were also pruned": the paper does not state its threshold; default 1
keeps every edge). Nodes left without an edge are not listed. The paper's "links between
evidently ID samples were discarded" names no rule (its MSP score is not said to enter the
graph), so featstore applies none beyond the steps above.

`top_edges` lists the heaviest edges (the Fig. 4 kind of evidence: one concept under two
names); `graph_tsv` gives the edges as TSV (source, target, weight) for a graph tool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Protocol

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import StoreLike
from featstore.store.textsafe import one_line

ID_PREFIX = "id:"


class ClassedStore(StoreLike, Protocol):
    """A store with class names (`Store`, `ArrayStore`)."""

    @property
    def classes(self) -> list[str]: ...


@dataclass(frozen=True)
class GraphOptions:
    """The pruning steps (module docstring)."""

    drop_self_loops: bool = True
    drop_id_sources: bool = True
    drop_same_names: bool = True
    min_weight: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.min_weight, bool) or not isinstance(self.min_weight, int) \
                or self.min_weight < 1:
            raise UsageError(f"--min-weight {self.min_weight!r}: expected an integer >= 1")


def row_classes(store: ClassedStore, split: str) -> list[str]:
    """Each row's ground-truth class: the store's class of its label, else its id's folder
    path (module docstring)."""
    sp = store.split(split)
    labels = np.asarray(sp.labels)
    names = list(store.classes)
    ids = [str(i) for i in np.asarray(sp.ids)]
    return [names[int(y)] if y >= 0 else (str(PurePosixPath(i).parent).strip("/") or i)
            for y, i in zip(labels, ids, strict=True)]


def source_name(split: str) -> str:
    """`ood/t1/sun` -> `t1/sun` (the split's name without its role)."""
    return split.split("/", 1)[1] if "/" in split else split


def confusion_graph(store: ClassedStore, splits: Sequence[str] | None = None,
                    options: GraphOptions | None = None) -> dict[str, Any]:
    """{"edges": [(source node, target node, weight)] heaviest first (ties by name),
    "nodes": the nodes with an edge, "pruned": {step: edges removed}, "rows": rows read}
    over `splits` (default: every split but id/train and id/val)."""
    opt = options or GraphOptions()
    names = list(store.classes)
    chosen = list(splits) if splits is not None else [
        s for s in store.splits() if s not in ("id/train", "id/val")]
    counts: Counter[tuple[str, str, bool]] = Counter()
    rows = 0
    for split in chosen:
        if not store.has_split(split):
            raise UsageError(f"split {split!r}: not in the store (its splits: "
                             f"{', '.join(store.splits())})")
        pred = np.argmax(np.asarray(store.split(split).logits), axis=1)
        truth = row_classes(store, split)
        is_id = store.split(split).role == "id"
        src = source_name(split)
        for t, p in zip(truth, pred, strict=True):
            counts[(f"{src}:{t}", ID_PREFIX + names[int(p)], is_id)] += 1
        rows += len(truth)
    return prune(counts, opt) | {"rows": rows}


def _same_name(a: str, b: str) -> bool:
    return PurePosixPath(a.split(":", 1)[1]).name == PurePosixPath(b.split(":", 1)[1]).name


def prune(counts: Counter[tuple[str, str, bool]], opt: GraphOptions) -> dict[str, Any]:
    """The graph of `counts` {(source, target, from an ID split): weight} after the pruning
    steps of `opt`, in the paper's order."""
    merged: Counter[tuple[str, str]] = Counter()
    pruned = {"self_loops": 0, "id_sources": 0, "same_names": 0, "low_weight": 0}
    for (a, b, from_id), w in counts.items():
        if opt.drop_self_loops and from_id and a.split(":", 1)[1] == b[len(ID_PREFIX):]:
            pruned["self_loops"] += 1
        elif opt.drop_id_sources and from_id:
            pruned["id_sources"] += 1
        elif opt.drop_same_names and _same_name(a, b):
            pruned["same_names"] += 1
        else:
            merged[(a, b)] += w
    edges = []
    for (a, b), w in merged.items():
        if w < opt.min_weight:
            pruned["low_weight"] += 1
        else:
            edges.append((a, b, int(w)))
    edges.sort(key=lambda e: (-e[2], e[0], e[1]))
    nodes = sorted({e[0] for e in edges} | {e[1] for e in edges})
    return {"edges": edges, "nodes": nodes, "pruned": pruned}


def top_edges(graph: dict[str, Any], k: int = 20) -> list[tuple[str, str, int]]:
    """The `k` heaviest edges."""
    return list(graph["edges"][:k])


def graph_tsv(graph: dict[str, Any]) -> str:
    """The edges as TSV: a header "source, target, weight", one edge a line."""
    return "source\ttarget\tweight\n" + "".join(f"{one_line(a)}\t{one_line(b)}\t{w}\n"
                                                for a, b, w in graph["edges"])


__all__ = ["GraphOptions", "confusion_graph", "graph_tsv", "prune", "row_classes",
           "source_name", "top_edges"]
