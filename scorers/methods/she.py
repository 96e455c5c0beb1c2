"""SHE: simplified Hopfield energy (Zhang, Fu, Chen, Zhang, Wang, Liu, ICLR 2023,
"Out-of-distribution detection based on in-distribution data patterns memorization with modern
Hopfield energy"), following OpenOOD v1.5's `SHEPostprocessor` with its configured metric
`inner_product` (`configs/postprocessors/she.yml`: metric: inner_product).

As implemented:

    pred(x) = argmax_c logit_c(x)
    S_c     = mean of the features of the id/train rows with label c AND pred c
              (the stored pattern of class c: correctly classified training samples)
    score(x) = < x, S_{pred(x)} >                    (inner product, float64)

Fallbacks OpenOOD does not have (where it would produce NaN): a class with no correctly
classified train row uses the mean of all its labelled train rows; a class with no train row
at all is an error at fit (there is no pattern to compare with). No hyperparameters.

Kernels (Numba): the fit accumulates each id/train row into its class's correct or wrong sum
in one pass over the chunks, row by row in float64, with numpy's argmax of the chunk's logits
as the prediction (`scorers.kernels.classstats.add_class_sums_by_correctness`; no sorted or
gathered copy of the chunk); the score is one pass per row
(`scorers.kernels.rowfeat.pattern_dot_rows`: the float64 dot with the predicted class's
pattern row, indexed in place).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.classstats import add_class_sums_by_correctness
from ..kernels.rowfeat import pattern_dot_rows
from ..paper import Paper

FIT_SPLIT = "id/train"


class SHE(Scorer):
    """Inner product with the predicted class's mean correctly-classified train feature."""

    name = "she"
    needs = ("features", "logits", "fit:id/train")
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(
                  title=("Out-of-distribution detection based on in-distribution data "
                         "patterns memorization with modern Hopfield energy"),
                  authors=("Zhang", "Fu", "Chen", "Du", "Li", "Wang", "Liu", "Han", "Zhang"),
                  venue="ICLR", year=2023, url="https://openreview.net/forum?id=KkazG4lgKL",
                  code="https://github.com/zjs975584714/SHE_ood_detection")

    def _fit(self, store: StoreLike) -> None:
        split = store.split(FIT_SPLIT)
        num_classes = int(split.dims["logits"])  # C from the logits (a store may have no head)
        dim = split.dims["features"]
        correct_sums = np.zeros((num_classes, dim))
        correct_counts = np.zeros(num_classes, dtype=np.int64)
        wrong_sums = np.zeros((num_classes, dim))
        wrong_counts = np.zeros(num_classes, dtype=np.int64)
        for _, (feats, logits, labels) in self.chunks(split, "features", "logits", "labels"):
            add_class_sums_by_correctness(feats, logits.argmax(axis=1),
                                          np.asarray(labels, dtype=np.int64), correct_sums,
                                          correct_counts, wrong_sums, wrong_counts)
        missing = np.flatnonzero(correct_counts + wrong_counts == 0)
        if missing.size:
            raise FeatstoreError(
                f"scorer 'she': class {int(missing[0])} has no labelled row in {FIT_SPLIT!r} "
                f"({missing.size} classes have none); SHE stores one pattern per class"
            )
        patterns = np.empty((num_classes, dim))
        ok = correct_counts > 0
        patterns[ok] = correct_sums[ok] / correct_counts[ok, None]
        # no correct row: every labelled row of the class is in wrong_sums
        patterns[~ok] = wrong_sums[~ok] / wrong_counts[~ok, None]
        self.patterns = patterns
        self.fallback_classes = np.flatnonzero(~ok)

    def _score(self, split: SplitLike) -> np.ndarray:
        def block(feats: np.ndarray, logits: np.ndarray) -> np.ndarray:
            out = np.empty(feats.shape[0])
            pattern_dot_rows(feats, logits.argmax(axis=1), self.patterns, out)
            return out

        return self.map_rows(split, ("features", "logits"), block)
