"""The per-threshold step of every ranking metric, shared by the one-shot metrics
(``scorers.metrics``, ``scorers.selective``) and the bootstrap (``scorers.stats.walk``).

A metric walk visits the distinct score values from the highest down (tie groups). At a group
the positive rows (ID; correct predictions) carry total weight ``ci`` and the negative rows
(OOD; wrong predictions) ``cj``: weight 1 per row for the metrics of the data itself, the row
multiplicities of a resample for the bootstrap. A step maps the walk's state before a group
to the state after it; ``*_start`` is the state before the first group and ``*_finish`` turns
the final state into the metrics (fractions). The formulas are those documented in
``scorers.metrics`` (OOD metrics) and ``scorers.selective`` (AURC, AUGRC); in brief, with
``tp``/``fp`` the positive/negative weight at or above the group, ``P``/``Q`` the totals:

- OOD positive (``-score``) first, from the counts above the group: recall ``ro = (Q - fp) /
  Q``, precision ``po = (Q - fp) / ((Q - fp) + (P - tp))``; trapezoid ``(ro_prev - ro)
  (po_prev + po) / 2`` and step ``(ro_prev - ro) po_prev`` summed (AUPR-Out, AP-Out, closed by
  the end point (0, 1) in ``ood_finish``); FPR95-OOD = ``(P - tp) / P`` at the last group with
  ``ro >= 0.95``. The state starts at ``ro_prev = 1`` (= ``ro`` of the first group), so the
  first group adds exactly zero.
- then ID positive, the group included: AUROC numerator ``cj (2 tp_above + ci)``; recall ``r =
  tp / P``, precision ``p = tp / (tp + fp)``; trapezoid ``(r - r_prev) (p + p_prev) / 2`` from
  (0, 1) and step ``(r - r_prev) p`` (AUPR-In, AP-In); FPR95 = ``fp / Q`` at the first group
  with ``r >= 0.95``; detection error ``min 0.5 (1 - r) + 0.5 fp / Q`` from 0.5; FACETS'
  detection error at that same threshold, at the TPR it achieves: ``0.5 (1 - tp95 / P) + 0.5
  fp95 / Q`` with ``tp95``, ``fp95`` the counts at the first group with ``r >= 0.95``.

Sums are Neumaier-compensated. Every value is an integer-valued weight sum or the same
operation on the same operands whichever caller runs the step, so a resample's metrics equal
``ood_metrics`` on the resampled rows bit for bit, and a step over a group of zero weight
(``ci = cj = 0``) is skipped by the callers (it is absent from the resample).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

TPR_LEVEL = 0.95
#: Number of values in the OOD walk state and of metrics it returns.
N_OOD_STATE = 19
N_OOD = 9
N_SEL_STATE = 8
_JIT: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(inline="always", **_JIT)
def nsum(s: float, c: float, x: float) -> tuple[float, float]:
    """One Neumaier-compensated addition: returns the new (sum, compensation)."""
    t = s + x
    if abs(s) >= abs(x):
        c += (s - t) + x
    else:
        c += (x - t) + s
    return t, c


@njit(inline="always", **_JIT)
def ood_start(n_pos: float, n_neg: float):
    """State before the first group: (tp, fp, auc, r_prev, p_prev, aupr_in s/c, ap_in s/c,
    fp at 95% TPR, detection error, ro_prev, po_prev, aupr_out s/c, ap_out s/c, P - tp at
    95% OOD recall, tp at 95% TPR); the 95% values start at the totals, i.e. a rate of 1."""
    z = 0.0
    return (z, z, z, z, 1.0, z, z, z, z, n_neg, 0.5, 1.0, z, z, z, z, z, n_pos, n_pos)


@njit(inline="always", **_JIT)
def ood_step(st, ci: float, cj: float, n_pos: float, n_neg: float):
    """The OOD walk state after a group of positive weight ``ci`` and negative weight ``cj``."""
    (tp, fp, auc, r_prev, p_prev, ain_s, ain_c, apin_s, apin_c, fp95, det, ro_prev, po_prev,
     aout_s, aout_c, apout_s, apout_c, fpo95, tp95) = st
    tpo = n_neg - fp
    fpo = n_pos - tp
    ro = tpo / n_neg
    po = tpo / (tpo + fpo)
    dr = ro_prev - ro
    aout_s, aout_c = nsum(aout_s, aout_c, dr * (po_prev + po) / 2.0)
    apout_s, apout_c = nsum(apout_s, apout_c, dr * po_prev)
    if ro >= TPR_LEVEL:
        fpo95 = fpo
    auc += cj * (2.0 * tp + ci)
    tp += ci
    fp += cj
    r = tp / n_pos
    p = tp / (tp + fp)
    dr = r - r_prev
    ain_s, ain_c = nsum(ain_s, ain_c, dr * (p + p_prev) / 2.0)
    apin_s, apin_c = nsum(apin_s, apin_c, dr * p)
    if r >= TPR_LEVEL and r_prev < TPR_LEVEL:
        fp95 = fp
        tp95 = tp
    e = 0.5 * (1.0 - r) + 0.5 * (fp / n_neg)
    if e < det:
        det = e
    return (tp, fp, auc, r, p, ain_s, ain_c, apin_s, apin_c, fp95, det, ro, po,
            aout_s, aout_c, apout_s, apout_c, fpo95, tp95)


@njit(inline="always", **_JIT)
def ood_finish(st, n_pos: float, n_neg: float, out) -> None:
    """``out[:9]`` = (auroc, aupr_in, aupr_out, ap_in, ap_out, fpr95, fpr95_ood,
    detection_error, detection_error_tpr95) as fractions; NaN when either side has zero
    total weight."""
    if n_pos <= 0.0 or n_neg <= 0.0:
        for m in range(N_OOD):
            out[m] = np.nan
        return
    (tp, fp, auc, r_prev, p_prev, ain_s, ain_c, apin_s, apin_c, fp95, det, ro_prev, po_prev,
     aout_s, aout_c, apout_s, apout_c, fpo95, tp95) = st
    aout_s, aout_c = nsum(aout_s, aout_c, ro_prev * (po_prev + 1.0) / 2.0)
    apout_s, apout_c = nsum(apout_s, apout_c, ro_prev * po_prev)
    out[0] = auc / (2.0 * n_pos * n_neg)
    out[1] = ain_s + ain_c
    out[2] = aout_s + aout_c
    out[3] = apin_s + apin_c
    out[4] = apout_s + apout_c
    out[5] = fp95 / n_neg
    out[6] = fpo95 / n_pos
    out[7] = det
    out[8] = 0.5 * (1.0 - tp95 / n_pos) + 0.5 * (fp95 / n_neg)


@njit(inline="always", **_JIT)
def sel_start():
    """State: (coverage C, errors E, AURC s/c, AUGRC s/c, errors and coverage where the
    current run of error-free groups started)."""
    z = 0.0
    return (z, z, z, z, z, z, z, z)


@njit(inline="always", **_JIT)
def sel_step(st, ci: float, cj: float):
    """AURC/AUGRC state after a group of ``ci`` correct and ``cj`` wrong rows (weights).

    AUGRC adds the trapezoid ``(C_k - C_{k-1}) (E_k + E_{k-1}) / 2``. AURC adds ``E_1`` at
    the first group, then at each group holding errors ``E_k - E_{k-1} + (E_{k-1} C_k - E_k
    C_{k-1}) ln(C_k / C_{k-1}) / (C_k - C_{k-1})``; over a run of error-free groups the terms
    ``E ln(C_k / C_{k-1})`` telescope to ``E (ln C_end - ln C_start)``, added when the run
    closes (or in ``sel_finish``). A group without errors takes no logarithm."""
    c_prev, e_prev, aurc_s, aurc_c, augrc_s, augrc_c, run_e, run_c = st
    c = c_prev + ci + cj
    e = e_prev + cj
    augrc_s, augrc_c = nsum(augrc_s, augrc_c, (c - c_prev) * (e + e_prev) / 2.0)
    if c_prev == 0.0:
        aurc_s, aurc_c = nsum(aurc_s, aurc_c, e)
        run_e = e
        run_c = c
    elif cj > 0.0:
        log_prev = math.log(c_prev)
        if run_e > 0.0:
            aurc_s, aurc_c = nsum(aurc_s, aurc_c, run_e * (log_prev - math.log(run_c)))
        log_c = math.log(c)
        seg = (e - e_prev) + (e_prev * c - e * c_prev) * (log_c - log_prev) / (c - c_prev)
        aurc_s, aurc_c = nsum(aurc_s, aurc_c, seg)
        run_e = e
        run_c = c
    return (c, e, aurc_s, aurc_c, augrc_s, augrc_c, run_e, run_c)


@njit(inline="always", **_JIT)
def sel_finish(st, out) -> None:
    """``out[:2]`` = (AURC, AUGRC) as fractions; NaN when the total weight is zero."""
    c, e, aurc_s, aurc_c, augrc_s, augrc_c, run_e, run_c = st
    if c <= 0.0:
        out[0] = np.nan
        out[1] = np.nan
        return
    if run_e > 0.0:
        aurc_s, aurc_c = nsum(aurc_s, aurc_c, run_e * (math.log(c) - math.log(run_c)))
    out[0] = (aurc_s + aurc_c) / c
    out[1] = (augrc_s + augrc_c) / (c * c)


@njit(**_JIT)
def merge_groups(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tie groups of two DESCENDING arrays: group ``g`` holds ``a[p_end[g-1]:p_end[g]]`` and
    ``b[q_end[g-1]:q_end[g]]``, the values equal, groups in decreasing value."""
    p_end = np.empty(a.shape[0] + b.shape[0], dtype=np.int64)
    q_end = np.empty_like(p_end)
    i = 0
    j = 0
    g = 0
    while i < a.shape[0] or j < b.shape[0]:
        v = a[i] if i < a.shape[0] and (j >= b.shape[0] or a[i] >= b[j]) else b[j]
        while i < a.shape[0] and a[i] == v:
            i += 1
        while j < b.shape[0] and b[j] == v:
            j += 1
        p_end[g] = i
        q_end[g] = j
        g += 1
    return p_end[:g], q_end[:g]


