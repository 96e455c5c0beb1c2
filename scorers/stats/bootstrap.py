"""Stratified bootstrap of every evaluation metric, all resamples from one sort per method.

Strata (each resampled separately, ``scorers.stats.resample``): the ID split; every OOD split;
and, for the misclassification AUROC only, the correctly and the wrongly classified labelled
ID rows (so that both classes of that AUROC are always present, as in the stratified
bootstrap of DeLong-style AUROC intervals). Per resample ``b``:

- OOD metrics of split ``s``: the ID resample ``b`` against the resample ``b`` of ``s``
  (``scorers.stats.walk.ood_lanes``); the same ID resample is shared by every OOD split and
  every method, so group means and paired differences are taken on common resamples;
- group means: the unweighted mean over the group's splits of their resample-``b`` values
  (the resampling stays within each split);
- pooled groups (``scorers.evaluate.pooled_groups``): the ID resample ``b`` against the
  concatenation of the resamples ``b`` of the group's splits (each split resampled within the
  pool, its row count kept, so the pool's source mix is that of the data);
- ID accuracy, AURC and AUGRC: the ID resample ``b`` (labelled rows);
- misclassification AUROC: the correct/wrong resample ``b``.

Cost: one sort of each side per method (the ID split's shared by its OOD splits) and one
merge into tie groups per pair; then per batch of resamples, each pair's multiplicities are
gathered into decreasing-score order (rows of 64 resamples, uint8) and one Numba call per
method walks every pair and every resample, 64 resamples per SIMD lane loop
(``scorers.stats.walk``), the two cores sharing the (pair, 64 resamples) tasks. BCa adds the
exact jackknife: one leave-one-out lane per distinct (tie group, stratum) cell, O(N^2) per
pair, fine for thousands of rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..metric_steps import merge_groups, ood_walk, sel_walk
from . import intervals, walk
from .resample import Stratum, batch_size, blocks, lane_totals, lanes_from_counts

#: The OOD metric columns of every distribution, in ``scorers.metrics.OOD_METRIC_NAMES`` order.
OOD_COLUMNS = ("auroc", "aupr_in", "aupr_out", "ap_in", "ap_out", "fpr95", "fpr95_ood",
               "detection_error", "detection_error_tpr95")
#: The ID-side columns of a method's ``misc`` distribution.
MISC_COLUMNS = ("misclassification_auroc", "aurc", "augrc")


@dataclass(frozen=True)
class BootstrapSpec:
    """What to compute: level (e.g. 0.95), resamples, interval method, seed."""

    level: float = 0.95
    n_boot: int = 1000
    method: str = "percentile"
    seed: int = 0

    def __post_init__(self) -> None:
        intervals.check_level(self.level)
        if int(self.n_boot) < 2:
            raise ValueError(f"bootstrap resamples (--boot) must be at least 2, got "
                             f"{self.n_boot}")
        if self.method not in intervals.METHODS:
            raise ValueError(f"interval method (--ci-method) must be one of "
                             f"{', '.join(intervals.METHODS)}, got {self.method!r}")

    def describe(self) -> dict[str, Any]:
        """The echo every output carries beside the intervals."""
        return {"level": self.level, "method": self.method, "resamples": int(self.n_boot),
                "seed": int(self.seed),
                "resampling": "stratified bootstrap: the ID split and every OOD split "
                              "resampled separately (misclassification AUROC: correct and "
                              "wrong ID rows resampled separately)"}


class Pair:
    """Positive and negative scores, each sorted once (decreasing), and their tie groups.

    ``p_order``: the positive side's decreasing order when already known (an ID split shared
    by several pairs). ``p_index``/``q_index``: the row of each score in its resampling
    stratum (default: itself), the rows the bootstrap kernels read multiplicities at."""

    def __init__(self, pos: np.ndarray, neg: np.ndarray, p_order: np.ndarray | None = None,
                 p_index: np.ndarray | None = None, q_index: np.ndarray | None = None):
        self.pos = np.ascontiguousarray(pos, dtype=np.float64)
        self.neg = np.ascontiguousarray(neg, dtype=np.float64)
        self.p_order = _decreasing(self.pos) if p_order is None else p_order
        self.q_order = _decreasing(self.neg)
        self.p_end, self.q_end = merge_groups(self.pos[self.p_order], self.neg[self.q_order])
        self.p_rows = self.p_order if p_index is None else p_index[self.p_order]
        self.q_rows = self.q_order if q_index is None else q_index[self.q_order]

    def _boot(self, kind: int, cp: np.ndarray, cq: np.ndarray) -> np.ndarray:
        offsets = np.array([0, self.p_end.size]), np.array([0, self.q_order.size])
        vals = walk.boot(kind, self.p_order, self.p_end, self.q_order, self.q_end, *offsets,
                         lanes_from_counts(cp), lanes_from_counts(cq))
        return 100.0 * vals[0, :cp.shape[0]]

    def ood(self, cp: np.ndarray, cq: np.ndarray) -> np.ndarray:
        """(B, 9) OOD metrics in percent for multiplicities ``cp`` (B, P) and ``cq`` (B, Q)."""
        return self._boot(0, cp, cq)

    def auroc(self, cp: np.ndarray, cq: np.ndarray) -> np.ndarray:
        """(B,) AUROC in percent alone (no precision or threshold work)."""
        return self._boot(2, cp, cq)[:, 0]

    def sel(self, cp: np.ndarray, cq: np.ndarray) -> np.ndarray:
        """(B, 2) AURC, AUGRC in percent (P = correct, Q = wrong)."""
        return self._boot(1, cp, cq)

    def point(self, kind: str = "ood") -> np.ndarray:
        """The metrics of the data itself (the one-shot walks: equal to ``ood_metrics``)."""
        if kind == "ood":
            return 100.0 * ood_walk(np.sort(self.pos), np.sort(self.neg))
        return 100.0 * sel_walk(self.pos[self.p_order], self.neg[self.q_order])

    def jackknife(self, kind: str = "ood") -> list[np.ndarray]:
        """Leave-one-out values (percent) of every P row, then of every Q row.

        Rows of one stratum in one tie group give the same value, so each distinct cell is
        walked once (one SIMD lane each) and the value copied to its rows."""
        out = []
        for which, order, ends in ((0, self.p_order, self.p_end), (1, self.q_order,
                                                                   self.q_end)):
            row_gid = np.empty(order.size, dtype=np.int64)
            row_gid[order] = np.repeat(np.arange(ends.size), np.diff(ends, prepend=0))
            _, first, inverse = np.unique(row_gid, return_index=True, return_inverse=True)
            vals = walk.jackknife(0 if kind == "ood" else 1, self.p_order, self.p_end,
                                  self.q_order, self.q_end, self.pos.size, self.neg.size,
                                  which, first)
            out.append(100.0 * vals[inverse])
        return out


def _decreasing(x: np.ndarray) -> np.ndarray:
    return np.argsort(-x, kind="stable")


@dataclass
class Distributions:
    """Bootstrap distributions (B rows) and point estimates of one evaluation."""

    spec: BootstrapSpec
    id_acc: np.ndarray                                         # (B,)
    splits: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)   # method->split
    groups: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)   # method->group
    pooled: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)   # method->group
    misc: dict[str, np.ndarray] = field(default_factory=dict)                # method->(B,3)


def _group_of(groups: Mapping[str, Sequence[str]]) -> dict[str, str]:
    return {s: g for g, names in groups.items() for s in names}


def bootstrap_evaluation(spec: BootstrapSpec, id_name: str,
                         scores: Mapping[str, Mapping[str, np.ndarray]],
                         groups: Mapping[str, Sequence[str]], correct: np.ndarray | None,
                         labelled: np.ndarray | None) -> tuple[Distributions, dict[str, Any]]:
    """Distributions and ``[lo, hi]`` intervals of every metric of every method.

    Args:
        spec: level, resamples, method, seed.
        id_name: the ID split's name (its stratum's name).
        scores: ``{method: {split: (N,) scores}}``, each holding ``id_name`` and the OOD
            splits named in ``groups``.
        groups: ``{group: [OOD split, ...]}``.
        correct: (N_id,) bool, whether each ID row is classified correctly (None: no labels).
        labelled: (N_id,) bool, rows with a label (not -1).

    Returns:
        (distributions, intervals) with intervals ``{"id_acc": [lo, hi] | None, "methods":
        {method: {"splits": {split: {metric: [lo, hi]}}, "groups": {...}, "misc": {name:
        [lo, hi]}}}}``; ``[lo, hi]`` entries are NaN where undefined.
    """
    ood_names = [s for names in groups.values() for s in names]
    first = next(iter(scores.values()))
    n_id = len(first[id_name])
    id_stratum = Stratum(id_name, n_id, spec.seed)
    ood_strata = [Stratum(s, len(first[s]), spec.seed) for s in ood_names]
    has_lab = labelled is not None and correct is not None and bool(labelled.any())
    lab_ok = lab_bad = None
    mis_strata: tuple[Stratum, Stratum] | None = None
    if has_lab:
        assert labelled is not None and correct is not None  # has_lab says so
        lab_ok = np.flatnonzero(labelled & correct)
        lab_bad = np.flatnonzero(labelled & ~correct)
        if lab_ok.size and lab_bad.size:
            mis_strata = (Stratum(f"{id_name}#correct", lab_ok.size, spec.seed),
                          Stratum(f"{id_name}#wrong", lab_bad.size, spec.seed))
    pairs, pools = {}, {}
    for m, sc in scores.items():
        id_order = _decreasing(np.asarray(sc[id_name], dtype=np.float64))
        pairs[m] = {s: Pair(sc[id_name], sc[s], p_order=id_order) for s in ood_names}
        pools[m] = _pooled_pairs(sc, id_name, id_order, groups)
    mis_pairs = ({m: Pair(sc[id_name][lab_ok], sc[id_name][lab_bad], p_index=lab_ok,
                          q_index=lab_bad) for m, sc in scores.items()} if has_lab else {})
    b_n = int(spec.n_boot)
    dist = Distributions(spec, np.full(b_n, np.nan))
    for m in scores:
        dist.splits[m] = {}
        dist.misc[m] = np.full((b_n, len(MISC_COLUMNS)), np.nan)
    parts: dict[str, list[np.ndarray]] = {m: [] for m in scores}
    pool_parts: dict[str, dict[str, list[np.ndarray]]] = {
        m: {g: [] for g in groups} for m in scores}
    start = 0
    max_rows = max([n_id, *(st.n for st in ood_strata)])
    for size in blocks(b_n, batch_size(max_rows)):
        sl = slice(start, start + size)
        c_id = id_stratum.lanes(size)
        c_ood = np.concatenate([st.lanes(size) for st in ood_strata], axis=1)
        c_mis = (mis_strata[0].lanes(size), mis_strata[1].lanes(size)) if mis_strata else None
        if has_lab:
            assert labelled is not None and lab_ok is not None  # has_lab says so
            dist.id_acc[sl] = (100.0 * lane_totals(c_id, lab_ok)[:size]
                               / lane_totals(c_id, np.flatnonzero(labelled))[:size])
        for m in scores:
            parts[m].append(_ood_batch(list(pairs[m].values()), c_id, c_ood)[:, :size])
            for g, pp in pools[m].items():
                pool_parts[m][g].append(_one(0, pp.p_rows, pp, pp.q_rows, c_id, c_ood)[:size])
            if has_lab:
                mp = mis_pairs[m]
                dist.misc[m][sl, 1:] = _one(1, mp.p_rows, mp, mp.q_rows, c_id, c_id)[:size]
                if c_mis is not None:
                    dist.misc[m][sl, 0] = _one(2, mp.p_order, mp, mp.q_order, *c_mis)[:size, 0]
        start += size
    for m in scores:
        vals = np.concatenate(parts.pop(m), axis=1)
        dist.splits[m] = {s: vals[k] for k, s in enumerate(ood_names)}
        dist.groups[m] = {g: np.mean([dist.splits[m][s] for s in names], axis=0)
                          for g, names in groups.items()}
        dist.pooled[m] = {g: np.concatenate(v, axis=0) for g, v in pool_parts.pop(m).items()}
    iv = _intervals(spec, dist, pairs, mis_pairs, groups, correct, labelled)
    _pooled_intervals(spec, dist, pools, groups, {st.name: st.n for st in ood_strata}, iv)
    return dist, iv


def _pooled_intervals(spec: BootstrapSpec, dist: Distributions,
                      pools: Mapping[str, Mapping[str, Pair]],
                      groups: Mapping[str, Sequence[str]], rows: Mapping[str, int],
                      iv: dict[str, Any]) -> None:
    """`iv["methods"][m]["pooled"][group]`: each pooled group's intervals (`rows`: each
    OOD split's row count, its BCa stratum)."""
    for m, by_group in pools.items():
        iv["methods"][m]["pooled"] = {
            g: _pairs(OOD_COLUMNS, _pooled_interval(spec, dist.pooled[m][g], pp,
                                                    [rows[s] for s in groups[g]]))
            for g, pp in by_group.items()}


