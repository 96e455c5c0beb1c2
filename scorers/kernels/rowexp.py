"""Fused row passes over logits (N, C) in float64, one Numba loop per row: the max, the
exponentials exp(z_j) with z_j = l_j / T - max_k l_k / T, their sum s, and what a scorer
derives from them (the logsumexp m + log s, the softmax e_j / s, sum_j p_j log p_j, GEN's
generalized entropy of the top-M probabilities). `scorers.kernels.softmax` is the public API;
this module holds the loops.

Why a kernel: NumPy's float64 exp is scalar on AVX2 machines (~6 ns per entry, 3x its
float32 exp), and the NumPy formulation needs a float64 copy of the chunk plus one pass per
operation. Here each row is read once, and `exp_nonpos` is a branch-free float64 exp that the
compiler vectorizes (`log_nonneg` likewise for the log GEN needs; every kernel is compiled
with error_model="numpy", so a division is not a branch that stops vectorization):

    exp(z) = 2^k * P(r),  k = floor(z / ln 2 + 1/2),  r = (z - k ln2_hi) - k ln2_lo,
    P = the degree-13 Taylor polynomial of exp (Horner, |r| <= ln 2 / 2: truncation < 1e-17),
    2^k = 2^k1 * 2^k2 with k1 = floor(k / 2), k2 = k - k1 (both normal numbers, so results in
    the subnormal range are rounded once), z clamped below at -746 (exp underflows to 0).

It is within 1 ulp of the correctly rounded exp for every z <= 0 (checked against np.exp in
tests/scorers/test_rowexp.py), exact at z = 0 (P(0) = 1), and deterministic: the same inputs
give the same bits, whatever the block or thread layout (each row is computed alone).
Sums of a row use four interleaved float64 accumulators in index order (fixed order).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: hi has 32 significant bits
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_MAGIC = 6755399441055744.0  # 1.5 * 2^52: x + MAGIC holds the integer x in its low bits


@njit(fastmath={"contract"}, error_model="numpy")
def exp_nonpos(z):
    """exp(z) for z <= 0 in float64 (see the module docstring), 0.0 below -746 and at -inf."""
    if z < -746.0:  # not max(): NaN must stay NaN
        z = -746.0
    k = np.floor(z * _INV_LN2 + 0.5)
    r = (z - k * _LN2_HI) - k * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    k1 = np.floor(k * 0.5)
    b1 = np.float64(k1 + _MAGIC).view(np.int64)
    b2 = np.float64((k - k1) + _MAGIC).view(np.int64)
    s1 = np.int64((b1 + 1023) << 52).view(np.float64)
    s2 = np.int64((b2 + 1023) << 52).view(np.float64)
    return p * s1 * s2


_SQRT2 = 1.4142135623730951
_TWO54 = 18014398509481984.0
_TWO52 = 4503599627370496.0
_MIN_NORMAL = 2.2250738585072014e-308


@njit(fastmath={"contract"}, error_model="numpy")
def log_nonneg(x):
    """log(x) for finite x >= 0 in float64 (-inf at 0), branch-free so loops vectorize:
    x = 2^k m with m in [sqrt(1/2), sqrt(2)) from the bits (subnormals scaled by 2^54 first),
    log m = 2 atanh(f) with f = (m - 1) / (m + 1), |f| <= 0.1716, as the odd series
    2 (f + f^3 / 3 + ... + f^23 / 23) (truncation < 1e-18 relative), and
    log x = k ln2_hi + (log m + k ln2_lo). Within a few ulp of np.log (tests)."""
    sub = np.float64(x < _MIN_NORMAL)
    xs = x * (1.0 + sub * (_TWO54 - 1.0))
    bits = np.float64(xs).view(np.int64)
    # the biased exponent e as a float without an int -> float conversion (none is packed
    # on AVX2): the double with bits 0x4330000000000000 | e is 2^52 + e
    k = np.int64(((bits >> 52) & 0x7FF) | 0x4330000000000000).view(np.float64) - (_TWO52 + 1023.0)
    m = np.int64((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000).view(np.float64)
    big = np.float64(m > _SQRT2)
    m = m * (1.0 - 0.5 * big)
    k = k + big - 54.0 * sub
    f = (m - 1.0) / (m + 1.0)
    f2 = f * f
    t = 2.0 / 23.0
    t = t * f2 + 2.0 / 21.0
    t = t * f2 + 2.0 / 19.0
    t = t * f2 + 2.0 / 17.0
    t = t * f2 + 2.0 / 15.0
    t = t * f2 + 2.0 / 13.0
    t = t * f2 + 2.0 / 11.0
    t = t * f2 + 2.0 / 9.0
    t = t * f2 + 2.0 / 7.0
    t = t * f2 + 2.0 / 5.0
    t = t * f2 + 2.0 / 3.0
    logm = 2.0 * f + f * f2 * t
    out = k * _LN2_HI + (logm + k * _LN2_LO)
    return -np.inf if x == 0.0 else out


@njit(error_model="numpy")
def _row_sum(v, n):
    """sum of v[:n] with four interleaved accumulators (fixed order, so deterministic)."""
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    j = 0
    while j + 4 <= n:
        a0 += v[j]
        a1 += v[j + 1]
        a2 += v[j + 2]
        a3 += v[j + 3]
        j += 4
    while j < n:
        a0 += v[j]
        j += 1
    return (a0 + a1) + (a2 + a3)


@njit(fastmath={"contract"}, error_model="numpy")
def _row_exp(x, i, temperature, z, e):
    """z[j] = x[i, j] / T - max_k x[i, k] / T and e[j] = exp(z[j]) for row i; returns the
    max / T (float64)."""
    c = x.shape[1]
    m = x[i, 0]
    for j in range(1, c):
        if x[i, j] > m:
            m = x[i, j]
    mt = np.float64(m) / temperature
    if temperature == 1.0:
        for j in range(c):
            z[j] = np.float64(x[i, j]) - mt
            e[j] = exp_nonpos(z[j])
    else:
        for j in range(c):
            z[j] = np.float64(x[i, j]) / temperature - mt
            e[j] = exp_nonpos(z[j])
    return mt


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def max_and_sumexp(x, temperature, mt_out, s_out):
    """Per row i: mt_out[i] = max_k x[i, k] / T and s_out[i] = sum_j exp(x[i, j] / T -
    mt_out[i]) (so logsumexp = mt + log s and the max softmax = 1 / s)."""
    c = x.shape[1]
    z = np.empty(c)
    e = np.empty(c)
    for i in range(x.shape[0]):
        mt_out[i] = _row_exp(x, i, temperature, z, e)
        s_out[i] = _row_sum(e, c)


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def log_max_softmax_rows(x, temperature, out):
    """out[i] = log max_j softmax(x[i] / T)_j = -log(s) = -log1p(r), r = the sum of e_j over
    every j but the first argmax (whose e is exp(0) = 1 exactly): log1p of r keeps r's
    digits where s = 1 + r rounds to 1.0, so the score separates rows until r underflows
    (top-logit gaps of ~745 T)."""
    c = x.shape[1]
    z = np.empty(c)
    e = np.empty(c)
    for i in range(x.shape[0]):
        _row_exp(x, i, temperature, z, e)
        top = 0
        for j in range(1, c):
            if x[i, j] > x[i, top]:
                top = j
        e[top] = 0.0
        out[i] = -math.log1p(_row_sum(e, c))


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def softmax_rows(x, temperature, p_out, plogp_out, want_plogp):
    """p_out[i, j] = e_j / s (e_j = exp(z_j), z_j = x[i, j] / T - max / T, s = sum e); when
    `want_plogp`, plogp_out[i] = sum_j p_j log p_j = (sum_j e_j z_j) / s - log s."""
    c = x.shape[1]
    z = np.empty(c)
    e = np.empty(c)
    for i in range(x.shape[0]):
        _row_exp(x, i, temperature, z, e)
        s = _row_sum(e, c)
        for j in range(c):
            p_out[i, j] = e[j] / s
        if want_plogp:
            for j in range(c):
                z[j] *= e[j]
            plogp_out[i] = _row_sum(z, c) / s - math.log(s)


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def neg_entropy_rows(x, out):
    """out[i] = sum_j p_j log p_j of p = softmax(x[i]) = (sum_j e_j z_j) / s - log s."""
    c = x.shape[1]
    z = np.empty(c)
    e = np.empty(c)
    for i in range(x.shape[0]):
        _row_exp(x, i, 1.0, z, e)
        s = _row_sum(e, c)
        for j in range(c):
            z[j] *= e[j]
        out[i] = _row_sum(z, c) / s - math.log(s)


@njit(error_model="numpy")
def _kth_largest(src, n, kth, a, b):
    """The value a descending sort of src[:n] puts at position kth (0-based), by quickselect
    with branch-free partitions (each pass copies the entries above the median-of-three
    pivot, or below it, into b with a conditional increment, then back into a);
    deterministic. NaN in src[:n] ends the search with a NaN or arbitrary entry."""
    for j in range(n):
        a[j] = src[j]
    while n > 1:
        x0, x1, x2 = a[0], a[n // 2], a[n - 1]
        pivot = max(min(x0, x1), min(max(x0, x1), x2))
        n_gt = 0
        n_eq = 0
        for j in range(n):
            v = a[j]
            b[n_gt] = v
            n_gt += v > pivot
            n_eq += v == pivot
        if kth < n_gt:
            n = n_gt
        elif kth < n_gt + n_eq:
            return pivot
        else:
            n_lt = 0
            for j in range(n):
                v = a[j]
                b[n_lt] = v
                n_lt += v < pivot
            if n_lt + n_gt + n_eq != n:  # NaN
                return pivot
            kth -= n_gt + n_eq
            n = n_lt
        for j in range(n):
            a[j] = b[j]
    return a[0]


@njit(error_model="numpy")
def _keep_largest(key, n, m, a, b):
    """Permute key[:n] so that key[:m] holds its m largest entries: those above the m-th
    largest value t (in their order in key), then the entries equal to t, then those below
    (in order). Branch-free passes through the scratch buffers a and b."""
    t = _kth_largest(key, n, m - 1, a, b)
    n_gt = 0
    n_lt = 0
    for j in range(n):
        v = key[j]
        a[n_gt] = v
        n_gt += v > t
        b[n_lt] = v
        n_lt += v < t
    for j in range(n_gt):
        key[j] = a[j]
    for j in range(n_gt, n - n_lt):
        key[j] = t
    for j in range(n_lt):
        key[n - n_lt + j] = b[j]


_SAMPLE = 64
_BRACKET = 4


@njit(error_model="numpy")
def _keep_top(z, m, key, sample):
    """Copy into key[:h] (in index order) h >= m entries of z that include its m largest,
    and return h: a branch-free pass keeping z_j >= a pivot taken from `_SAMPLE` strided
    entries (the sample's (rank + 1)-th largest, rank = 1.5 m / C of the sample + 2, by a
    partial insertion sort into `sample`); all of z when the row is short, m large, or the
    pivot keeps fewer than m."""
    c = z.shape[0]
    if c >= 4 * _SAMPLE and 2 * m < c:
        stride = c // _SAMPLE
        rank = min(_SAMPLE - 1, (3 * m * _SAMPLE) // (2 * c) + 2)
        kept = 0  # sample[:kept]: the largest sampled values so far, descending
        for a in range(_SAMPLE):
            v = z[a * stride]
            if kept <= rank:
                kept += 1
            elif v <= sample[rank]:
                continue
            b = kept - 1
            while b > 0 and sample[b - 1] < v:
                sample[b] = sample[b - 1]
                b -= 1
            sample[b] = v
        pivot = sample[rank]
        h = 0
        for j in range(c):
            key[h] = z[j]
            h += z[j] >= pivot
        if h >= m:
            return h
    for j in range(c):
        key[j] = z[j]
    return c


@njit(error_model="numpy")
def _sample_top(z, count, sample):
    """sample[:count] = the `count` largest of `_SAMPLE` entries of z taken at a fixed
    stride, in decreasing order (a partial insertion sort)."""
    stride = z.shape[0] // _SAMPLE
    kept = 0
    for a in range(_SAMPLE):
        v = z[a * stride]
        if kept < count:
            kept += 1
        elif v <= sample[count - 1]:
            continue
        b = kept - 1
        while b > 0 and sample[b - 1] < v:
            sample[b] = sample[b - 1]
            b -= 1
        sample[b] = v


@njit(error_model="numpy")
def _bracket_top(z, m, key, sample, band, a, b):
    """Try to leave the m largest entries of z in key[:m] with one branch-free pass: two
    pivots from the strided sample bracket the m-th largest (sample ranks m S / C -+ 6);
    entries above the upper pivot go to key, entries between the pivots to `band`; if the
    m-th largest is in the band, a selection there finds it (t) and key[:m] becomes the
    entries above t (upper ones first, then band ones, in index order) then copies of t.
    False (key unspecified) when the row is short, m >= C / 2 or the bracket missed."""
    c = z.shape[0]
    if c < 4 * _SAMPLE or 2 * m >= c:
        return False
    centre = (m * _SAMPLE) // c
    r_lo = min(_SAMPLE - 1, centre + _BRACKET)
    _sample_top(z, r_lo + 1, sample)
    upper = sample[centre - _BRACKET] if centre >= _BRACKET else np.inf
    lower = sample[r_lo]
    n_up = 0
    n_band = 0
    for j in range(c):
        v = z[j]
        key[n_up] = v
        n_up += v > upper
        band[n_band] = v
        n_band += (v <= upper) & (v >= lower)
    if n_up >= m or n_up + n_band < m:
        return False
    t = _kth_largest(band, n_band, m - n_up - 1, a, b)
    kept = n_up
    for j in range(n_band):
        v = band[j]
        key[kept] = v
        kept += v > t
    for j in range(kept, m):
        key[j] = t
    return True


_MAX_HALF_STEPS = 64


@njit(error_model="numpy")
def _power_half_steps(q, n, half_steps, out, work):
    """out[:n] = q[:n] ** (half_steps / 2) for 0 <= half_steps <= _MAX_HALF_STEPS by
    products (binary exponentiation, one vectorized pass per bit of the integer part) and one
    sqrt for a half: GEN's gamma in {0.5, 1, 2, 5, 10} of the default grid costs no exp."""
    whole = half_steps // 2
    for k in range(n):
        out[k] = np.sqrt(q[k]) if half_steps % 2 else 1.0
        work[k] = q[k]
    while whole > 0:
        if whole % 2:
            for k in range(n):
                out[k] *= work[k]
        whole //= 2
        if whole > 0:
            for k in range(n):
                work[k] *= work[k]


