"""A Gscore model for use: fitted on labelled meta-train sets (`fit_gscore`), saved and loaded
as JSON (`GscoreModel`, never pickle), and applied to an unlabelled set (`predict_gscore`)."""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import UsageError
from featstore.store.fileio import atomic_write_json
from featstore.store.interfaces import StoreLike
from featstore.version import __version__
from scorers.registry import check_scorers

from ..metrics import ood_metrics
from .engine import GscoreEngine
from .metasets import (
    check_same_model,
    draw_sets,
    gscore_scores,
    load_scores,
    method_key,
    ood_test_splits,
    select_splits,
    set_truth,
    store_pools,
    target_column,
)
from .regression import correlations, fit_variant, predict_line, rmse
from .results import json_ready
from .spec import (
    _AUTO,
    DISTANCES,
    FORMAT,
    FORMAT_VERSION,
    GMM_MAX_ITER,
    GMM_TOL,
    ID_VAL,
    MODELLINGS,
    SETS_PER_SPLIT,
    SIGMA_FLOOR_REL,
    TAU_FROM,
    ModelSpec,
    _check_target,
    parse_model,
    parse_ratio,
)


@dataclass
class GscoreModel:
    """A fitted Gscore regression; saved as JSON (never pickle) with the modelling, the
    distance, tau, the coefficients, the target metric, the scorer's name and parameters and
    the sha256 of the store model(s) it was fitted on (predicting on a store of another
    model is an error unless forced). At prediction the scorer is fitted on, and the UDE
    reference taken from, the PREDICTED store (its id/train, id/val): those belong to the
    model being evaluated, only OOD labels are missing; the fit-time reference is recorded
    in `reference` for information."""

    modelling: str
    distance: str
    tau: float | None
    theta1: float
    theta0: float
    target: str
    scorer: str
    scorer_params: dict[str, Any]
    model_sha256s: list[str]
    ude_kernel: str = "gauss"
    floor_rel: float = SIGMA_FLOOR_REL
    gmm_max_iter: int = GMM_MAX_ITER
    gmm_tol: float = GMM_TOL
    clip: bool = True
    reference: dict[str, Any] | None = None
    meta_train: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    @property
    def model_sha256(self) -> str:
        return self.model_sha256s[0]

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(self.modelling, self.distance, self.tau)

    # ---------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "featstore_version": __version__,
            "created": self.created,
            "modelling": self.modelling, "distance": self.distance, "tau": self.tau,
            "ude_kernel": self.ude_kernel, "sigma_floor_rel": self.floor_rel,
            "gmm": {"max_iter": self.gmm_max_iter, "tol": self.gmm_tol},
            "regression": {"theta1": self.theta1, "theta0": self.theta0, "clip": self.clip},
            "target": self.target,
            "scorer": {"name": self.scorer, "params": self.scorer_params},
            "model_sha256": self.model_sha256, "model_sha256s": list(self.model_sha256s),
            "reference": self.reference, "meta_train": self.meta_train,
        }

    def save(self, path: str | Path) -> None:
        atomic_write_json(Path(path), json_ready(self.to_json()))

    @classmethod
    def from_json(cls, obj: Any, where: str = "gscore model") -> GscoreModel:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise UsageError(f"{where}: not a featstore gscore model (missing format "
                             f"{FORMAT!r}); write one with `featstore gscore fit`")
        if obj.get("format_version") != FORMAT_VERSION:
            raise UsageError(f"{where}: format_version {obj.get('format_version')!r}, this "
                             f"featstore reads {FORMAT_VERSION}")
        try:
            modelling, dist = obj["modelling"], obj["distance"]
            if modelling not in MODELLINGS or dist not in DISTANCES:
                raise UsageError(f"{where}: unknown modelling/distance {modelling!r}/{dist!r}")
            tau = obj["tau"]
            if tau is not None:
                tau = float(tau)
            parse_model(f"{modelling}-{dist}", "none" if tau is None else tau)
            reg = obj["regression"]
            scorer = obj["scorer"]
            shas = obj.get("model_sha256s") or [obj["model_sha256"]]
            model = cls(
                modelling=modelling, distance=dist, tau=tau, theta1=float(reg["theta1"]),
                theta0=float(reg["theta0"]), target=_check_target(obj["target"]),
                scorer=str(scorer["name"]), scorer_params=dict(scorer.get("params") or {}),
                model_sha256s=[str(s) for s in shas],
                ude_kernel=str(obj.get("ude_kernel", "gauss")),
                floor_rel=float(obj.get("sigma_floor_rel", SIGMA_FLOOR_REL)),
                gmm_max_iter=int(obj.get("gmm", {}).get("max_iter", GMM_MAX_ITER)),
                gmm_tol=float(obj.get("gmm", {}).get("tol", GMM_TOL)),
                clip=bool(reg.get("clip", True)), reference=obj.get("reference"),
                meta_train=dict(obj.get("meta_train") or {}), created=str(obj.get("created", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, UsageError):
                raise
            raise UsageError(f"{where}: malformed gscore model ({type(exc).__name__}: {exc})"
                             ) from None
        if not (math.isfinite(model.theta1) and math.isfinite(model.theta0)):
            raise UsageError(f"{where}: non-finite regression coefficients")
        return model

    @classmethod
    def load(cls, path: str | Path) -> GscoreModel:
        path = Path(path)
        if not path.is_file():
            raise UsageError(f"gscore model {str(path)!r}: file not found")
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError,
                RecursionError) as exc:
            raise UsageError(f"gscore model {str(path)!r}: not valid JSON ({exc})") from None
        return cls.from_json(obj, f"gscore model {str(path)!r}")

    # ---------------------------------------------------------------- use
    def engine(self, x: np.ndarray, n: np.ndarray, ref_mu: Any = None,
               ref_sd: Any = None) -> GscoreEngine:
        return GscoreEngine(x, n, ref_mu, ref_sd, ude_kernel=self.ude_kernel,
                            floor_rel=self.floor_rel, gmm_max_iter=self.gmm_max_iter,
                            gmm_tol=self.gmm_tol)

    def gscore(self, scores: np.ndarray, ref: tuple[float, float] | None = None
               ) -> tuple[float, dict[str, Any]]:
        """Gscore of one unlabelled set of scores and its fitted Gaussians (for GMM also how
        the EM ended: converged, collapsed, steps, log-likelihood)."""
        s = np.asarray(scores, dtype=np.float64).ravel()
        if s.size < 1:
            raise UsageError("gscore: empty set of scores")
        if self.modelling == "ude" and ref is None:
            raise UsageError("gscore: UDE needs the id/val reference (mu_val, sd_val)")
        eng = self.engine(s[None, :], np.array([s.size]), *(ref or (None, None)))
        g = float(eng.gscore(self.modelling, self.distance, self.tau)[0])
        parts: dict[str, Any] = eng.pair(self.modelling, self.tau).row(0)
        if self.modelling == "gmm":
            fit = eng.gmm()[0]
            parts["gmm"] = {"converged": bool(fit[9]), "collapsed": bool(fit[7]),
                            "em_steps": int(fit[6]), "loglik_per_sample": float(fit[8])}
        return g, parts

    def predict(self, scores: np.ndarray, ref: tuple[float, float] | None = None) -> float:
        g, _ = self.gscore(scores, ref)
        return float(predict_line(self.theta1, self.theta0, np.array([g]), self.clip)[0])


def _fit_sets(stores: Sequence[Any], method: str, params: dict[str, Any], keep: Any,
              draw: dict[str, Any], use_cache: bool) -> tuple[list, str, Any, GscoreEngine,
                                                              np.ndarray]:
    """Score the stores and draw the meta-train sets: (data, key, sets, engine, truth)."""
    kernel = draw.pop("ude_kernel")
    data = [store_pools(i, st, keep) for i, st in enumerate(stores)]
    key = method_key(method, params)
    for sd in data:
        load_scores(sd, key, method, params, use_cache)
    offsets = np.cumsum([0] + [sd.total for sd in data])[:-1]
    names = list(dict.fromkeys(s for sd in data for s in sd.ood))
    sets = draw_sets(data, names, [np.arange(sd.n_id) for sd in data], offsets=offsets,
                     **draw)
    x = sets.values(np.concatenate([sd.scores[key] for sd in data]))
    refs = np.array([data[s].ref[key][:2] for s in sets.store])
    eng = GscoreEngine(x, sets.n, refs[:, 0], refs[:, 1], ude_kernel=kernel)
    return data, key, sets, eng, set_truth(x, sets)


def _tau_from(stores: Sequence[Any], tau_from: str, spec: ModelSpec, target: str, keep: Any,
              draw: dict[str, Any], use_cache: bool) -> float | None:
    """tau searched on the tau detector's meta-train sets (the same draws)."""
    *_, eng, truth = _fit_sets(stores, tau_from, {}, keep, dict(draw), use_cache)
    return fit_variant(eng, spec, truth[:, target_column(target)])["tau"]


#: Folds of `fit_gscore`'s cross-validated RMSE (grouped by OOD split; fewer with fewer splits).
FIT_CV_FOLDS = 5


def _fit_cv(eng: GscoreEngine, spec: ModelSpec, truth: np.ndarray, split: list[str],
            clip: bool, seed: int) -> dict[str, Any] | None:
    """K-fold cross-validation of the fit over the OOD splits (every split held out once:
    its sets predicted by a model, tau search included, fitted on the other splits' sets):
    the RMSE and the 95% quantile of the absolute residuals (the conformal rank
    ceil(0.95 (n + 1)) of n), which `predict_gscore` turns into a prediction interval. A tau
    tuned on another detector's sets (`tau_from`) stays fixed in the folds."""
    names = list(dict.fromkeys(split))
    k = min(FIT_CV_FOLDS, len(names))
    if k < 2:
        return None
    perm = np.random.default_rng([seed, 7]).permutation(len(names))
    fold_of = {names[j]: f for f, part in enumerate(np.array_split(perm, k)) for j in part}
    folds = np.array([fold_of[s] for s in split])
    pred = np.empty(truth.size)
    for f in range(k):
        tr, te = np.flatnonzero(folds != f), np.flatnonzero(folds == f)
        res = fit_variant(eng, spec, truth[tr], tr)
        g = eng.gscore(spec.modelling, spec.distance, res["tau"])[te]
        pred[te] = predict_line(res["theta1"], res["theta0"], g, clip)
    resid = np.sort(np.abs(pred - truth))
    rank = min(resid.size, math.ceil(0.95 * (resid.size + 1)))
    return {"folds": k, "rmse": rmse(pred, truth), "abs_residual_q95": float(resid[rank - 1]),
            "n": int(resid.size)}


def fit_gscore(stores: Sequence[Any], method: str = "msp", target: str = "fpr95",
               model: str | ModelSpec = "ude-wasserstein", *, params: Mapping[str, Any] | None
               = None, tau: Any = "default", ratio: Any = 1.0, size: int | None = None,
               heterogeneous: bool = False, sets_per_split: int = SETS_PER_SPLIT,
               seed: int = 0, tau_from: str | None = TAU_FROM,
               splits: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
               ude_kernel: str = "gauss", clip: bool = True, allow_other_model: bool = False,
               use_cache: bool = True) -> GscoreModel:
    """Fit a Gscore regression on meta-train sets built from the OOD test splits of `stores`
    (all, or those `splits` / `exclude` select; ID rows: all of id/test; `sets_per_split`
    seeded subsamples per split). A searched tau ("auto") is tuned on `tau_from`'s meta-train
    sets (default MSP, the paper's supplementary B; None: on `method`'s own)."""
    if not stores:
        raise UsageError("gscore fit: name at least one store")
    check_scorers(m for m in (method, tau_from) if m is not None)
    _check_target(target)
    spec = model if isinstance(model, ModelSpec) else parse_model(model, tau)
    if sets_per_split < 1:
        raise UsageError(f"sets_per_split {sets_per_split}: must be >= 1")
    draw: dict[str, Any] = {
        "ratio": parse_ratio(ratio), "size": size, "per_split": sets_per_split,
        "rng": None, "heterogeneous": heterogeneous, "ude_kernel": ude_kernel}
    check_same_model(stores, allow_other_model)
    params = dict(params or {})
    keep = select_splits([s for st in stores for s in ood_test_splits(st)], splits, exclude)
    fit_spec = spec
    if spec.tau == _AUTO and tau_from is not None and (tau_from != method or params):
        draw["rng"] = np.random.default_rng([seed, 0])
        fit_spec = ModelSpec(spec.modelling, spec.distance,
                             _tau_from(stores, tau_from, spec, target, keep, draw, use_cache))
    draw["rng"] = np.random.default_rng([seed, 0])
    data, key, sets, eng, truth_all = _fit_sets(stores, method, params, keep, dict(draw),
                                                use_cache)
    truth = truth_all[:, target_column(target)]
    res = fit_variant(eng, fit_spec, truth)
    g = eng.gscore(spec.modelling, spec.distance, res["tau"])
    pred = predict_line(res["theta1"], res["theta0"], g, clip)
    pearson, spearman = correlations(g, truth)
    ref0 = data[0].ref[key]
    return GscoreModel(
        modelling=spec.modelling, distance=spec.distance, tau=res["tau"],
        theta1=res["theta1"], theta0=res["theta0"], target=target, scorer=method,
        scorer_params=params, model_sha256s=list(dict.fromkeys(sd.sha for sd in data)),
        ude_kernel=ude_kernel, clip=clip,
        reference={"split": ID_VAL, "store": data[0].path, "mu": ref0[0], "sd": ref0[1],
                   "n": ref0[2]},
        meta_train={"stores": [sd.path for sd in data], "splits": list(dict.fromkeys(
                        s for sd in data for s in sd.ood)),
                    "splits_include": list(splits) if splits else None,
                    "splits_exclude": list(exclude) if exclude else None, "n_sets": sets.m,
                    "ratio": draw["ratio"], "size": size, "heterogeneous": heterogeneous,
                    "sets_per_split": sets_per_split, "seed": seed,
                    "tau_from": (tau_from if fit_spec is not spec else method)
                    if spec.tau == _AUTO else None,
                    "mean_n_id": float(sets.n_id.mean()),
                    "mean_n_ood": float((sets.n - sets.n_id).mean()),
                    "train_mse": res["loss"], "train_rmse": rmse(pred, truth),
                    "pearson": pearson, "spearman": spearman,
                    "tau_search": [list(t) for t in res["trace"]],
                    "cv": _fit_cv(eng, fit_spec, truth, sets.split, clip, seed),
                    "gmm_fits": eng.gmm_status(),
                    "points": {"gscore": [float(v) for v in g],
                               "true": [float(v) for v in truth]}},
        created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )


def predict_gscore(model: GscoreModel, store: StoreLike, splits: Sequence[str], *,
                   force: bool = False, use_cache: bool = True,
                   with_truth: bool = False) -> dict[str, Any]:
    """Predicted metric of the unlabelled set made of the named splits' rows (labels ignored),
    with a 95% prediction interval: ± the 95% quantile of the fit's cross-validated absolute
    residuals (`_fit_cv`; None for a model saved without them). The set's scores are the
    ones the fit modelled (`metasets.gscore_scores`: the scorer's paper form), so a set the
    fit drew gets the Gscore the fit computed for it.

    With `with_truth`, when the set holds both id/* and ood/* rows, the true metric (roles as
    labels, on the same scores, as the fit's targets) is reported beside the prediction."""
    if store.model_sha256 not in model.model_sha256s and not force:
        raise UsageError(
            f"the gscore model was fitted on stores of model {model.model_sha256[:12]}… but "
            f"store {str(store.path)!r} comes from model {store.model_sha256[:12]}…; pass "
            "--allow-other-model (force=True) to predict anyway")
    splits = list(dict.fromkeys(splits))
    if not splits:
        raise UsageError("gscore predict: name at least one split (--split)")
    for s in splits:
        store.split(s)
    names = list(splits)
    need_ref = model.modelling == "ude"
    if need_ref:
        if not store.has_split(ID_VAL):
            raise UsageError(f"store {str(store.path)!r} has no id/val split: UDE takes its "
                             "reference Gaussian from the scorer's id/val scores")
        names = list(dict.fromkeys([ID_VAL, *names]))
    scores = gscore_scores(store, model.scorer, model.scorer_params, names, use_cache)
    x = np.concatenate([scores[s] for s in splits])
    ref = None
    if need_ref:
        val = scores[ID_VAL]
        ref = (float(val.mean()), float(val.std()))
    g, parts = model.gscore(x, ref)
    pred = float(predict_line(model.theta1, model.theta0, np.array([g]), model.clip)[0])
    cv = model.meta_train.get("cv") or {}
    q = cv.get("abs_residual_q95")
    interval = None
    if q is not None:
        lo, hi = pred - float(q), pred + float(q)
        interval = [max(0.0, lo), min(100.0, hi)] if model.clip else [lo, hi]
    out: dict[str, Any] = {
        "store": str(store.path), "splits": splits, "n": int(x.size), "scorer": model.scorer,
        "model": model.spec.label, "tau": model.tau, "target": model.target, "gscore": g,
        "predicted": pred, "interval": interval, "interval_level": 0.95 if interval else None,
        "cv_rmse": cv.get("rmse"), "parts": parts,
        "reference": None if ref is None else {"split": ID_VAL, "mu": ref[0], "sd": ref[1]},
        "forced": store.model_sha256 not in model.model_sha256s,
    }
    if with_truth:
        id_parts = [scores[s] for s in splits if s.startswith("id/") or s.startswith("csid/")]
        ood_parts = [scores[s] for s in splits if s.startswith("ood/")]
        out["truth"] = (ood_metrics(np.concatenate(id_parts), np.concatenate(ood_parts))
                        [model.target] if id_parts and ood_parts else None)
    return out
