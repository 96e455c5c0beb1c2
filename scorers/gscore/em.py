"""Two-component 1-D Gaussian mixtures by EM over many sets at once (Numba).

See the package docstring ("gmm") for the initialisation, the stopping rule and SQUAREM."""

from __future__ import annotations

import os

import numpy as np
from numba import njit

from .kmeans import _best_cut
from .spec import GMM_MAX_ITER, GMM_TOL, SIGMA_FLOOR_REL


@njit(cache=True)
def _em_step(z: np.ndarray, sz: float, szz: float, th: np.ndarray, var_floor: float,
             out: np.ndarray) -> bool:
    """One EM update of th = [w0, m0, m1, v0, v1] on standardised z; False if collapsed.

    One pass and one exp per sample: with t = log(w0 N0(z)) - log(w1 N1(z)),
    P(1 | z) = 1 / (1 + exp(t)); the M step uses the sums of r, r z and r z^2."""
    w0, m0, m1, v0, v1 = th[0], th[1], th[2], th[3], th[4]
    i0 = 0.5 / v0
    i1 = 0.5 / v1
    c = np.log(w0 / (1.0 - w0)) - 0.5 * np.log(v0 / v1)
    n1 = 0.0
    s1 = 0.0
    q1 = 0.0
    ni = z.size
    for j in range(ni):
        zj = z[j]
        d0 = zj - m0
        d1 = zj - m1
        t = c - d0 * d0 * i0 + d1 * d1 * i1
        if t > 0.0:
            e = np.exp(-t)
            rj = e / (1.0 + e)
        else:
            rj = 1.0 / (1.0 + np.exp(t))
        n1 += rj
        s1 += rj * zj
        q1 += rj * zj * zj
    n0 = ni - n1
    if n0 < 1e-8 * ni or n1 < 1e-8 * ni:
        return False
    nm0 = (sz - s1) / n0
    nm1 = s1 / n1
    out[0] = n0 / ni
    out[1] = nm0
    out[2] = nm1
    out[3] = max((szz - q1) / n0 - nm0 * nm0, var_floor)
    out[4] = max(q1 / n1 - nm1 * nm1, var_floor)
    return True


@njit(cache=True)
def _em_delta(a: np.ndarray, b: np.ndarray) -> float:
    """Largest change of weight, means and standard deviations between two parameter sets."""
    d = max(abs(a[0] - b[0]), abs(a[1] - b[1]), abs(a[2] - b[2]))
    return max(d, abs(np.sqrt(a[3]) - np.sqrt(b[3])), abs(np.sqrt(a[4]) - np.sqrt(b[4])))


@njit(cache=True)
def _em_iterate(z: np.ndarray, th0: np.ndarray, max_iter: int, tol: float,
                var_floor: float) -> tuple[int, bool]:
    """SQUAREM-accelerated EM from th0 (updated in place): (EM steps, not collapsed)."""
    th1 = np.empty(5)
    th2 = np.empty(5)
    thp = np.empty(5)
    sz = z.sum()
    szz = (z * z).sum()
    steps = 0
    ok = True
    while steps < max_iter:
        ok = _em_step(z, sz, szz, th0, var_floor, th1)
        steps += 1
        if not ok or _em_delta(th1, th0) <= tol:
            th0[:] = th1
            break
        ok = _em_step(z, sz, szz, th1, var_floor, th2)
        steps += 1
        if not ok or _em_delta(th2, th1) <= tol:
            th0[:] = th2
            break
        # SQUAREM (Varadhan & Roland 2008, scheme S3): extrapolate, then one EM step
        rr = 0.0
        vv = 0.0
        for q in range(5):
            r = th1[q] - th0[q]
            v = th2[q] - 2.0 * th1[q] + th0[q]
            rr += r * r
            vv += v * v
        alpha = -np.sqrt(rr / vv) if vv > 0.0 else -1.0
        alpha = min(alpha, -1.0)
        for q in range(5):
            r = th1[q] - th0[q]
            v = th2[q] - 2.0 * th1[q] + th0[q]
            thp[q] = th0[q] - 2.0 * alpha * r + alpha * alpha * v
        if not (0.0 < thp[0] < 1.0 and thp[3] >= var_floor and thp[4] >= var_floor):
            thp[:] = th2  # outside the parameter space: plain EM
        ok = _em_step(z, sz, szz, thp, var_floor, th1)
        steps += 1
        if not ok:
            break
        th0[:] = th1
    return steps, ok


