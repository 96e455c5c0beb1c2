"""Data-dependent defaults: ONE rule, applied alike by evaluation, sweeps and reports
(README "Data-dependent defaults").

A scorer's defaults are generic values from the papers and OpenOOD's ImageNet configs (ViM's
dim 512 or 1000, KNN's K up to 1000, NNGuide's K = 100 over a 1% bank). A store's data can make
such a value invalid: fewer id/train rows than ViM's dim, a bank smaller than K, a feature
dimension D too small for an ASH percentile. The rule:

- A DEFAULT (a parameter the user did not set, or a value of a scorer's default sweep grid)
  that the store makes invalid is CLAMPED to the nearest bound of the parameter's valid range
  (`Scorer.valid_ranges(params, store)`), and the run says so: every change is returned as
  {"setting": {param: default}, "used": {param: clamped}, "reason": the range and what sets
  it}, and every output (terminal, JSON, report) lists it.
- When the range is empty (no value is valid, e.g. one id/train row for ViM's dim), the scorer
  cannot run on this store: a UsageError with the reason (a run over many scorers skips it
  with that reason, `scorers.skipping`).
- A value the USER gave (a fixed parameter, an explicit grid) is never changed: out of range
  is a UsageError naming the value and the range (exit code 2).
- In a default grid every setting is clamped the same way; settings that become equal are
  scored once (the first in grid order is kept).

A value counts as invalid when it lies outside the range AND the scorer's own
`check_params(params, store)` refuses it (ASH's percentile range is a closed bound that is
exact at its end but slightly stricter than the rounding rule beyond it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from featstore.interfaces import StoreLike

from .base import Scorer, expand_grid
from .clamp import adapt_params, describe


def fit_defaults(scorer: Scorer, given: Mapping[str, Any], store: StoreLike
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The parameters to run `scorer` (built with the user's `given` parameters) with on
    `store`: its defaults clamped by the rule above, `given` untouched; plus the adjustments."""
    return adapt_params(scorer, scorer.params, set(given), store)


def adapt_grid(scorer: Scorer, grid: Mapping[str, Sequence[Any]], fixed: Collection[str],
               store: StoreLike) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The settings of a DEFAULT grid, each clamped by the rule (parameters in `fixed` are the
    user's and stay), duplicates after clamping merged in grid order; returns (settings,
    adjustments), one adjustment per changed setting."""
    settings: list[dict[str, Any]] = []
    adjusted: list[dict[str, Any]] = []
    for setting in (expand_grid(grid) if grid else [{}]):
        params, adj = adapt_params(scorer, {**scorer.params, **setting}, fixed, store)
        used = {k: params[k] for k in setting}
        if used != setting:
            reasons = "; ".join(a["reason"] for a in adj if set(a["used"]) <= set(setting))
            adjusted.append({"setting": dict(setting), "used": used, "reason": reasons})
        if used not in settings:
            settings.append(used)
    return settings, adjusted


__all__ = ["adapt_grid", "adapt_params", "describe", "fit_defaults"]
