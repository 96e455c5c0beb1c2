"""NECO: neural-collapse based OOD detection (Ben Ammar, Belkhir, Popescu, Manzanera & Franchi,
ICLR 2024, "NECO: NEural Collapse Based Out-of-distribution detection"), following the
authors' `neco()` (github.com/mouinbenammar/NECO; the function as the paper's code and the
Mahalanobis++ authors' copy, mueller-mp/maha-norm `NINCO/detection_methods.py` at 53de550,
compute it).

Fit on id/train (float64, two streaming passes: the column means, then the Gram sum of the
centered rows, `scorers.fitting.classstats.train_mean` and `scorers.kernels.gram`):

    m, s = the column means and standard deviations (1/N; s_j = 1 where s_j = 0), as
           sklearn's StandardScaler; z = (x - m) / s   (`scaler=true`; z = x otherwise)
    V    = the eigenvectors of the (1/N) covariance of z about its id/train mean c (c = 0 with
           the scaler), by decreasing eigenvalue: sklearn PCA(D)'s components (with the
           scaler, that covariance is Sigma_x / (s s^T) of the centered rows' Sigma_x)

Score of a row, as implemented:

    NECO(x)  = ||(z - c) V[:, :dim]||_2 / ||z||_2         (the paper's eq.)
    score(x) = NECO(x)                                     (`maxlogit=false`)
    score(x) = NECO(x) * max_k l_k                         (`maxlogit=true`: the code's score
                                                            for every architecture but ResNet)

Defaults: dim = 100 (the authors' `--neco_dim` default, "ETF approximative dimension";
clamped below min(D, N) on smaller stores), maxlogit = true (the authors' code multiplies by
the max logit unless the model is a ResNet: pass maxlogit=false for ResNets), scaler = true
(the code's StandardScaler; its comment suggests dropping it where the classes are well
separated, e.g. ViTs on CIFAR). The authors' DeiT / Swin branch divides by the norm of the raw
feature instead of the scaled one; that form is not offered. Grid: no published sweep; dim over
[10, 50, 100, 200, 500] around the authors' default, and both maxlogit forms.

The fitted space is computed once per store object and id/train content (kept while the
store object lives), so a sweep's per-setting refits share it. `score_grid`: one projection
onto V[:, :max dim] per block (in fixed panels of 64 columns, so that every setting's bits
are those of a single fit); the running sums of its squared columns give every dim. Memory:
the D x D covariance and its eigenvectors (float64).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer, ValidRange, fit_split_names, value_fields
from ..fitting.classstats import train_mean
from ..fitting.principal import dim_range
from ..kernels.gram import GramSum
from ..kernels.subspace import eigh_upper
from ..paper import Paper
from ..threads import fit_work, threads_for

FIT_SPLIT = "id/train"
# store object -> {key: (shift, scale, center, V)}: the fitted space, shared by every fit of
# the same id/train content, chunking, scaler and BLAS thread count (what decides its bits),
# so that refitting per setting of a sweep costs no further pass (as ViM's `shared_space`)
_FITS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[np.ndarray, ...]]]
_FITS = weakref.WeakKeyDictionary()
# columns of V per projection product: every setting's projection is made of the same
# fixed-shape products, so a grid's scores equal a single setting's bit for bit
PANEL = 64


class NECO(Scorer):
    """Share of the (scaled) feature's norm in its top-`dim` principal subspace."""

    name = "neco"
    needs = ("features", "logits", "fit:id/train")
    defaults = {"dim": 100, "maxlogit": True, "scaler": True}
    grid = {"dim": [10, 50, 100, 200, 500], "maxlogit": [True, False]}
    paper = Paper(title="NECO: NEural Collapse Based Out-of-distribution detection",
                  authors=("Ben Ammar", "Belkhir", "Popescu", "Manzanera", "Franchi"),
                  venue="ICLR", year=2024, url="https://arxiv.org/abs/2310.06823",
                  code="https://github.com/mouinbenammar/NECO")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        dim = params["dim"]
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
            raise UsageError(f"scorer {self.name!r}: dim must be an integer >= 1 (got {dim!r})")
        for key in ("maxlogit", "scaler"):
            if not isinstance(params[key], bool):
                raise UsageError(f"scorer {self.name!r}: {key} must be true or false "
                                 f"(got {params[key]!r})")
        if store is not None:
            bound = dim_range(store)
            if dim > bound.hi:
                raise UsageError(f"scorer {self.name!r}: dim={dim} is out of range "
                                 f"({bound.why})")

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        return {"dim": dim_range(store)}

    def _fit(self, store: StoreLike) -> None:
        work = fit_work(store, fit_split_names(self), value_fields(self))
        entry = store.manifest.get("splits", {}).get(FIT_SPLIT, {})
        key = (store.model_sha256, entry.get("sha256"), store.split(FIT_SPLIT).num_rows,
               self.chunk_rows, bool(self.params["scaler"]), threads_for(work))
        try:
            memo = _FITS.setdefault(store, {})
        except TypeError:  # a store object that cannot be weakly referenced: no sharing
            memo = {}
        if key not in memo:
            memo[key] = self._fit_space(store)
        self.shift, self.scale, self.center, self.components = memo[key]

    def _fit_space(self, store: StoreLike
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(shift, scale, center, V): the two passes and the eigendecomposition."""
        mean = train_mean(self, store, FIT_SPLIT)          # pass 1: column sums
        d = mean.shape[0]
        gram = GramSum(d)                                    # pass 2: scatter about the mean
        n = 0
        for _, (x,) in self.chunks(self.fit_split(store, FIT_SPLIT), "features"):
            c = x.astype(np.float64)
            c -= mean
            gram.add(c)
            n += c.shape[0]
        cov = gram.matrix(n)
        if self.params["scaler"]:
            std = np.sqrt(np.diag(cov).copy())
            std[std == 0.0] = 1.0
            cov /= std[:, None]
            cov /= std[None, :]
            shift, scale, center = mean, std, np.zeros(d)
        else:
            shift, scale, center = np.zeros(d), np.ones(d), mean
        _, vecs = eigh_upper(np.asfortranarray(cov))
        return shift, scale, center, np.ascontiguousarray(vecs[:, ::-1])

    def _z(self, x: np.ndarray) -> np.ndarray:
        z = x.astype(np.float64) - self.shift
        z /= self.scale
        return z

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        top = max(int(s["dim"]) for s in full)
        panels = [self.components[:, lo:lo + PANEL] for lo in range(0, top, PANEL)]

        def block(x: np.ndarray, logits: np.ndarray) -> list[np.ndarray]:
            z = self._z(x)
            zc = z - self.center
            proj = np.concatenate([zc @ panel for panel in panels], axis=1)
            cum = np.cumsum(proj * proj, axis=1)
            norm = np.sqrt(np.einsum("ij,ij->i", z, z))
            max_logit = logits.max(axis=1).astype(np.float64)
            out = []
            for s in full:
                ratio = np.sqrt(cum[:, int(s["dim"]) - 1]) / norm
                out.append(ratio * max_logit if s["maxlogit"] else ratio)
            return out

        return self.map_rows(split, ("features", "logits"), block, outputs=len(settings))
