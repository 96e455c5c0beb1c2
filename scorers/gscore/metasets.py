"""Meta-sets and their targets: each store's scores pooled once (`StorePools`, every detector
over every store: `PooledScores`), the partition of the OOD splits into meta-train and
meta-test splits and of id/test into ID pools, the seeded subsamples drawn from them
(`MetaSets`: index matrices into the pooled scores), and the metrics they are compared with:
each set's sampled target (`set_truth`) and its split-level target (`split_truth`)."""

from __future__ import annotations

import fnmatch
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import StoreLike

from ..evaluate import score_splits
from ..metrics import ood_metrics
from ..registry import get_scorer
from ..scoreform import paper_forms
from .engine import GscoreEngine, pack
from .spec import FPR_AT_TPR, HETERO_MIN, ID_TEST, ID_VAL, TAU_HALFWIDTH, TRUTH_COLUMNS


def set_sizes(ratio: float, size: int | None, id_pool: int, ood_pool: int) -> tuple[int, int]:
    """(n_id, n_ood) of a meta-set: n_id:n_ood = `ratio`, n_id + n_ood = `size` (None: the
    largest set with that ratio the two pools allow); a size larger than a pool is scaled
    down with the ratio kept; each side keeps at least one sample."""
    if id_pool < 1 or ood_pool < 1:
        raise UsageError("meta-set: empty ID or OOD pool")
    if size is None:
        n_ood = min(float(ood_pool), id_pool / ratio)
        n_id = n_ood * ratio
    else:
        if size < 2:
            raise UsageError(f"meta-set size {size}: must be >= 2")
        n_id = max(1, round(size * ratio / (1.0 + ratio)))
        n_ood = max(1, size - n_id)
        f = min(1.0, id_pool / n_id, ood_pool / n_ood)
        if f < 1.0:
            n_id, n_ood = math.floor(n_id * f), math.floor(n_ood * f)
    n_id = int(min(id_pool, max(1, round(n_id))))
    n_ood = int(min(ood_pool, max(1, round(n_ood))))
    return n_id, n_ood


