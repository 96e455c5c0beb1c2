"""KL matching.

Paper: Hendrycks, Basart, Mazeika, Zou, Kwon, Mostajabi, Steinhardt & Song, "Scaling
Out-of-Distribution Detection for Real-World Settings", ICML 2022 (section on KL matching).

Fit, on `id/val` (labels are not used; as in the paper and OpenOOD v1.5's
`kl_matching_postprocessor.py`, which also fits on the ID validation loader): with
p_i = softmax(l_i) and yhat_i = argmax_k p_ik, one template per predicted class

    d_k = mean { p_i : yhat_i = k }.

Classes that no id/val row is predicted as get no template and are skipped in the minimum
below; `scorer.template_classes` lists the classes that have one. An id/val split with no rows
is an error. Sources, checked in their code: OpenOOD v1.5 (`kl_matching_postprocessor.py` at
commit 3c35632) gives such a class the one-hot template e_k and scores with
`scipy.stats.entropy(p, e_k)`, which is +inf for any p with a non-zero entry outside k (every
softmax output short of underflow), so the one-hot template never attains the minimum and
OpenOOD's scores equal these; featstore skips the class instead because a template the data
never showed should not be able to win where p underflows to exactly e_k.

Score as implemented, for logits l in R^C and p = softmax(l):

    score(x) = -min_k KL(p || d_k),  KL(p || d_k) = sum_j p_j log p_j - sum_j p_j log d_kj

computed per chunk with matrix operations: the first term is the negative entropy, with
log p_j = l_j - logsumexp(l) (`scorers.kernels.softmax.softmax_plogp`, one exp pass; so
p_j = 0 contributes 0, no epsilon needed); the second enters only through its maximum over k,
i.e. the minimum cross-entropy min_k -sum_j p_j log d_kj, taken by
`scorers.kernels.mincross.min_cross_entropy`: one float32 GEMM p @ log(D).T over all templates
prunes the templates that cannot be the minimum (a proven error bound), and the remaining ones
are summed again in float64, so the score is the float64 one (not a float32 approximation).
log(0) in a
template is guarded by clipping templates from below at eps = np.finfo(float64).tiny
(~2.2e-308) before the log: a template entry is exactly 0 only when every row predicted as that
class had that probability underflow, and the clip turns the infinite KL of such a template into
a large finite one (log eps ~ -708) without changing any entry that is representable. No
hyperparameters, so no grid (OpenOOD v1.5 `configs/postprocessors/klm.yml` has no sweep).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.classstats import add_class_sums
from ..kernels.mincross import min_cross_entropy
from ..kernels.softmax import softmax, softmax_plogp
from ..paper import Paper

FIT_SPLIT = "id/val"
EPS = np.finfo(np.float64).tiny


class KLMatching(Scorer):
    """-min_k KL(softmax(l) || d_k) over per-predicted-class mean softmax templates."""

    name = "kl_matching"
    needs = ("logits", f"fit:{FIT_SPLIT}")
    min_classes = 2
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(title="Scaling Out-of-Distribution Detection for Real-World Settings",
                  authors=("Hendrycks", "Basart", "Mazeika", "Zou", "Kwon", "Mostajabi",
                           "Steinhardt", "Song"),
                  venue="ICML", year=2022, url="https://arxiv.org/abs/1911.11132",
                  code="https://github.com/hendrycks/anomaly-seg")

    templates: np.ndarray | None = None
    template_classes: np.ndarray | None = None

    def _fit(self, store: StoreLike) -> None:
        split = self.fit_split(store, FIT_SPLIT)
        c = int(split.dims["logits"])
        sums = np.zeros((c, c), dtype=np.float64)
        counts = np.zeros(c, dtype=np.int64)
        for _, (logits,) in self.chunks(split, "logits"):
            probs = softmax(logits)
            add_class_sums(sums, counts, probs, probs.argmax(axis=1))
        used = np.flatnonzero(counts)
        if used.size == 0:
            raise FeatstoreError(
                f"scorer {self.name!r}: split {FIT_SPLIT!r} has no rows to fit class templates"
            )
        self.template_classes = used
        self.templates = sums[used] / counts[used, None]
        log_t = np.log(np.maximum(self.templates, EPS))  # (K, C), every entry <= 0
        self._log_templates = np.ascontiguousarray(log_t)
        self._log_templates32_t = np.ascontiguousarray(log_t.T, dtype=np.float32)
        self._log_amax = float(np.abs(log_t).max())

    def _score(self, split: SplitLike) -> np.ndarray:
        log_t, log_t32_t, amax = (self._log_templates, self._log_templates32_t,
                                  self._log_amax)

        def block(part: np.ndarray) -> np.ndarray:
            probs, plogp = softmax_plogp(part)  # plogp = sum_j p_j log p_j
            # -min_k KL = -(plogp + min_k -sum_j p_j log d_kj)
            return -(plogp + min_cross_entropy(probs, log_t, log_t32_t, amax))

        return self.map_rows(split, ("logits",), block)
