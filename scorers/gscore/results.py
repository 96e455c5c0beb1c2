"""The evaluation's results: one variant's row on one partition (`evaluate_variant`: rmse,
rmse_split, floor, correlations), the rows collected over partitions or rounds (`Tally`),
their summaries (`summarise`: mean with a 95% Student-t interval) and the nesting of the
JSON result."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .engine import GscoreEngine
from .metasets import MetaSets, StorePools
from .regression import correlations, fit_variant, predict_line, rmse
from .spec import ModelSpec


@dataclass
class Tally:
    """Per-partition (or per-round) result rows, keyed by tuples, and the protocol's
    bookkeeping: `main[(detector, target, variant)]`, `base[(detector, target, baseline)]`,
    `robust[(setting index, detector, target, variant)]`, `cross[(detector, target,
    variant, fit store, test store)]` each a list of rows (one per partition or round);
    `points`: the first partition's per-set values; `sizes_seen`: the mean ID and OOD rows
    of the meta-test sets per setting; the seconds spent per phase (`t_*`)."""

    main: dict[tuple, list] = field(default_factory=dict)
    base: dict[tuple, list] = field(default_factory=dict)
    robust: dict[tuple, list] = field(default_factory=dict)
    cross: dict[tuple, list] = field(default_factory=dict)
    points: dict[tuple, dict] = field(default_factory=dict)
    sizes_seen: dict[int, list] = field(default_factory=dict)
    n_sets: int = 0
    t_model: float = 0.0
    t_truth: float = 0.0
    t_draw: float = 0.0
    t_base: float = 0.0
    t_tau: float = 0.0
    baseline_note: str | None = None
    gmm: dict[str, dict[str, int]] = field(default_factory=dict)

    def add_gmm(self, method: str, status: dict[str, int] | None) -> None:
        """Accumulate how the GMM fits of one engine ended, per detector."""
        if status is None:
            return
        acc = self.gmm.setdefault(method, {})
        for k, v in status.items():
            acc[k] = max(acc.get(k, 0), v) if k == "max_steps" else acc.get(k, 0) + v


def _bounds(name: str) -> tuple[float, float]:
    """The range a summarised value can take (its interval is clipped to it)."""
    if name.startswith(("pearson", "spearman")):
        return -1.0, 1.0
    return (0.0, 1.0) if name == "tau" else (0.0, float("inf"))


def _agg(values: Sequence[float | None], bounds: tuple[float, float] = (-np.inf, np.inf)
         ) -> dict[str, Any]:
    """{"mean", "ci": [lo, hi], "std", "n", "values"} of one quantity over partitions (random
    partitions, or cross-validation rounds): over the k finite values, the mean and its 95%
    Student-t interval mean ± t_{0.975, k-1} sd / sqrt(k) (sd with ddof 1; clipped to
    `bounds`; none below 2 values); "values" keeps every partition's value (None where it
    was not finite)."""
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


def evaluate_variant(eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec,
                     p_tr: np.ndarray, p_te: np.ndarray, clip: bool,
                     t_split: np.ndarray | None = None, t_floor: np.ndarray | None = None
                     ) -> tuple[dict[str, float], dict[str, Any]]:
    """One variant on one partition: fitted on the meta-train sets (`fit_variant`: tau and
    line), predicting the meta-test sets (pred_i, clipped with `clip`). The row:
    - `rmse` = sqrt(mean_i (pred_i - p_i)^2) against the sampled targets p_te (each set's
      metric on its own rows, `metasets.set_truth`);
    - `rmse_split` = sqrt(mean_i (pred_i - s_i)^2) against the split-level targets t_split
      (all id/test rows vs every row of the set's OOD split: no subsampling noise);
    - `floor` = sqrt(mean_i (f_i - p_i)^2), the RMSE of the oracle split-level predictor f
      (t_floor: the split's metric from the meta-train ID rows vs every row of the split)
      against the sampled targets: no predictor that knows only the split and the
      meta-train ID rows does better in expectation, so it measures the target noise;
    - `pearson`, `spearman` (meta-test) and `pearson_train`, `spearman_train` between the
      Gscore and the target; `tau` the fitted tau (NaN for none).
    Returns (row, fit with the meta-test "points")."""
    fit = fit_variant(eng_tr, spec, p_tr)
    g_tr = eng_tr.gscore(spec.modelling, spec.distance, fit["tau"])
    g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
    pred = predict_line(fit["theta1"], fit["theta0"], g_te, clip)
    pr_tr, sp_tr = correlations(g_tr, p_tr)
    pr_te, sp_te = correlations(g_te, p_te)
    row = {"rmse": rmse(pred, p_te), "pearson": pr_te, "spearman": sp_te,
           "pearson_train": pr_tr, "spearman_train": sp_tr,
           "tau": float("nan") if fit["tau"] is None else float(fit["tau"])}
    if t_split is not None and t_floor is not None:
        row["rmse_split"] = rmse(pred, t_split)
        row["floor"] = rmse(t_floor, p_te)
    fit["points"] = {"gscore": g_te.tolist(), "true": p_te.tolist(), "predicted": pred.tolist(),
                     **({} if t_split is None else {"split_true": t_split.tolist()}),
                     **({} if t_floor is None else {"floor": t_floor.tolist()})}
    return row, fit


def summarise(per_repeat: Mapping[Any, list[dict[str, float]]]) -> dict[Any, dict]:
    """{key: {quantity: `_agg` of its values over partitions}} of result rows."""
    out = {}
    for key, rows in per_repeat.items():
        out[key] = {m: _agg([r.get(m) for r in rows], _bounds(m)) for m in rows[0]}
    return out


def nest(rows: Mapping[tuple, Any], depth: int) -> dict:
    """{(a, b, c): v} -> {a: {b: {c: v}}} for the first `depth` key parts."""
    out: dict = {}
    for key, val in rows.items():
        d = out
        for k in key[:depth - 1]:
            d = d.setdefault(k, {})
        d[key[depth - 1]] = val
    return out


def cross_store_rows(cross: dict, data: Sequence[StorePools], tr: MetaSets, te: MetaSets,
                     eng_tr: GscoreEngine, eng_te: GscoreEngine, spec: ModelSpec,
                     p_tr: np.ndarray, p_te: np.ndarray, method: str, target: str, clip: bool,
                     label: str | None = None) -> None:
    """Into `cross`: the variant fitted on store a's meta-train sets, tested on store b's
    meta-test sets (its scores, its own id/val reference for UDE), for every pair (a, b):
    rmse and correlations."""
    for a in data:
        rows_a = np.flatnonzero(tr.store == a.index)
        if rows_a.size < 2:
            continue
        fit = fit_variant(eng_tr, spec, p_tr[rows_a], rows_a)
        g_te = eng_te.gscore(spec.modelling, spec.distance, fit["tau"])
        for b in data:
            rows_b = np.flatnonzero(te.store == b.index)
            if rows_b.size == 0:
                continue
            pred = predict_line(fit["theta1"], fit["theta0"], g_te[rows_b], clip)
            pr, sp = correlations(g_te[rows_b], p_te[rows_b])
            cross.setdefault((method, target, label or spec.label, a.path, b.path), []).append(
                {"rmse": rmse(pred, p_te[rows_b]), "pearson": pr, "spearman": sp})


def headline_correlations(summary: dict[Any, dict], corr_on: str) -> dict[Any, dict]:
    """`pearson` / `spearman` on the sets `corr_on` names; both sides kept as `pearson_test`,
    `spearman_test`, `pearson_train`, `spearman_train`."""
    for cell in summary.values():
        for name in ("pearson", "spearman"):
            cell[f"{name}_test"] = cell[name]
            if corr_on == "train":
                cell[name] = cell[f"{name}_train"]
    return summary


def json_ready(obj: Any) -> Any:
    """`obj` with NumPy scalars and arrays as Python values and non-finite floats as None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.floating | np.integer):
        return json_ready(obj.item())
    if isinstance(obj, Mapping):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_ready(obj.tolist())
    return obj