_TINY = 1e-300  # a p (1 - p) below this is carried as its log (GEN)


@njit(error_model="numpy")
def _log_rest(z, first):
    """log sum_{j != first} exp(z_j) from the second-largest z (no underflow); -inf if none."""
    z2 = -np.inf
    for j in range(z.shape[0]):
        if j != first and z[j] > z2:
            z2 = z[j]
    if z2 == -np.inf:
        return -np.inf
    acc = 0.0
    for j in range(z.shape[0]):
        if j != first:
            acc += exp_nonpos(z[j] - z2)
    return z2 + math.log(acc)


@njit(fastmath={"contract"}, error_model="numpy")
def _gen_products(z, e, s, key, top, qv, lt, tiny):
    """GEN's qv[k] = p_k (1 - p_k) of the kept entries key[:top] (p_k = exp(key_k) / s), a
    largest entry (key_k = 0) as (1 / s) (r / s), r = s - 1 summed without the first
    argmax's e = 1 (1 - p never rounds to 0); where qv[k] < _TINY, tiny[k] is set and
    lt[k] = log(p_k (1 - p_k)) from logs: log r - 2 log1p(r) (log r from the second-largest z
    when r is tiny) or z - log1p(r) + log1p(-p). Returns whether any entry is tiny."""
    c = z.shape[0]
    first = 0
    while first < c - 1 and z[first] != 0.0:  # z = 0 at the max (NaN rows: any index)
        first += 1
    e_top = e[first]
    e[first] = 0.0
    r = _row_sum(e, c)
    e[first] = e_top
    q_top = r / s / s
    count = 0
    for k in range(top):  # branch-free (selects), so it vectorizes
        p = exp_nonpos(key[k]) / s
        v = q_top if key[k] == 0.0 else p * (1.0 - p)
        qv[k] = v
        count += v < _TINY
    if count == 0:
        return False
    ls = math.log1p(r)
    logr = math.log(r) if r >= _TINY else _log_rest(z, first)
    for k in range(top):
        tiny[k] = qv[k] < _TINY
        if tiny[k]:
            if key[k] == 0.0:
                lt[k] = logr - 2.0 * ls
            else:
                lt[k] = key[k] - ls + math.log1p(-exp_nonpos(key[k]) / s)
    return True


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def gen_rows(x, gammas, ms, out):
    """GEN over the rows of x (T = 1): out[i, g, q] = -sum over the top ms[q] probabilities
    p of row i of (p (1 - p))^gammas[g], for distinct gammas and distinct ms sorted in
    decreasing order, each <= C.

    Per row: one exp pass (z_j = l_j - max l, e_j = exp(z_j), s = sum e); then selections
    leave the ms[q] largest z in key[:ms[q]] for every q (key[:ms[0]] = all of z when
    ms[0] = C; else `_bracket_top`, or `_keep_top` + `_keep_largest` when its bracket
    misses; then `_keep_largest` within the previous prefix), and lq_k = log(p_k (1 - p_k)),
    p_k = exp(key_k) / s, once per kept entry (`log_nonneg`; skipped when every gamma is a
    multiple of 1/2). Per gamma: one exp pass w_k = exp(gamma lq_k) = (p_k (1 - p_k))^gamma
    over the kept entries, or, for gamma a multiple of 1/2 up to 32, products and a sqrt of
    p_k (1 - p_k) (`_power_half_steps`); summed in key order; the sum for ms[q] is the
    running sum at ms[q]. Without saturation (`_gen_products`): a largest entry's
    p (1 - p) is (1 / s) (r / s), r the sum of the other e (never 1 - 1.0), and a product
    below `_TINY` is carried as its log (log r - 2 log1p(r), or z - log1p(r) + log1p(-p)),
    so (p (1 - p))^gamma = exp(gamma lq) stays exact where p rounds to 1.0 or exp(z)
    underflows, until gamma lq itself underflows (< -745)."""
    n, c = x.shape
    n_m = ms.shape[0]
    top = ms[0]
    z = np.empty(c)
    e = np.empty(c)
    key = np.empty(c)
    lq = np.empty(c)
    sample = np.empty(_SAMPLE)
    buf_a = np.empty(c)
    buf_b = np.empty(c)
    band = np.empty(c)
    qv = np.empty(c)
    half_steps = np.empty(gammas.shape[0], dtype=np.int64)
    need_log = False
    for g in range(gammas.shape[0]):
        twice = gammas[g] * 2.0
        exact = twice == np.floor(twice) and twice <= _MAX_HALF_STEPS
        half_steps[g] = np.int64(twice) if exact else -1
        need_log = need_log or not exact
    tiny = np.empty(c, dtype=np.bool_)
    lt = np.empty(c)
    for i in range(n):
        _row_exp(x, i, 1.0, z, e)
        s = _row_sum(e, c)
        if top == c:
            for j in range(c):
                key[j] = z[j]
        elif not _bracket_top(z, top, key, sample, band, buf_a, buf_b):
            _keep_largest(key, _keep_top(z, top, key, sample), top, buf_a, buf_b)
        for q in range(1, n_m):
            _keep_largest(key, ms[q - 1], ms[q], buf_a, buf_b)
        any_tiny = _gen_products(z, e, s, key, top, qv, lt, tiny)
        if need_log:
            for k in range(top):
                lq[k] = log_nonneg(qv[k])
            if any_tiny:
                for k in range(top):
                    if tiny[k]:
                        lq[k] = lt[k]
        for g in range(gammas.shape[0]):
            gamma = gammas[g]
            if half_steps[g] >= 0:  # e is free after the row's sum
                _power_half_steps(qv, top, half_steps[g], e, z)  # z is free too
                if any_tiny:
                    for k in range(top):
                        if tiny[k]:
                            e[k] = exp_nonpos(gamma * lt[k])
            else:
                for k in range(top):
                    e[k] = exp_nonpos(gamma * lq[k])
            acc = 0.0
            start = 0
            for q in range(n_m - 1, -1, -1):
                acc += _row_sum(e[start:], ms[q] - start)
                start = ms[q]
                out[i, g, q] = -acc


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def exp_array(z, out):
    """out[j] = exp_nonpos(z[j]) for a 1-D array (the kernel's exp, exposed for its tests)."""
    for j in range(z.shape[0]):
        out[j] = exp_nonpos(z[j])


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def log_array(x, out):
    """out[j] = log_nonneg(x[j]) for a 1-D array (exposed for its tests)."""
    for j in range(x.shape[0]):
        out[j] = log_nonneg(x[j])