@njit(cache=True, nogil=True)
def ood_walk(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The 9 OOD metrics (fractions) of ASCENDING-sorted ID scores ``a`` and OOD scores ``b``,
    weight 1 per row: one merge from the top grouping equal values, one ``ood_step`` each."""
    n_pos = float(a.shape[0])
    n_neg = float(b.shape[0])
    st = ood_start(n_pos, n_neg)
    i = a.shape[0] - 1
    j = b.shape[0] - 1
    while i >= 0 or j >= 0:
        v = a[i] if i >= 0 and (j < 0 or a[i] >= b[j]) else b[j]
        ci = 0
        while i >= 0 and a[i] == v:
            ci += 1
            i -= 1
        cj = 0
        while j >= 0 and b[j] == v:
            cj += 1
            j -= 1
        st = ood_step(st, float(ci), float(cj), n_pos, n_neg)
    out = np.empty(N_OOD)
    ood_finish(st, n_pos, n_neg, out)
    return out


@njit(**_JIT)
def sel_walk(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(AURC, AUGRC) as fractions of DESCENDING-sorted scores of correct rows ``a`` and wrong
    rows ``b``, weight 1 per row."""
    p_end, q_end = merge_groups(a, b)
    st = sel_start()
    ia = 0
    ja = 0
    for g in range(p_end.shape[0]):
        st = sel_step(st, float(p_end[g] - ia), float(q_end[g] - ja))
        ia = p_end[g]
        ja = q_end[g]
    out = np.empty(2)
    sel_finish(st, out)
    return out
