"""Per-repeat result rows of the evaluation protocol and their summaries (mean ± std)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .engine import GscoreEngine
from .metasets import _Sets, _StoreData
from .regression import _corr, _fit_spec, _predict, _rmse
from .spec import ModelSpec


def _agg(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and population std (ddof 0) of the finite values, and how many there were."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std()), "n": int(v.size)}


def _eval_spec(eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec, p_tr: np.ndarray,
               p_te: np.ndarray, clip: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """Fit one variant on meta-train sets, predict the meta-test sets: RMSE, correlations."""
    fit = _fit_spec(eng_tr, spec, p_tr)
    g_tr = eng_tr.gscore(spec.modelling, spec.distance, fit["tau"])
    g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
    pred = _predict(fit["theta1"], fit["theta0"], g_te, clip)
    pr_tr, sp_tr = _corr(g_tr, p_tr)
    pr_te, sp_te = _corr(g_te, p_te)
    row = {"rmse": _rmse(pred, p_te), "pearson": pr_te, "spearman": sp_te,
           "pearson_train": pr_tr, "spearman_train": sp_tr,
           "tau": float("nan") if fit["tau"] is None else float(fit["tau"])}
    fit["points"] = {"gscore": g_te.tolist(), "true": p_te.tolist(), "predicted": pred.tolist()}
    return row, fit


def _summarise(per_repeat: Mapping[Any, list[dict[str, float]]]) -> dict[Any, dict]:
    out = {}
    for key, rows in per_repeat.items():
        out[key] = {m: _agg([r[m] for r in rows]) for m in rows[0]}
    return out


def _nest(rows: Mapping[tuple, Any], depth: int) -> dict:
    """{(a, b, c): v} -> {a: {b: {c: v}}} for the first `depth` key parts."""
    out: dict = {}
    for key, val in rows.items():
        d = out
        for k in key[:depth - 1]:
            d = d.setdefault(k, {})
        d[key[depth - 1]] = val
    return out


def _cross_rows(cross: dict, data: Sequence[_StoreData], tr: _Sets, te: _Sets,
                eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec, p_tr: np.ndarray,
                p_te: np.ndarray, method: str, target: str, clip: bool,
                label: str | None = None) -> None:
    """Model fitted on store a's meta-train sets, tested on store b's meta-test sets."""
    for a in data:
        rows_a = np.flatnonzero(tr.store == a.index)
        if rows_a.size < 2:
            continue
        fit = _fit_spec(eng_tr, spec, p_tr[rows_a], rows_a)
        g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
        for b in data:
            rows_b = np.flatnonzero(te.store == b.index)
            if rows_b.size == 0:
                continue
            pred = _predict(fit["theta1"], fit["theta0"], g_te[rows_b], clip)
            pr, sp = _corr(g_te[rows_b], p_te[rows_b])
            cross.setdefault((method, target, label or spec.label, a.path, b.path), []).append(
                {"rmse": _rmse(pred, p_te[rows_b]), "pearson": pr, "spearman": sp})
