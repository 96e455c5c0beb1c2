"""Numba kernels: every metric of one resample from multiplicity weights over a fixed order.

The scores of a positive set P and a negative set Q are merged and sorted ONCE (descending,
``merged_order``); a resample is then a vector of multiplicities (how often each original row
was drawn), and every metric of that resample is one walk over the fixed order that adds the
weights of each tie group. A tie group whose weights sum to zero is absent from the resample
and is skipped, so the thresholds are exactly the distinct values of the resampled data and
the numbers equal ``scorers.metrics.ood_metrics`` (or the selective-classification metrics of
``scorers.selective``) evaluated on the resampled rows themselves.

Per group ``g`` (highest value first) with positive weight ``ci`` and negative weight ``cj``,
``tp``/``fp`` are the cumulative weights at or above ``g``; the formulas are those of
``scorers.metrics`` (module docstring there): AUROC ``sum_g cj (2 tp_above + ci) / (2 P Q)``,
trapezoid AUPR-In/Out with the (recall 0, precision 1) end point, step-wise AP-In/Out, FPR95
(ID positive, first threshold with TPR >= 0.95), FPR95-OOD (OOD positive), detection error
``min 0.5 (1 - TPR) + 0.5 FPR``. With P = correctly and Q = wrongly classified rows,
``sel_walk`` adds AURC and AUGRC (definitions in ``scorers.selective``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

TPR_LEVEL = 0.95
N_OOD = 8   # auroc, aupr_in, aupr_out, ap_in, ap_out, fpr95, fpr95_ood, detection_error


def merged_order(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The descending merge of ``pos`` and ``neg``: (is_neg uint8, row int64, group_end uint8).

    ``row[k]`` indexes ``pos`` when ``is_neg[k] == 0`` else ``neg``; ``group_end[k]`` is 1 when
    position ``k + 1`` holds a different value (or ``k`` is last). One stable sort, O(N log N).
    """
    values = np.concatenate([np.asarray(pos, np.float64), np.asarray(neg, np.float64)])
    order = np.argsort(-values, kind="stable")
    is_neg = (order >= pos.shape[0]).astype(np.uint8)
    row = np.where(is_neg == 1, order - pos.shape[0], order).astype(np.int64)
    v = values[order]
    group_end = np.ones(v.shape[0], dtype=np.uint8)
    group_end[:-1] = v[1:] != v[:-1]
    return is_neg, row, group_end


@njit(cache=True, nogil=True, inline="always")
def _nsum(s: float, c: float, x: float) -> tuple[float, float]:
    t = s + x
    if abs(s) >= abs(x):
        c += (s - t) + x
    else:
        c += (x - t) + s
    return t, c


@njit(cache=True, nogil=True)
def ood_walk(is_neg, row, group_end, wp, wq, skip_neg, skip_row, out):
    """The 8 OOD metrics (fractions) into ``out[:8]`` for weights ``wp`` (P rows), ``wq`` (Q).

    The row ``(skip_neg, skip_row)`` gets weight 0 (a jackknife leave-one-out; ``skip_row =
    -1`` skips nothing). Returns False when P or Q has zero total weight (metrics undefined).
    """
    n_pos = 0.0
    for r in range(wp.shape[0]):
        n_pos += wp[r]
    n_neg = 0.0
    for r in range(wq.shape[0]):
        n_neg += wq[r]
    if skip_row >= 0:
        if skip_neg == 0:
            n_pos -= wp[skip_row]
        else:
            n_neg -= wq[skip_row]
    if n_pos <= 0.0 or n_neg <= 0.0:
        for m in range(N_OOD):
            out[m] = np.nan
        return False
    tp = 0.0
    fp = 0.0
    auc_num = 0.0
    r_prev = 0.0
    p_prev = 1.0
    aupr_in_s = 0.0
    aupr_in_c = 0.0
    ap_in_s = 0.0
    ap_in_c = 0.0
    fpr95 = 1.0
    fpr95_found = False
    det_err = 0.5
    ro_prev = 0.0
    po_prev = 0.0
    have_o = False
    aupr_out_s = 0.0
    aupr_out_c = 0.0
    ap_out_s = 0.0
    ap_out_c = 0.0
    fpr95_ood = 1.0
    ci = 0.0
    cj = 0.0
    for k in range(row.shape[0]):
        rr = row[k]
        if is_neg[k] == 0:
            if not (skip_neg == 0 and rr == skip_row):
                ci += wp[rr]
        else:
            if not (skip_neg == 1 and rr == skip_row):
                cj += wq[rr]
        if group_end[k] == 0 or (ci == 0.0 and cj == 0.0):
            if group_end[k] == 1:
                ci = 0.0
                cj = 0.0
            continue
        # OOD positive: the counts above this group.
        tpo = n_neg - fp
        fpo = n_pos - tp
        ro = tpo / n_neg
        po = tpo / (tpo + fpo)
        if have_o:
            dr = ro_prev - ro
            aupr_out_s, aupr_out_c = _nsum(aupr_out_s, aupr_out_c, dr * (po_prev + po) / 2.0)
            ap_out_s, ap_out_c = _nsum(ap_out_s, ap_out_c, dr * po_prev)
        if ro >= TPR_LEVEL:
            fpr95_ood = fpo / n_pos
        ro_prev = ro
        po_prev = po
        have_o = True
        # ID positive: this group included.
        auc_num += cj * (2.0 * tp + ci)
        tp += ci
        fp += cj
        r = tp / n_pos
        p = tp / (tp + fp)
        fpr = fp / n_neg
        dr = r - r_prev
        aupr_in_s, aupr_in_c = _nsum(aupr_in_s, aupr_in_c, dr * (p + p_prev) / 2.0)
        ap_in_s, ap_in_c = _nsum(ap_in_s, ap_in_c, dr * p)
        if not fpr95_found and r >= TPR_LEVEL:
            fpr95 = fpr
            fpr95_found = True
        e = 0.5 * (1.0 - r) + 0.5 * fpr
        if e < det_err:
            det_err = e
        r_prev = r
        p_prev = p
        ci = 0.0
        cj = 0.0
    aupr_out_s, aupr_out_c = _nsum(aupr_out_s, aupr_out_c, ro_prev * (po_prev + 1.0) / 2.0)
    ap_out_s, ap_out_c = _nsum(ap_out_s, ap_out_c, ro_prev * po_prev)
    out[0] = auc_num / (2.0 * n_pos * n_neg)
    out[1] = aupr_in_s + aupr_in_c
    out[2] = aupr_out_s + aupr_out_c
    out[3] = ap_in_s + ap_in_c
    out[4] = ap_out_s + ap_out_c
    out[5] = fpr95
    out[6] = fpr95_ood
    out[7] = det_err
    return True


