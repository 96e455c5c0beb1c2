"""Cross-validation over the OOD splits (`evaluate_gscore(cv=K, repeats=R)`): every OOD split
is a meta-test split exactly once per round, so every set is tested R times
(`run_cv_round`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .baselines import auto_eval_distances, confidence_baseline
from .config import EvalOptions
from .metasets import (
    MetaSets,
    PooledScores,
    check_disjoint,
    draw_sets,
    id_pools,
    set_targets,
    set_truth,
    target_column,
)
from .regression import correlations, fit_line, fit_variant, predict_line, rmse, search_tau
from .results import Tally
from .spec import _AUTO, ModelSpec


def _folds(names: list[str], k: int, rng: np.random.Generator) -> dict[str, int]:
    perm = [names[i] for i in rng.permutation(len(names))]
    return {name: f for f, part in enumerate(np.array_split(np.arange(len(perm)), k))
            for name in (perm[i] for i in part)}


def _fold_rows(sets: MetaSets, fold: dict[str, int]) -> np.ndarray:
    return np.array([fold[s] for s in sets.split], dtype=np.int64)


def _mean(values: list[float]) -> float:
    v = [x for x in values if np.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")


def _fold_taus(opt: EvalOptions, sc: PooledScores, tr: MetaSets,
               f_tr: np.ndarray) -> dict[tuple, Any]:
    """{(fold, target, variant label): tau} tuned on the tau detector's meta-train sets."""
    specs = [s for s in opt.specs if s.tau == _AUTO]
    if opt.tau_from is None or not specs:
        return {}
    eng = sc.engine(tr, opt.tau_from, opt.ude_kernel)
    truth = set_truth(eng.x, tr)
    out: dict[tuple, Any] = {}
    for f in range(opt.cv or 0):
        rows = np.flatnonzero(f_tr != f)
        for target in opt.targets:
            p = truth[rows, target_column(target)]
            for spec in specs:
                res = search_tau(lambda ts, s=spec, r=rows: eng.gscores(  # type: ignore[misc]
                    s.modelling, s.distance, ts)[:, r], p,  # (mypy: a lambda's defaults)
                    halfwidth=eng.tau_halfwidth)
                out[(f, target, spec.label)] = res["tau"]
    return out


