"""`featstore.Detector`: a fitted scorer and a threshold, saved as one safe HDF5 file and
loaded back to score new feature batches with in/out decisions.

    det = Detector.fit(store, "vim", target_tpr=0.95)      # threshold on id/val
    det.save("vim.detector.h5")
    det = Detector.load("vim.detector.h5")
    scores, is_id = det.score_features(features, logits)    # logits optional (from the head)

Fit: the scorer (a name, `module:Class`, a class or an instance) is built with its defaults
clamped to the store by `scorers.adapt.fit_defaults` (what `featstore score` runs) and fitted
on the store. Threshold, on `threshold_split`'s scores (default `id/val`): with `target_tpr`
(default 0.95) the largest t with mean(s_id >= t) >= target_tpr, i.e. t = sort(s_id)[floor((1
- target_tpr) N)]; with `target_fpr` instead, the smallest t with mean(s_ood >= t) <=
target_fpr over the store's val OOD splits pooled. A row is in-distribution when score >= t.

The artifact (HDF5, nothing pickled, loading executes no code): attributes `format`
(`featstore-detector`), `version`, `scorer` (the registered name), `params` (JSON),
`threshold`, `rule` (JSON: target and split), `model_sha256`; the head under /head and the
arrays of every split the scorer fits on (its `fit:` needs) under /fit/<slug>. Load rebuilds
the scorer by refitting it on those arrays (`featstore.ArrayStore`: the same arrays give the
same state, so the same scores). The scorer must be registered when loading (a built-in, an
entry point, or a class the caller has imported and registered): a module named in the file
is never imported.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from featstore.arraystore import ArrayStore
from featstore.errors import InputError, UsageError
from featstore.fileio import atomic_write_bytes
from featstore.interfaces import StoreLike
from featstore.version import __version__
from scorers.adapt import fit_defaults
from scorers.base import Scorer, fit_split_names, value_fields
from scorers.registry import REGISTRY, resolve, unknown_scorer

FORMAT = "featstore-detector"
FORMAT_VERSION = 1


def tpr_threshold(id_scores: np.ndarray, target_tpr: float) -> float:
    """The largest t with mean(id_scores >= t) >= target_tpr."""
    s = np.sort(np.asarray(id_scores, dtype=np.float64))
    return float(s[int(math.floor((1.0 - target_tpr) * len(s)))])


def fpr_threshold(ood_scores: np.ndarray, target_fpr: float) -> float:
    """The smallest t with mean(ood_scores >= t) <= target_fpr."""
    s = np.sort(np.asarray(ood_scores, dtype=np.float64))
    keep = int(math.floor(target_fpr * len(s)))  # OOD rows allowed at or above t
    return -math.inf if keep >= len(s) else float(np.nextafter(s[len(s) - keep - 1], np.inf))


@dataclass
class Detector:
    """A fitted scorer, its threshold and how the threshold was chosen (module docstring)."""

    scorer: Scorer
    threshold: float
    rule: dict[str, Any]

    @classmethod
    def fit(cls, store: StoreLike, scorer: Any, *, params: dict[str, Any] | None = None,
            target_tpr: float | None = None, target_fpr: float | None = None,
            threshold_split: str = "id/val") -> Detector:
        """Fit `scorer` on `store` and choose the threshold (module docstring)."""
        if target_tpr is not None and target_fpr is not None:
            raise UsageError("Detector.fit: give target_tpr or target_fpr, not both")
        given = {**(scorer.given if isinstance(scorer, Scorer) else {}), **(params or {})}
        name = resolve(scorer)
        used, _ = fit_defaults(REGISTRY[name](**given), given, store)
        fitted = REGISTRY[name](**used).fit(store)
        if not store.has_split(threshold_split):
            raise UsageError(f"Detector.fit: store {str(store.path)!r} has no split "
                             f"{threshold_split!r} to choose the threshold on")
        if target_fpr is not None:
            if not 0 <= target_fpr <= 1:
                raise UsageError(f"target_fpr={target_fpr} must lie in [0, 1]")
            ood = store.splits(role="ood", usage="val")
            if not ood:
                raise UsageError("Detector.fit: target_fpr needs OOD splits flagged val")
            pooled = np.concatenate([fitted.score(store.split(s)) for s in ood])
            rule = {"target_fpr": target_fpr, "splits": ood}
            return cls(fitted, fpr_threshold(pooled, target_fpr), rule)
        tpr = 0.95 if target_tpr is None else target_tpr
        if not 0 < tpr <= 1:
            raise UsageError(f"target_tpr={tpr} must lie in (0, 1]")
        id_scores = fitted.score(store.split(threshold_split))
        return cls(fitted, tpr_threshold(id_scores, tpr),
                   {"target_tpr": tpr, "splits": [threshold_split]})

    # ------------------------------------------------------------------ scoring
    def score_features(self, features: Any, logits: Any | None = None,
                       extras: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores (N,) float64, in-distribution decisions (N,) bool: score >= threshold)
        of rows given as arrays or torch tensors; logits from the head when absent."""
        scores = self.scorer.score_arrays(features, logits, extras)
        return scores, scores >= self.threshold

    # ------------------------------------------------------------------ artifact
    def save(self, path: str | Path) -> Path:
        """Write the artifact (module docstring) atomically; returns its path."""
        store = self.scorer.fitted_store
        path = Path(path)
        buffer = io.BytesIO()
        with h5py.File(buffer, "w") as fh:
            meta = {"format": FORMAT, "version": FORMAT_VERSION, "featstore_version":
                    __version__, "scorer": self.scorer.name,
                    "params": json.dumps(self.scorer.params), "threshold": self.threshold,
                    "rule": json.dumps(self.rule), "model_sha256": store.model_sha256}
            fh.attrs.update(meta)
            weight, bias = store.head
            fh.create_dataset("head/weight", data=weight)
            fh.create_dataset("head/bias", data=bias)
            for name in fit_split_names(self.scorer):
                split = store.split(name)
                grp = fh.create_group(f"fit/{name.replace('/', '__')}")
                grp.attrs["name"] = name
                for field in ("features", "logits", "labels"):
                    grp.create_dataset(field, data=np.asarray(getattr(split, field)))
                for f in value_fields(self.scorer):
                    if f.startswith("extra:"):
                        grp.create_dataset(f"extras/{f[6:]}", data=np.asarray(split.read(f)))
        atomic_write_bytes(path, buffer.getvalue())
        return path

    @classmethod
    def load(cls, path: str | Path) -> Detector:
        """Read an artifact written by `save` and refit its scorer on the stored arrays;
        InputError naming the file for anything else."""
        path = Path(path)
        try:
            fh = h5py.File(path, "r")
        except OSError as exc:
            raise InputError(f"detector {str(path)!r}: not an HDF5 file ({exc})") from None
        with fh:
            if fh.attrs.get("format") != FORMAT:
                raise InputError(f"detector {str(path)!r}: not a featstore detector (no "
                                 f"format={FORMAT!r} attribute)")
            name = str(fh.attrs["scorer"])
            if name not in REGISTRY or ":" in name:
                raise InputError(f"detector {str(path)!r}: {unknown_scorer(name)}; import and "
                                 "register its class first")
            head = (fh["head/weight"][()], fh["head/bias"][()])
            splits = {}
            for grp in fh.get("fit", {}).values():
                arrays = {f: grp[f][()] for f in ("features", "logits", "labels")}
                if "extras" in grp:
                    arrays["extras"] = {k: grp["extras"][k][()] for k in grp["extras"]}
                splits[str(grp.attrs["name"])] = arrays
            dtype = next((str(a["features"].dtype) for a in splits.values()), "float32")
            store = ArrayStore(head, splits=splits, dtype=dtype,
                               model_sha256=str(fh.attrs["model_sha256"]))
            scorer = REGISTRY[name](**json.loads(fh.attrs["params"])).fit(store)
            return cls(scorer, float(fh.attrs["threshold"]), json.loads(fh.attrs["rule"]))
