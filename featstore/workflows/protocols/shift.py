"""Shift-level grids (IS-OOD: Long et al., "Rethinking the Evaluation of Out-of-Distribution
Detection: A Sorites Paradox", NeurIPS 2024).

OOD samples carry two shift degrees, semantic and covariate. Each axis is cut into L levels
(L = 8 by default) and the L x L cells are OOD subsets; every cell is evaluated against id/test
with a scorer, and cells with fewer than `min_count` samples (default 10, the IS-OOD code's
DATASET_NUM_TH) are N/A. Per-axis level means average a metric over the other axis's non-N/A
cells (IS-OOD `analyze_metrics.py`), and `scorers.metrics.shift_sensitivity` gives the Pearson
correlation with the level index and |slope| (the paper's eqs. 5-6, Table 1).

As implemented:

- binning (`bin_levels`): `equal` cuts [min, max] into L equal-width intervals, `quantile`
  at the L-quantiles of the values; level i holds start_i <= v < end_i (the last interval is
  closed), as IS-OOD's Algorithm 1 (lines 11-16). Hand-set edges (`parse_level_edges`, CLI
  `--levels-edges "0,0.1,0.2,0.4"` for both axes or `"SEM;COV"` per axis, same count) replace
  the binning and fix L = edges - 1; degrees outside [first, last edge] belong to no level and
  are counted as `outside` in the result, never folded into an end level.
- grid layout: `grid[cov, sem]`, rows covariate levels, columns semantic levels, as IS-OOD's
  result tables (`cov_{c}_sem_{s}`).
- cells from a store (`store_cells`): OOD test splits named `ood/shift/cov{c}_sem{s}/...`
  (IS-OOD's per-cell lists imported by `featstore protocol lists2spec`; the splits of one cell
  are concatenated, as IS-OOD concatenates a cell's train and val lists), or per-row degrees
  (`extra/sem_shift`, `extra/cov_shift` of OOD test splits, or a degrees .npz) binned as above.
  A degrees .npz (`shift-degrees`, typically from a reference store such as CLIP features)
  carries each split's image ids; its rows are matched to the scored store's rows by id
  (`align_degrees`), never by position; a store image without a degree is an error.
- shift degrees from features (`shift_degrees`): the cosine distance of each OOD sample to its
  k-th nearest ID sample (default k = 10, as the IS-OOD release; k = 1 is the paper's eq. 4) in a
  semantic and a covariate feature subspace, by exact FAISS inner-product search on
  L2-normalised features (scorers.knn_index).
- LAID (`fit_laid`): an l x l matrix W learned from text-encoder features of (standard,
  semantic-shift, covariate-shift) triplets; (f W)[:l/2] is the semantic part, (f W)[l/2:] the
  covariate part. Loss, averaged over the triplets (cosine distance dist = 1 - cos):
      L_sem = [dist(st_sem, cs_sem) - dist(st_sem, ss_sem) + alpha]_+
      L_cov = [dist(st_cov, ss_cov) - dist(st_cov, cs_cov) + alpha]_+
      L     = L_sem + L_cov + lambda * ||W^T W - I||_F^2
  (eqs. 2-3; the hinge is the usual triplet-loss form). Adam, W initialised to the identity,
  seeded; torch is imported only here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import InputError, UsageError
from featstore.store.fileio import atomic_save_npz
from featstore.store.interfaces import SplitLike, StoreLike
from scorers.evaluate import ID_SPLIT, score_splits
from scorers.knn_index import build_index, l2_normalize
from scorers.metrics import OOD_METRIC_NAMES, ood_metrics, shift_sensitivity

DEFAULT_LEVELS = 8
DEFAULT_MIN_COUNT = 10
#: k-th nearest ID neighbour of the shift degrees (the IS-OOD release's k; eq. 4 reads k = 1)
DEFAULT_K = 10
BINNINGS = ("equal", "quantile")
CELL_GROUP = re.compile(r"^shift/(?:cov(?P<c>\d+)_sem(?P<s>\d+)|sem(?P<s2>\d+)_cov(?P<c2>\d+))$")
SEM_EXTRA, COV_EXTRA = "sem_shift", "cov_shift"


def bin_levels(values: np.ndarray, levels: int = DEFAULT_LEVELS, binning: str = "equal",
               edges: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(level index per value in 0..L-1, the L + 1 edges)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise UsageError("shift levels: no values to bin")
    if not np.isfinite(v).all():
        raise UsageError(f"shift levels: {int((~np.isfinite(v)).sum())} non-finite degrees")
    if edges is not None:
        e = np.asarray(edges, dtype=np.float64)
        if e.ndim != 1 or e.size < 2 or (np.diff(e) <= 0).any():
            raise UsageError("shift levels: edges must be increasing, at least 2 of them")
        levels = e.size - 1
    else:
        if levels < 2:
            raise UsageError(f"--levels {levels}: must be >= 2")
        if binning == "equal":
            e = np.linspace(v.min(), v.max(), levels + 1)
        elif binning == "quantile":
            e = np.quantile(v, np.linspace(0.0, 1.0, levels + 1))
        else:
            raise UsageError(f"--binning {binning!r}: expected one of {', '.join(BINNINGS)}")
    idx = np.searchsorted(e, v, side="right") - 1
    return np.clip(idx, 0, levels - 1).astype(np.int64), e


def parse_level_edges(text: str) -> dict[str, list[float]]:
    """`"0,0.1,0.3"` (both axes) or `"0,0.1,0.3;0,0.2,0.5"` (semantic;covariate) ->
    {"semantic": [...], "covariate": [...]}; both axes need the same number of edges (the grid
    is L x L), at least 3 (L >= 2), strictly increasing and finite."""
    parts = text.split(";")
    if len(parts) not in (1, 2):
        raise UsageError(f"--levels-edges {text!r}: expected 'e0,e1,...' or 'SEM;COV' lists")
    lists = []
    for part in parts:
        try:
            e = [float(x) for x in part.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--levels-edges {text!r}: {part!r} is not a list of numbers") \
                from None
        if len(e) < 3 or not all(np.isfinite(e)) or (np.diff(e) <= 0).any():
            raise UsageError(f"--levels-edges {text!r}: {part!r} must hold at least 3 finite, "
                             "strictly increasing edges")
        lists.append(e)
    sem, cov = (lists[0], lists[0]) if len(lists) == 1 else lists
    if len(sem) != len(cov):
        raise UsageError(f"--levels-edges {text!r}: semantic and covariate need the same number "
                         f"of edges (the grid is L x L), got {len(sem)} and {len(cov)}")
    return {"semantic": sem, "covariate": cov}


@dataclass
class ShiftGrid:
    """One scorer's metrics on the L x L cells (`values[metric][cov, sem]`, NaN = N/A)."""

    levels: int
    counts: np.ndarray                       # (L, L) int
    values: dict[str, np.ndarray]            # metric -> (L, L) float, NaN where N/A

    def level_means(self, metric: str, axis: str) -> np.ndarray:
        """Per-level mean over the other axis's non-N/A cells (NaN for an all-N/A level)."""
        grid = self.values[metric]
        along = 0 if axis == "semantic" else 1  # semantic levels are columns: mean over rows
        with np.errstate(invalid="ignore"):
            counts = (~np.isnan(grid)).sum(axis=along)
            sums = np.nansum(grid, axis=along)
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)

    def sensitivity(self, metric: str) -> dict[str, dict[str, float]]:
        """{semantic|covariate: {correlation, sensitivity}} of the per-level means."""
        out = {}
        for axis in ("semantic", "covariate"):
            try:
                corr, sens = shift_sensitivity(self.level_means(metric, axis))
            except ValueError:
                corr, sens = float("nan"), float("nan")
            out[axis] = {"correlation": corr, "sensitivity": sens}
        return out

    def to_json(self) -> dict[str, Any]:
        def clean(a: np.ndarray) -> list:
            return [[None if np.isnan(x) else float(x) for x in row] for row in a]

        return {"levels": self.levels, "layout": "rows = covariate level, columns = semantic "
                "level", "counts": self.counts.tolist(),
                "values": {m: clean(v) for m, v in self.values.items()}}


