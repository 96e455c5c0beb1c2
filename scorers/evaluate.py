"""Evaluate scorers over a store (DESIGN §4): per-OOD-split metrics against id/test, group
metrics in two forms, ID accuracy, misclassification AUROC, and fit and score seconds per
method. A group's two forms: ``groups`` is the unweighted mean of the metric over the group's
test splits (each OOD source weighs the same); ``pooled`` is the metric of id/test against the
group's test splits concatenated (each OOD row weighs the same: a source of 50,000 rows weighs
ten times one of 5,000), as FACETS (Recalcati et al., DSAA 2023, §IV Tables II-V: each
dataset's OOD "Total" is one set of rows; §VI Tables VI-VII report one cell per dataset)
computes its table. Only test-usage OOD splits enter the table; val-flagged splits
are for hyperparameter selection (scorers.sweep).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.interfaces import StoreLike
from featstore.store.values import require_finite

from .base import Scorer, fit_split_names, value_fields
from .cache import ScoreCache, cache_off_reason
from .metrics import OOD_METRIC_NAMES, id_accuracy_or_nan, misclassification_auroc, ood_metrics
from .misclassification import misclassification_or_none
from .registry import REGISTRY, code_digest, resolve, resolve_methods
from .results import EvaluationResult
from .selective import selective_metrics
from .skipping import check_supported, require_any, run_each, unsupported_reason
from .stats.bootstrap import BootstrapSpec
from .uncertainty import add_intervals

logger = logging.getLogger(__name__)

ID_SPLIT = "id/test"


def supported(store: StoreLike, name: str) -> tuple[bool, str]:
    """Whether the store has what scorer `name` needs (and why not)."""
    why = unsupported_reason(store, name)
    return why is None, why or ""


def group_means(per_split: Mapping[str, Mapping[str, float]],
                store: StoreLike) -> dict[str, dict[str, float]]:
    """Unweighted mean of each metric over each group's splits."""
    groups: dict[str, list[str]] = {}
    for name in per_split:
        groups.setdefault(store.split(name).group or "", []).append(name)
    return {g: {m: mean_of([per_split[s][m] for s in names]) for m in OOD_METRIC_NAMES}
            for g, names in groups.items()}


def pooled_groups(id_scores: np.ndarray, scores: Mapping[str, np.ndarray],
                  store: StoreLike, id_name: str = "id/test") -> dict[str, dict[str, float]]:
    """Each group's metrics on its splits POOLED: `ood_metrics(id_scores, concatenation of
    the group's splits' scores in `scores` order)` (module docstring; `groups` is the mean
    form). The metrics are rank statistics, so the concatenation's order does not matter."""
    groups: dict[str, list[str]] = {}
    for name in scores:
        groups.setdefault(store.split(name).group or "", []).append(name)
    return {g: ood_metrics(id_scores, np.concatenate([np.asarray(scores[s]) for s in names]),
                           id_name=id_name, ood_name=f"pooled {g or 'ood'} ({len(names)} "
                                                     "splits)")
            for g, names in groups.items()}


def mean_of(values: Sequence[float]) -> float:
    """math.fsum(values) / len(values): the correctly rounded sum, so the mean does not depend
    on the order of the splits (and costs ~0.3 us, np.mean ~7 us on a short list: sweeps take
    thousands of these)."""
    return math.fsum(values) / len(values)


def require_finite_inputs(store: StoreLike, name: str, splits: Sequence[str]) -> None:
    """NonFiniteError (featstore.store.values) if a field scorer `name` reads (features, logits,
    extras) holds NaN or inf in one of its fit splits or in `splits`: a dictionary lookup in
    the manifest's record, so it runs before anything data-dependent (defaults clamped to the
    data, a fit) could turn the NaN into a misleading message."""
    scorer_cls = REGISTRY.get(name)
    if scorer_cls is None:  # an unknown name is the caller's error to report (get_scorer)
        return
    fields = value_fields(scorer_cls)
    for split_name in [*(s for s in fit_split_names(scorer_cls) if store.has_split(s)),
                       *splits]:
        require_finite(store.split(split_name), fields, f"{name!r} scores")


