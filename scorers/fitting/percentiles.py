"""Exact percentiles of every feature entry of a fit split, memoised per (split, p) on one
scorer (ReAct's clip value, VRA's two clip values): `np.percentile(all N*D entries as
float64, p)` ('linear') by the two-pass radix select of `scorers.kernels.select`. Pass 1's
histogram of each split is kept, so further percentiles of the same split cost one pass, and
every percentile missing from a request comes out of the same pass 2.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from featstore.errors import UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from ..base import Scorer
from ..kernels.select import exact_percentiles, high_histogram


def check_percentile_split(name: str, split: object, store: StoreLike | None) -> None:
    """UsageError unless `split` (a scorer's `percentile_split`, ReAct / VRA) is a split name,
    and with `store`, one of its splits (the valid ones named)."""
    if not isinstance(split, str):
        raise UsageError(
            f"scorer {name!r}: percentile_split must be a split name (got {split!r})")
    if store is not None and not store.has_split(split):
        avail = ", ".join(store.splits()) or "none"
        raise UsageError(
            f"scorer {name!r}: percentile_split {split!r} is not a split of store "
            f"{str(store.path)!r} (available: {avail})")


class SplitPercentiles:
    """Percentiles of the `features` entries of a fitted store's splits, read in `scorer`'s
    chunks (`Scorer.chunks`)."""

    def __init__(self, scorer: Scorer, store: StoreLike):
        self.scorer = scorer
        self.store = store
        self.values: dict[tuple[str, float], float] = {}
        self.cum_hi: dict[str, np.ndarray] = {}

    def get(self, keys: list[tuple[str, float]]) -> list[float]:
        """The percentile of each (split name, p) in `keys`; the missing ones of a split from
        one pass 2 over it (after its pass 1, once per split)."""
        missing: dict[str, list[float]] = {}
        for split_name, p in keys:
            if (split_name, p) not in self.values:
                missing.setdefault(split_name, [])
                if p not in missing[split_name]:
                    missing[split_name].append(p)
        for split_name, ps in missing.items():
            split = self.scorer.fit_split(self.store, split_name)

            def chunks(split: SplitLike = split) -> Iterable[np.ndarray]:
                return (x for _, (x,) in self.scorer.chunks(split, "features"))

            if split_name not in self.cum_hi:
                self.cum_hi[split_name] = high_histogram(chunks)
            found = exact_percentiles(chunks, ps, self.cum_hi[split_name])
            for p, value in zip(ps, found, strict=True):
                self.values[(split_name, p)] = value
        return [self.values[k] for k in keys]
