"""Shared machinery of the scorers that search a bank of id/train rows with FAISS (knn,
nnguide): parameter checks, the seeded bank subsample, and the grid path that runs one search
per chunk at the largest K of each bank setting (K values that share a FAISS search width are
grouped by `KnnIndex.search_key`).

With an approximate `index`, the search width (IVF nprobe, HNSW ef_search) is calibrated at
fit to the scorer's `recall_target` (default 0.95; null keeps the fixed defaults) on the
recall queries (`scorers.knn_index`, "Recall calibration"); `diagnostics` records the recall,
the target and the chosen width (`index_options`).

A subclass names its bank-size parameter (`fraction_param`), builds its index from the store
(`_build`, from a `bank_stream`: the index holds the only copy of the bank) and turns one
search per chunk into scores for several K (`_scores_for_ks`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from .base import Scorer, ValidRange
from .knn_bank import BankStream
from .knn_index import INDEX_KINDS, KnnIndex, l2_normalize, subsample_rows, subsample_size
from .rowmap import read_chunk_rows

FIT_SPLIT = "id/train"
RECALL_QUERIES = 256
RECALL_SPLITS = ("id/val", "id/test", FIT_SPLIT)
MIN_K = 5  # fewer neighbours than this: a clamped K is reported as degenerate


def recall_split(store: StoreLike) -> str:
    """The split whose first rows are the recall queries: id/val when the store has it (rows
    outside the bank), else id/test, else id/train (bank rows: recall is then optimistic)."""
    return next(n for n in RECALL_SPLITS if store.has_split(n))


def recall_queries(store: StoreLike, max_rows: int = RECALL_QUERIES) -> np.ndarray:
    """The first `max_rows` features of `recall_split(store)`, L2-normalized: the queries on
    which an approximate index's recall@K is measured."""
    split = store.split(recall_split(store))
    rows = min(max_rows, split.num_rows)
    return l2_normalize(split.read("features", slice(0, rows)))


def is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def bank_chunks(store: StoreLike, fraction: float, seed: int, chunk_rows: int,
                *fields: str) -> Iterator[tuple[np.ndarray, ...]]:
    """id/train chunks of `fields` restricted to the bank rows: all rows, or the sorted
    `subsample_rows(N, fraction, seed)`; empty chunks are skipped."""
    split = store.split(FIT_SPLIT)
    rows = subsample_rows(split.num_rows, fraction, seed)
    for sl, arrays in split.iter_chunks(*fields, chunk_rows=chunk_rows):
        if rows is not None:
            lo, hi = np.searchsorted(rows, [sl.start, sl.stop])
            pick = rows[lo:hi] - sl.start
            arrays = tuple(a[pick] for a in arrays)
        if arrays[0].shape[0]:
            yield arrays


def bank_stream(store: StoreLike, fraction: float, seed: int, chunk_rows: int,
                fields: tuple[str, ...], transform: Callable[..., np.ndarray]) -> BankStream:
    """The bank as a stream of `transform(*chunk_arrays)` float32 chunks of the bank rows of
    id/train (`bank_chunks`, reads of about `rowmap.FIT_READ_BYTES`, at most `chunk_rows`
    rows), read afresh per pass: the index it is added to holds the only copy
    (`scorers.knn_bank`)."""
    split = store.split(FIT_SPLIT)
    rows = read_chunk_rows(split, fields, chunk_rows)  # ~4 MiB per read, at most chunk_rows

    def chunks() -> Iterator[np.ndarray]:
        for arrays in bank_chunks(store, fraction, seed, rows, *fields):
            yield transform(*arrays)

    return BankStream(subsample_size(split.num_rows, fraction), split.dims["features"], chunks)