def _pooled_pairs(sc: Mapping[str, np.ndarray], id_name: str, id_order: np.ndarray,
                  groups: Mapping[str, Sequence[str]]) -> dict[str, Pair]:
    """Per group, the pair (ID split, the group's OOD splits concatenated), its negative rows
    read at their own strata's rows of the stacked OOD multiplicities (the groups' splits
    are consecutive there, in ``groups`` order)."""
    out, start = {}, 0
    for g, names in groups.items():
        neg = np.concatenate([np.asarray(sc[s], dtype=np.float64) for s in names])
        out[g] = Pair(sc[id_name], neg, p_order=id_order,
                      q_index=start + np.arange(neg.size, dtype=np.int64))
        start += neg.size
    return out


def _pooled_interval(spec: BootstrapSpec, d: np.ndarray, pair: Pair,
                     sizes: Sequence[int]) -> np.ndarray:
    """A pooled group's interval; BCa's strata: the ID rows, then each split's rows."""
    jack = None
    if spec.method == "bca":
        j_id, j_pool = pair.jackknife()
        jack = [j_id, *np.split(j_pool, np.cumsum(sizes)[:-1])]
    return _interval(spec, d, pair.point(), jack)


def _ood_batch(pairs: Sequence[Pair], c_id: np.ndarray, c_ood: np.ndarray) -> np.ndarray:
    """(pairs, lanes, 9) OOD metrics in percent of pairs sharing the positive (ID) side, their
    negative strata stacked in ``c_ood``'s rows in order; one kernel call."""
    q_base = np.cumsum([0] + [p.neg.size for p in pairs])
    g_off = np.cumsum([0] + [p.p_end.size for p in pairs])
    q_rows = np.concatenate([p.q_rows + q_base[k] for k, p in enumerate(pairs)])
    cp, cq = np.take(c_id, pairs[0].p_rows, axis=1), np.take(c_ood, q_rows, axis=1)
    vals = walk.boot(0, np.arange(cp.shape[1]), np.concatenate([p.p_end for p in pairs]),
                     np.arange(cq.shape[1]), np.concatenate([p.q_end for p in pairs]), g_off,
                     q_base, cp, cq)
    return 100.0 * vals


