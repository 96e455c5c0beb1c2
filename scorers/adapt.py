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
- A default grid is first FITTED to the store by the scorer (`Scorer.fit_grid`): knn's K
  values, chosen for OpenOOD's 50,000-row CIFAR banks, are scaled by bank / 50,000 on a
  smaller bank (rounded, >= 1: the share K / bank the grid was chosen for is kept), so a
  200-row bank sweeps K in [1, 2, 4], not [50, 100, 200] (K = 200 = the whole bank); each
  changed setting is listed with the reason. A bank of 50,000 rows or more keeps the grid.
  Under the remote-sensing paper's protocol (`grid_rule="paper"` of `scorers.sweep.sweep`,
  the `protocol ten-methods` / `protocol osr` presets: §2.5 tunes over "the five most common
  values") the default grid is NOT fitted: its values are used as they are, clamped only
  where the store makes one invalid (a K above the bank), duplicates merged.
- In a default grid every setting is then clamped the same way; settings that become equal
  are scored once (the first in grid order is kept).
- A clamp that leaves the scorer DEGENERATE (`Scorer.degenerate`: vim/residual dim = N - 1,
  a bank scorer's K below 5 or equal to the whole bank, ASH/SCALE keeping one activation)
  says so in the adjustment's reason, naming what the store lacks (the API warns with it).

A value counts as invalid when it lies outside the range AND the scorer's own
`check_params(params, store)` refuses it (ASH's percentile range is a closed bound that is
exact at its end but slightly stricter than the rounding rule beyond it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from featstore.store.interfaces import StoreLike

from .base import Scorer, expand_grid
from .clamp import adapt_params, describe


def fit_defaults(scorer: Scorer, given: Mapping[str, Any], store: StoreLike
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The parameters to run `scorer` (built with the user's `given` parameters) with on
    `store`: its defaults clamped by the rule above, `given` untouched; plus the adjustments."""
    return adapt_params(scorer, scorer.params, set(given), store)


def adapt_grid(scorer: Scorer, grid: Mapping[str, Sequence[Any]], fixed: Collection[str],
               store: StoreLike, fit_to_store: bool = True
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The settings of a DEFAULT grid fitted to the store (`Scorer.fit_grid`: knn scales its
    K values to the bank; skipped when not `fit_to_store`: a grid another rule fixes, RS §2.5's
    "five most common values" as they are or OpenOOD's configs, clamped only) and each clamped
    by the rule (parameters in `fixed` are the user's and stay), duplicates merged in grid
    order; returns (settings, adjustments), one adjustment per changed setting. `fit_grid`
    keeps each parameter's number of values, so setting i of the fitted grid is the fit of
    setting i of `grid`."""
    settings: list[dict[str, Any]] = []
    adjusted: list[dict[str, Any]] = []
    fitted, why = (scorer.fit_grid(grid, store) if fit_to_store
                   else ({k: list(v) for k, v in grid.items()}, ""))
    for setting, fit in zip(expand_grid(grid) if grid else [{}],
                            expand_grid(fitted) if fitted else [{}], strict=True):
        params, adj = adapt_params(scorer, {**scorer.params, **fit}, fixed, store)
        used = {k: params[k] for k in setting}
        if used != setting:
            reasons = [why] if fit != setting else []
            reasons += [a["reason"] for a in adj if set(a["used"]) <= set(setting)]
            adjusted.append({"setting": dict(setting), "used": used,
                             "reason": "; ".join(reasons)})
        if used not in settings:
            settings.append(used)
    return settings, adjusted


__all__ = ["adapt_grid", "adapt_params", "describe", "fit_defaults"]
