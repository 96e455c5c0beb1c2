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

As implemented (layer: the store's penultimate `features`):

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
- `max_train` = 10000 (OC-SVM cost), `seed` = 0, `approx` = "none" | "nystroem",
  `n_components` = 1000 (Nystroem landmarks, capped at the number of fitted rows).

`score_grid` over nu shares the scaler, the training subsample, the Nystroem map and the
transform of every query chunk; only the SVM is refitted per nu.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .base import Scorer
from .neighbours import is_int

FIT_SPLIT = "id/train"
APPROX = ("none", "nystroem")
# Parameters that decide the shared preparation (everything except nu).
_PREP_KEYS = ("max_train", "seed", "approx", "n_components")


class _Prep:
    """Scaler (+ Nystroem map) and the matrix the SVM is fitted on."""

    def __init__(self, scaler: Any, nystroem: Any, x_fit: np.ndarray | None):
        self.scaler = scaler
        self.nystroem = nystroem
        self.x_fit = x_fit

    def transform(self, feats: np.ndarray) -> np.ndarray:
        z = self.scaler.transform(feats.astype(np.float64))
        return self.nystroem.transform(z) if self.nystroem is not None else z


class OODL(Scorer):
    """One-class SVM decision function on standardized id/train features."""

    name = "oodl"
    needs = ("features", "fit:id/train")
    defaults = {"nu": 0.001, "max_train": 10000, "seed": 0, "approx": "none",
                "n_components": 1000}
    grid = {"nu": [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]}
    paper = ("Abdelzad, Czarnecki, Salay, Denouden, Vernekar, Phan. Detecting out-of-"
             "distribution inputs in deep neural networks using an early-layer output. "
             "arXiv:1910.10307, 2019 (as benchmarked by FACETS, DSAA 2023)")

    def check_params(self, params: Mapping[str, Any], store: Any = None) -> None:
        nu = params["nu"]
        if (not isinstance(nu, numbers.Real) or isinstance(nu, bool)
                or not 0.0 < float(nu) <= 1.0):
            raise UsageError(f"scorer 'oodl': nu={nu!r} must satisfy 0 < nu <= 1")
        for key in ("max_train", "n_components"):
            if not is_int(params[key]) or params[key] < 1:
                raise UsageError(f"scorer 'oodl': {key}={params[key]!r} must be an integer >= 1")
        if not is_int(params["seed"]) or params["seed"] < 0:
            raise UsageError(f"scorer 'oodl': seed={params['seed']!r} must be an integer >= 0")
        if params["approx"] not in APPROX:
            raise UsageError(
                f"scorer 'oodl': approx={params['approx']!r} is not one of {', '.join(APPROX)}"
            )

    # ------------------------------------------------------------------ shared work
    def _prepare(self, store: Any, params: Mapping[str, Any]) -> _Prep:
        from sklearn.kernel_approximation import Nystroem  # lazy: keeps `import scorers` fast
        from sklearn.preprocessing import StandardScaler

        split = store.split(FIT_SPLIT)
        scaler = StandardScaler()
        for _, (feats,) in split.iter_chunks("features", chunk_rows=self.chunk_rows):
            scaler.partial_fit(feats.astype(np.float64))
        n = split.num_rows
        max_train = int(params["max_train"])
        rows = None
        if max_train < n:
            rng = np.random.default_rng(int(params["seed"]))
            rows = np.sort(rng.choice(n, size=max_train, replace=False))
        parts = []
        for sl, (feats,) in split.iter_chunks("features", chunk_rows=self.chunk_rows):
            if rows is not None:
                lo, hi = np.searchsorted(rows, [sl.start, sl.stop])
                feats = feats[rows[lo:hi] - sl.start]
            if feats.shape[0]:
                parts.append(scaler.transform(feats.astype(np.float64)))
        x_fit = np.concatenate(parts, axis=0)
        nystroem = None
        if params["approx"] == "nystroem":
            var = float(x_fit.var())
            gamma = 1.0 / (x_fit.shape[1] * var) if var > 0 else 1.0
            nystroem = Nystroem(kernel="rbf", gamma=gamma,
                                n_components=min(int(params["n_components"]), x_fit.shape[0]),
                                random_state=int(params["seed"]))
            x_fit = nystroem.fit_transform(x_fit)
        return _Prep(scaler, nystroem, x_fit)

    @staticmethod
    def _fit_model(prep: _Prep, params: Mapping[str, Any]) -> Any:
        from sklearn.linear_model import SGDOneClassSVM
        from sklearn.svm import OneClassSVM

        if params["approx"] == "nystroem":
            model = SGDOneClassSVM(nu=float(params["nu"]), random_state=int(params["seed"]))
        else:
            model = OneClassSVM(kernel="rbf", gamma="scale", nu=float(params["nu"]),
                                cache_size=500)
        return model.fit(prep.x_fit)

    # ------------------------------------------------------------------ hooks
    def _fit(self, store: Any) -> None:
        prep = self._prepare(store, self.params)
        self.model = self._fit_model(prep, self.params)
        self.num_fit_rows = prep.x_fit.shape[0]
        prep.x_fit = None  # training matrix not needed after fitting
        self.prep = prep

    def _score(self, split: Any) -> np.ndarray:
        out = np.empty(split.num_rows, dtype=np.float64)
        for rows, (feats,) in self.chunks(split, "features"):
            out[rows] = self.model.decision_function(self.prep.transform(feats))
        return out

    def _score_grid(self, split: Any, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        full = [{**self.params, **s} for s in settings]
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(full):
            groups.setdefault(tuple(p[key] for key in _PREP_KEYS), []).append(i)
        out: list[np.ndarray | None] = [None] * len(settings)
        for members in groups.values():
            prep = self._prepare(self.store, full[members[0]])
            models = {i: self._fit_model(prep, full[i]) for i in members}
            prep.x_fit = None
            for i in members:
                out[i] = np.empty(split.num_rows, dtype=np.float64)
            for rows, (feats,) in self.chunks(split, "features"):
                z = prep.transform(feats)
                for i in members:
                    out[i][rows] = models[i].decision_function(z)
        return out  # type: ignore[return-value]
