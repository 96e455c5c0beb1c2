"""Sanity checks of what a store holds: is it the user's task? (README "Bring your own
classifier"). Run on `id/test` and `id/val` after extraction, by `featstore info` and by the
experiment runner.

Per split with labelled rows (labels >= 0), from the stored logits:

- `accuracy` = mean(argmax_c logits == label), in percent;
- `chance` = the largest class share among the labels (always answering the most frequent
  class), in percent;
- `permuted` = the accuracy of the best one-to-one relabelling of the predictions: the
  assignment maximising the trace of the confusion matrix M[true, predicted] (Hungarian
  algorithm, `scipy.optimize.linear_sum_assignment`), in percent; `moves` lists the first
  classes it maps elsewhere as (label, output) pairs.

A warning is raised (text in `warning`, never an error: the numbers are still computed) when
- accuracy <= chance + `CHANCE_MARGIN` points ("near chance"), or
- permuted >= accuracy + `PERMUTATION_GAIN` points: the model's outputs are in another class
  order than the labels (ImageFolder sorts folder names, a head in numeric order) — the fix
  is the spec's `classes` or `class_map`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from featstore.store.interfaces import StoreLike

#: accuracy within this many points above chance is "near chance"
CHANCE_MARGIN = 5.0
#: a relabelling that gains this many points means the class order is likely wrong
PERMUTATION_GAIN = 20.0
#: rows read per chunk
CHUNK_ROWS = 65536
SPLITS = ("id/test", "id/val")


def confusion(store: StoreLike, name: str) -> np.ndarray:
    """M[true, predicted] over the split's labelled rows, read in chunks, (C, C) int64."""
    split = store.split(name)
    c = int(store.manifest["num_classes"])
    m = np.zeros((c, c), dtype=np.int64)
    for start in range(0, split.num_rows, CHUNK_ROWS):
        rows = slice(start, min(start + CHUNK_ROWS, split.num_rows))
        labels = np.asarray(split.read("labels", rows))
        pred = np.asarray(split.read("logits", rows)).argmax(axis=1)
        keep = (labels >= 0) & (labels < c)
        np.add.at(m, (labels[keep], pred[keep]), 1)
    return m


def check_confusion(m: np.ndarray, classes: list[str] | None = None) -> dict[str, Any] | None:
    """The numbers and warning of the module docstring for one confusion matrix; None when no
    row is labelled."""
    n = int(m.sum())
    if n == 0:
        return None
    accuracy = 100.0 * float(np.trace(m)) / n
    chance = 100.0 * float(m.sum(axis=1).max()) / n
    from scipy.optimize import linear_sum_assignment  # lazy: every CLI command imports this module

    rows, cols = linear_sum_assignment(m, maximize=True)
    permuted = 100.0 * float(m[rows, cols].sum()) / n
    name = (lambda i: classes[i]) if classes else str
    moves = [(name(int(r)), name(int(c))) for r, c in zip(rows, cols, strict=True)
             if r != c and m[r, c] > 0][:3]
    warning = None
    if permuted >= accuracy + PERMUTATION_GAIN:
        shown = ", ".join(f"label {a} -> output {b}" for a, b in moves)
        warning = (f"ID accuracy {accuracy:.2f}% but {permuted:.2f}% if the classes were "
                   f"relabelled ({shown}, ...): the labels and the model's outputs are in a "
                   "different class order; set `classes` or `class_map` in the spec")
    elif accuracy <= chance + CHANCE_MARGIN:
        warning = (f"ID accuracy {accuracy:.2f}% is near chance ({chance:.2f}%, the largest "
                   "class): check the model's weights, the [transform] and the labels "
                   "(`classes` / `class_map` in the spec)")
    return {"rows": n, "accuracy": accuracy, "chance": chance, "permuted": permuted,
            "moves": moves, "warning": warning}


def id_checks(store: StoreLike) -> dict[str, dict[str, Any]]:
    """{split: check_confusion(...)} for the store's id/test and id/val with labelled rows."""
    names = getattr(store, "classes", None)  # Store and ArrayStore have class names
    classes = list(names) if names else None
    out: dict[str, dict[str, Any]] = {}
    for name in SPLITS:
        if store.has_split(name) and "logits" in store.split(name).dims:
            result = check_confusion(confusion(store, name), classes)
            if result is not None:
                out[name] = result
    return out


def warnings_of(checks: dict[str, dict[str, Any]]) -> list[str]:
    """`split: warning` lines of `id_checks`."""
    return [f"{name}: {c['warning']}" for name, c in checks.items() if c.get("warning")]


def report_lines(checks: dict[str, dict[str, Any]]) -> list[str]:
    """One line per checked split, `ID accuracy on id/test: 93.33% of 30 rows (chance
    33.33%)`, each followed by its `WARNING: ...` line when it has one (the report's lines)."""
    out: list[str] = []
    for name, c in checks.items():
        out.append(f"ID accuracy on {name}: {c['accuracy']:.2f}% of {c['rows']} rows "
                   f"(chance {c['chance']:.2f}%)")
        if c.get("warning"):
            out.append(f"WARNING: {name}: {c['warning']}")
    return out


__all__ = ["check_confusion", "confusion", "id_checks", "report_lines", "warnings_of"]