def _cv_spec(eng_tr: Any, eng_te: Any, spec: ModelSpec, p_tr: np.ndarray, p_te: np.ndarray,
             f_tr: np.ndarray, f_te: np.ndarray, taus: dict[int, Any],
             clip: bool) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Every fold's fit of one variant: (predictions, Gscores) of all meta-test sets and the
    fold-mean correlations and tau."""
    pred, g = np.full(p_te.size, np.nan), np.full(p_te.size, np.nan)
    acc: dict[str, list[float]] = {k: [] for k in ("pearson", "spearman", "pearson_train",
                                                   "spearman_train", "tau")}
    for f in sorted(set(f_te.tolist())):
        rows_tr, rows_te = np.flatnonzero(f_tr != f), np.flatnonzero(f_te == f)
        use = ModelSpec(spec.modelling, spec.distance, taus[f]) if f in taus else spec
        fit = fit_variant(eng_tr, use, p_tr[rows_tr], rows_tr)
        g_tr = eng_tr.gscore(spec.modelling, spec.distance, fit["tau"])[rows_tr]
        g[rows_te] = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])[rows_te]
        pred[rows_te] = predict_line(fit["theta1"], fit["theta0"], g[rows_te], clip)
        for side, (a, b) in (("", (g[rows_te], p_te[rows_te])),
                             ("_train", (g_tr, p_tr[rows_tr]))):
            pr, sp = correlations(a, b)
            acc["pearson" + side].append(pr)
            acc["spearman" + side].append(sp)
        acc["tau"].append(float("nan") if fit["tau"] is None else float(fit["tau"]))
    return pred, g, {k: _mean(v) for k, v in acc.items()}


def run_cv_round(opt: EvalOptions, sc: PooledScores, tally: Tally, rnd: int,
                 step: Callable[[], None]) -> None:
    """One cross-validation round r (seeded by (seed, r)) into `tally`.

    The OOD split names are permuted and cut into K folds of near-equal size
    (`numpy.array_split`); id/test is split into the meta-train and meta-test ID pools as in
    the random partitions (`metasets.id_pools`); every split gets its `sets_per_split`
    meta-train sets (ID rows from the meta-train pool) and meta-test sets (ID rows from the
    meta-test pool), drawn once per round. Fold f's model (tau searched, line fitted) uses
    the meta-train sets of the splits outside f and predicts the meta-test sets of the splits
    in f; never a split on both sides of a fold. The round's values: `rmse`, `rmse_split` and
    `floor` (as in `results.evaluate_variant`) over all its meta-test sets, each predicted by
    the fold that held its split out; Pearson / Spearman (and their meta-train counterparts)
    the mean over the K folds, computed within a fold (one fitted tau per fold); `tau` the
    mean of the folds' taus. The baselines on the same sets: the confidence score needs no
    fit; auto-evaluation fits its line per fold."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([opt.seed, rnd, 0])
    fold = _folds(list(sc.names), opt.cv or 2, rng)
    pools = id_pools(sc.data, opt.id_train_fraction, rng)
    draw: dict[str, Any] = {
        "ratio": opt.main.ratio, "size": opt.main.size, "per_split": opt.sets_per_split,
        "rng": np.random.default_rng([opt.seed, rnd, 1, 0]), "offsets": sc.offsets,
        "heterogeneous": opt.main.heterogeneous}
    tr = draw_sets(sc.data, sc.names, pools[0], **draw)
    te = draw_sets(sc.data, sc.names, pools[1], **draw)
    f_tr, f_te = _fold_rows(tr, fold), _fold_rows(te, fold)
    for f in range(opt.cv or 0):
        check_disjoint(sorted({s for s, k in fold.items() if k != f}),
                       sorted({s for s, k in fold.items() if k == f}))
    tally.n_sets += tr.m + te.m
    tally.sizes_seen.setdefault(0, []).append((float(te.n_id.mean()),
                                               float((te.n - te.n_id).mean())))
    tally.t_draw += time.perf_counter() - t0
    fd = None
    if opt.baselines:
        t1 = time.perf_counter()
        try:
            fd = (auto_eval_distances(sc.data, tr, sc.offsets),
                  auto_eval_distances(sc.data, te, sc.offsets))
        except UsageError as exc:
            tally.baseline_note = str(exc)
        tally.t_base += time.perf_counter() - t1
    t1 = time.perf_counter()
    taus = _fold_taus(opt, sc, tr, f_tr)
    tally.t_tau += time.perf_counter() - t1
    for m in sc.methods:
        t1 = time.perf_counter()
        eng_tr, eng_te = sc.engine(tr, m, opt.ude_kernel), sc.engine(te, m, opt.ude_kernel)
        truth_tr, truth_te = set_truth(eng_tr.x, tr), set_truth(eng_te.x, te)
        split_te = set_targets(te, sc.split_t[m])
        floor_te = set_targets(te, sc.floor_table(m, pools[0]))
        tally.t_truth += time.perf_counter() - t1
        t1 = time.perf_counter()
        for target in opt.targets:
            col = target_column(target)
            p_tr, p_te = truth_tr[:, col], truth_te[:, col]
            for spec in opt.specs:
                ft = {f: taus[(f, target, spec.label)] for f in range(opt.cv or 0)
                      if (f, target, spec.label) in taus}
                pred, g, row = _cv_spec(eng_tr, eng_te, spec, p_tr, p_te, f_tr, f_te, ft,
                                        opt.clip)
                row = {"rmse": rmse(pred, p_te), "rmse_split": rmse(pred, split_te[:, col]),
                       "floor": rmse(floor_te[:, col], p_te), **row}
                tally.main.setdefault((m, target, spec.label), []).append(row)
                if rnd == 0:
                    tally.points[(m, target, spec.label)] = {
                        "gscore": g.tolist(), "true": p_te.tolist(), "predicted": pred.tolist(),
                        "split_true": split_te[:, col].tolist(),
                        "floor": floor_te[:, col].tolist(), "split": te.split}
        tally.t_model += time.perf_counter() - t1
        tally.add_gmm(m, eng_tr.gmm_status())
        tally.add_gmm(m, eng_te.gmm_status())
        if opt.baselines:
            t1 = time.perf_counter()
            _cv_baselines(opt, sc, tally, m, tr, te, eng_te.x, truth_tr, truth_te, fd,
                          (f_tr, f_te))
            tally.t_base += time.perf_counter() - t1
        step()


def _cv_baselines(opt: EvalOptions, sc: PooledScores, tally: Tally, m: str, tr: MetaSets,
                  te: MetaSets, x_te: np.ndarray, truth_tr: np.ndarray, truth_te: np.ndarray,
                  fd: tuple[np.ndarray, np.ndarray] | None,
                  folds: tuple[np.ndarray, np.ndarray]) -> None:
    """Confidence score and auto-evaluation (line fitted per fold) on the round's sets."""
    assert sc.msp is not None
    conf = confidence_baseline(x_te, te.values(sc.msp), te, opt.targets)
    f_tr, f_te = folds
    for j, target in enumerate(opt.targets):
        p_tr, p_te = truth_tr[:, target_column(target)], truth_te[:, target_column(target)]
        tally.base.setdefault((m, target, "confidence"), []).append(
            {"rmse": rmse(conf[:, j], p_te),
             **dict(zip(("pearson", "spearman"), correlations(conf[:, j], p_te), strict=True))})
        if fd is None:
            continue
        pred = np.empty(te.m)
        for f in sorted(set(f_te.tolist())):
            rows_tr, rows_te = np.flatnonzero(f_tr != f), np.flatnonzero(f_te == f)
            t1_, t0_, _ = fit_line(fd[0][rows_tr], p_tr[rows_tr])
            pred[rows_te] = predict_line(t1_, t0_, fd[1][rows_te], opt.clip)
        tally.base.setdefault((m, target, "auto_eval"), []).append(
            {"rmse": rmse(pred, p_te),
             **dict(zip(("pearson", "spearman"), correlations(fd[1], p_te), strict=True))})
