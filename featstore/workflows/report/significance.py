"""Whether a statistical section can say anything at this size, before it is drawn.

Each function returns None when the test can reach significance at level `alpha`, else a one-
line note saying why it cannot (the report shows the note instead of the section):

- paired bootstrap with B resamples: the smallest two-sided p is 2 / (B + 1)
  (`scorers.stats.paired_bootstrap_p`: 2 (1 + 0) / (B + 1)); Holm over m pairs multiplies the
  smallest p by m, so no adjusted p can fall below min(1, 2 m / (B + 1));
- Friedman over n blocks (OOD test splits) and k scorers: the statistic is largest when every
  block ranks the scorers alike, chi2 = n (k - 1) (no ties), so the smallest p is
  chi2.sf(n (k - 1), k - 1);
- Nemenyi's critical difference CD = q_alpha sqrt(k (k + 1) / (6 n)): mean ranks lie in
  [1, k], so when CD >= k - 1 no pair can differ; the smallest n with CD < k - 1 is named.
"""

from __future__ import annotations

import math

from scipy.stats import chi2

from scorers.stats.ranking import nemenyi_cd


def bootstrap_floor(resamples: int, pairs: int) -> float:
    """The smallest Holm-adjusted p-value a paired bootstrap of `resamples` can give over
    `pairs` pairs: min(1, pairs * 2 / (resamples + 1))."""
    return min(1.0, pairs * 2.0 / (resamples + 1.0))


def bootstrap_note(resamples: int, pairs: int, alpha: float = 0.05) -> str | None:
    """None when an adjusted p below `alpha` is attainable, else why not."""
    floor = bootstrap_floor(resamples, pairs)
    if floor < alpha:
        return None
    need = math.floor(2.0 * pairs / alpha)  # smallest B with 2 m / (B + 1) < alpha
    return (f"no pair can reach p < {alpha:g}: with {resamples} bootstrap resamples the "
            f"smallest p is 2/{resamples + 1}, and Holm over {pairs} pairs raises it to "
            f"{floor:.3g} (needs at least {need} resamples, or fewer scorers)")


def friedman_floor(k: int, n_blocks: int) -> float:
    """The smallest Friedman p for k scorers over n blocks: chi2.sf(n (k - 1), k - 1)."""
    return float(chi2.sf(n_blocks * (k - 1), k - 1))


def friedman_note(k: int, n_blocks: int, alpha: float = 0.05) -> str | None:
    floor = friedman_floor(k, n_blocks)
    if floor < alpha:
        return None
    return (f"Friedman's test cannot reach p < {alpha:g} over {n_blocks} OOD test splits and "
            f"{k} scorers (smallest attainable p {floor:.3g})")


def min_blocks_for_cd(k: int, alpha: float = 0.05) -> int:
    """The fewest blocks for which Nemenyi's CD is below k - 1."""
    n = 1
    while nemenyi_cd(k, n, alpha) >= k - 1:
        n += 1
    return n


def cd_note(k: int, n_blocks: int, alpha: float = 0.05) -> str | None:
    cd = nemenyi_cd(k, n_blocks, alpha)
    if cd < k - 1:
        return None
    return (f"no critical-difference diagram: Nemenyi's CD over {n_blocks} OOD test splits is "
            f"{cd:.1f}, not below {k - 1} (the largest possible gap of mean ranks of {k} "
            f"scorers), so no pair can differ; it needs at least "
            f"{min_blocks_for_cd(k, alpha)} splits")