def evaluate_cells(id_scores: np.ndarray, cell_scores: Mapping[tuple[int, int], np.ndarray],
                   levels: int, min_count: int = DEFAULT_MIN_COUNT) -> ShiftGrid:
    """`ood_metrics` of id/test vs every cell with at least `min_count` samples."""
    counts = np.zeros((levels, levels), dtype=np.int64)
    values = {m: np.full((levels, levels), np.nan) for m in OOD_METRIC_NAMES}
    for (c, s), scores in cell_scores.items():
        if not (0 <= c < levels and 0 <= s < levels):
            raise UsageError(f"shift cell cov{c}_sem{s} is outside a {levels} x {levels} grid")
        counts[c, s] = len(scores)
        if len(scores) < min_count:
            continue
        res = ood_metrics(id_scores, scores, id_name="id/test", ood_name=f"cov{c}_sem{s}")
        for m in OOD_METRIC_NAMES:
            values[m][c, s] = res[m]
    return ShiftGrid(levels, counts, values)


def cells_from_degrees(scores: np.ndarray, sem: np.ndarray, cov: np.ndarray,
                       levels: int = DEFAULT_LEVELS, binning: str = "equal",
                       sem_edges: Sequence[float] | None = None,
                       cov_edges: Sequence[float] | None = None,
                       ) -> tuple[dict[tuple[int, int], np.ndarray], dict[str, list[float]]]:
    """Group OOD scores into (cov level, sem level) cells; returns cells and the edges.
    With hand-set edges, rows whose degree lies outside an axis's [first, last] edge enter no
    cell (`shift_grid` reports their count as `outside`)."""
    scores, sem, cov = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (scores, sem, cov))
    if not (len(scores) == len(sem) == len(cov)):
        raise UsageError(f"shift degrees: {len(sem)} semantic and {len(cov)} covariate degrees "
                         f"for {len(scores)} scores")
    inside = np.ones(len(scores), dtype=bool)
    for values, given in ((sem, sem_edges), (cov, cov_edges)):
        if given is not None:
            inside &= (values >= given[0]) & (values <= given[-1])
    if not inside.all():
        if not inside.any():
            raise UsageError("--levels-edges: every shift degree lies outside the given edges")
        scores, sem, cov = scores[inside], sem[inside], cov[inside]
    s_level, s_edges = bin_levels(sem, levels, binning, sem_edges)
    c_level, c_edges = bin_levels(cov, levels, binning, cov_edges)
    cells: dict[tuple[int, int], np.ndarray] = {}
    for c in range(len(c_edges) - 1):
        for s in range(len(s_edges) - 1):
            mask = (c_level == c) & (s_level == s)
            if mask.any():
                cells[(c, s)] = scores[mask]
    return cells, {"semantic": s_edges.tolist(), "covariate": c_edges.tolist()}