def partition_splits(names: Sequence[str], train_fraction: float,
                     rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """Random meta-train / meta-test partition of OOD split names: a permutation by `rng`,
    the first round(train_fraction * S) names (at least 1, at most S - 1) meta-train, the
    rest meta-test; never the same split on both sides (`check_disjoint`)."""
    names = list(dict.fromkeys(names))
    if len(names) < 2:
        raise UsageError(f"gscore evaluation needs at least 2 OOD test splits (one for "
                         f"meta-train, one for meta-test), got {len(names)}")
    if not 0.0 < train_fraction < 1.0:
        raise UsageError(f"train_fraction {train_fraction}: must lie in (0, 1)")
    perm = [names[i] for i in rng.permutation(len(names))]
    k = min(len(names) - 1, max(1, round(train_fraction * len(names))))
    train, test = perm[:k], perm[k:]
    check_disjoint(train, test)
    return train, test


def check_disjoint(train: Sequence[str], test: Sequence[str]) -> None:
    """Raise if an OOD split is both a meta-train and a meta-test split."""
    both = sorted(set(train) & set(test))
    if both:
        raise FeatstoreError(f"meta-train and meta-test share OOD split(s) {', '.join(both)}")


@dataclass
class StorePools:
    """One store's scores pooled as [id/test rows, OOD split 1 rows, ...] per detector
    (`scores`, by `method_key`), its id/val reference Gaussian per detector (`ref`: mean,
    population std, rows), and for the auto-evaluation baseline the pooled features and the
    id/train Gaussian (`baselines.load_features`)."""

    index: int
    store: StoreLike
    path: str
    sha: str
    ood: list[str]
    n_id: int
    sizes: dict[str, int]
    offset: dict[str, int]
    total: int
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    ref: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    features: np.ndarray | None = None
    train_gauss: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def ood_test_splits(store: StoreLike) -> list[str]:
    """The store's OOD splits with usage `test` (val-flagged parts are near-duplicates of their
    test parts and would leak between meta-train and meta-test)."""
    return store.splits(role="ood", usage="test")


def select_splits(names: Sequence[str], include: Sequence[str] | None = None,
                  exclude: Sequence[str] | None = None) -> list[str]:
    """OOD split names kept by `include` (shell patterns, e.g. 'ood/photo/*'; None = all)
    minus those matched by `exclude`; a pattern that matches nothing is an error."""
    names = list(dict.fromkeys(names))
    for option, patterns in (("--splits", include), ("--exclude", exclude)):
        for pat in patterns or []:
            if not any(fnmatch.fnmatchcase(n, pat) for n in names):
                raise UsageError(f"{option} {pat!r}: matches no OOD test split (have "
                                 f"{', '.join(names[:6])}{', ...' if len(names) > 6 else ''})")
    kept = [n for n in names if include is None or not include
            or any(fnmatch.fnmatchcase(n, p) for p in include)]
    kept = [n for n in kept if not any(fnmatch.fnmatchcase(n, p) for p in exclude or [])]
    if not kept:
        raise UsageError("--splits/--exclude leave no OOD test split")
    return kept


def store_pools(index: int, store: StoreLike,
                keep: Sequence[str] | None = None) -> StorePools:
    """Pools of one store; `keep`: the OOD split names to use (None = every OOD test split)."""
    for need in (ID_TEST, ID_VAL):
        if not store.has_split(need):
            raise UsageError(f"store {str(store.path)!r} has no complete {need!r} split; gscore "
                             f"needs id/test (ID rows of meta-sets) and id/val (UDE reference)")
    ood = ood_test_splits(store)
    if not ood:
        raise UsageError(f"store {str(store.path)!r} has no OOD test split")
    if keep is not None:
        ood = [s for s in ood if s in set(keep)]
    n_id = store.split(ID_TEST).num_rows
    sizes = {s: store.split(s).num_rows for s in ood}
    offset, pos = {}, n_id
    for s in ood:
        offset[s] = pos
        pos += sizes[s]
    return StorePools(index, store, str(store.path), store.model_sha256, ood, n_id, sizes,
                      offset, pos)


def method_key(method: str, params: Mapping[str, Any]) -> str:
    """The key of a detector's scores in `StorePools.scores`: its name, plus its parameters."""
    return method if not params else method + json.dumps(dict(params), sort_keys=True)


def gscore_scores(store: StoreLike, method: str, params: Mapping[str, Any],
                  names: Sequence[str], use_cache: bool) -> dict[str, np.ndarray]:
    """The scores Gscore models, of every named split: the scorer's scores
    (`scorers.evaluate.score_splits`, cached in scores.h5) in its paper's form
    (`scorers.scoreform.paper_form`: exp of a "log_prob" score, the probability of a
    "log_odds" one), each checked finite. What fit, evaluate, predict and gbench all load."""
    scores, _, _ = score_splits(store, method, params, names, use_cache)
    form = get_scorer(method, **params).score_form()
    scores = paper_forms(scores, form, f"scorer {method!r}")
    for name, s in scores.items():
        bad = int((~np.isfinite(s)).sum())
        if bad:
            raise FeatstoreError(f"scorer {method!r}: {bad} non-finite scores in split {name!r}")
    return scores


def load_scores(sd: StorePools, key: str, method: str, params: Mapping[str, Any],
                use_cache: bool) -> float:
    """Pool the scores Gscore models (`gscore_scores`) of id/val, id/test and every OOD test
    split once: id/test and the OOD splits concatenated in `sd.scores[key]`, the id/val
    (mean, sd, n) in `sd.ref[key]`. Returns the seconds spent."""
    if key in sd.scores:
        return 0.0
    t0 = time.perf_counter()
    scores = gscore_scores(sd.store, method, params, [ID_VAL, ID_TEST, *sd.ood], use_cache)
    sd.scores[key] = np.concatenate([scores[ID_TEST], *[scores[s] for s in sd.ood]])
    val = scores[ID_VAL]
    sd.ref[key] = (float(val.mean()), float(val.std()), int(val.size))
    return time.perf_counter() - t0


@dataclass
class MetaSets:
    """Meta-sets as padded index matrices into the concatenation of the stores' pools; a
    meta-set is a pair of index subsets (ID rows of id/test, rows of one OOD test split)."""

    idx: np.ndarray      # (M, L) global row index (0 beyond n)
    n: np.ndarray        # (M,)
    n_id: np.ndarray     # (M,) the first n_id entries of a row are ID rows
    store: np.ndarray    # (M,) store index
    split: list[str]     # (M,) OOD split name

    @property
    def m(self) -> int:
        return int(self.n.size)

    def values(self, pooled: np.ndarray) -> np.ndarray:
        """(M, L) the sets' values of `pooled` (0 beyond n)."""
        valid = np.arange(self.idx.shape[1])[None, :] < self.n[:, None]
        return np.where(valid, pooled[self.idx], 0.0)

    def is_id(self) -> np.ndarray:
        """(M, L) True at a set's ID rows."""
        return np.arange(self.idx.shape[1])[None, :] < self.n_id[:, None]


def hetero_sizes(id_pool: int, ood_pool: int, rng: np.random.Generator,
                 low: int = HETERO_MIN) -> tuple[int, int]:
    """Supplementary C: n_id and n_ood drawn independently and uniformly from [lo, N] of their
    pool size N, lo = min(low, max(1, N // 10)) (the paper's [100, N] for N >= 1000; a
    tenth of the pool below that, so small pools still give varied sizes and ratios)."""
    out = []
    for pool in (id_pool, ood_pool):
        lo = min(low, max(1, pool // 10))
        out.append(int(rng.integers(lo, pool + 1)))
    return out[0], out[1]


def draw_sets(stores: Sequence[StorePools], names: Sequence[str],
               id_pools: Sequence[np.ndarray], ratio: float, size: int | None,
               per_split: int, rng: np.random.Generator,
               offsets: Sequence[int] | np.ndarray,
               heterogeneous: bool = False) -> MetaSets:
    """`per_split` seeded subsamples without replacement of every (store, OOD split): the ID
    rows from the store's `id_pools` entry (indices into its id/test rows), the OOD rows
    from the split; n_id:n_ood = ratio with total `size` (`set_sizes`), or with
    `heterogeneous` a random size and ratio per set (`hetero_sizes`)."""
    rows, n_ids, st, sp = [], [], [], []
    for sd, pool, base in zip(stores, id_pools, offsets, strict=True):
        for name in names:
            if name not in sd.sizes:
                continue
            n_pool = sd.sizes[name]
            for _ in range(per_split):
                n_id, n_ood = (hetero_sizes(len(pool), n_pool, rng) if heterogeneous
                               else set_sizes(ratio, size, len(pool), n_pool))
                ids = rng.choice(pool, n_id, replace=False)
                oods = sd.offset[name] + rng.choice(n_pool, n_ood, replace=False)
                rows.append(base + np.concatenate([ids, oods]))
                n_ids.append(n_id)
                st.append(sd.index)
                sp.append(name)
    if not rows:
        raise UsageError("no meta-set could be drawn (no OOD split in these stores)")
    idx, n = pack(rows)
    return MetaSets(idx.astype(np.int64), n, np.asarray(n_ids, dtype=np.int64),
                 np.asarray(st, dtype=np.int64), sp)


def fpr_at_tpr(id_scores: np.ndarray, ood_scores: np.ndarray, tpr_percent: int) -> float:
    """FPR (percent) at TPR >= tpr_percent, ID positive: at the highest threshold t keeping at
    least that share of ID scores (t = the k-th largest ID score, k = ceil(p * n_id / 100) in
    integers), the share of OOD scores >= t. For p = 95 this is `ood_metrics`' fpr95."""
    a = np.sort(np.asarray(id_scores, dtype=np.float64))[::-1]
    k = (int(tpr_percent) * a.size + 99) // 100
    t = a[max(k, 1) - 1]
    return 100.0 * float(np.count_nonzero(np.asarray(ood_scores) >= t)) / len(ood_scores)


def set_truth(x: np.ndarray, sets: MetaSets) -> np.ndarray:
    """(M, len(TRUTH_COLUMNS)) the sampled target of every meta-set: the metrics (percent,
    `scorers.metrics.ood_metrics` and `fpr_at_tpr`) of its own ID rows vs its own OOD rows;
    x holds the sets' scores (`MetaSets.values`)."""
    out = np.empty((sets.m, len(TRUTH_COLUMNS)))
    for i in range(sets.m):
        k, n = sets.n_id[i], sets.n[i]
        vals = ood_metrics(x[i, :k], x[i, k:n])
        for name, level in FPR_AT_TPR.items():
            vals[name] = fpr_at_tpr(x[i, :k], x[i, k:n], level)
        out[i] = [vals[name] for name in TRUTH_COLUMNS]
    return out


def split_truth(data: Sequence[StorePools], key: str, id_rows: Sequence[np.ndarray] | None
                = None) -> dict[tuple[int, str], np.ndarray]:
    """Split-level targets: {(store index, OOD split): TRUTH_COLUMNS row} of the scorer `key`'s
    scores, each store's ID rows `id_rows[i]` (indices into its id/test rows; None: all of
    id/test) against every row of the OOD split (no subsampling). With all of id/test this
    is the noise-free target of `rmse_split`; with the meta-train ID pool it is the oracle
    split-level predictor whose RMSE against the sampled targets is the noise `floor`
    (`results.evaluate_variant`)."""
    out = {}
    for i, sd in enumerate(data):
        scores = sd.scores[key]
        ids = scores[:sd.n_id] if id_rows is None else scores[np.asarray(id_rows[i])]
        for name in sd.ood:
            ood = scores[sd.offset[name]:sd.offset[name] + sd.sizes[name]]
            vals = ood_metrics(ids, ood)
            for t, level in FPR_AT_TPR.items():
                vals[t] = fpr_at_tpr(ids, ood, level)
            out[(sd.index, name)] = np.array([vals[c] for c in TRUTH_COLUMNS])
    return out


def set_targets(sets: MetaSets, table: Mapping[tuple[int, str], np.ndarray]) -> np.ndarray:
    """(M, len(TRUTH_COLUMNS)): each meta-set's split-level target row from `split_truth`."""
    return np.stack([table[(int(st), sp)] for st, sp in zip(sets.store, sets.split,
                                                            strict=True)])


def id_pools(data: Sequence[StorePools], id_train_fraction: float | None,
              rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The id/test rows meta-train and meta-test sets draw from, per store: disjoint random
    parts (a permutation by `rng`; the first round(id_train_fraction * n) rows, at least 1
    and at most n - 1, for meta-train sets, the rest for meta-test sets: featstore's default;
    the paper (§6.1) takes a fifth of CIFAR-10's train set, held out of the backbone's
    training, for meta-train and the test set for meta-test, disjoint as these are) or, with
    None, all rows for both (optimistic: a small pool leaks between the sides)."""
    pools_tr, pools_te = [], []
    for sd in data:
        perm = rng.permutation(sd.n_id)
        if id_train_fraction is None:
            pools_tr.append(np.arange(sd.n_id))
            pools_te.append(np.arange(sd.n_id))
            continue
        k = min(sd.n_id - 1, max(1, round(id_train_fraction * sd.n_id)))
        pools_tr.append(np.sort(perm[:k]))
        pools_te.append(np.sort(perm[k:]))
    return pools_tr, pools_te


def target_column(target: str) -> int:
    """The column of `target` in the true-metric matrices (`set_truth`, `split_truth`)."""
    return TRUTH_COLUMNS.index(target)


def check_same_model(stores: Sequence[Any], allow_other_model: bool) -> None:
    """Refuse to pool stores made by different models unless `allow_other_model`."""
    shas = {st.model_sha256 for st in stores}
    if len(shas) > 1 and not allow_other_model:
        raise UsageError("the stores were made by different models "
                         f"({', '.join(sorted(s[:12] for s in shas))}); pass "
                         "--allow-other-model / allow_other_model=True to pool them")


@dataclass
class PooledScores:
    """Every detector's scores of every store, computed once and pooled: `pooled[m]` is the
    concatenation of the stores' pools (`data`, starting at `offsets`), `refs[m]` each
    store's id/val (mean, std), `split_t[m]` the split-level targets (`split_truth` with all
    of id/test), `msp` the pooled MSP scores for the confidence baseline (None without
    baselines); `skipped`: detectors that could not run, with the reason."""

    data: list[StorePools]
    offsets: np.ndarray
    names: list[str]
    methods: list[str]
    skipped: dict[str, str]
    pooled: dict[str, np.ndarray]
    msp: np.ndarray | None
    refs: dict[str, np.ndarray]
    seconds: float
    keys: dict[str, str] = field(default_factory=dict)
    split_t: dict[str, dict] = field(default_factory=dict)
    #: `--paper`'s modelling settings every engine gets (`GscoreEngine`): Kmeans by Lloyd's
    #: algorithm from this seed (None: the exact 2-means), the tau refinement's half-width.
    lloyd_seed: int | None = None
    tau_halfwidth: float = TAU_HALFWIDTH

    def floor_table(self, m: str, id_rows: Sequence[np.ndarray]) -> dict:
        """Split-level targets of detector m from the meta-train ID rows (the oracle floor)."""
        return split_truth(self.data, self.keys[m], id_rows)

    def engine(self, sets: MetaSets, m: str, ude_kernel: str) -> GscoreEngine:
        """The Gscore engine of detector m's scores on `sets` (UDE reference: each set's
        store's id/val Gaussian; `lloyd_seed`, `tau_halfwidth`: this evaluation's)."""
        refs = self.refs[m]
        return GscoreEngine(sets.values(self.pooled[m]), sets.n, refs[sets.store, 0],
                            refs[sets.store, 1], ude_kernel=ude_kernel,
                            lloyd_seed=self.lloyd_seed, tau_halfwidth=self.tau_halfwidth)
