"""Numba kernels: every metric of many resamples at once, from row multiplicities.

A resample is a vector of multiplicities (how often each row was drawn). ``LANES`` resamples
are walked together: the multiplicities of a stratum are laid out ``(chunks, rows, LANES)``
(``scorers.stats.resample``), so the weights of one row in the resamples of a chunk are
contiguous. The tie groups of a (positive, negative) pair are found once from the two sides
sorted once (``scorers.metric_steps.merge_groups``); per group, the kernel sums each lane's
weights of the group's rows and applies the metric's step (``scorers.metric_steps``: the same
step the one-shot metrics use, so values equal ``ood_metrics`` on the resampled rows bit for
bit) to every lane. The lane loop has no data-dependent branches for the OOD and the
error-free selective groups (a lane whose group weight is zero keeps its state, by a select),
so it runs as SIMD over the lanes; the walk state lives in one flat array with rows a
compile-time ``LANES`` apart, which lets the compiler see that the rows do not overlap.

Kinds: 0 = the 9 OOD metrics (``N_OOD`` columns), 1 = AURC and AUGRC (2), 2 = AUROC (1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from ..metric_steps import (
    N_OOD,
    N_OOD_STATE,
    N_SEL_STATE,
    ood_finish,
    ood_start,
    ood_step,
    sel_finish,
    sel_start,
    sel_step,
)

#: Resamples walked together (SIMD lanes of one kernel call).
LANES = 64
#: Output columns per kind.
WIDTH = (N_OOD, 2, 1)
_JIT: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy"}
# rows of the flat state array after the walk state: group weights and lane totals
_CI, _CJ, _NP, _NN = 0, 1, 2, 3


@njit(inline="always", **_JIT)
def _load8(a, w):
    """Lane ``w`` of an 8-value walk state (rows ``LANES`` apart) as a tuple."""
    L = LANES
    return (a[w], a[L + w], a[2 * L + w], a[3 * L + w], a[4 * L + w], a[5 * L + w],
            a[6 * L + w], a[7 * L + w])


@njit(inline="always", **_JIT)
def _load19(a, w):
    """Lane ``w`` of the 19-value OOD walk state as a tuple."""
    L = LANES
    return _load8(a, w) + (a[8 * L + w], a[9 * L + w], a[10 * L + w], a[11 * L + w],
                           a[12 * L + w], a[13 * L + w], a[14 * L + w], a[15 * L + w],
                           a[16 * L + w], a[17 * L + w], a[18 * L + w])


@njit(inline="always", **_JIT)
def _store8(a, w, new, old, keep):
    """Lane ``w`` of the state := ``old`` where ``keep`` (a zero-weight group) else ``new``
    (written out: an indexed loop over a tuple does not become SIMD)."""
    L = LANES
    a[0 * L + w] = old[0] if keep else new[0]
    a[1 * L + w] = old[1] if keep else new[1]
    a[2 * L + w] = old[2] if keep else new[2]
    a[3 * L + w] = old[3] if keep else new[3]
    a[4 * L + w] = old[4] if keep else new[4]
    a[5 * L + w] = old[5] if keep else new[5]
    a[6 * L + w] = old[6] if keep else new[6]
    a[7 * L + w] = old[7] if keep else new[7]


@njit(inline="always", **_JIT)
def _store19(a, w, new, old, keep):
    """As ``_store8`` for the 19-value OOD state."""
    L = LANES
    _store8(a, w, new[:8], old[:8], keep)
    a[8 * L + w] = old[8] if keep else new[8]
    a[9 * L + w] = old[9] if keep else new[9]
    a[10 * L + w] = old[10] if keep else new[10]
    a[11 * L + w] = old[11] if keep else new[11]
    a[12 * L + w] = old[12] if keep else new[12]
    a[13 * L + w] = old[13] if keep else new[13]
    a[14 * L + w] = old[14] if keep else new[14]
    a[15 * L + w] = old[15] if keep else new[15]
    a[16 * L + w] = old[16] if keep else new[16]
    a[17 * L + w] = old[17] if keep else new[17]
    a[18 * L + w] = old[18] if keep else new[18]


@njit(inline="always", **_JIT)
def _group_weights(a, at, cp, p_rows, ia, ib, cq, q_rows, ja, jb):
    """Rows ``at + _CI`` / ``at + _CJ`` of ``a`` := per lane, the weight of the group's
    positive rows ``p_rows[ia:ib]`` and negative rows ``q_rows[ja:jb]``."""
    ci = (at + _CI) * LANES
    cj = (at + _CJ) * LANES
    if ib - ia == 1 and jb == ja:
        r = p_rows[ia]
        for w in range(LANES):
            a[ci + w] = cp[r, w]
            a[cj + w] = 0.0
        return
    if ib == ia and jb - ja == 1:
        r = q_rows[ja]
        for w in range(LANES):
            a[ci + w] = 0.0
            a[cj + w] = cq[r, w]
        return
    for w in range(LANES):
        a[ci + w] = 0.0
        a[cj + w] = 0.0
    for k in range(ia, ib):
        r = p_rows[k]
        for w in range(LANES):
            a[ci + w] += cp[r, w]
    for k in range(ja, jb):
        r = q_rows[k]
        for w in range(LANES):
            a[cj + w] += cq[r, w]


@njit(**_JIT)
def _totals(a, at, cp, p_rows, cq, q_rows):
    """Rows ``at + _NP`` / ``at + _NN`` := per lane, the total positive / negative weight."""
    for w in range(LANES):
        a[(at + _NP) * LANES + w] = 0.0
        a[(at + _NN) * LANES + w] = 0.0
    for k in range(p_rows.shape[0]):
        for w in range(LANES):
            a[(at + _NP) * LANES + w] += cp[p_rows[k], w]
    for k in range(q_rows.shape[0]):
        for w in range(LANES):
            a[(at + _NN) * LANES + w] += cq[q_rows[k], w]


@njit(**_JIT)
def ood_lanes(p_rows, p_end, q_rows, q_end, cp, cq, out):
    """``out[w, :N_OOD]`` = the OOD metrics (fractions) of lane ``w``: positive row ``p_rows[k]``
    weighted ``cp[p_rows[k], w]``, negative ``q_rows[k]`` by ``cq[q_rows[k], w]``."""
    S = N_OOD_STATE
    L = LANES
    a = np.empty((S + 4) * L)
    _totals(a, S, cp, p_rows, cq, q_rows)
    for w in range(L):
        s0 = ood_start(a[(S + _NP) * L + w], a[(S + _NN) * L + w])
        _store19(a, w, s0, s0, False)
    ia = 0
    ja = 0
    for g in range(p_end.shape[0]):
        _group_weights(a, S, cp, p_rows, ia, p_end[g], cq, q_rows, ja, q_end[g])
        ia = p_end[g]
        ja = q_end[g]
        for w in range(L):
            ci = a[(S + _CI) * L + w]
            cj = a[(S + _CJ) * L + w]
            old = _load19(a, w)
            new = ood_step(old, ci, cj, a[(S + _NP) * L + w], a[(S + _NN) * L + w])
            _store19(a, w, new, old, ci + cj == 0.0)
    for w in range(L):
        ood_finish(_load19(a, w), a[(S + _NP) * L + w], a[(S + _NN) * L + w], out[w])


@njit(**_JIT)
def sel_lanes(p_rows, p_end, q_rows, q_end, cp, cq, out):
    """``out[w, :2]`` = (AURC, AUGRC) of lane ``w`` (positive = correct, negative = wrong
    rows). Groups without wrong rows take no logarithm and run as SIMD over the lanes."""
    S = N_SEL_STATE
    L = LANES
    a = np.empty((S + 4) * L)
    for w in range(L):
        s0 = sel_start()
        _store8(a, w, s0, s0, False)
    ia = 0
    ja = 0
    for g in range(p_end.shape[0]):
        _group_weights(a, S, cp, p_rows, ia, p_end[g], cq, q_rows, ja, q_end[g])
        has_wrong = q_end[g] > ja
        ia = p_end[g]
        ja = q_end[g]
        if has_wrong:
            for w in range(L):
                ci = a[(S + _CI) * L + w]
                cj = a[(S + _CJ) * L + w]
                if ci + cj > 0.0:
                    old = _load8(a, w)
                    _store8(a, w, sel_step(old, ci, cj), old, False)
        else:
            for w in range(L):
                ci = a[(S + _CI) * L + w]
                old = _load8(a, w)
                _store8(a, w, sel_step(old, ci, 0.0), old, ci == 0.0)
    for w in range(L):
        sel_finish(_load8(a, w), out[w])


@njit(**_JIT)
def auroc_lanes(p_rows, p_end, q_rows, q_end, cp, cq, out):
    """``out[w, 0]`` = AUROC (fraction) of lane ``w``: ``sum_g cj (2 tp_above + ci) / (2 P
    Q)``, exact in floating point (integer-valued terms); NaN when P or Q weighs zero."""
    L = LANES
    a = np.zeros(6 * L)
    _totals(a, 2, cp, p_rows, cq, q_rows)
    ia = 0
    ja = 0
    for g in range(p_end.shape[0]):
        _group_weights(a, 2, cp, p_rows, ia, p_end[g], cq, q_rows, ja, q_end[g])
        ia = p_end[g]
        ja = q_end[g]
        for w in range(L):
            ci = a[(2 + _CI) * L + w]
            a[L + w] += a[(2 + _CJ) * L + w] * (2.0 * a[w] + ci)
            a[w] += ci
    for w in range(L):
        n_pos = a[(2 + _NP) * L + w]
        n_neg = a[(2 + _NN) * L + w]
        ok = n_pos > 0.0 and n_neg > 0.0
        out[w, 0] = a[L + w] / (2.0 * n_pos * n_neg) if ok else np.nan


@njit(inline="always", **_JIT)
def _lanes(kind, p_rows, p_end, q_rows, q_end, cp, cq, out):
    if kind == 0:
        ood_lanes(p_rows, p_end, q_rows, q_end, cp, cq, out)
    elif kind == 1:
        sel_lanes(p_rows, p_end, q_rows, q_end, cp, cq, out)
    else:
        auroc_lanes(p_rows, p_end, q_rows, q_end, cp, cq, out)


def _boot(kind, p_rows, p_ends, q_rows, q_ends, g_off, q_off, cp3, cq3, out):
    """Every (pair, chunk): pair ``s`` has groups ``g_off[s]:g_off[s+1]`` and negative rows
    ``q_rows[q_off[s]:q_off[s+1]]``; ``out[s, c]`` gets chunk ``c``'s lanes."""
    n_chunks = cp3.shape[0]
    for t in prange((g_off.shape[0] - 1) * n_chunks):
        s = t // n_chunks
        c = t % n_chunks
        g0, g1 = g_off[s], g_off[s + 1]
        _lanes(kind, p_rows, p_ends[g0:g1], q_rows[q_off[s]:q_off[s + 1]], q_ends[g0:g1],
               cp3[c], cq3[c], out[s, c])