# ---------------------------------------------------------------------------- stores
def cell_of_split(store: StoreLike, name: str) -> tuple[int, int] | None:
    """(cov, sem) of a split in group `shift/cov{c}_sem{s}` (or DESIGN's `shift/sem{s}_cov{c}`),
    else None."""
    group = store.split(name).group or ""
    m = CELL_GROUP.match(group)
    if not m:
        return None
    return (int(m.group("c") or m.group("c2")), int(m.group("s") or m.group("s2")))


IDS_SUFFIX = "__ids"


class Degrees(dict):
    """{split: (N, 2) [semantic, covariate]} with `ids` {split: (N,) image ids}: the rows of
    a degrees file are matched to a store's rows by these ids (`align_degrees`)."""

    def __init__(self, degrees: Mapping[str, np.ndarray], ids: Mapping[str, np.ndarray]):
        super().__init__(degrees)
        self.ids = dict(ids)


def load_degrees(path: str | Path) -> Degrees:
    """A degrees .npz: `<split slug>` -> (N, 2) [semantic, covariate] rows and
    `<split slug>__ids` -> their (N,) image ids (as `save_degrees` writes them). A file
    without the ids of a split (written before ids were saved, or by hand) is refused: its
    rows could only be matched by position."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--degrees {str(path)!r}: file not found")
    with np.load(path, allow_pickle=False) as z:
        raw = {k: z[k] for k in z.files}
    ids = {k[:-len(IDS_SUFFIX)].replace("__", "/"): np.asarray(v).astype(str)
           for k, v in raw.items() if k.endswith(IDS_SUFFIX)}
    out = {k.replace("__", "/"): np.asarray(v, dtype=np.float64) for k, v in raw.items()
           if not k.endswith(IDS_SUFFIX)}
    for k, v in out.items():
        if v.ndim != 2 or v.shape[1] != 2:
            raise UsageError(f"--degrees {str(path)!r}: {k!r} has shape {v.shape}, expected "
                             "(N, 2) [semantic, covariate]")
        if k not in ids or ids[k].shape != (len(v),):
            raise UsageError(f"--degrees {str(path)!r}: {k!r} has no image ids for its "
                             f"{len(v)} rows (key {k.replace('/', '__')}{IDS_SUFFIX}); rerun "
                             "`featstore protocol shift-degrees` to write them")
    return Degrees(out, ids)


def align_degrees(split: SplitLike, degrees: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
    """`degrees` reordered to the split's rows by image id (every row of the split must have
    exactly one); without ids, the rows must already be in the split's order (same count)."""
    if ids is None:
        if len(degrees) != split.num_rows:
            raise UsageError(f"split {split.name!r}: {len(degrees)} degrees for "
                             f"{split.num_rows} rows")
        return degrees
    pos = {str(i): k for k, i in enumerate(ids)}
    if len(pos) != len(ids):
        raise UsageError(f"degrees of split {split.name!r}: image ids repeat")
    store_ids = [str(i) for i in split.ids]
    missing = [i for i in store_ids if i not in pos]
    if missing:
        raise UsageError(f"degrees of split {split.name!r}: {len(missing)} of its "
                         f"{len(store_ids)} images have no degree (first: {missing[0]!r}); "
                         "the degrees file comes from another store")
    return degrees[[pos[i] for i in store_ids]]