def score_splits(store: StoreLike, name: str, params: Mapping[str, Any], splits: Sequence[str],
                 use_cache: bool = True, diagnostics: dict[str, Any] | None = None,
                 allow_nonfinite: bool = False
                 ) -> tuple[dict[str, np.ndarray], float, float]:
    """Scores of every named split (cached in scores.h5); returns (scores, fit s, score s).
    When the scorer is fitted, its `diagnostics` (e.g. an approximate index's recall@K) are
    copied into the `diagnostics` dict if one is given.

    Before any cache lookup: NaN / inf in the fields the scorer reads, in its fit splits or
    the scored ones, are an error (featstore.store.values.NonFiniteError) unless `allow_nonfinite`;
    each scored split's file must be the one committed (`Store.check_committed`). A read-only
    store is scored with the cache off (`cache.cache_off_reason`). A scorer that is not a
    built-in is cached under `name~<sha256 of its user modules' source>` (`registry.code_digest`),
    so editing it never reads stale scores; without readable source it is not cached."""
    name = resolve(name)
    scorer = REGISTRY[name](**params)
    if not allow_nonfinite:
        require_finite_inputs(store, name, splits)
    return _scores(store, name, scorer, splits, use_cache, diagnostics)


def _scores(store: StoreLike, name: str, scorer: Scorer, splits: Sequence[str],
            use_cache: bool, diagnostics: dict[str, Any] | None
            ) -> tuple[dict[str, np.ndarray], float, float]:
    """`score_splits` for a resolved `name` and its `scorer`, built once and configured, whose
    inputs the caller has checked for NaN / inf (`require_finite_inputs`, once per split per
    call) or allowed: the scorer's own checks in `fit` / `score` would repeat it, and are off."""
    scorer.check_finite = False
    if use_cache and cache_off_reason(store) is not None:
        use_cache = False
    digest = code_digest(name)
    if digest is None:  # a scorer whose source cannot be read: its scores are never cached
        use_cache = False
    key = f"{name}~{digest}" if digest else name
    cache = ScoreCache(store) if use_cache else None
    form = scorer.score_form()  # the score's form is part of the key, as its code is
    cparams = {**scorer.params, "score_form": form} if form else scorer.params
    out: dict[str, np.ndarray] = {}
    todo = []
    for split_name in splits:
        split = store.split(split_name)
        store.check_committed(split_name)
        hit = cache.get(key, cparams, split) if cache else None
        if hit is not None:
            out[split_name] = hit
        else:
            todo.append(split)
    fit_s = score_s = 0.0
    logger.debug("%s: %d of %d splits from the score cache%s", name, len(splits) - len(todo),
                 len(splits), "" if cache else " (cache off)")
    if todo:
        t0 = time.perf_counter()
        scorer.fit(store)
        fit_s = time.perf_counter() - t0
        logger.debug("%s: fitted on %s in %.3f s", name, store.path, fit_s)
        if diagnostics is not None:
            diagnostics.update(scorer.diagnostics)
        for split in todo:
            t0 = time.perf_counter()
            scores = scorer.score(split)
            score_s += time.perf_counter() - t0
            if cache:
                cache.put(key, cparams, split, scores)
            out[split.name] = scores
        logger.debug("%s: scored %d splits in %.3f s", name, len(todo), score_s)
    return {s: out[s] for s in splits}, fit_s, score_s


def score_with_defaults(store: StoreLike, name: str, given: Mapping[str, Any],
                        splits: Sequence[str], use_cache: bool = True,
                        diagnostics: dict[str, Any] | None = None,
                        allow_nonfinite: bool = False
                        ) -> tuple[dict[str, np.ndarray], float, float, dict[str, Any],
                                   list[dict[str, Any]]]:
    """`score_splits` with the user's `given` parameters untouched and data-invalid defaults
    clamped (`Scorer.fix_defaults`, the rule of `scorers.adapt`): (scores, fit s, score s,
    params used, adjustments). What `featstore score` runs (`scorers.score_run.score_store`,
    which resolves the method to its registered `name`), so that it follows eval's rule: the
    name is built into one scorer, and non-finite inputs are checked first
    (`require_finite_inputs`), once per split, unless `allow_nonfinite`."""
    if not allow_nonfinite:
        require_finite_inputs(store, name, splits)
    scorer = REGISTRY[name](**given)
    adjusted = scorer.fix_defaults(store)
    scores, fit_s, score_s = _scores(store, name, scorer, splits, use_cache, diagnostics)
    return scores, fit_s, score_s, dict(scorer.params), adjusted


def id_side_metrics(id_scores: np.ndarray, logits: np.ndarray, labels: np.ndarray
                    ) -> dict[str, float]:
    """Misclassification AUROC, AURC and AUGRC of the ID scores (NaN where undefined)."""
    try:
        mis = misclassification_auroc(id_scores, logits, labels)
    except ValueError:
        mis = float("nan")
    try:
        sel = selective_metrics(id_scores, logits, labels)
    except ValueError:
        sel = {"aurc": float("nan"), "augrc": float("nan")}
    return {"misclassification_auroc": mis, **sel}


