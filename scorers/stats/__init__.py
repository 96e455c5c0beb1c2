"""Statistics over scores: stratified bootstrap intervals of every metric (percentile, BCa),
DeLong's test, paired bootstrap tests with Holm's correction, rankings with Friedman and
Nemenyi. NumPy/SciPy/Numba only; nothing here reads a store (``scorers.compare`` and
``scorers.evaluate`` feed it scores).

Names are resolved on first use (PEP 562): `featstore eval` needs the bootstrap, not DeLong's
or Friedman's ``scipy.stats`` (a third of a second to import)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE = {
    **dict.fromkeys(("MISC_COLUMNS", "OOD_COLUMNS", "BootstrapSpec", "Distributions", "Pair",
                     "bootstrap_evaluation"), "bootstrap"),
    **dict.fromkeys(("DeLongResult", "delong_covariance", "delong_test"), "delong"),
    **dict.fromkeys(("acceleration", "bca_interval", "percentile_interval"), "intervals"),
    **dict.fromkeys(("holm", "paired_bootstrap_p"), "paired"),
    **dict.fromkeys(("RankingResult", "friedman", "nemenyi_cd", "nemenyi_p", "rank_methods"),
                    "ranking"),
}


def __getattr__(name: str) -> Any:
    """A name of `__all__`, imported from its module when first asked for."""
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MISC_COLUMNS", "OOD_COLUMNS", "BootstrapSpec", "DeLongResult", "Distributions", "Pair",
    "RankingResult", "acceleration", "bca_interval", "bootstrap_evaluation",
    "delong_covariance", "delong_test", "friedman", "holm", "nemenyi_cd", "nemenyi_p",
    "paired_bootstrap_p", "percentile_interval", "rank_methods",
]
