"""The regression from Gscore to the metric, p = theta1 * G + theta0: the least-squares line
(`fit_lines`), the tau search (`search_tau`), one variant's fit (`fit_variant`), the
prediction (`predict_line`), and the statistics of predictions (`rmse`, `correlations`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from featstore.errors import UsageError

from .engine import GscoreEngine
from .spec import _AUTO, TAU_COARSE, TAU_HALFWIDTH, TAU_STEP, ModelSpec


def fit_line(g: np.ndarray, p: np.ndarray) -> tuple[float, float, float]:
    """Least squares p = theta1 * g + theta0 -> (theta1, theta0, training MSE)."""
    t1, t0, mse = fit_lines(np.asarray(g, dtype=np.float64)[None, :], p)
    return float(t1[0]), float(t0[0]), float(mse[0])


def fit_lines(g: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`fit_line` for every row of g (T, M) against the same p (M,): ordinary least squares
    in closed form, theta1 = cov(g, p) / var(g), theta0 = mean(p) - theta1 mean(g) (equal to
    numpy lstsq on [g, 1]); a constant row gets theta1 = 0, theta0 = mean(p). The training
    loss is the mean squared residual."""
    g = np.asarray(g, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    if g.ndim != 2 or g.shape[1] < 1 or g.shape[1] != p.shape[0] or p.ndim != 1:
        raise UsageError(f"fit_line: need matching non-empty G and p, got {g.shape}, {p.shape}")
    gm = g.mean(axis=1, keepdims=True)
    dg = g - gm
    dp = p - p.mean()
    sxx = (dg * dg).sum(axis=1)
    ok = (sxx > 0) & np.isfinite(sxx) & (np.ptp(g, axis=1) > 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        t1 = np.where(ok, (dg * dp[None, :]).sum(axis=1) / np.where(ok, sxx, 1.0), 0.0)
    t0 = p.mean() - t1 * gm[:, 0]
    resid = p[None, :] - (t1[:, None] * g + t0[:, None])
    return t1, t0, (resid * resid).mean(axis=1)


def search_tau(g_of_taus: Callable[[list[float]], np.ndarray], p: np.ndarray,
               coarse: Sequence[float] = TAU_COARSE, step: float = TAU_STEP,
               halfwidth: float = TAU_HALFWIDTH) -> dict[str, Any]:
    """Coarse-to-fine tau minimising the regression's training MSE on meta-train sets: the
    grid `coarse` (0, 0.1, ..., 1.0), then every `step` (0.01) in [tau0 - halfwidth,
    tau0 + halfwidth] around the best grid value tau0, clipped to [0, 1] (supplementary B
    refines inside the best 0.1-interval; this window covers both neighbouring intervals);
    ties go to the first value in grid order.

    `g_of_taus(taus)` returns the meta-train Gscores for each tau, shape (T, M). Returns
    {"tau", "tau_coarse", "theta1", "theta0", "loss", "trace": [(tau, loss), ...]}."""
    coarse = [round(float(t), 10) for t in coarse]
    t1c, t0c, lc = fit_lines(g_of_taus(coarse), p)
    i0 = int(np.argmin(lc))
    tau0 = coarse[i0]
    k = int(round(halfwidth / step))
    fine = sorted({round(min(1.0, max(0.0, tau0 + i * step)), 10) for i in range(-k, k + 1)})
    t1f, t0f, lf = fit_lines(g_of_taus(fine), p)
    j = int(np.argmin(lf))
    trace = dict(zip(coarse, lc.tolist(), strict=True))
    trace.update(zip(fine, lf.tolist(), strict=True))
    return {"tau": fine[j], "tau_coarse": tau0, "theta1": float(t1f[j]),
            "theta0": float(t0f[j]), "loss": float(lf[j]), "trace": sorted(trace.items())}


def fit_variant(engine: GscoreEngine, spec: ModelSpec, p: np.ndarray,
              rows: np.ndarray | None = None) -> dict[str, Any]:
    """One Gscore variant fitted on meta-train sets (the engine's rows `rows`, all if None)
    with their metrics p: tau searched (`search_tau`) when spec.tau is "auto", else the
    given tau (or None), and the line (`fit_line`). Returns {"tau", "theta1", "theta0",
    "loss", "trace"}."""
    sel = slice(None) if rows is None else rows
    if spec.tau == _AUTO:
        res = search_tau(lambda ts: engine.gscores(spec.modelling, spec.distance, ts)[:, sel],
                         p, halfwidth=engine.tau_halfwidth)
    else:
        tau = None if spec.tau is None else float(spec.tau)
        t1, t0, mse = fit_line(engine.gscore(spec.modelling, spec.distance, tau)[sel], p)
        res = {"tau": tau, "theta1": t1, "theta0": t0, "loss": mse, "trace": []}
    return res


def predict_line(theta1: float, theta0: float, g: np.ndarray, clip: bool) -> np.ndarray:
    """p = theta1 * g + theta0, clipped to [0, 100] with `clip` (a percent metric cannot
    leave that range, so clipping never increases an error)."""
    pred = theta1 * np.asarray(g, dtype=np.float64) + theta0
    return np.clip(pred, 0.0, 100.0) if clip else pred


def _rankdata(a: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), as scipy.stats.rankdata."""
    order = np.argsort(a, kind="mergesort")
    s = a[order]
    first = np.r_[True, s[1:] != s[:-1]]
    dense = np.empty(a.size, dtype=np.int64)
    dense[order] = np.cumsum(first)
    bounds = np.r_[np.flatnonzero(first), a.size]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def correlations(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(Pearson, Spearman) of a and b: Pearson's r of the values and of their average ranks
    (`_rankdata`); NaN where either side is constant or has < 3 points."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan"), float("nan")
    return _pearson(a, b), _pearson(_rankdata(a), _rankdata(b))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    da, db = a - a.mean(), b - b.mean()
    den = math.sqrt(float(da @ da) * float(db @ db))
    return float(da @ db) / den if den > 0 else float("nan")


def rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    """sqrt(mean((pred - truth)^2))."""
    d = np.asarray(pred) - np.asarray(truth)
    return float(np.sqrt(np.mean(d * d)))