def evaluate(store: StoreLike, methods: Sequence[str | type[Scorer] | Scorer] | None = None,
             params: Mapping[str, Mapping[str, Any]] | None = None,
             use_cache: bool = True, progress: Callable[[str], object] | None = None,
             strict: bool = False, allow_nonfinite: bool = False, ci: BootstrapSpec | None = None,
             keep_scores: dict[str, dict[str, np.ndarray]] | None = None) -> EvaluationResult:
    """Metrics of every method on every OOD test split of the store. A method is a
    registered name, `module:Class`, a `Scorer` subclass or an instance (run with its given
    parameters; `scorers.registry.resolve_methods`); results are keyed by scorer name.

    With ``ci``, every metric also carries its stratified-bootstrap interval
    (``scorers.uncertainty.add_intervals``: ``"<metric>_ci": [lo, hi]`` beside each value,
    ``"id_acc_ci"``, and the method echo in ``"ci"``); without it ``"ci"`` is None.
    ``keep_scores``, if given, receives every evaluated method's scores {method: {split:
    scores}} (id/test and the OOD test splits).

    Returns a `scorers.results.EvaluationResult` (a read-only dict too): {"store",
    "model_sha256", "id_split", "id_acc", "ood_splits", "methods":
    {name: {"params" (as run: `params[name]` over the defaults, a data-invalid default clamped
    by `scorers.adapt`), "adjusted" (those clamps: [{"setting", "used", "reason"}]),
    "fit_seconds", "score_seconds", "diagnostics" (the fit's, e.g. recall@K of an approximate
    index; empty when cached), "misclassification_auroc", "misclassification" (FACETS
    Table VII: fpr95, detection_error, auroc, errors, warning; None when undefined), "splits":
    {split: metrics}, "groups": {group: metrics} (the mean over the group's splits),
    "pooled": {group: metrics} (on the group's splits concatenated; module docstring), "aurc",
    "augrc" (selective classification, `scorers.selective`)}}, "skipped": {name: reason}, "ci"}.

    A method that cannot run on this store (`scorers.skipping`: a missing need, no valid
    parameter value, a class without train rows, ...) is listed in "skipped" with its one-line
    reason, or, with `strict` (the caller named it), raises that error. When no method ran,
    FeatstoreError lists every reason."""
    if not store.has_split(ID_SPLIT):
        raise FeatstoreError(f"store {str(store.path)!r} has no complete {ID_SPLIT!r} split; "
                             "evaluation compares every OOD split against it")
    methods, params = resolve_methods(methods or list(REGISTRY), params)
    ood = store.splits(role="ood", usage="test")
    if not ood:
        raise FeatstoreError(f"store {str(store.path)!r} has no OOD test split to evaluate")
    for name in (ID_SPLIT, *ood):  # a missing or damaged split file fails the run (exit 1),
        store.check_committed(name)  # never one scorer at a time
    id_split = store.split(ID_SPLIT)
    logits, labels = np.asarray(id_split.logits), np.asarray(id_split.labels)
    kept: dict[str, dict[str, np.ndarray]] = {} if keep_scores is None else keep_scores

    def run(name: str) -> dict[str, Any]:
        check_supported(store, name)
        if not allow_nonfinite:
            require_finite_inputs(store, name, [ID_SPLIT, *ood])
        scorer = REGISTRY[name](**params.get(name, {}))
        adjusted = scorer.fix_defaults(store)
        if progress:
            progress(name)
        diag: dict[str, Any] = {}
        scores, fit_s, score_s = _scores(store, name, scorer, [ID_SPLIT, *ood], use_cache, diag)
        id_scores = scores[ID_SPLIT]
        per_split = {s: ood_metrics(id_scores, scores[s], id_name=ID_SPLIT, ood_name=s)
                     for s in ood}
        id_side = id_side_metrics(id_scores, logits, labels)
        kept[name] = scores
        return {
            "misclassification": misclassification_or_none(id_scores, logits, labels),
            "params": dict(scorer.params), "adjusted": adjusted,
            "fit_seconds": fit_s, "score_seconds": score_s,
            "cached": fit_s == 0.0 and score_s == 0.0,
            "diagnostics": diag,
            **id_side,
            "splits": per_split, "groups": group_means(per_split, store),
            "pooled": pooled_groups(id_scores, {s: scores[s] for s in ood}, store),
        }

    done, skipped = run_each(methods, run, strict=strict)
    require_any(done, skipped, store)
    result: dict[str, Any] = {
        "store": str(store.path), "model_sha256": store.model_sha256, "id_split": ID_SPLIT,
        "id_acc": id_accuracy_or_nan(logits, labels), "ood_splits": ood, "methods": done,
        "skipped": skipped, "ci": None}
    if ci is not None:
        add_intervals(result, kept, store, ci)
    return EvaluationResult(**result)