def _one(kind: int, p_rows: np.ndarray, pair: Pair, q_rows: np.ndarray, cp: np.ndarray,
         cq: np.ndarray) -> np.ndarray:
    """(lanes, WIDTH[kind]) metrics in percent of one pair read at stratum rows ``p_rows`` /
    ``q_rows``."""
    vals = walk.boot(kind, np.arange(p_rows.size), pair.p_end, np.arange(q_rows.size),
                     pair.q_end, np.array([0, pair.p_end.size]), np.array([0, q_rows.size]),
                     np.take(cp, p_rows, axis=1), np.take(cq, q_rows, axis=1))
    return 100.0 * vals[0]


def _interval(spec: BootstrapSpec, d: np.ndarray, estimate: np.ndarray,
              jack: Sequence[np.ndarray] | None) -> np.ndarray:
    if d.ndim == 1:
        d = d[:, None]
    if spec.method == "percentile" or jack is None:
        return intervals.percentile_interval(d, spec.level)
    jack = [j if j.ndim == 2 else j[:, None] for j in jack]
    return intervals.bca_interval(d, estimate, intervals.acceleration(jack), spec.level)


def _pairs(names: Sequence[str], iv: np.ndarray) -> dict[str, list[float]]:
    return {n: [float(iv[i, 0]), float(iv[i, 1])] for i, n in enumerate(names)}


