"""GMM: the class-conditional Gaussian mixture of the penultimate features, as pytorch-ood
0.4.0 implements it (`pytorch_ood/detector/gmm.py`, `GMM`; "a classical baseline
(class-conditional Gaussians); no single paper introduced it", pytorch-ood's own note). Its
closest paper is Lee et al.'s class-conditional Gaussian model (NeurIPS 2018), which ties the
covariance (`mds`); OpenOOD's `gmm_postprocessor.py` is another method (unsupervised
tied-covariance mixtures of multi-layer features after PCA / class-aware projections, summed
across layers), not this one.

As implemented. Fit on the labelled id/train rows (float64; classes without rows are left
out):

    pi_k    = N_k / N
    mu_k    = mean of the rows of class k
    Sigma_k = (1/N_k) sum_{y_i = k} (x_i - mu_k)(x_i - mu_k)^T + reg I       (per class)
    Sigma_k = L_k L_k^T (Cholesky; a FeatstoreError naming the class and `reg` where it fails)

Score (higher = more in-distribution; pytorch-ood's outlier score is its negative):

    score(x) = log sum_k pi_k N(x | mu_k, Sigma_k)
             = logsumexp_k [ log pi_k - (||L_k^{-1} (x - mu_k)||^2 + log det Sigma_k
                                         + D log 2 pi) / 2 ]

`reg` (default 1e-6, pytorch-ood's) keeps Sigma_k invertible where a class has fewer rows
than dimensions (then log det Sigma_k and the distances outside the class's span are ruled by
reg). No published sweep, so no default grid (sweep it with `--grid reg=1e-6,1e-4,1e-2`).
Cost: C covariances of D x D (fit memory 2 C D^2 float64: refused with a
clear error where that exceeds half the machine's memory) and C products of D x D per scored
row, C times those of `mds`, the price of per-class covariances. `score_grid` fits each reg's
factors from the same class scatter matrices (one pass over id/train).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import scipy.linalg

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.classstats import add_class_sums
from ..kernels.gram import GramSum
from ..kernels.softmax import logsumexp
from ..paper import Paper

FIT_SPLIT = "id/train"


def _memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62


class GMM(Scorer):
    """Log-likelihood of a class-conditional Gaussian mixture (one covariance per class)."""

    name = "gmm"
    needs = ("features", "fit:id/train")
    defaults = {"reg": 1e-6}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(title="A simple unified framework for detecting out-of-distribution "
                        "samples and adversarial attacks",
                  authors=("Lee", "Lee", "Lee", "Shin"), venue="NeurIPS", year=2018,
                  url="https://arxiv.org/abs/1807.03888",
                  code="https://github.com/kkirchheim/pytorch-ood/blob/main/src/pytorch_ood/"
                       "detector/gmm.py",
                  note="class-conditional Gaussians with per-class covariances, as "
                       "pytorch-ood's GMM detector")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        reg = params["reg"]
        if isinstance(reg, bool) or not isinstance(reg, numbers.Real) \
                or not math.isfinite(reg) or reg < 0:
            raise UsageError(f"scorer {self.name!r}: reg must be a finite number >= 0 "
                             f"(got {reg!r})")

    def _fit(self, store: StoreLike) -> None:
        split = self.fit_split(store, FIT_SPLIT)
        c, d = int(split.dims["logits"]), int(split.dims["features"])
        sums, counts = np.zeros((c, d)), np.zeros(c, dtype=np.int64)
        for _, (x, y) in self.chunks(split, "features", "labels"):
            add_class_sums(sums, counts, x, y)
        present = np.flatnonzero(counts)
        if present.size == 0:
            raise FeatstoreError(f"scorer {self.name!r}: split {FIT_SPLIT!r} has no labelled "
                                 f"rows (labels in [0, {c})); class Gaussians need labels")
        need = 2 * present.size * d * d * 8
        if need > _memory_bytes() // 2:
            raise FeatstoreError(
                f"scorer {self.name!r}: {present.size} class covariances of {d} x {d} need "
                f"{need / 2**30:.1f} GiB, over half of this machine's memory; use `mds` "
                "(one tied covariance) on this store")
        self.means = sums[present] / counts[present, None]
        slot = np.full(c, -1)
        slot[present] = np.arange(present.size)
        grams = [GramSum(d) for _ in present]
        for _, (x, y) in self.chunks(split, "features", "labels"):
            y = np.asarray(y, dtype=np.int64)
            keep = (y >= 0) & (y < c)
            for k in np.unique(y[keep]):
                i = slot[k]
                grams[i].add(x[y == k].astype(np.float64) - self.means[i])
        self.classes = present
        self.log_weights = np.log(counts[present] / counts.sum())
        self.scatter = [g.matrix(int(counts[k])) for g, k in zip(grams, present, strict=True)]
        self._factors: dict[float, tuple[list[np.ndarray], np.ndarray]] = {}
        for reg in {float(self.params["reg"]), *(float(s["reg"]) for s in self.fit_settings
                                                  if "reg" in s)}:
            self.factors(reg)

    def factors(self, reg: float) -> tuple[list[np.ndarray], np.ndarray]:
        """(L_k^{-1} per class, log det Sigma_k) for one ridge `reg`."""
        if reg not in self._factors:
            inv_chols, log_dets = [], []
            eye = np.eye(self.means.shape[1])
            for k, scatter in zip(self.classes, self.scatter, strict=True):
                try:
                    chol = scipy.linalg.cholesky(scatter + reg * eye, lower=True,
                                                 check_finite=False)
                except np.linalg.LinAlgError:
                    raise FeatstoreError(
                        f"scorer {self.name!r}: the covariance of class {int(k)} of split "
                        f"{FIT_SPLIT!r} plus reg={reg} I is not positive definite; pass a "
                        "larger reg") from None
                inv_chols.append(scipy.linalg.solve_triangular(chol, eye, lower=True,
                                                               check_finite=False))
                log_dets.append(2.0 * np.log(np.diag(chol)).sum())
            self._factors[reg] = (inv_chols, np.array(log_dets))
        return self._factors[reg]

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        regs = [float({**self.params, **s}["reg"]) for s in settings]
        parts = {reg: self.factors(reg) for reg in set(regs)}
        const = self.means.shape[1] * np.log(2.0 * np.pi)

        def block(x: np.ndarray) -> list[np.ndarray]:
            x64 = x.astype(np.float64)
            out = {}
            for reg, (inv_chols, log_dets) in parts.items():
                ll = np.empty((x.shape[0], len(inv_chols)))
                for i, inv_chol in enumerate(inv_chols):
                    z = (x64 - self.means[i]) @ inv_chol.T
                    ll[:, i] = np.einsum("ij,ij->i", z, z)
                ll += log_dets + const
                ll *= -0.5
                ll += self.log_weights
                out[reg] = logsumexp(ll)
            return [out[reg] for reg in regs]

        return self.map_rows(split, ("features",), block, outputs=len(settings))
