"""OODL: a one-class SVM on network features (Abdelzad, Czarnecki, Salay, Denouden, Vernekar,
Phan, 2019, "Detecting out-of-distribution inputs in deep neural networks using an early-layer
output", arXiv:1910.10307), as evaluated by the FACETS benchmark (DSAA 2023).

FACETS (§ on OOD detection methods) describes OODL as an external one-class classifier on
features extracted from one layer of the network and "Following the official OODL
implementation a One-Class SVM can be used as an OOD Detector", with hyperparameters "the
kernel approximation function (RBF or Nystroem), the fraction of allowed training errors nu,
and the network layer"; it gives no values. The official implementation
(github.com/vahdat-ab/OODL, utility.py `build_one_class_svm`) fits sklearn's StandardScaler on
the training features and OneClassSVM(nu=0.001, kernel="rbf", gamma="scale") on the
standardized features, and scores with score_samples (higher = more ID).

As implemented (layer: the store's penultimate `features`, or with `layer` = L the view
`layer_features/L` of `featstore extract --feature-layers L`, the global average pool of module
L's output: OODL's early layer, which FACETS lists as a hyperparameter):

    s(x)   = (x - mean) / std                  StandardScaler fitted (streamed) on all id/train
    fit    = OneClassSVM(kernel="rbf", gamma="scale", nu=nu) on s(id/train rows), at most
             `max_train` rows drawn uniformly without replacement with default_rng(`seed`)
             (the SVM is O(N^2) in memory and time)
    score(x) = decision_function(s(x))        = score_samples(s(x)) - offset_ (same ranking
                                                as OODL's score_samples; higher = more ID)

with `approx="nystroem"`: an RBF Nystroem map (gamma = 1 / (D * Var(s(X_fit))), the value of
gamma="scale"; `n_components` landmarks, random_state=`seed`) followed by a linear
SGDOneClassSVM(nu=nu, random_state=`seed`), score = its decision_function; for large banks.

Parameters (defaults with sources):
- `nu` = 0.001: the official OODL code's default (`build_one_class_svm(nu_value=0.001)`).
  Default sweep grid nu in [0.001, 0.01, 0.05, 0.1, 0.2, 0.5] (no OpenOOD config exists;
  the official default plus a log-spaced range). Valid: 0 < nu <= 1.
- `layer` = null (the penultimate features; a module name reads `layer_features/<layer>`:
  the early-layer output of the OODL paper; it is not in the default grid, whose settings
  must hold on every store),
- `max_train` = 10000 (OC-SVM cost), `seed` = 0, `approx` = "none" | "nystroem",
  `n_components` = 1000 (Nystroem landmarks, capped at the number of fitted rows).

How the SVM is computed (approx="none"): the RBF kernel k(a, b) = exp(-gamma * max(|a|^2 +
|b|^2 - 2 a.b, 0)), gamma = 1 / (D * Var(s(X_fit))) (gamma="scale"; 1 if that variance is 0), is
evaluated with float64 BLAS. With at most PRECOMPUTED_MAX_ROWS fitted rows (a Gram matrix of at
most 512 MiB, the size of the kernel cache the libsvm fit had), libsvm is fitted on the
precomputed Gram matrix (OneClassSVM(kernel="precomputed", nu)), which is the same dual problem
with the kernel entries rounded differently (decisions within ~1e-13 relative of sklearn's
rbf OneClassSVM on the test data, same support vectors); above that, OneClassSVM(kernel="rbf",
gamma) computes the kernel itself. Either way

    decision(x) = sum_i dual_coef_i * k(s(x), sv_i) + intercept_   (sklearn's decision_function)

with the kernel rows of a block of query rows computed once against the union of the support
vectors of every nu being scored. A grid's decisions therefore come from a GEMM of another shape
than a separate fit's (the union vs one model's support vectors), which a BLAS library may round
differently: they equal separate fits' to ~1e-16 relative, not bit for bit on every CPU.

Sharing across settings and calls: the scaler, the training subsample, the Nystroem map, the
fitted models (per nu) and the Gram matrix (while models are fitted: at fit, the models of
every nu that `fit(store, grid)` announced are fitted on the one Gram matrix) are computed once
per scorer and cached (keyed by `max_train`, `seed`, `approx`, `n_components`, and nu), so
`score_grid` on several splits fits each model once, and the single-setting fit's model is
reused by a sweep; per block of query rows the transform and the kernel rows are shared by
every nu.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.extra_keys import LAYER_FEATURES, layer_name
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..fitting.layers import parse_layers, require_view, resolve_layers
from ..neighbours import is_int
from ..paper import Paper

FIT_SPLIT = "id/train"
APPROX = ("none", "nystroem")
# Parameters that decide the shared preparation (everything except nu).
_PREP_KEYS = ("max_train", "seed", "approx", "n_components", "layer")


PRECOMPUTED_MAX_ROWS = 8192


def rbf_kernel(a: np.ndarray, b: np.ndarray, gamma: float, a_sq: np.ndarray,
               b_sq: np.ndarray) -> np.ndarray:
    """exp(-gamma * max(|a_i|^2 + |b_j|^2 - 2 a_i.b_j, 0)) in float64 (BLAS for a @ b.T)."""
    d = a @ b.T
    d *= -2.0
    d += a_sq[:, None]
    d += b_sq[None, :]
    np.maximum(d, 0.0, out=d)
    d *= -gamma
    return np.exp(d, out=d)


def row_norms_sq(a: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, a)


class _Prep:
    """Scaler (+ Nystroem map), the matrix the SVMs are fitted on, and the fitted models."""

    def __init__(self, scaler: Any, nystroem: Any, x_fit: np.ndarray):
        self.scaler = scaler
        self.nystroem = nystroem
        self.x_fit = x_fit
        self.num_rows = int(x_fit.shape[0])
        var = float(x_fit.var()) if x_fit.size else 0.0
        self.gamma = 1.0 / (x_fit.shape[1] * var) if var != 0 else 1.0
        self.precomputed = nystroem is None and self.num_rows <= PRECOMPUTED_MAX_ROWS
        self.x_sq = row_norms_sq(x_fit) if nystroem is None else None
        self.models: dict[float, Any] = {}

    def transform(self, feats: np.ndarray) -> np.ndarray:
        z = self.scaler.transform(feats.astype(np.float64))
        return self.nystroem.transform(z) if self.nystroem is not None else z


class OODL(Scorer):
    """One-class SVM decision function on standardized id/train features."""

    name = "oodl"
    needs = ("features", "fit:id/train")
    defaults = {"nu": 0.001, "max_train": 10000, "seed": 0, "approx": "none",
                "n_components": 1000, "layer": None}
    grid = {"nu": [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]}
    paper = Paper(
                  title=("Detecting out-of-distribution inputs in deep neural networks "
                         "using an early-layer output"),
                  authors=("Abdelzad", "Czarnecki", "Salay", "Denouden", "Vernekar", "Phan"),
                  venue="arXiv", year=2019, url="https://arxiv.org/abs/1910.10307",
                  code="https://github.com/vahdat-ab/OODL",
                  note="as benchmarked by FACETS, DSAA 2023")

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        nu = params["nu"]
        if (not isinstance(nu, numbers.Real) or isinstance(nu, bool)
                or not 0.0 < float(nu) <= 1.0):
            raise UsageError(f"scorer 'oodl': nu={nu!r} must satisfy 0 < nu <= 1")
        for key in ("max_train", "n_components"):
            if not is_int(params[key]) or params[key] < 1:
                raise UsageError(f"scorer 'oodl': {key}={params[key]!r} must be an integer >= 1")
        if not is_int(params["seed"]) or params["seed"] < 0:
            raise UsageError(f"scorer 'oodl': seed={params['seed']!r} must be an integer >= 0")
        layer = parse_layers(self.name, "layer", params["layer"])
        if layer is not None and len(layer) != 1:
            raise UsageError(f"scorer 'oodl': layer={params['layer']!r} must name one layer")
        if params["approx"] not in APPROX:
            raise UsageError(
                f"scorer 'oodl': approx={params['approx']!r} is not one of {', '.join(APPROX)}"
            )

    # ------------------------------------------------------------------ shared work
    def _prepare(self, store: StoreLike, params: Mapping[str, Any]) -> _Prep:
        from sklearn.kernel_approximation import Nystroem  # lazy: keeps `import scorers` fast
        from sklearn.preprocessing import StandardScaler

        split = store.split(FIT_SPLIT)
        field = self._field(store, params)
        scaler = StandardScaler()
        for _, (feats,) in split.iter_chunks(field, chunk_rows=self.chunk_rows):
            scaler.partial_fit(feats.astype(np.float64))
        n = split.num_rows
        max_train = int(params["max_train"])
        rows = None
        if max_train < n:
            rng = np.random.default_rng(int(params["seed"]))
            rows = np.sort(rng.choice(n, size=max_train, replace=False))
        # the standardized rows go straight into one preallocated array (no list of parts
        # concatenated into a second copy)
        x_fit = np.empty((n if rows is None else rows.size, int(scaler.n_features_in_)))
        filled = 0
        for sl, (feats,) in split.iter_chunks(field, chunk_rows=self.chunk_rows):
            if rows is not None:
                lo, hi = np.searchsorted(rows, [sl.start, sl.stop])
                feats = feats[rows[lo:hi] - sl.start]
            if feats.shape[0]:
                x_fit[filled:filled + feats.shape[0]] = scaler.transform(
                    feats.astype(np.float64))
                filled += feats.shape[0]
        nystroem = None
        if params["approx"] == "nystroem":
            var = float(x_fit.var())
            gamma = 1.0 / (x_fit.shape[1] * var) if var > 0 else 1.0
            nystroem = Nystroem(kernel="rbf", gamma=gamma,
                                n_components=min(int(params["n_components"]), x_fit.shape[0]),
                                random_state=int(params["seed"]))
            x_fit = nystroem.fit_transform(x_fit)
        return _Prep(scaler, nystroem, x_fit)

    def _field(self, store: StoreLike, params: Mapping[str, Any]) -> str:
        """`features`, or the layer view `extra:layer_features/<layer>` (checked stored)."""
        layer = parse_layers(self.name, "layer", params["layer"])
        if layer is None:
            return "features"
        resolve_layers(self.name, store, LAYER_FEATURES, layer, FIT_SPLIT)
        return f"extra:{layer_name(LAYER_FEATURES, layer[0])}"

    def _prep_for(self, params: Mapping[str, Any]) -> _Prep:
        key = tuple(params[k] for k in _PREP_KEYS)
        if key not in self._preps:
            self._preps[key] = self._prepare(self.fitted_store, params)
        return self._preps[key]

    def _models_for(self, prep: _Prep, params: list[Mapping[str, Any]]) -> list[Any]:
        """The fitted model of every setting (same preparation), fitting the missing ones (one
        Gram matrix for all of them when precomputed)."""
        from sklearn.linear_model import SGDOneClassSVM  # lazy: keeps `import scorers` fast
        from sklearn.svm import OneClassSVM

        missing = list(dict.fromkeys(float(p["nu"]) for p in params
                                     if float(p["nu"]) not in prep.models))
        if missing:
            gram = None
            if prep.precomputed:
                assert prep.x_sq is not None  # precomputed: no Nystroem map
                gram = rbf_kernel(prep.x_fit, prep.x_fit, prep.gamma, prep.x_sq, prep.x_sq)
            seed = int(params[0]["seed"])
            for nu in missing:
                if prep.nystroem is not None:
                    model = SGDOneClassSVM(nu=nu, random_state=seed).fit(prep.x_fit)
                elif gram is not None:
                    model = OneClassSVM(kernel="precomputed", nu=nu, cache_size=64).fit(gram)
                else:
                    model = OneClassSVM(kernel="rbf", gamma=prep.gamma, nu=nu,
                                        cache_size=500).fit(prep.x_fit)
                prep.models[nu] = model
        return [prep.models[float(p["nu"])] for p in params]

    @staticmethod
    def _support(models: list[Any], prep: _Prep) -> tuple[np.ndarray, np.ndarray, list]:
        """The union of the models' support vectors (rows of the fit matrix), their squared
        norms, and each model's columns in that union."""
        assert prep.x_sq is not None  # exact RBF models only (no Nystroem map)
        union = np.unique(np.concatenate([m.support_ for m in models]))
        cols = [np.searchsorted(union, m.support_) for m in models]
        return prep.x_fit[union], prep.x_sq[union], cols

    @staticmethod
    def _decisions(prep: _Prep, models: list[Any], support: Any, feats: np.ndarray
                   ) -> list[np.ndarray]:
        """decision_function of every model on a block of rows: one transform; for the RBF
        SVMs one block of kernel rows against the union of their support vectors."""
        z = prep.transform(feats)
        if prep.nystroem is not None:
            return [m.decision_function(z) for m in models]
        sv, sv_sq, cols = support
        z_sq = row_norms_sq(z)
        out = [np.empty(z.shape[0], dtype=np.float64) for _ in models]
        block = max(1, (1 << 22) // max(1, sv.shape[0]))    # at most ~32 MB of kernel rows
        for lo in range(0, z.shape[0], block):
            hi = min(lo + block, z.shape[0])
            k = rbf_kernel(z[lo:hi], sv, prep.gamma, z_sq[lo:hi], sv_sq)
            for o, m, c in zip(out, models, cols, strict=True):
                o[lo:hi] = k[:, c] @ m.dual_coef_[0] + m.intercept_[0]
        return out

    # ------------------------------------------------------------------ hooks
    def _fit(self, store: StoreLike) -> None:
        self._preps: dict[tuple, _Prep] = {}
        self.prep = self._prep_for(self.params)
        # the nu of every setting `fit(store, grid)` announced with this preparation: their
        # models are fitted now, on the one Gram matrix the default's model needs anyway
        key = tuple(self.params[k] for k in _PREP_KEYS)
        announced = [p for p in ({**self.params, **s} for s in self.fit_settings)
                     if tuple(p[k] for k in _PREP_KEYS) == key]
        self.model = self._models_for(self.prep, [self.params, *announced])[0]
        self.num_fit_rows = self.prep.num_rows

    def _score(self, split: SplitLike) -> np.ndarray:
        return self._score_grid(split, [{}])[0]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(full):
            groups.setdefault(tuple(p[key] for key in _PREP_KEYS), []).append(i)
        out: list[np.ndarray] = [np.empty(0)] * len(settings)
        for members in groups.values():
            prep = self._prep_for(full[members[0]])
            models = self._models_for(prep, [full[i] for i in members])
            support = None if prep.nystroem is not None else self._support(models, prep)

            def block(feats: np.ndarray, prep: _Prep = prep, models: list = models,
                      support: Any = support) -> list[np.ndarray]:
                return self._decisions(prep, models, support, feats)

            field = self._field(self.fitted_store, full[members[0]])
            if field != "features":
                require_view(self.name, split, field.removeprefix("extra:"))
            scores = self.map_rows(split, (field,), block, outputs=len(members))
            for i, dec in zip(members, scores, strict=True):
                out[i] = dec
        return out
