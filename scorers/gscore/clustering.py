"""Two-cluster fits of one-dimensional sets, many sets at once (Numba kernels): the exact
2-means partition (`kmeans_rows`: the Kmeans modelling, and the start of EM) and the
two-component Gaussian mixture fitted by EM (`gmm_params`: the GMM modelling). The formulas
are in the docstrings of the functions that implement them."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .spec import GMM_MAX_ITER, GMM_TOL, SIGMA_FLOOR_REL


@njit(cache=True)
def _best_cut(xs: np.ndarray, n: int) -> int:
    """Exact 1-D 2-means on ascending xs[:n]: the size k of the low cluster (0: no cut).

    In one dimension the optimal 2-means partition is a cut of the sorted values. With S_k
    the sum of the k lowest values and T the total, the cut maximises
    S_k^2/k + (T - S_k)^2/(n - k) (equivalently minimises the within-cluster sum of squares)
    over the cuts between two different values: the GLOBAL optimum, found exactly
    (deterministic, never worse than Lloyd's algorithm from random centroids); identical
    values are never separated."""
    total = 0.0
    for j in range(n):
        total += xs[j]
    best = -1.0
    best_k = 0
    s = 0.0
    for k in range(1, n):
        s += xs[k - 1]
        if xs[k - 1] == xs[k]:
            continue
        r = total - s
        v = s * s / k + r * r / (n - k)
        if v > best:
            best = v
            best_k = k
    return best_k


@njit(cache=True)
def kmeans_rows(X: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per padded row X[i, :n[i]]: [mu_lo, sd_lo, n_lo, mu_hi, sd_hi, n_hi] of the optimal
    2-means partition (`_best_cut`; means and population standard deviations of the two
    clusters). A constant row has no cut: one cluster (hi) holds every sample, lo is empty."""
    m = X.shape[0]
    out = np.zeros((m, 6))
    for i in range(m):
        ni = n[i]
        xs = np.sort(X[i, :ni])
        mean = xs.mean()
        k = _best_cut(xs - mean, ni)
        if k == 0:  # constant row: one cluster (IND) with every sample, an empty one
            out[i, 0] = mean
            out[i, 3] = mean
            out[i, 4] = xs.std()
            out[i, 5] = ni
            continue
        lo = xs[:k]
        hi = xs[k:]
        out[i, 0] = lo.mean()
        out[i, 1] = lo.std()
        out[i, 2] = k
        out[i, 3] = hi.mean()
        out[i, 4] = hi.std()
        out[i, 5] = ni - k
    return out


#: Lloyd's iterations at most (scikit-learn's KMeans max_iter).
LLOYD_MAX_ITER = 300


def lloyd_starts(n: np.ndarray, seed: int) -> np.ndarray:
    """(M, 2) int64: two distinct random rows of each set, the starting centroids of Lloyd's
    algorithm (Gscore §5.1: "Kmeans starts with two random centroids"; Forgy's start, two
    samples of the set): with u = default_rng(seed).random((M, 2)), i1 = floor(u0 n),
    i2 = floor(u1 (n - 1)), i2 += 1 where i2 >= i1 (i2 = i1 for a one-row set)."""
    n = np.asarray(n, dtype=np.int64)
    u = np.random.default_rng(seed).random((n.size, 2))
    i1 = np.minimum((u[:, 0] * n).astype(np.int64), n - 1)
    i2 = np.minimum((u[:, 1] * np.maximum(n - 1, 1)).astype(np.int64), np.maximum(n - 2, 0))
    i2 = np.where(n > 1, i2 + (i2 >= i1), i1)
    return np.stack([i1, i2], axis=1)


@njit(cache=True)
def lloyd_rows(X: np.ndarray, n: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """As `kmeans_rows`, by Lloyd's algorithm from the centroids X[i, starts[i]] (the paper's
    Kmeans, §5.1): assign each sample to the nearer centroid (a tie to the first), move each
    centroid to its cluster's mean, until no assignment changes or `LLOYD_MAX_ITER` rounds;
    a local optimum (the exact `kmeans_rows` is the global one). Columns [mu_lo, sd_lo, n_lo,
    mu_hi, sd_hi, n_hi] (lo = the cluster with the lower centroid); equal starting values
    leave one cluster with every sample (lo empty)."""
    m = X.shape[0]
    out = np.zeros((m, 6))
    for i in range(m):
        ni = n[i]
        x = X[i, :ni]
        c1 = x[starts[i, 0]]
        c2 = x[starts[i, 1]]
        first = np.zeros(ni, dtype=np.bool_)
        for it in range(LLOYD_MAX_ITER):
            changed = False
            s1 = 0.0
            k1 = 0
            s2 = 0.0
            for j in range(ni):
                a = abs(x[j] - c1) <= abs(x[j] - c2)
                if a != first[j] or it == 0:
                    changed = True
                first[j] = a
                if a:
                    s1 += x[j]
                    k1 += 1
                else:
                    s2 += x[j]
            if k1 > 0:
                c1 = s1 / k1
            if k1 < ni:
                c2 = s2 / (ni - k1)
            if not changed:
                break
        a_lo = c1 <= c2
        lo = x[first == a_lo]
        hi = x[first != a_lo]
        if lo.size == 0 or hi.size == 0:
            out[i, 3] = x.mean()
            out[i, 4] = x.std()
            out[i, 5] = ni
            out[i, 0] = x.mean()
            continue
        out[i, 0] = lo.mean()
        out[i, 1] = lo.std()
        out[i, 2] = lo.size
        out[i, 3] = hi.mean()
        out[i, 4] = hi.std()
        out[i, 5] = hi.size
    return out


#: Column names of `gmm_params`' output.
GMM_COLUMNS: tuple[str, ...] = ("w_lo", "mu_lo", "sd_lo", "w_hi", "mu_hi", "sd_hi", "steps",
                                "collapsed", "loglik", "converged", "rejected")
_LOG_2PI = float(np.log(2.0 * np.pi))
#: Extrapolations tried per SQUAREM cycle, halving alpha towards -1 after each rejection.
MAX_BACKTRACK = 4


@njit(cache=True)
def _em_step(z: np.ndarray, sz: float, szz: float, th: np.ndarray, var_floor: float,
             out: np.ndarray) -> tuple[bool, float]:
    """One EM update of th = [w0, m0, m1, v0, v1] (w1 = 1 - w0) on standardised z into `out`.

    E step and log-likelihood in one pass, one exp and one log1p per sample: with
    t = log(w0 N0(z)) - log(w1 N1(z)), P(1 | z) = 1 / (1 + exp(t)) and
    log p(z) = log(w1 N1(z)) + softplus(t). M step: weights and means from the
    responsibility sums; each variance is the responsibility-weighted variance floored at
    `var_floor`. The floored update is the exact maximiser of the expected complete-data
    log-likelihood over {v >= var_floor} (-n/2 log v - S/(2v) is unimodal in v), so every
    plain EM step is monotone: the log-likelihood never decreases. A component whose
    responsibility mass falls below 1e-8 * n is collapsed (returns False).

    Returns (not collapsed, mean log-likelihood of z under th)."""
    w0, m0, m1, v0, v1 = th[0], th[1], th[2], th[3], th[4]
    i0 = 0.5 / v0
    i1 = 0.5 / v1
    c = np.log(w0 / (1.0 - w0)) - 0.5 * np.log(v0 / v1)
    a1 = np.log(1.0 - w0) - 0.5 * (np.log(v1) + _LOG_2PI)
    n1 = 0.0
    s1 = 0.0
    q1 = 0.0
    ll = 0.0
    ni = z.size
    for j in range(ni):
        zj = z[j]
        d0 = zj - m0
        d1 = zj - m1
        t = c - d0 * d0 * i0 + d1 * d1 * i1
        if t > 0.0:
            e = np.exp(-t)
            rj = e / (1.0 + e)
            sp = t + np.log1p(e)
        else:
            e = np.exp(t)
            rj = 1.0 / (1.0 + e)
            sp = np.log1p(e)
        ll += a1 - d1 * d1 * i1 + sp
        n1 += rj
        s1 += rj * zj
        q1 += rj * zj * zj
    ll /= ni
    n0 = ni - n1
    if n0 < 1e-8 * ni or n1 < 1e-8 * ni:
        return False, ll
    nm0 = (sz - s1) / n0
    nm1 = s1 / n1
    out[0] = n0 / ni
    out[1] = nm0
    out[2] = nm1
    out[3] = max((szz - q1) / n0 - nm0 * nm0, var_floor)
    out[4] = max(q1 / n1 - nm1 * nm1, var_floor)
    return True, ll


@njit(cache=True)
def _step_length(th0: np.ndarray, th1: np.ndarray, th2: np.ndarray) -> float:
    """SQUAREM S3 step length alpha = min(-|r| / |v|, -1), r = th1 - th0,
    v = th2 - 2 th1 + th0 (`_em_iterate`)."""
    rr = 0.0
    vv = 0.0
    for q in range(5):
        r = th1[q] - th0[q]
        v = th2[q] - 2.0 * th1[q] + th0[q]
        rr += r * r
        vv += v * v
    alpha = -np.sqrt(rr / vv) if vv > 0.0 else -1.0
    return min(alpha, -1.0)


@njit(cache=True)
def _extrapolate(th0: np.ndarray, th1: np.ndarray, th2: np.ndarray, alpha: float,
                 thp: np.ndarray) -> None:
    """th' = th0 - 2 alpha r + alpha^2 v into thp (alpha = -1 gives th2, the plain EM;
    `_em_iterate`)."""
    for q in range(5):
        r = th1[q] - th0[q]
        v = th2[q] - 2.0 * th1[q] + th0[q]
        thp[q] = th0[q] - 2.0 * alpha * r + alpha * alpha * v


@njit(cache=True)
def _em_iterate(z: np.ndarray, th0: np.ndarray, max_iter: int, tol: float, var_floor: float,
                accelerate: bool, planted: np.ndarray) -> tuple[int, bool, bool, int, float]:
    """Safeguarded SQUAREM EM from th0 (updated in place to the final iterate).

    SQUAREM (Varadhan & Roland 2008, scheme S3): from th0, two EM steps th1, th2;
    r = th1 - th0, v = th2 - 2 th1 + th0, alpha = min(-|r| / |v|, -1) (`_step_length`);
    th' = th0 - 2 alpha r + alpha^2 v (`_extrapolate`); the candidate is EM(th'). It is
    ACCEPTED only if th' lies in the parameter space, does not collapse, and l(th') >= l(th1)
    (then l(EM(th')) >= l(th') >= l(th1) >= l(th0)); a rejected extrapolation is retried with
    alpha halved towards -1 (alpha <- (alpha - 1) / 2, at most MAX_BACKTRACK tries), and when
    none is accepted the plain EM iterate th2 is taken, so the log-likelihood at the start of
    each cycle never drops. `accelerate=False`: plain EM steps. Stops when the mean
    per-sample log-likelihood changes by at most tol * max(1, |l|) over a cycle (relative;
    absolute near 0), or after `max_iter` EM steps (then not converged).

    Returns (EM steps, collapsed, converged, rejected extrapolations, final mean
    log-likelihood). `planted` (test hook): when planted[0] > 0 it replaces the first
    extrapolated point, so a test can plant a bad step and see it rejected."""
    th1 = np.empty(5)
    th2 = np.empty(5)
    thp = np.empty(5)
    th3 = np.empty(5)
    sz = z.sum()
    szz = (z * z).sum()
    steps, rejected, cycle = 0, 0, 0
    ll_prev = -np.inf
    while steps < max_iter:
        ok, ll0 = _em_step(z, sz, szz, th0, var_floor, th1)
        steps += 1
        if not ok:
            return steps, True, True, rejected, ll0
        if abs(ll0 - ll_prev) <= tol * max(1.0, abs(ll0)):
            return steps, False, True, rejected, ll0
        ll_prev = ll0
        if not accelerate:
            th0[:] = th1
            continue
        ok, ll1 = _em_step(z, sz, szz, th1, var_floor, th2)
        steps += 1
        if not ok:
            th0[:] = th1
            return steps, True, True, rejected, ll1
        alpha = _step_length(th0, th1, th2)
        accepted = False
        for _ in range(MAX_BACKTRACK):
            if planted[0] > 0.0 and cycle == 0:
                thp[:] = planted
            else:
                _extrapolate(th0, th1, th2, alpha, thp)
            if 0.0 < thp[0] < 1.0 and thp[3] >= var_floor and thp[4] >= var_floor:
                okp, llp = _em_step(z, sz, szz, thp, var_floor, th3)
                steps += 1
                accepted = okp and llp >= ll1
            cycle += 1
            if accepted or alpha == -1.0:
                break
            rejected += 1
            alpha = min(-1.0, 0.5 * (alpha - 1.0))  # backtrack towards the plain EM point
        if accepted:
            th0[:] = th3
        else:
            th0[:] = th2
    ok, ll = _em_step(z, sz, szz, th0, var_floor, th1)
    return steps, not ok, False, rejected, ll


@njit(cache=True)
def _em_start(zs: np.ndarray, var_floor: float, th0: np.ndarray) -> None:
    """Initial parameters from the exact 2-means partition of the ascending zs (`_best_cut`;
    an even split when there is no cut): the two clusters' weights, means and variances
    (floored at var_floor)."""
    ni = zs.size
    k = _best_cut(zs, ni)
    if k == 0:
        k = ni // 2
    th0[0] = k / ni
    th0[1] = zs[:k].mean()
    th0[2] = zs[k:].mean()
    th0[3] = max(zs[:k].var(), var_floor)
    th0[4] = max(zs[k:].var(), var_floor)


@njit(cache=True, nogil=True)
def _em_rows(X: np.ndarray, n: np.ndarray, max_iter: int, tol: float, var_floor: float,
             accelerate: bool, planted: np.ndarray) -> np.ndarray:
    """Per row, the 2-component GMM (`gmm_params`); columns as GMM_COLUMNS."""
    m = X.shape[0]
    out = np.zeros((m, 11))
    th0 = np.empty(5)
    thb = np.empty(5)
    for i in range(m):
        ni = n[i]
        x = X[i, :ni]
        mean = x.mean()
        sd = x.std()
        out[i, 9] = 1.0
        if ni < 2 or sd <= 1e-12 * max(1.0, abs(mean)):  # constant up to rounding
            out[i, 0] = 0.5
            out[i, 1] = mean
            out[i, 2] = sd
            out[i, 3] = 0.5
            out[i, 4] = mean
            out[i, 5] = sd
            out[i, 7] = 1.0
            out[i, 8] = np.inf if sd == 0.0 else np.nan
            continue
        z = (x - mean) / sd
        _em_start(np.sort(z), var_floor, th0)
        thb[:] = th0
        steps, collapsed, converged, rejected, ll = _em_iterate(z, th0, max_iter, tol,
                                                                var_floor, accelerate, planted)
        if accelerate:  # plain EM from the same start; keep the better of the two fits
            sb, cb, vb, _, llb = _em_iterate(z, thb, max_iter, tol, var_floor, False, planted)
            steps += sb
            if (collapsed and not cb) or (collapsed == cb and llb > ll):
                th0[:] = thb
                collapsed, converged, ll = cb, vb, llb
        w0, m0, m1, v0, v1 = th0[0], th0[1], th0[2], th0[3], th0[4]
        w1 = 1.0 - w0
        if collapsed:
            w0, m0, m1, v0, v1, w1 = 0.5, 0.0, 0.0, 1.0, 1.0, 0.5
        if m0 > m1:
            m0, m1, v0, v1, w0, w1 = m1, m0, v1, v0, w1, w0
        out[i, 0] = w0
        out[i, 1] = mean + sd * m0
        out[i, 2] = sd * np.sqrt(v0)
        out[i, 3] = w1
        out[i, 4] = mean + sd * m1
        out[i, 5] = sd * np.sqrt(v1)
        out[i, 6] = steps
        out[i, 7] = 1.0 if collapsed else 0.0
        out[i, 8] = ll - np.log(sd)
        out[i, 9] = 1.0 if converged else 0.0
        out[i, 10] = rejected
    return out


def gmm_params(x: np.ndarray, n: np.ndarray, max_iter: int = GMM_MAX_ITER,
               tol: float = GMM_TOL, floor_rel: float = SIGMA_FLOOR_REL, *,
               accelerate: bool = True, planted: np.ndarray | None = None) -> np.ndarray:
    """Two-component 1-D Gaussian mixture of each padded row x[i, :n[i]], fitted by EM.

    Each set is standardised (z = (x - mean) / std, population std) and EM runs on z from the
    exact 2-means partition (`_em_start`), each variance floored at floor_rel**2 (of the
    standardised set, i.e. SIGMA_FLOOR_REL**2 of the set's variance: sklearn's reg_covar
    made scale free), accelerated by safeguarded SQUAREM (`_em_iterate`). A monotone
    extrapolation can still end in another basin than plain EM from the same start, so
    plain EM from the same start runs as well and the better fit is kept (non-collapsed
    first, then the higher log-likelihood): the result is never below plain EM's, i.e.
    scikit-learn's GaussianMixture from the same initialisation. A row that hits `max_iter`
    EM steps is reported as NOT converged, never silently. A collapsed fit (a component's
    responsibility mass below 1e-8 * n), a set of fewer than two samples or a constant set
    (std <= 1e-12 * max(1, |mean|): equal values give a rounding-level std) reports the whole
    set's Gaussian twice, with `collapsed` = 1.

    Returns (M, 11), columns `GMM_COLUMNS` in original units, component `lo` the one with the
    lower mean: [w_lo, mu_lo, sd_lo, w_hi, mu_hi, sd_hi, EM steps (of both runs), collapsed,
    mean log-likelihood per sample, converged, rejected SQUAREM extrapolations].
    `accelerate=False` runs plain EM only; `planted` (standardised [w0, m0, m1, v0, v1])
    replaces the first extrapolated point (a test hook).

    Rows are independent: large batches are split over threads (the kernel releases the GIL),
    with results identical to one call."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    n = np.ascontiguousarray(n, dtype=np.int64)
    plant = np.zeros(5) if planted is None else np.asarray(planted, dtype=np.float64)
    args = (int(max_iter), float(tol), float(floor_rel) ** 2, bool(accelerate), plant)
    workers = min(os.cpu_count() or 1, max(1, x.shape[0] // 64))
    if workers < 2:
        return _em_rows(x, n, *args)

    bounds = np.linspace(0, x.shape[0], workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda ab: _em_rows(x[ab[0]:ab[1]], n[ab[0]:ab[1]], *args),
                              zip(bounds[:-1], bounds[1:], strict=True)))
    return np.concatenate(parts)
