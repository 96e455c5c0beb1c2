"""Rankings of methods across many blocks (OOD sets, seeds, stores): average ranks, the
Friedman test and the Nemenyi post-hoc test with its critical difference (Demšar 2006, JMLR 7).

As implemented, for a (N blocks x k methods) table of one metric:

- ranks within each block, 1 = best (highest value for a "max" metric, lowest for "min"),
  ties get the mean of the ranks they span; ``R_j`` = mean rank of method ``j``;
- Friedman: ``chi2 = (12 / (N k (k+1)) sum_j (N R_j)^2 - 3 N (k+1)) / C`` with the tie
  correction ``C = 1 - sum_ties (t^3 - t) / (N k (k^2 - 1))``, ``p = P(chi2_{k-1} > chi2)``
  (= ``scipy.stats.friedmanchisquare``);
- Nemenyi: ``CD = q_alpha sqrt(k (k+1) / (6 N))`` with ``q_alpha`` the studentized range
  quantile ``q_{1-alpha}(k, inf) / sqrt(2)`` (Demšar's Table 5: 2.569 for k = 4 at 0.05);
  pairwise ``p_ij = P(Q_{k,inf} > sqrt(2) |R_i - R_j| / sqrt(k (k+1) / (6 N)))``;
- CD cliques: the maximal runs of methods, in rank order, whose first and last mean ranks
  differ by less than CD (the bars of a critical-difference diagram).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2, rankdata, studentized_range


@dataclass(frozen=True)
class RankingResult:
    """Average ranks, Friedman's test, Nemenyi's CD and pairwise p-values."""

    methods: list[str]
    mean_ranks: np.ndarray          # (k,)
    n_blocks: int
    friedman_chi2: float
    friedman_p: float
    alpha: float
    critical_difference: float
    nemenyi_p: np.ndarray           # (k, k)
    cliques: list[list[str]]

    def to_json(self) -> dict:
        return {"methods": self.methods,
                "mean_ranks": {m: float(r) for m, r in zip(self.methods, self.mean_ranks,
                                                           strict=True)},
                "n_blocks": self.n_blocks, "friedman_chi2": self.friedman_chi2,
                "friedman_p": self.friedman_p, "alpha": self.alpha,
                "critical_difference": self.critical_difference,
                "nemenyi_p": [[float(v) for v in row] for row in self.nemenyi_p],
                "cliques": self.cliques}


def block_ranks(table: np.ndarray, direction: str = "max") -> np.ndarray:
    """(N, k) ranks within each row, 1 = best, ties averaged."""
    t = np.asarray(table, dtype=np.float64)
    if t.ndim != 2:
        raise ValueError(f"ranking table must be 2-D (blocks x methods), got {t.shape}")
    if not np.isfinite(t).all():
        raise ValueError(f"ranking table holds {int((~np.isfinite(t)).sum())} non-finite "
                         "values; drop the blocks or methods that lack a value")
    if direction not in ("max", "min"):
        raise ValueError(f"direction must be 'max' or 'min', got {direction!r}")
    return rankdata(-t if direction == "max" else t, axis=1)


def friedman(ranks: np.ndarray) -> tuple[float, float]:
    """(chi2, p) of the Friedman test from (N, k) within-block ranks (ties averaged)."""
    r = np.asarray(ranks, dtype=np.float64)
    n, k = r.shape
    if k < 3:
        raise ValueError(f"the Friedman test needs at least 3 methods, got {k}")
    ties = 0.0
    for row in r:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts ** 3 - counts).sum())
    c = 1.0 - ties / (n * k * (k * k - 1))
    sums = r.sum(axis=0)
    stat = (12.0 / (n * k * (k + 1)) * float((sums ** 2).sum()) - 3.0 * n * (k + 1)) / c
    return float(stat), float(chi2.sf(stat, k - 1))


def nemenyi_cd(k: int, n_blocks: int, alpha: float = 0.05) -> float:
    """Nemenyi's critical difference of mean ranks for ``k`` methods over ``n_blocks``."""
    q = studentized_range.ppf(1.0 - alpha, k, np.inf) / np.sqrt(2.0)
    return float(q * np.sqrt(k * (k + 1) / (6.0 * n_blocks)))


def nemenyi_p(mean_ranks: np.ndarray, n_blocks: int) -> np.ndarray:
    """(k, k) Nemenyi p-values of every pair of mean ranks (diagonal 1)."""
    r = np.asarray(mean_ranks, dtype=np.float64)
    k = r.size
    se = np.sqrt(k * (k + 1) / (6.0 * n_blocks))
    q = np.sqrt(2.0) * np.abs(r[:, None] - r[None, :]) / se
    p = studentized_range.sf(q, k, np.inf)
    np.fill_diagonal(p, 1.0)
    return np.clip(p, 0.0, 1.0)


def cd_cliques(methods: list[str], mean_ranks: np.ndarray, cd: float) -> list[list[str]]:
    """Maximal runs (in rank order, length >= 2) whose mean ranks span less than ``cd``."""
    order = np.argsort(mean_ranks, kind="stable")
    r = np.asarray(mean_ranks)[order]
    runs: list[tuple[int, int]] = []
    for i in range(r.size):
        j = i
        while j + 1 < r.size and r[j + 1] - r[i] < cd:
            j += 1
        if j > i and not any(a <= i and j <= b for a, b in runs):
            runs.append((i, j))
    return [[methods[order[t]] for t in range(a, b + 1)] for a, b in runs]


def rank_methods(table: np.ndarray, methods: list[str], direction: str = "max",
                 alpha: float = 0.05) -> RankingResult:
    """Average ranks, Friedman and Nemenyi for a (blocks x methods) table of one metric."""
    if len(methods) != np.shape(table)[1]:
        raise ValueError(f"{len(methods)} method names for {np.shape(table)[1]} columns")
    if np.shape(table)[0] < 2:
        raise ValueError(f"ranking needs at least 2 blocks (OOD sets, seeds or stores), got "
                         f"{np.shape(table)[0]}")
    ranks = block_ranks(table, direction)
    n = ranks.shape[0]
    mean = ranks.mean(axis=0)
    stat, p = friedman(ranks)
    cd = nemenyi_cd(len(methods), n, alpha)
    return RankingResult(list(methods), mean, n, stat, p, alpha, cd, nemenyi_p(mean, n),
                         cd_cliques(list(methods), mean, cd))
