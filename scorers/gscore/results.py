"""Per-partition result rows of the evaluation protocol and their summaries: the mean over
partitions (random partitions, or cross-validation rounds) with a 95% interval for it
(Student t: mean ± t_{0.975, k-1} sd / sqrt(k), sd with ddof 1, over the k finite values;
no interval below 2 values), and the values themselves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .engine import GscoreEngine
from .metasets import _Sets, _StoreData
from .regression import _corr, _fit_spec, _predict, _rmse
from .spec import ModelSpec


def _bounds(name: str) -> tuple[float, float]:
    """The range a summarised value can take (its interval is clipped to it)."""
    if name.startswith(("pearson", "spearman")):
        return -1.0, 1.0
    return (0.0, 1.0) if name == "tau" else (0.0, float("inf"))


def _agg(values: Sequence[float | None], bounds: tuple[float, float] = (-np.inf, np.inf)
         ) -> dict[str, Any]:
    """{"mean", "ci": [lo, hi], "std" (ddof 1), "n", "values"} over the finite values (module
    docstring; the interval clipped to `bounds`); "values" keeps every partition's value
    (None where it was not finite)."""
    from scipy.stats import t as student_t  # lazy: only summaries need it

    kept = [None if x is None or not np.isfinite(x) else float(x) for x in values]
    v = np.asarray([x for x in kept if x is not None], dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "ci": None, "std": None, "n": 0, "values": kept}
    mean = float(v.mean())
    if v.size < 2:
        return {"mean": mean, "ci": None, "std": None, "n": 1, "values": kept}
    sd = float(v.std(ddof=1))
    half = float(student_t.ppf(0.975, v.size - 1)) * sd / np.sqrt(v.size)
    lo, hi = max(bounds[0], mean - half), min(bounds[1], mean + half)
    return {"mean": mean, "ci": [float(lo), float(hi)], "std": sd, "n": int(v.size),
            "values": kept}


def _eval_spec(eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec, p_tr: np.ndarray,
               p_te: np.ndarray, clip: bool, t_split: np.ndarray | None = None,
               t_floor: np.ndarray | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Fit one variant on meta-train sets, predict the meta-test sets: RMSE against the
    sampled targets `p_te`, `rmse_split` against the split-level targets `t_split`, the
    oracle `floor` (RMSE of `t_floor`, the split-level targets from the meta-train ID pool,
    against `p_te`), correlations."""
    fit = _fit_spec(eng_tr, spec, p_tr)
    g_tr = eng_tr.gscore(spec.modelling, spec.distance, fit["tau"])
    g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
    pred = _predict(fit["theta1"], fit["theta0"], g_te, clip)
    pr_tr, sp_tr = _corr(g_tr, p_tr)
    pr_te, sp_te = _corr(g_te, p_te)
    row = {"rmse": _rmse(pred, p_te), "pearson": pr_te, "spearman": sp_te,
           "pearson_train": pr_tr, "spearman_train": sp_tr,
           "tau": float("nan") if fit["tau"] is None else float(fit["tau"])}
    if t_split is not None and t_floor is not None:
        row["rmse_split"] = _rmse(pred, t_split)
        row["floor"] = _rmse(t_floor, p_te)
    fit["points"] = {"gscore": g_te.tolist(), "true": p_te.tolist(), "predicted": pred.tolist(),
                     **({} if t_split is None else {"split_true": t_split.tolist()}),
                     **({} if t_floor is None else {"floor": t_floor.tolist()})}
    return row, fit


def _summarise(per_repeat: Mapping[Any, list[dict[str, float]]]) -> dict[Any, dict]:
    out = {}
    for key, rows in per_repeat.items():
        out[key] = {m: _agg([r.get(m) for r in rows], _bounds(m)) for m in rows[0]}
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