@njit(cache=True, nogil=True)
def sel_walk(is_neg, row, group_end, wp, wq, skip_neg, skip_row, out):
    """AURC and AUGRC (fractions) into ``out[0:2]``; P = correct rows, Q = wrong rows.

    Coverage points are the distinct score values from the top: ``C_k`` rows accepted, ``E_k``
    of them wrong (weights). AUGRC: trapezoids of ``E/n`` over coverage ``C/n`` from (0, 0)
    up to (1, E_total/n). AURC: ``(1/n) [E_1 + sum_k (E_k - E_{k-1} + (E_{k-1} C_k - E_k
    C_{k-1}) ln(C_k / C_{k-1}) / (C_k - C_{k-1}))]``, the exact area of the selective risk
    ``E(c)/c`` with ``E`` linear in ``c`` between points (fd-shifts / Traub et al. 2024).
    Over a run of groups without errors the terms are ``E ln(C_k / C_{k-1})``, summed as
    ``E (ln C_end - ln C_start)``: two logarithms per group that holds errors, none elsewhere.
    Returns False when the total weight is zero.
    """
    n = 0.0
    for r in range(wp.shape[0]):
        n += wp[r]
    for r in range(wq.shape[0]):
        n += wq[r]
    if skip_row >= 0:
        n -= wp[skip_row] if skip_neg == 0 else wq[skip_row]
    if n <= 0.0:
        out[0] = np.nan
        out[1] = np.nan
        return False
    c_prev = 0.0
    e_prev = 0.0
    aurc_s = 0.0
    aurc_c = 0.0
    augrc_s = 0.0
    augrc_c = 0.0
    run_e = 0.0         # errors accepted over the current run of error-free groups
    run_log = 0.0       # ln of the coverage count where that run started
    ci = 0.0
    cj = 0.0
    for k in range(row.shape[0]):
        rr = row[k]
        if is_neg[k] == 0:
            if not (skip_neg == 0 and rr == skip_row):
                ci += wp[rr]
        else:
            if not (skip_neg == 1 and rr == skip_row):
                cj += wq[rr]
        if group_end[k] == 0 or (ci == 0.0 and cj == 0.0):
            if group_end[k] == 1:
                ci = 0.0
                cj = 0.0
            continue
        c = c_prev + ci + cj
        e = e_prev + cj
        augrc_s, augrc_c = _nsum(augrc_s, augrc_c, (c - c_prev) * (e + e_prev) / 2.0)
        if c_prev == 0.0:
            aurc_s, aurc_c = _nsum(aurc_s, aurc_c, e)
            run_e = e
            run_log = math.log(c)
        elif cj > 0.0:
            # close the error-free run: sum of e ln(c_k / c_{k-1}) telescopes
            log_prev = math.log(c_prev)
            if run_e > 0.0:
                aurc_s, aurc_c = _nsum(aurc_s, aurc_c, run_e * (log_prev - run_log))
            log_c = math.log(c)
            seg = (e - e_prev) + (e_prev * c - e * c_prev) * (log_c - log_prev) / (c - c_prev)
            aurc_s, aurc_c = _nsum(aurc_s, aurc_c, seg)
            run_e = e
            run_log = log_c
        c_prev = c
        e_prev = e
        ci = 0.0
        cj = 0.0
    if run_e > 0.0 and c_prev > 0.0:
        aurc_s, aurc_c = _nsum(aurc_s, aurc_c, run_e * (math.log(c_prev) - run_log))
    out[0] = (aurc_s + aurc_c) / n
    out[1] = (augrc_s + augrc_c) / (n * n)
    return True


