"""The text of numbers in every output: the terminal tables (cli/), the report
(featstore/workflows/report/), the experiment tables (featstore/workflows/experiments/) and the
benchmarks' tables format metric values here, so that one value reads the same everywhere.

Conventions:
- A missing value (None, NaN, anything that is not a real number) prints as `MISSING`, an en
  dash `–`; a summary cell (`{"mean": ..., ...}`) without a mean is missing too.
- Metrics are in percent already; no `%` sign is added to table cells.
- An interval `[lo, hi]` is shown either compactly as `value±h`, h = (hi - lo) / 2 (one
  decimal each), or in full as `value [lo, hi]` (the value with two decimals, the bounds with
  one); an interval with a missing bound is left out. The compact form is used only where the
  interval is roughly symmetric about the value: the value lies within h / 4 of the interval's
  centre (the two sides differ by at most h / 2; `LOPSIDED`), or h rounds to 0.0. A lopsided
  interval (a value at a bound, `100.0` with `[53.3, 100.0]`) prints as `value [lo, hi]` with
  one decimal each, never as a `±` that claims a side the interval does not have.

Torch-free and scorer-free (NumPy is not needed either), so that every layer and the light CLI
commands import it without loading Numba or torch.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

#: the text of a missing value
MISSING = "–"

#: `compact` prints `value±h` only while |value - centre| <= LOPSIDED * h
LOPSIDED = 0.25

#: column headers of the per-scorer metrics, with the better direction (↑ higher, ↓ lower)
METRIC_HEADER = {"auroc": "AUROC↑", "fpr95": "FPR95↓",
                 "misclassification_auroc": "misclf AUROC↑", "aurc": "AURC↓",
                 "augrc": "AUGRC↓"}

#: titles of the metrics a Gscore model predicts (`gscore evaluate` targets)
TARGET_TITLE = {"auroc": "AUROC", "fpr95": "FPR@TPR95", "fpr@tpr80": "FPR@TPR80",
                "fpr@tpr60": "FPR@TPR60", "aupr_in": "AUPR-In", "aupr_out": "AUPR-Out",
                "detection_error": "Detection error"}


def real(value: Any) -> float | None:
    """`value` as a float, or None when it is missing (None, NaN, not a real number)."""
    if not isinstance(value, numbers.Real):
        return None
    v = float(value)
    return None if math.isnan(v) else v


def number(value: Any, spec: str = ".2f") -> str:
    """`value` formatted with the format `spec` (`72.95`, `+0.912` with `+.3f`); `–` missing."""
    v = real(value)
    return MISSING if v is None else format(v, spec)


def _bounds(interval: Sequence[Any] | None) -> tuple[float, float] | None:
    if not interval:
        return None
    lo, hi = real(interval[0]), real(interval[1])
    return None if lo is None or hi is None else (lo, hi)


def compact(value: Any, interval: Sequence[Any] | None = None) -> str:
    """`80.9±3.7` (h = half the interval's width) for an interval symmetric about the value at
    one decimal, `100.0 [53.3, 100.0]` for a lopsided one, `80.9` without an interval, `–`
    missing."""
    v = real(value)
    if v is None:
        return MISSING
    bounds = _bounds(interval)
    if bounds is None:
        return f"{v:.1f}"
    lo, hi = bounds
    h = (hi - lo) / 2
    if abs(v - (lo + hi) / 2) > LOPSIDED * h and f"{h:.1f}" != "0.0":
        return f"{v:.1f} [{lo:.1f}, {hi:.1f}]"
    return f"{v:.1f}±{h:.1f}"


def with_interval(value: Any, interval: Sequence[Any] | None = None, digits: int = 2,
                  bound_digits: int = 1) -> str:
    """`72.95 [68.8, 77.0]` (the value with `digits` decimals, the bounds with
    `bound_digits`), `72.95` without an interval, `–` missing."""
    v = real(value)
    if v is None:
        return MISSING
    bounds = _bounds(interval)
    text = f"{v:.{digits}f}"
    if bounds is None:
        return text
    return f"{text} [{bounds[0]:.{bound_digits}f}, {bounds[1]:.{bound_digits}f}]"


def _mean(cell: Mapping[str, Any] | None) -> Any:
    return None if not cell else cell.get("mean")


def cell_number(cell: Mapping[str, Any] | None, spec: str = "+.3f") -> str:
    """The mean of a summary cell `{"mean": m, ...}` formatted with `spec`; `–` missing."""
    return number(_mean(cell), spec)


def mean_interval(cell: Mapping[str, Any] | None, digits: int = 2) -> str:
    """A summary cell `{"mean": m, "ci": [lo, hi]}` as `m [lo, hi]`, every number with
    `digits` decimals; `m` without an interval; `–` missing."""
    if cell is None or real(_mean(cell)) is None:
        return MISSING
    return with_interval(cell["mean"], cell.get("ci"), digits, digits)


def mean_std(stat: Mapping[str, Any] | None, digits: int = 2, runs: int | None = None) -> str:
    """A summary cell `{"mean": m, "std": s, "n": k}` as `m ± s` (`digits` decimals), with
    `(n=k)` appended when `runs` is given and fewer than `runs` entered; `–` missing."""
    if stat is None or real(_mean(stat)) is None:
        return MISSING
    text = f"{number(stat['mean'], f'.{digits}f')} ± {number(stat['std'], f'.{digits}f')}"
    return text if runs is None or stat["n"] >= runs else f"{text} (n={stat['n']})"


def setting_text(setting: Mapping[str, Any] | None, empty: str = "") -> str:
    """A scorer's parameters as `K=10, alpha=0.5` (in their order); `empty` for none."""
    return ", ".join(f"{k}={v}" for k, v in (setting or {}).items()) or empty
