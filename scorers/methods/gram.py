"""Gram: deviations of Gram-matrix statistics from their class-wise training ranges (Sastry &
Oore, "Detecting Out-of-Distribution Examples with Gram Matrices", ICML 2020; OpenOOD v1.5
`gram_postprocessor.py`).

Reads the view `layer_gram/<L>` (N, P, C_L) that `featstore extract --feature-layers L
--gram-powers P` writes: for each row and order p = 1..P, g_p = sign(r) |r|^(1/p) with r the
row sums of the Gram matrix of the p-th power of layer L's (C_L, H*W) output (OpenOOD's `G_p`;
featstore/extraction/layer_views.py). Formula as implemented, with `powers` = the orders 1..P
used, labels y of id/train and c(x) = argmax of the logits:

    fit:   per class k, int(val_fraction * n_k) of its n_k id/train rows are held out, drawn
           with numpy default_rng(seed).choice per class in class order (OpenOOD:
           random.sample(range(n_k), int(0.1 n_k))); on the other rows, per layer l, order p
           and class k: lo_lpk = min, hi_lpk = max of g_p over the rows (element-wise, C_l)
    delta(lo, hi, g) = sum_j max(lo_j - g_j, 0) / |lo_j + 1e-6| + max(g_j - hi_j, 0) / |hi_j + 1e-6|
    n_l    = mean over the held-out rows x (all classes) of sum_p delta(lo_lp{y}, hi_lp{y}, g_p(x))
    score(x) = - ( sum_l sum_p delta(lo_lp{c(x)}, hi_lp{c(x)}, g_lp(x)) / n_l ) / max softmax(l(x))

which is OpenOOD's `get_deviations` output -deviations / confs (float64 here, float32 there).
OpenOOD hooks every Conv2d and ReLU module; here the layers are the ones extracted (`layers`,
default null: every stored layer). Defaults: powers 1..5 (OpenOOD `configs/postprocessors/
gram.yml` `powers: [1,2,3,4,5]`; the paper's code uses 1..10), val_fraction 0.1, seed 0. The
sweep grid of OpenOOD holds one setting (`powers_list: [[1,2,3,4,5]]`): the default grid is
empty. A default `powers` above the orders stored is clamped to them (`valid_ranges`). A
class without training rows left after the hold-out, or a layer whose held-out rows all lie
inside the ranges (n_l = 0, a division by zero in OpenOOD), is an error naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.extra_keys import LAYER_GRAM, layer_name, stored_layers
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer, ValidRange
from ..fitting.layers import parse_layers, require_view, resolve_layers
from ..kernels.softmax import log_max_softmax
from ..neighbours import is_int
from ..paper import Paper

FIT_SPLIT = "id/train"
EPS = 1e-6


def held_out_rows(labels: np.ndarray, num_classes: int, fraction: float,
                  seed: int) -> np.ndarray:
    """Boolean mask of the id/train rows held out to normalise (module docstring)."""
    rng = np.random.default_rng(seed)
    held = np.zeros(labels.shape[0], dtype=bool)
    for k in range(num_classes):
        rows = np.flatnonzero(labels == k)
        if rows.size:
            held[rows[rng.choice(rows.size, size=int(fraction * rows.size), replace=False)]] = True
    return held


def deviations(lo: np.ndarray, hi: np.ndarray, grams: np.ndarray) -> np.ndarray:
    """sum over orders p and channels j of delta (module docstring); lo, hi, grams: (n, P, C)
    (the bounds already gathered for each row's class)."""
    below = np.maximum(lo - grams, 0.0) / np.abs(lo + EPS)
    above = np.maximum(grams - hi, 0.0) / np.abs(hi + EPS)
    return (below + above).sum(axis=(1, 2))


class Gram(Scorer):
    """-(sum of normalised Gram-range deviations) / max softmax (higher = more ID)."""

    name = "gram"
    needs = ("logits", f"extra:{LAYER_GRAM}", "fit:id/train")
    defaults: ClassVar[dict[str, Any]] = {"layers": None, "powers": 5, "val_fraction": 0.1,
                                          "seed": 0}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper = Paper(title="Detecting Out-of-Distribution Examples with Gram Matrices",
                  authors=("Sastry", "Oore"), venue="ICML", year=2020,
                  url="https://arxiv.org/abs/1912.12510",
                  code="https://github.com/VectorInstitute/gram-ood-detection",
                  note="OpenOOD v1.5's normalisation on held-out id/train rows")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        parse_layers(self.name, "layers", params["layers"])
        if not is_int(params["powers"]) or params["powers"] < 1:
            raise UsageError(f"scorer {self.name!r}: powers={params['powers']!r} must be an "
                             "integer >= 1 (orders 1..powers)")
        frac = params["val_fraction"]
        if isinstance(frac, bool) or not isinstance(frac, int | float) or not 0 < frac < 1:
            raise UsageError(f"scorer {self.name!r}: val_fraction={frac!r} must be in (0, 1)")
        if not is_int(params["seed"]) or params["seed"] < 0:
            raise UsageError(f"scorer {self.name!r}: seed={params['seed']!r} must be an "
                             "integer >= 0")
        top = self.valid_ranges(params, store).get("powers") if store is not None else None
        if top is not None and params["powers"] > top.hi:
            raise UsageError(f"scorer {self.name!r}: powers={params['powers']} but {top.why}",
                             need=f"extra:{LAYER_GRAM}",
                             how=f"extract with gram_powers={params['powers']}")

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        """powers in [1, P]: P the fewest orders stored for a chosen layer in id/train (a
        default above it is clamped, `scorers.adapt`)."""
        if not store.has_split(FIT_SPLIT):
            return {}
        split = store.split(FIT_SPLIT)
        wanted = parse_layers(self.name, "layers", params["layers"])
        held = [n for n in (wanted or stored_layers(split.extra_names(), LAYER_GRAM))
                if split.has_extra(layer_name(LAYER_GRAM, n))]
        if not held:
            return {}
        top = min(int(split.extra(layer_name(LAYER_GRAM, n)).shape[1]) for n in held)
        return {"powers": ValidRange(1, top, f"1 <= powers <= {top} (the orders stored in "
                                             f"{FIT_SPLIT!r})")}

    def _grams(self, split: SplitLike, layer: str) -> str:
        name = layer_name(LAYER_GRAM, layer)
        require_view(self.name, split, name)
        stored = split.extra(name).shape[1]
        if stored < self.params["powers"]:
            raise UsageError(f"scorer {self.name!r}: powers={self.params['powers']} but split "
                             f"{split.name!r} holds orders 1..{stored} of layer {layer!r}",
                             need=f"extra:{name}",
                             how=f"extract with gram_powers={self.params['powers']}")
        return f"extra:{name}"

    def _fit(self, store: StoreLike) -> None:
        wanted = parse_layers(self.name, "layers", self.params["layers"])
        self.layers = resolve_layers(self.name, store, LAYER_GRAM, wanted, FIT_SPLIT)
        split = store.split(FIT_SPLIT)
        labels = np.asarray(split.read("labels"), dtype=np.int64)
        num_classes = int(split.dims["logits"])
        held = held_out_rows(labels, num_classes, float(self.params["val_fraction"]),
                             int(self.params["seed"]))
        fit_rows = ~held & (labels >= 0) & (labels < num_classes)
        missing = np.setdiff1d(np.arange(num_classes), labels[fit_rows])
        if missing.size:
            raise FeatstoreError(f"scorer {self.name!r}: class {int(missing[0])} has no "
                                 f"{FIT_SPLIT!r} rows left to fit its Gram ranges (each of "
                                 f"the {num_classes} classes needs rows)")
        self.lo, self.hi, self.norm = [], [], []
        for layer in self.layers:
            lo, hi = self._ranges(split, layer, labels, fit_rows, num_classes)
            self.lo.append(lo)
            self.hi.append(hi)
            self.norm.append(self._normaliser(split, layer, labels, held, lo, hi))

    def _ranges(self, split: SplitLike, layer: str, labels: np.ndarray, fit_rows: np.ndarray,
                num_classes: int) -> tuple[np.ndarray, np.ndarray]:
        powers = int(self.params["powers"])
        field = self._grams(split, layer)
        lo = hi = None
        for rows, (g,) in self.chunks(split, field):
            g = g[:, :powers].astype(np.float64)
            if lo is None or hi is None:
                lo = np.full((num_classes, *g.shape[1:]), np.inf)
                hi = np.full((num_classes, *g.shape[1:]), -np.inf)
            keep, y = fit_rows[rows], labels[rows]
            for k in np.unique(y[keep]):
                sel = g[keep & (y == k)]
                lo[k] = np.minimum(lo[k], sel.min(axis=0))
                hi[k] = np.maximum(hi[k], sel.max(axis=0))
        assert lo is not None and hi is not None
        return lo, hi

    def _normaliser(self, split: SplitLike, layer: str, labels: np.ndarray, held: np.ndarray,
                    lo: np.ndarray, hi: np.ndarray) -> float:
        powers = int(self.params["powers"])
        total, count = 0.0, 0
        for rows, (g,) in self.chunks(split, self._grams(split, layer)):
            sel = held[rows]
            if sel.any():
                y = labels[rows][sel]
                total += float(deviations(lo[y], hi[y], g[sel, :powers].astype(np.float64)).sum())
                count += int(sel.sum())
        if count == 0 or total == 0.0:
            raise FeatstoreError(
                f"scorer {self.name!r}: layer {layer!r}: "
                + ("no id/train rows are held out" if count == 0 else
                   "every held-out id/train row lies inside the class ranges")
                + f" (val_fraction={self.params['val_fraction']}), so the deviation "
                  "normaliser is 0; raise val_fraction or fit on more rows")
        return total / count

    def _score(self, split: SplitLike) -> np.ndarray:
        powers = int(self.params["powers"])
        fields = ("logits", *(self._grams(split, layer) for layer in self.layers))

        def block(logits: np.ndarray, *grams: np.ndarray) -> np.ndarray:
            pred = np.argmax(logits, axis=1)
            dev = np.zeros(logits.shape[0])
            for lo, hi, norm, g in zip(self.lo, self.hi, self.norm, grams, strict=True):
                dev += deviations(lo[pred], hi[pred], g[:, :powers].astype(np.float64)) / norm
            conf = np.exp(log_max_softmax(logits, 1.0))
            return -dev / conf

        return self.map_rows(split, fields, block)