def _jack(kind, p_rows, p_end, q_rows, q_end, n_p, n_q, which, cells, out):
    """Leave-one-out: lane ``l`` of chunk ``c`` drops row ``cells[c * LANES + l]`` of the
    positive (``which == 0``) or negative side; every other row weighs 1."""
    n_chunks = (cells.shape[0] + LANES - 1) // LANES
    for c in prange(n_chunks):
        cp = np.ones((n_p, LANES), np.uint8)
        cq = np.ones((n_q, LANES), np.uint8)
        for lane in range(LANES):
            k = c * LANES + lane
            if k < cells.shape[0]:
                if which == 0:
                    cp[cells[k], lane] = 0
                else:
                    cq[cells[k], lane] = 0
        _lanes(kind, p_rows, p_end, q_rows, q_end, cp, cq, out[c])


#: Below this many lane-row visits a kernel runs on one thread: waking the thread pool costs
#: more than it saves on small work.
PARALLEL_MIN_WORK = 4_000_000

_KERNELS = {name: (njit(**_JIT)(fn), njit(parallel=True, **_JIT)(fn))
            for name, fn in (("boot", _boot), ("jack", _jack))}


def _dispatch(name: str, work: int):
    serial, parallel = _KERNELS[name]
    return parallel if work >= PARALLEL_MIN_WORK else serial