def shift_grid(store: StoreLike, method: str, params: Mapping[str, Any] | None = None,
               levels: int = DEFAULT_LEVELS, binning: str = "equal",
               min_count: int = DEFAULT_MIN_COUNT, degrees: Mapping[str, np.ndarray] | None = None,
               use_cache: bool = True,
               levels_edges: Mapping[str, Sequence[float]] | None = None) -> dict[str, Any]:
    """The shift grid of one scorer over a store: cells from `shift/cov{c}_sem{s}` splits if
    any, else from per-row degrees (`degrees` or the splits' sem/cov extras), binned into
    `levels` levels or by hand-set `levels_edges` ({"semantic": edges, "covariate": edges},
    see `parse_level_edges`), which then fix the level count."""
    if not store.has_split(ID_SPLIT):
        raise UsageError(f"store {str(store.path)!r} has no {ID_SPLIT!r} split")
    ood = store.splits(role="ood", usage="test")
    named = {n: c for n in ood if (c := cell_of_split(store, n)) is not None}
    cell_splits = list(named)
    if cell_splits and levels_edges is not None:
        raise UsageError("--levels-edges bins per-row shift degrees, but this store's cells come "
                         "from ood/shift/cov<c>_sem<s> splits (their levels are fixed)")
    if cell_splits:
        scores, _, _ = score_splits(store, method, params or {}, [ID_SPLIT, *cell_splits],
                                    use_cache)
        found = max(max(c) for c in named.values()) + 1
        grid_levels = max(found, levels)
        by_cell: dict[tuple[int, int], list[np.ndarray]] = {}
        for n in cell_splits:
            by_cell.setdefault(named[n], []).append(scores[n])
        merged = {k: np.concatenate(v) for k, v in by_cell.items()}
        grid = evaluate_cells(scores[ID_SPLIT], merged, grid_levels, min_count)
        return {"method": method, "source": "splits", "splits": cell_splits, "grid": grid,
                "edges": None}
    rows = []
    for n in ood:
        if degrees is not None and n in degrees:
            d = align_degrees(store.split(n), degrees[n], getattr(degrees, "ids", {}).get(n))
            rows.append((n, d[:, 0], d[:, 1]))
        elif degrees is None:
            sp = store.split(n)
            if sp.has_extra(SEM_EXTRA) and sp.has_extra(COV_EXTRA):
                rows.append((n, np.asarray(sp.extra(SEM_EXTRA)), np.asarray(sp.extra(COV_EXTRA))))
    if not rows:
        raise UsageError(f"store {str(store.path)!r} has no shift cells: no OOD test split in a "
                         "group shift/cov<c>_sem<s>, and no per-row degrees (extra/sem_shift + "
                         "extra/cov_shift, or --degrees FILE.npz)")
    names = [r[0] for r in rows]
    scores, _, _ = score_splits(store, method, params or {}, [ID_SPLIT, *names], use_cache)
    for n, sem, cov in rows:
        if len(sem) != len(scores[n]) or len(cov) != len(scores[n]):
            raise UsageError(f"split {n!r}: {len(sem)} degrees for {len(scores[n])} rows")
    all_scores = np.concatenate([scores[n] for n in names])
    sem = np.concatenate([r[1] for r in rows])
    cov = np.concatenate([r[2] for r in rows])
    sem_edges = cov_edges = None
    if levels_edges is not None:
        sem_edges, cov_edges = levels_edges["semantic"], levels_edges["covariate"]
        levels = len(sem_edges) - 1
        outside = int((~((sem >= sem_edges[0]) & (sem <= sem_edges[-1])
                         & (cov >= cov_edges[0]) & (cov <= cov_edges[-1]))).sum())
    else:
        outside = 0
    cells, edges = cells_from_degrees(all_scores, sem, cov, levels, binning, sem_edges,
                                      cov_edges)
    grid = evaluate_cells(scores[ID_SPLIT], cells, levels, min_count)
    return {"method": method, "source": "degrees", "splits": names, "grid": grid,
            "edges": edges, "outside": outside}