class BankScorer(Scorer):
    """A scorer over a FAISS index of (a subsample of) id/train; see the module docstring."""

    fraction_param: ClassVar[str] = "bank_fraction"
    # the bank size the default K grid was chosen for (None: the grid is not rescaled)
    grid_bank: ClassVar[int | None] = None
    bank_keys: ClassVar[tuple[str, ...]] = ()

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        name, fp = self.name, self.fraction_param
        k = params["K"]
        if not is_int(k) or k < 1:
            raise UsageError(f"scorer {name!r}: K={k!r} must be an integer >= 1")
        frac = params[fp]
        if (not isinstance(frac, numbers.Real) or isinstance(frac, bool)
                or not 0.0 < float(frac) <= 1.0):
            raise UsageError(f"scorer {name!r}: {fp}={frac!r} must satisfy 0 < {fp} <= 1")
        if not is_int(params["seed"]) or params["seed"] < 0:
            raise UsageError(f"scorer {name!r}: seed={params['seed']!r} must be an integer >= 0")
        self.check_choice(params, "index", INDEX_KINDS)
        target = params.get("recall_target")
        if target is not None and (isinstance(target, bool) or not isinstance(target, numbers.Real)
                                   or not 0.0 < float(target) <= 1.0):
            raise UsageError(f"scorer {name!r}: recall_target={target!r} must satisfy "
                             "0 < recall_target <= 1 (or null: fixed default search width)")
        if store is not None and store.has_split(FIT_SPLIT):
            n = store.split(FIT_SPLIT).num_rows
            size = subsample_size(n, float(frac))
            if k > size:
                raise UsageError(
                    f"scorer {name!r}: K={k} is larger than the train bank ({size} rows: "
                    f"{n} rows of {FIT_SPLIT} x {fp} {frac}); valid: 1 <= K <= {size}"
                )

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        """K's data-dependent range: 1 <= K <= the bank size (id/train rows x the fraction)."""
        if not store.has_split(FIT_SPLIT):
            return {}
        fp, frac = self.fraction_param, float(params[self.fraction_param])
        n = store.split(FIT_SPLIT).num_rows
        size = subsample_size(n, frac)
        return {"K": ValidRange(1, size, f"1 <= K <= {size}, the train bank ({n} rows of "
                                         f"{FIT_SPLIT} x {fp} {params[fp]})")}

    def degenerate(self, param: str, default: Any, used: Any, params: Mapping[str, Any],
                   store: StoreLike) -> str:
        """A clamped K below MIN_K neighbours or equal to the whole bank (the K-th neighbour
        is then no near one); names the id/train rows the default K needs."""
        if param != "K" or not store.has_split(FIT_SPLIT):
            return ""
        fp, frac = self.fraction_param, float(params[self.fraction_param])
        n = store.split(FIT_SPLIT).num_rows
        size = subsample_size(n, frac)
        if used >= MIN_K and used < size:
            return ""
        what = [f"K={used} < {MIN_K} neighbours"] if used < MIN_K else []
        what += [f"K = the whole {size}-row bank"] if used >= size else []
        need = math.ceil(default / frac - 1e-9)
        return (f"{' and '.join(what)}; the store lacks {FIT_SPLIT} rows: the default "
                f"K={default} at {fp} {params[fp]} needs >= {need} (it has {n})")

    def fit_grid(self, grid: Mapping[str, Any], store: StoreLike
                 ) -> tuple[dict[str, list[Any]], str]:
        """With `grid_bank` set and a bank smaller than it, every default K scaled by
        bank / grid_bank (rounded, >= 1): the share K / bank the grid was chosen for is kept."""
        out = {k: list(v) for k, v in grid.items()}
        if (self.grid_bank is None or "K" not in out or self.fraction_param in out
                or not store.has_split(FIT_SPLIT)):
            return out, ""
        fp = self.fraction_param
        n = store.split(FIT_SPLIT).num_rows
        size = subsample_size(n, float(self.params[fp]))
        if size >= self.grid_bank:
            return out, ""
        out["K"] = [max(1, round(k * size / self.grid_bank)) for k in out["K"]]
        return out, (f"the default K grid is set for a {self.grid_bank}-row bank; scaled by "
                     f"this store's bank {size}/{self.grid_bank} ({n} rows of {FIT_SPLIT} x "
                     f"{fp} {self.params[fp]})")

    def score_form(self) -> str:
        """"reranked" with `index` = ivf_pq, whose distances are exact after re-ranking
        (`scorers.knn_index`): scores cached from its earlier quantized distances are never
        read back; "" otherwise."""
        return "reranked" if self.params.get("index") == "ivf_pq" else ""

    # ------------------------------------------------------------------ subclass hooks
    def _build(self, store: StoreLike, params: Mapping[str, Any]) -> KnnIndex:
        raise NotImplementedError

    def _scores_for_ks(self, index: KnnIndex, split: SplitLike,
                       ks: list[int]) -> dict[int, np.ndarray]:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared work
    @staticmethod
    def search_groups(index: KnnIndex, ks: list[int]) -> list[list[int]]:
        """K values grouped by the FAISS search they can share (one search at the group max)."""
        groups: dict[Any, list[int]] = {}
        for k in sorted(set(ks)):
            groups.setdefault(index.search_key(k), []).append(k)
        return list(groups.values())

    def _fit(self, store: StoreLike) -> None:
        self.index = self._build(store, self.params)
        self.bank_size = self.index.ntotal
        self.diagnostics = {"index": self.params["index"], "bank_size": self.bank_size}
        if self.index.recall is not None:
            self.diagnostics.update(recall_at_k=self.index.recall,
                                    recall_k=self.index.options["recall_k"],
                                    recall_queries=self.index.recall_queries,
                                    recall_split=recall_split(store),
                                    index_options=dict(self.index.options))

    def index_options(self, store: StoreLike, params: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments every subclass passes to KnnIndex: the recall queries when the
        index is approximate (recall@K against exact search is measured at build) and the
        `recall_target` the search width is calibrated to (None: the fixed defaults)."""
        if params["index"] == "exact":
            return {}
        target = params.get("recall_target")
        return {"recall_queries": recall_queries(store), "recall_k": int(params["K"]),
                "recall_target": None if target is None else float(target)}

    def _score(self, split: SplitLike) -> np.ndarray:
        k = int(self.params["K"])
        return self._scores_for_ks(self.index, split, [k])[k]

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        keys = (self.fraction_param, "seed", "index", "recall_target")
        full = [{**self.params, **s} for s in settings]
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(full):
            groups.setdefault(tuple(p.get(key) for key in keys), []).append(i)
        out: list[np.ndarray] = [np.empty(0)] * len(settings)
        own = tuple(self.params.get(key) for key in keys)
        for key, members in groups.items():
            index = self.index if key == own else self._build(self.fitted_store, full[members[0]])
            scores = self._scores_for_ks(index, split, [int(full[i]["K"]) for i in members])
            for i in members:
                out[i] = scores[int(full[i]["K"])]
        return out
