"""CARef: class-aware relative feature error (Ling, Chang, Zhao, Zhao, Chow & Deng, "CADRef:
Robust Out-of-Distribution Detection via Class-Aware Decoupled Relative Feature Leveraging",
CVPR 2025; CARef is the paper's first, undecoupled method).

Formula as implemented (float64), exactly the authors' `ood_methods/CARef.py` (LingAndZero/
CADRef at 121f74b), with x the penultimate feature, l the stored logits, c = argmax_k l_k
(first index on ties) and m_c the mean feature of the id/train rows PREDICTED as c
(`scorers.fitting.predmeans`: the authors group the training features by the model's
prediction, not by label):

    score = -||m_c - x||_1 / ||x||_1

Higher is more in-distribution. No hyperparameters (the paper has none). ||x||_1 = 0 is
clamped to the smallest positive float64 (the authors' float32 code divides by zero there); a
class no id/train row is predicted as takes the id/train mean (their code fails there).
The per-row pass is `scorers.kernels.classref.class_ref_errors`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.predmeans import predicted_class_means
from ..kernels.classref import class_ref_errors
from ..paper import Paper

CADREF_PAPER = Paper(
    title="CADRef: Robust Out-of-Distribution Detection via Class-Aware Decoupled Relative "
          "Feature Leveraging",
    authors=("Ling", "Chang", "Zhao", "Zhao", "Chow", "Deng"), venue="CVPR", year=2025,
    url="https://openaccess.thecvf.com/content/CVPR2025/html/Ling_CADRef_Robust_Out-of-"
        "Distribution_Detection_via_Class-Aware_Decoupled_Relative_Feature_Leveraging_"
        "CVPR_2025_paper.html",
    code="https://github.com/LingAndZero/CADRef")


class CARef(Scorer):
    name = "caref"
    needs = ("features", "logits", "fit:id/train")
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(title=CADREF_PAPER.title, authors=CADREF_PAPER.authors, venue="CVPR",
                  year=2025, url=CADREF_PAPER.url, code=CADREF_PAPER.code,
                  note="CARef, the relative error without decoupling")

    def _fit(self, store: StoreLike) -> None:
        fitted = predicted_class_means(self, store)
        self.means = fitted.means
        self.diagnostics["classes_without_predicted_rows"] = fitted.empty

    def _score(self, split: SplitLike) -> np.ndarray:
        def block(x: np.ndarray, logits: np.ndarray) -> np.ndarray:
            rel, _, _ = class_ref_errors(x, np.argmax(logits, axis=1), self.means)
            return -rel

        return self.map_rows(split, ("features", "logits"), block)