# ---------------------------------------------------------------------------- degrees
def nearest_cosine_distance(bank: np.ndarray, queries: np.ndarray, k: int = 1) -> np.ndarray:
    """Cosine distance (1 - cos) of each query to its k-th nearest bank row (exact FAISS
    inner-product search on L2-normalised rows)."""
    bank = np.asarray(bank, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.float32)
    if bank.ndim != 2 or queries.ndim != 2 or bank.shape[1] != queries.shape[1]:
        raise UsageError(f"shift degrees: bank {bank.shape} and queries {queries.shape} must be "
                         "(N, D) with the same D")
    if not 1 <= k <= len(bank):
        raise UsageError(f"--k {k}: must lie in 1..{len(bank)} (ID bank size)")
    index = build_index(l2_normalize(bank), metric="ip", kind="exact")
    sims, _ = index.search(l2_normalize(queries), k)
    return (1.0 - np.asarray(sims, dtype=np.float64)[:, k - 1]).clip(0.0, 2.0)


def split_features(features: np.ndarray, laid: np.ndarray | None = None,
                   sem_dims: slice | None = None,
                   cov_dims: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(semantic, covariate) parts: halves of f W with a LAID matrix, else the given slices."""
    f = np.asarray(features, dtype=np.float64)
    if laid is not None:
        w = np.asarray(laid, dtype=np.float64)
        if w.shape != (f.shape[1], f.shape[1]):
            raise UsageError(f"LAID matrix {w.shape} does not fit features of D={f.shape[1]}")
        z = f @ w
        h = f.shape[1] // 2
        return z[:, :h], z[:, h:]
    if sem_dims is None or cov_dims is None:
        raise UsageError("shift degrees: give a LAID matrix or both semantic and covariate dims")
    return f[:, sem_dims], f[:, cov_dims]


def shift_degrees(id_features: np.ndarray, ood_features: np.ndarray,
                  laid: np.ndarray | None = None, sem_dims: slice | None = None,
                  cov_dims: slice | None = None, k: int = DEFAULT_K) -> np.ndarray:
    """(N, 2) [semantic, covariate] shift degrees of OOD rows relative to the ID rows."""
    id_sem, id_cov = split_features(id_features, laid, sem_dims, cov_dims)
    ood_sem, ood_cov = split_features(ood_features, laid, sem_dims, cov_dims)
    return np.stack([nearest_cosine_distance(id_sem, ood_sem, k),
                     nearest_cosine_distance(id_cov, ood_cov, k)], axis=1)


def parse_dims(text: str | None) -> slice | None:
    """'0:256' -> slice(0, 256)."""
    if text is None:
        return None
    m = re.match(r"^\s*(\d*)\s*:\s*(\d*)\s*$", text)
    if not m:
        raise UsageError(f"dims {text!r}: expected START:END, e.g. 0:256")
    return slice(int(m.group(1)) if m.group(1) else None, int(m.group(2)) if m.group(2) else None)


def store_degrees(store: StoreLike, laid: np.ndarray | None = None, sem_dims: slice | None = None,
                  cov_dims: slice | None = None, k: int = DEFAULT_K,
                  id_split: str = "id/train") -> dict[str, np.ndarray]:
    """Degrees of every OOD test split of a (reference, e.g. CLIP) store vs `id_split`."""
    bank = np.asarray(store.split(id_split).features, dtype=np.float32)
    out = {}
    for name in store.splits(role="ood", usage="test"):
        feats = np.asarray(store.split(name).features, dtype=np.float32)
        out[name] = shift_degrees(bank, feats, laid, sem_dims, cov_dims, k)
    return out


def save_degrees(path: str | Path, degrees: Mapping[str, np.ndarray],
                 ids: Mapping[str, np.ndarray] | None = None) -> Path:
    """Write degrees as .npz keyed by split slug (`ood/x/y` -> `ood__x__y`) and each split's
    image ids under `<slug>__ids` (unicode, no pickle), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k.replace("/", "__"): np.asarray(v) for k, v in degrees.items()}
    for k, v in (ids or {}).items():
        arrays[k.replace("/", "__") + IDS_SUFFIX] = np.asarray([str(i) for i in v])
    atomic_save_npz(path, arrays)
    return path