@njit(cache=True, nogil=True)
def _em_rows(X: np.ndarray, n: np.ndarray, max_iter: int, tol: float,
             var_floor: float) -> np.ndarray:
    """Per row, 2-component 1-D GMM by EM (SQUAREM-accelerated) on the standardised values.

    Returns [w_lo, mu_lo, sd_lo, w_hi, mu_hi, sd_hi, EM steps, collapsed] in the row's
    original units, component `lo` having the lower mean (module docstring)."""
    m = X.shape[0]
    out = np.zeros((m, 8))
    th0 = np.empty(5)
    for i in range(m):
        ni = n[i]
        x = X[i, :ni]
        mean = x.mean()
        sd = x.std()
        if ni < 2 or sd == 0.0:
            out[i, 0] = 0.5
            out[i, 1] = mean
            out[i, 2] = sd
            out[i, 3] = 0.5
            out[i, 4] = mean
            out[i, 5] = sd
            out[i, 7] = 1.0
            continue
        z = (x - mean) / sd
        zs = np.sort(z)
        k = _best_cut(zs, ni)
        if k == 0:
            k = ni // 2
        th0[0] = k / ni
        th0[1] = zs[:k].mean()
        th0[2] = zs[k:].mean()
        th0[3] = max(zs[:k].var(), var_floor)
        th0[4] = max(zs[k:].var(), var_floor)
        steps, ok = _em_iterate(z, th0, max_iter, tol, var_floor)
        collapsed = 0.0 if ok else 1.0
        w0, m0, m1, v0, v1 = th0[0], th0[1], th0[2], th0[3], th0[4]
        w1 = 1.0 - w0
        if collapsed == 1.0:
            m0 = 0.0
            m1 = 0.0
            v0 = 1.0
            v1 = 1.0
            w0 = 0.5
            w1 = 0.5
        if m0 > m1:
            m0, m1 = m1, m0
            v0, v1 = v1, v0
            w0, w1 = w1, w0
        out[i, 0] = w0
        out[i, 1] = mean + sd * m0
        out[i, 2] = sd * np.sqrt(v0)
        out[i, 3] = w1
        out[i, 4] = mean + sd * m1
        out[i, 5] = sd * np.sqrt(v1)
        out[i, 6] = steps
        out[i, 7] = collapsed
    return out


def gmm_params(x: np.ndarray, n: np.ndarray, max_iter: int = GMM_MAX_ITER,
               tol: float = GMM_TOL, floor_rel: float = SIGMA_FLOOR_REL) -> np.ndarray:
    """(M, 8) [w_lo, mu_lo, sd_lo, w_hi, mu_hi, sd_hi, EM steps, collapsed] per row.

    Rows are independent: large batches are split over threads (the kernel releases the GIL),
    with results identical to one call."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    n = np.ascontiguousarray(n, dtype=np.int64)
    args = (int(max_iter), float(tol), float(floor_rel) ** 2)
    workers = min(os.cpu_count() or 1, max(1, x.shape[0] // 64))
    if workers < 2:
        return _em_rows(x, n, *args)
    from concurrent.futures import ThreadPoolExecutor

    bounds = np.linspace(0, x.shape[0], workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda ab: _em_rows(x[ab[0]:ab[1]], n[ab[0]:ab[1]], *args),
                              zip(bounds[:-1], bounds[1:], strict=True)))
    return np.concatenate(parts)
