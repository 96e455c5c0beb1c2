"""FACETS' sampling of the candidate images a class assignment (`protocol wordnet` / `tiers`)
writes into its lists and specs: validation and test halves, images per class, balanced ID
and OOD counts. The paper: ../shared/papers/facets-realistic-ood-benchmark-dsaa-2023.md.

- Val / test: "Separate validation and test sets for each setup were established" (line 262),
  every composition table reads "(val/test)" (lines 179, 198, 215, 245): Places365-Standard
  val's "100 labeled images per class" (line 188) give 18,250 = 365 x 50 in each (Table II,
  line 181), ImageNet val's 50 per class give 8,900 = 356 x 25 (Table V, line 249). So each
  candidate class's images are divided in two, `val_fraction` = 0.5 to val, the rest to test.
- Per class: the ImageNet classes a WordNet threshold makes ID enter with 50 images each in
  val and in test, 2,800 = 56 x 50, 4,500 = 90 x 50, 7,000 = 140 x 50 (Table IV, lines 218,
  223, 228); the OODness-tier datasets take no fixed count (SUN397's 46,851 ID images over
  319 classes, Table V, line 248), so `protocol tiers` caps none by default.
- Balance (§IV): SVHN "randomly sampled" "to ensure consistency in sample size" (line 188;
  18,250 / 18,250, Table II line 184), ImageNet OOD by "stratified random sampling" (line 190) to
  18,108 against 18,250 (Table III, lines 201-202), and every WordNet and tier dataset's OOD
  total within 1.5% of its ID total (Table IV lines 219, 224, 229; Table V lines 251, 258).

As implemented (`candidate_parts`): per role (ID-assigned, OOD-assigned), the images of each
class (classes sorted, images in list order) are divided by `divide_val_test` (one
`numpy.random.default_rng(sample_seed)` over the classes in order: per class a permutation,
its first floor(n * val_fraction) rows to val, the rest to test; both parts keep list
order); then each part of the ID-assigned classes is cut to `per_class` images per class by
`featstore.extraction.datasets.sample_rows` (seed `sample_seed`, the extraction rule). This
happens when the lists are written, since the ID-assigned candidates join id/test (id/val)
unlabelled, -1, where a `per_class` key could not count them. `balance = true` and
`balance_seed` go into the spec: extraction cuts the larger of id/test and the OOD test
splits to the smaller's size, an OOD side in its largest split only so the other sources
keep their rows (`balance_id_ood`: uniform over the rows, so stratified by class in
expectation only; val splits are not balanced, as the spec key defines). The totals come
out equal where the paper's differ by up to 1.5% (Tables IV-V), by a rule it does not state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.extraction.datasets import sample_rows

#: images per ID-assigned candidate class in each of val and test (Table IV; module doc)
PAPER_PER_CLASS = 50
#: the share of each class's images that goes to val (the paper's val/test halves)
PAPER_VAL_FRACTION = 0.5


@dataclass(frozen=True)
class Sampling:
    """What written lists and specs sample (module docstring): `val_fraction` of each class's
    images to val (0: no val lists), `per_class` images per ID-assigned class in each part
    (None: all), drawn with `sample_seed`; `balance` (with `balance_seed`) written into the
    spec for extraction."""

    per_class: int | None = PAPER_PER_CLASS
    balance: bool = True
    sample_seed: int = 0
    balance_seed: int = 0
    val_fraction: float = PAPER_VAL_FRACTION

    def __post_init__(self) -> None:
        pc = self.per_class
        if pc is not None and (isinstance(pc, bool) or not isinstance(pc, int) or pc < 1):
            raise UsageError(f"--per-class {pc!r}: expected an integer >= 1 (0: every image)")
        if not 0.0 <= self.val_fraction < 1.0:
            raise UsageError(f"--val-fraction {self.val_fraction!r}: expected a number in "
                             "[0, 1) (0: no val lists)")

    @classmethod
    def of(cls, per_class: int, balance: bool, seed: int, val_fraction: float) -> Sampling:
        """From the command's options: `per_class` 0 = every image, one seed for both."""
        if per_class < 0:
            raise UsageError(f"--per-class {per_class}: expected an integer >= 0 (0: every "
                             "image)")
        return cls(per_class or None, balance, seed, seed, val_fraction)

    def to_json(self) -> dict[str, Any]:
        return {"per_class": self.per_class, "sample_seed": self.sample_seed,
                "balance": self.balance, "balance_seed": self.balance_seed,
                "val_fraction": self.val_fraction}

    def describe(self) -> str:
        """One line for the written spec's header."""
        drawn = (f"{self.per_class} images per ID-assigned candidate class in each part"
                 if self.per_class is not None else "every image of the ID-assigned classes")
        return (f"sampling: {self.val_fraction:g} of each class's images to val, the rest to "
                f"test; {drawn} (sample_seed {self.sample_seed}); balance = "
                f"{str(self.balance).lower()} (ID vs OOD test rows, at extraction)")


def divide_val_test(labels: np.ndarray, fraction: float, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(val rows, test rows), each sorted: per class label (ascending), the first
    floor(n * fraction) rows of a permutation drawn from one `default_rng(seed)` go to val."""
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    val = [rng.permutation(rows)[:int(len(rows) * fraction)]
           for rows in (np.flatnonzero(y == c) for c in np.unique(y))]
    val_rows = np.sort(np.concatenate(val)) if val else np.zeros(0, dtype=np.int64)
    return val_rows, np.setdiff1d(np.arange(len(y)), val_rows)


def candidate_parts(assignment: Mapping[str, str], images: Mapping[str, Sequence[str]],
                    sampling: Sampling) -> dict[str, dict[str, list[str]]]:
    """{"val" | "test": {"id" | "ood": [image paths]}} (module docstring's rule)."""
    parts: dict[str, dict[str, list[str]]] = {"val": {}, "test": {}}
    for role in ("id", "ood"):
        classes = [c for c, a in sorted(assignment.items()) if a == role]
        paths = [p for c in classes for p in images.get(c, [])]
        labels = np.concatenate([np.full(len(images.get(c, [])), i)
                                 for i, c in enumerate(classes)] or [np.zeros(0, int)])
        for part, rows in zip(("val", "test"), divide_val_test(labels, sampling.val_fraction,
                                                              sampling.sample_seed),
                              strict=True):
            if role == "id" and sampling.per_class is not None and len(rows):
                rows = rows[sample_rows(labels[rows], sampling.per_class,
                                        seed=sampling.sample_seed)]
            parts[part][role] = [paths[int(i)] for i in rows]
    return parts


__all__ = ["PAPER_PER_CLASS", "PAPER_VAL_FRACTION", "Sampling", "candidate_parts",
           "divide_val_test"]
