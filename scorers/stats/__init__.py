"""Statistics over scores: stratified bootstrap intervals of every metric (percentile, BCa),
DeLong's test, paired bootstrap tests with Holm's correction, rankings with Friedman and
Nemenyi. NumPy/SciPy/Numba only; nothing here reads a store (``scorers.compare`` and
``scorers.evaluate`` feed it scores)."""

from .bootstrap import (
    MISC_COLUMNS,
    OOD_COLUMNS,
    BootstrapSpec,
    Distributions,
    Pair,
    bootstrap_evaluation,
)
from .delong import DeLongResult, delong_covariance, delong_test
from .intervals import acceleration, bca_interval, percentile_interval
from .paired import holm, paired_bootstrap_p
from .ranking import RankingResult, friedman, nemenyi_cd, nemenyi_p, rank_methods

__all__ = [
    "MISC_COLUMNS", "OOD_COLUMNS", "BootstrapSpec", "DeLongResult", "Distributions", "Pair",
    "RankingResult", "acceleration", "bca_interval", "bootstrap_evaluation",
    "delong_covariance", "delong_test", "friedman", "holm", "nemenyi_cd", "nemenyi_p",
    "paired_bootstrap_p", "percentile_interval", "rank_methods",
]