# ---------------------------------------------------------------------------- LAID
@dataclass
class LaidConfig:
    margin: float = 0.5
    orth_weight: float = 1.0
    lr: float = 0.01
    steps: int = 500
    batch_size: int = 256
    seed: int = 0


def laid_loss(w: Any, st: Any, ss: Any, cs: Any, margin: float, orth_weight: float) -> Any:
    """The LAID objective of one batch (torch tensors; see the module docstring)."""
    # lazy: the shift protocol scores stores without torch; only LAID training needs it
    import torch
    import torch.nn.functional as F

    h = w.shape[0] // 2
    zst, zss, zcs = st @ w, ss @ w, cs @ w

    def dist(a: Any, b: Any) -> Any:
        return 1.0 - F.cosine_similarity(a, b, dim=1)

    l_sem = F.relu(dist(zst[:, :h], zcs[:, :h]) - dist(zst[:, :h], zss[:, :h]) + margin)
    l_cov = F.relu(dist(zst[:, h:], zss[:, h:]) - dist(zst[:, h:], zcs[:, h:]) + margin)
    eye = torch.eye(w.shape[0], dtype=w.dtype)
    orth = ((w.T @ w - eye) ** 2).sum()
    return (l_sem + l_cov).mean() + orth_weight * orth


def fit_laid(standard: np.ndarray, semantic_shift: np.ndarray, covariate_shift: np.ndarray,
             config: LaidConfig | None = None) -> np.ndarray:
    """Learn the (l, l) LAID matrix from text-feature triplets (row-aligned (N, l) arrays)."""
    import torch  # lazy: see laid_loss

    config = config or LaidConfig()
    arrays = [np.asarray(a, dtype=np.float32) for a in (standard, semantic_shift,
                                                         covariate_shift)]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1 or arrays[0].ndim != 2 or arrays[0].shape[1] % 2:
        raise UsageError(f"LAID: the three triplet arrays must share one (N, l) shape with even "
                         f"l, got {sorted(shapes)}")
    n, dim = arrays[0].shape
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # l x l matrices: a thread pool costs more than it gives
    try:
        return _fit_laid(arrays, n, dim, config)
    finally:
        torch.set_num_threads(threads)


def _fit_laid(arrays: list[np.ndarray], n: int, dim: int, config: LaidConfig) -> np.ndarray:
    import torch  # lazy: see laid_loss

    gen = torch.Generator().manual_seed(config.seed)
    st, ss, cs = (torch.from_numpy(a) for a in arrays)
    w = torch.eye(dim, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([w], lr=config.lr)
    for _ in range(config.steps):
        idx = torch.randint(0, n, (min(config.batch_size, n),), generator=gen)
        loss = laid_loss(w, st[idx], ss[idx], cs[idx], config.margin, config.orth_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return w.detach().numpy().astype(np.float64)
