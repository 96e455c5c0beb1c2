"""OpenMax (Bendale & Boult, CVPR 2016, "Towards Open Set Deep Networks"), as the authors'
code (abhijitbendale/OSDN), OpenOOD (`openood/postprocessors/openmax_postprocessor.py` at
3c35632) and pytorch-ood 0.4 (`detector/openmax`) compute it, with libMR's Weibull fit
transcribed (`scorers.kernels.weibull`: FitHigh's MLE and W_score, no libmr dependency).

As implemented. Fit, on id/train's logits v (the activation vectors, AV) and labels y:

    MAV_k  = mean of v over the fit rows of class k; fit rows: those with argmax v = y
             (`fit_rows="correct"`: the paper, OSDN, OpenOOD) or all labelled rows ("all":
             pytorch-ood)
    d(v, k) = w ||v - MAV_k||_2 + (1 - w) (1 - cos(v, MAV_k))         w = `euclid_weight`
    rho_k  = libMR FitHigh of the `tailsize` largest d(v_i, k) over the fit rows of class k

Score of a row with logits v, s(1..alpha) its alpha largest classes in descending order:

    omega_i = (alpha + 1 - i) / alpha       (`rank_weights="code"`, OSDN / OpenOOD /
                                             pytorch-ood); (alpha - i) / alpha ("paper",
                                             the paper's Algorithm 2)
    w_k     = W_score_k(d(v, k)) for k = s(i), i <= alpha (1 for a class without a Weibull
              model: no fit rows, or fewer than two distinct tail distances, as pytorch-ood
              treats a class it has no model of; listed in the scorer's `diagnostics`)
    v^_k    = v_k (1 - omega_i w_k)  for k = s(i);  v_k otherwise
    v^_0    = sum_{i <= alpha} v_s(i) omega_i w_s(i)                      (the unknown class)
    score   = log sum_{k >= 1} exp(v^_k) - v^_0 = log(P(known) / P(unknown))

OpenOOD and pytorch-ood return -P(unknown) = -exp(v^_0) / sum_{k >= 0} exp(v^_k) (pytorch-ood
caps v^ at 709 before exp); the log-odds ranks every row as -P(unknown) does (same AUROC,
FPR, ...) without rounding P(unknown) to 0 or 1 (`score_form` "log_odds"). The paper prints
omega_s(i) = 1 - ((alpha - i)/alpha) exp(-(d/lambda)^kappa); the authors' code, followed
here, weighs the rank by (alpha + 1 - i)/alpha and multiplies by libMR's W_score, the Weibull
CDF (`rank_weights="paper"` takes the printed rank weights). The distance: OpenOOD uses the
Euclidean one (w = 1, the default), OSDN "eucos" (0.005 ||.|| + cosine), pytorch-ood the blend
above (offered through `euclid_weight`). pytorch-ood computes the distances only to the
classes that are some row's argmax in the batch (the others stay 0); featstore computes every
distance it uses.

Defaults: tailsize 20, alpha 3 (OpenOOD's hard-coded `weibull_tail`, `weibull_alpha`), w = 1,
fit_rows "correct". Grid: pytorch-ood's `hyperparameter_space` for tailsize [10, 20, 30, 40,
50] and alpha [1, 3, 5, 10, 15, 20] (alpha is clamped to C). `score_grid` computes each row's
top classes and distances once (for the largest alpha); each tailsize's Weibull models are
fitted once, from the distances of the fit rows kept at fit (one float64 per row), no further
pass over id/train.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer, ValidRange
from ..kernels.classstats import add_class_sums
from ..kernels.softmax import logsumexp
from ..kernels.weibull import Weibull, fit_high
from ..paper import Paper

FIT_SPLIT = "id/train"


def _classes(store: StoreLike) -> int:
    split = store.split(FIT_SPLIT)
    return int(split.dims["logits"])


class OpenMax(Scorer):
    """Log-odds of a known class against OpenMax's unknown class."""

    name = "openmax"
    needs = ("logits", "fit:id/train")
    defaults = {"tailsize": 20, "alpha": 3, "euclid_weight": 1.0, "fit_rows": "correct",
                "rank_weights": "code"}
    grid = {"tailsize": [10, 20, 30, 40, 50], "alpha": [1, 3, 5, 10, 15, 20]}
    paper = Paper(title="Towards Open Set Deep Networks", authors=("Bendale", "Boult"),
                  venue="CVPR", year=2016, url="https://arxiv.org/abs/1511.06233",
                  code="https://github.com/abhijitbendale/OSDN")

    def score_form(self) -> str:
        return "log_odds"

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        for key, low in (("tailsize", 2), ("alpha", 1)):
            value = params[key]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise UsageError(f"scorer {self.name!r}: {key} must be an integer >= {low} "
                                 f"(got {value!r})")
        w = params["euclid_weight"]
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) \
                or not 0.0 <= float(w) <= 1.0:
            raise UsageError(f"scorer {self.name!r}: euclid_weight must be a number in [0, 1] "
                             f"(got {w!r})")
        self.check_choice(params, "fit_rows", ("correct", "all"))
        self.check_choice(params, "rank_weights", ("code", "paper"))
        if store is not None and params["alpha"] > _classes(store):
            raise UsageError(f"scorer {self.name!r}: alpha={params['alpha']} exceeds the "
                             f"{_classes(store)} classes of the store")

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        c = _classes(store)
        return {"alpha": ValidRange(1, c, f"1 <= alpha <= C = {c} classes")}

    # ------------------------------------------------------------------ fit
    def _fit(self, store: StoreLike) -> None:
        split = self.fit_split(store, FIT_SPLIT)
        c = _classes(store)
        correct = self.params["fit_rows"] == "correct"
        sums, counts = np.zeros((c, c)), np.zeros(c, dtype=np.int64)
        for _, (v, y) in self.chunks(split, "logits", "labels"):
            add_class_sums(sums, counts, v, np.where(self._is_fit_row(v, y, correct), y, -1))
        if counts.sum() == 0:
            raise FeatstoreError(f"scorer {self.name!r}: split {FIT_SPLIT!r} has no "
                                 f"{'correctly classified ' if correct else ''}labelled rows "
                                 "to fit the class means on")
        self.present = counts > 0
        self.mav = np.where(self.present[:, None], sums / np.maximum(counts, 1)[:, None], 0.0)
        self.mav_norm = np.linalg.norm(self.mav, axis=1)
        dists, labels = [], []
        for _, (v, y) in self.chunks(split, "logits", "labels"):
            keep = self._is_fit_row(v, y, correct)
            yk = y[keep].astype(np.int64)
            dists.append(self._distances(v[keep].astype(np.float64), yk[:, None])[:, 0])
            labels.append(yk)
        d_all, y_all = np.concatenate(dists), np.concatenate(labels)
        order = np.lexsort((d_all, y_all))            # by class, distances ascending
        d_sorted, bounds = d_all[order], np.searchsorted(y_all[order], np.arange(c + 1))
        self._class_dists = [d_sorted[bounds[k]:bounds[k + 1]] for k in range(c)]
        self._models: dict[int, list[Weibull | None]] = {}
        sizes = {int(s.get("tailsize", self.params["tailsize"]))
                 for s in [self.params, *self.fit_settings]}
        for t in sorted(sizes):         # other tailsizes: fitted when first scored
            self.models(t)

    @staticmethod
    def _is_fit_row(v: np.ndarray, y: np.ndarray, correct: bool) -> np.ndarray:
        labelled = (y >= 0) & (y < v.shape[1])
        return labelled & (np.argmax(v, axis=1) == y) if correct else labelled

    def models(self, tailsize: int) -> list[Weibull | None]:
        """FitHigh of each class's `tailsize` largest fit distances; None for a class without
        fit rows or whose tail has fewer than two distinct distances (no likelihood maximum:
        a class of one or two fit rows), listed in `diagnostics`."""
        if tailsize not in self._models:
            models: list[Weibull | None] = []
            for d in self._class_dists:
                try:
                    models.append(fit_high(d[-tailsize:]) if d.size else None)
                except FeatstoreError:
                    models.append(None)
            self._models[tailsize] = models
            none = [k for k, m in enumerate(models) if m is None]
            if none and tailsize == int(self.params["tailsize"]):
                self.diagnostics["classes_without_weibull"] = none
        return self._models[tailsize]

    # ------------------------------------------------------------------ score
    def _distances(self, v: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """d(v_i, k) for k = classes[i, j] (float64, shape of `classes`)."""
        w = float(self.params["euclid_weight"])
        diff = v[:, None, :] - self.mav[classes]
        out = np.zeros(classes.shape)
        if w > 0.0:
            out += w * np.sqrt(np.einsum("nac,nac->na", diff, diff))
        if w < 1.0:
            dots = np.einsum("nc,nac->na", v, self.mav[classes])
            norms = np.linalg.norm(v, axis=1)[:, None] * self.mav_norm[classes]
            out += (1.0 - w) * (1.0 - dots / norms)
        return out

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        a_max = max(int(s["alpha"]) for s in full)
        sizes = sorted({int(s["tailsize"]) for s in full})
        models = {t: self.models(t) for t in sizes}

        def block(logits: np.ndarray) -> list[np.ndarray]:
            v = logits.astype(np.float64)
            top = np.argsort(v, axis=1, kind="stable")[:, ::-1][:, :a_max]
            dist = self._distances(v, top)
            w_by_size = {t: self._w_scores(models[t], top, dist) for t in sizes}
            v_top = np.take_along_axis(v, top, axis=1)
            return [self._log_odds(v, top, v_top, w_by_size[int(s["tailsize"])],
                                   int(s["alpha"]), s["rank_weights"]) for s in full]

        return self.map_rows(split, ("logits",), block, outputs=len(settings))

    @staticmethod
    def _w_scores(models: list[Weibull | None], top: np.ndarray,
                  dist: np.ndarray) -> np.ndarray:
        out = np.ones(top.shape)
        for k in np.unique(top):
            model = models[int(k)]
            if model is not None:
                at = top == k
                out[at] = model.cdf(dist[at])
        return out

    @staticmethod
    def _log_odds(v: np.ndarray, top: np.ndarray, v_top: np.ndarray, w: np.ndarray,
                  alpha: int, rank_weights: str) -> np.ndarray:
        ranks = np.arange(1, alpha + 1, dtype=np.float64)
        omega = ((alpha + 1 - ranks) if rank_weights == "code" else (alpha - ranks)) / alpha
        moved = v_top[:, :alpha] * omega * w[:, :alpha]        # v_k omega_i w_k
        revised = v.copy()
        np.put_along_axis(revised, top[:, :alpha], v_top[:, :alpha] - moved, axis=1)
        return logsumexp(revised) - moved.sum(axis=1)