def boot(kind: int, p_rows: np.ndarray, p_ends: np.ndarray, q_rows: np.ndarray,
         q_ends: np.ndarray, g_off: np.ndarray, q_off: np.ndarray, cp3: np.ndarray,
         cq3: np.ndarray) -> np.ndarray:
    """(pairs, chunks * LANES, WIDTH[kind]) metrics (fractions) of every resample lane.

    ``cp3``/``cq3``: (chunks, rows, LANES) multiplicities of the positive / negative stratum;
    ``p_rows`` (shared by every pair) and ``q_rows`` index their rows in decreasing score;
    pair ``s``'s tie groups are ``p_ends``/``q_ends[g_off[s]:g_off[s+1]]`` (ends within
    ``p_rows`` and within the pair's ``q_rows[q_off[s]:q_off[s+1]]``)."""
    n_pairs = g_off.shape[0] - 1
    out = np.empty((n_pairs, cp3.shape[0], LANES, WIDTH[kind]))
    work = (p_rows.shape[0] * n_pairs + q_rows.shape[0]) * cp3.shape[0] * LANES
    _dispatch("boot", work)(kind, p_rows, p_ends, q_rows, q_ends, g_off, q_off, cp3, cq3, out)
    return out.reshape(n_pairs, cp3.shape[0] * LANES, WIDTH[kind])


def jackknife(kind: int, p_rows: np.ndarray, p_end: np.ndarray, q_rows: np.ndarray,
              q_end: np.ndarray, n_p: int, n_q: int, which: int,
              cells: np.ndarray) -> np.ndarray:
    """(len(cells), WIDTH[kind]) metrics with row ``cells[i]`` of the positive (``which`` 0)
    or negative (1) side left out, every other row weighing 1 (``n_p``/``n_q`` rows)."""
    n_chunks = (cells.shape[0] + LANES - 1) // LANES
    out = np.empty((n_chunks, LANES, WIDTH[kind]))
    work = (p_rows.shape[0] + q_rows.shape[0]) * n_chunks * LANES
    _dispatch("jack", work)(kind, p_rows, p_end, q_rows, q_end, n_p, n_q, which,
                            np.ascontiguousarray(cells, dtype=np.int64), out)
    return out.reshape(n_chunks * LANES, WIDTH[kind])[:cells.shape[0]]