def _intervals(spec: BootstrapSpec, dist: Distributions, pairs: Mapping[str, Mapping[str, Pair]],
               mis_pairs: Mapping[str, Pair], groups: Mapping[str, Sequence[str]],
               correct: np.ndarray | None, labelled: np.ndarray | None) -> dict[str, Any]:
    bca = spec.method == "bca"
    out: dict[str, Any] = {"id_acc": None, "methods": {}}
    if labelled is not None and correct is not None and labelled.any():
        jack_acc = None
        acc = 100.0 * np.mean(correct[labelled])
        if bca:  # leave one ID row out: closed form
            n_lab = float(labelled.sum())
            n_ok = float((labelled & correct).sum())
            jack_acc = [np.where(labelled, 100.0 * (n_ok - (labelled & correct)) /
                                 np.maximum(n_lab - 1.0, 1.0), acc)]
        out["id_acc"] = [float(v) for v in _interval(spec, dist.id_acc, np.array([acc]),
                                                     jack_acc)[0]]
    for m, by_split in pairs.items():
        est = {s: p.point() for s, p in by_split.items()}
        jack = {s: p.jackknife() for s, p in by_split.items()} if bca else {}
        res: dict[str, Any] = {"splits": {}, "groups": {}, "misc": {}}
        for s in by_split:
            iv = _interval(spec, dist.splits[m][s], est[s], jack.get(s))
            res["splits"][s] = _pairs(OOD_COLUMNS, iv)
        for g, names in groups.items():
            g_est = np.mean([est[s] for s in names], axis=0)
            g_jack = None
            if bca:  # strata: the ID rows (move every split), then each split's OOD rows
                k = len(names)
                g_jack = [np.mean([jack[s][0] for s in names], axis=0)]
                for s in names:
                    others = sum(est[t] for t in names if t != s)
                    g_jack.append((others + jack[s][1]) / k)
            res["groups"][g] = _pairs(OOD_COLUMNS, _interval(spec, dist.groups[m][g], g_est,
                                                             g_jack))
        if m in mis_pairs:
            mp = mis_pairs[m]
            d = dist.misc[m]
            if np.isfinite(d[:, 0]).all():
                jk = mp.jackknife("ood") if bca else None
                iv = _interval(spec, d[:, 0], mp.point("ood")[:1],
                               [j[:, :1] for j in jk] if jk else None)
                res["misc"]["misclassification_auroc"] = [float(iv[0, 0]), float(iv[0, 1])]
            sel_jk = None
            if bca:  # strata: the ID split (an unlabelled row leaves the value unchanged)
                assert labelled is not None and correct is not None  # mis_pairs has m
                jc, jw = mp.jackknife("sel")
                full = np.tile(mp.point("sel"), (labelled.size, 1))
                full[np.flatnonzero(labelled & correct)] = jc
                full[np.flatnonzero(labelled & ~correct)] = jw
                sel_jk = [full]
            iv = _interval(spec, d[:, 1:], mp.point("sel"), sel_jk)
            res["misc"].update(_pairs(MISC_COLUMNS[1:], iv))
        out["methods"][m] = res
    return out