@njit(cache=True, nogil=True)
def auroc_walk(is_neg, row, group_end, wp, wq):
    """AUROC (fraction) alone for weights ``wp``, ``wq``: ``sum_g cj (2 tp_above + ci) /
    (2 P Q)``; NaN when P or Q has zero total weight."""
    n_pos = 0.0
    for r in range(wp.shape[0]):
        n_pos += wp[r]
    n_neg = 0.0
    for r in range(wq.shape[0]):
        n_neg += wq[r]
    if n_pos <= 0.0 or n_neg <= 0.0:
        return np.nan
    tp = 0.0
    auc_num = 0.0
    ci = 0.0
    cj = 0.0
    for k in range(row.shape[0]):
        if is_neg[k] == 0:
            ci += wp[row[k]]
        else:
            cj += wq[row[k]]
        if group_end[k] == 1:
            auc_num += cj * (2.0 * tp + ci)
            tp += ci
            ci = 0.0
            cj = 0.0
    return auc_num / (2.0 * n_pos * n_neg)


def _auroc_boot(is_neg, row, group_end, cp, cq):
    out = np.empty(cp.shape[0])
    for b in prange(cp.shape[0]):
        out[b] = auroc_walk(is_neg, row, group_end, cp[b], cq[b])
    return out


def _ood_boot(is_neg, row, group_end, cp, cq):
    b_n = cp.shape[0]
    out = np.empty((b_n, N_OOD))
    for b in prange(b_n):
        ood_walk(is_neg, row, group_end, cp[b], cq[b], 0, -1, out[b])
    return out


def _sel_boot(is_neg, row, group_end, cp, cq):
    b_n = cp.shape[0]
    out = np.empty((b_n, 2))
    for b in prange(b_n):
        sel_walk(is_neg, row, group_end, cp[b], cq[b], 0, -1, out[b])
    return out


def _ood_jack(is_neg, row, group_end, wp, wq, which_neg, rows):
    out = np.empty((rows.shape[0], N_OOD))
    for i in prange(rows.shape[0]):
        ood_walk(is_neg, row, group_end, wp, wq, which_neg, rows[i], out[i])
    return out


def _sel_jack(is_neg, row, group_end, wp, wq, which_neg, rows):
    out = np.empty((rows.shape[0], 2))
    for i in prange(rows.shape[0]):
        sel_walk(is_neg, row, group_end, wp, wq, which_neg, rows[i], out[i])
    return out


#: Below this many row visits (rows x resamples) a kernel runs on one thread: waking the
#: thread pool costs more than it saves on small splits (measured: ~14 ms per call under load).
PARALLEL_MIN_WORK = 2_000_000

_KERNELS = {name: (njit(cache=True)(fn), njit(cache=True, parallel=True)(fn))
            for name, fn in (("auroc_boot", _auroc_boot), ("ood_boot", _ood_boot),
                             ("sel_boot", _sel_boot), ("ood_jack", _ood_jack),
                             ("sel_jack", _sel_jack))}


def _dispatch(name: str, work: int):
    serial, parallel = _KERNELS[name]
    return parallel if work >= PARALLEL_MIN_WORK else serial


def auroc_boot(is_neg, row, group_end, cp, cq):
    """(B,) AUROC of every resample ``b`` (multiplicities ``cp[b]``, ``cq[b]``)."""
    return _dispatch("auroc_boot", row.shape[0] * cp.shape[0])(is_neg, row, group_end, cp, cq)


def ood_boot(is_neg, row, group_end, cp, cq):
    """(B, 8) metrics, resample ``b`` weighting P rows by ``cp[b]`` and Q rows by ``cq[b]``."""
    return _dispatch("ood_boot", row.shape[0] * cp.shape[0])(is_neg, row, group_end, cp, cq)


def sel_boot(is_neg, row, group_end, cp, cq):
    """(B, 2) AURC, AUGRC, resample ``b`` weighting by ``cp[b]`` / ``cq[b]``."""
    return _dispatch("sel_boot", row.shape[0] * cp.shape[0])(is_neg, row, group_end, cp, cq)


def ood_jack(is_neg, row, group_end, wp, wq, which_neg, rows):
    """(len(rows), 8) leave-one-out metrics, dropping row ``rows[i]`` of P (which_neg 0) / Q."""
    return _dispatch("ood_jack", row.shape[0] * rows.shape[0])(
        is_neg, row, group_end, wp, wq, which_neg, rows)


def sel_jack(is_neg, row, group_end, wp, wq, which_neg, rows):
    """(len(rows), 2) leave-one-out AURC, AUGRC."""
    return _dispatch("sel_jack", row.shape[0] * rows.shape[0])(
        is_neg, row, group_end, wp, wq, which_neg, rows)
