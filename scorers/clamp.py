"""The clamping step of the one defaults rule (`scorers.adapt` states the rule), apart so that
`Scorer.fit` applies it to API callers too: a scorer built with `get_scorer(name, **given)`
and fitted on a store gets its data-invalid DEFAULTS clamped, with a FeatstoreWarning and the
changes in `scorer.adjusted`, exactly as `featstore eval` / `sweep` clamp them. A clamp that
leaves the scorer degenerate (`Scorer.degenerate`: a tiny K, a whole bank, a single kept
activation) says so in its reason, with what the store lacks."""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from featstore.errors import UsageError
from featstore.store.interfaces import StoreLike

if TYPE_CHECKING:
    from .base import Scorer, ValidRange


def _inside(value: Any, rng: ValidRange) -> bool:
    return isinstance(value, numbers.Real) and rng.lo <= float(value) <= rng.hi


def _clamp(value: Any, rng: ValidRange) -> Any:
    """The nearest bound of `rng` to `value` (an integer when the bounds are integers)."""
    used = rng.lo if isinstance(value, numbers.Real) and value < rng.lo else rng.hi
    return int(used) if isinstance(rng.lo, int) and isinstance(rng.hi, int) else used


def _refused(scorer: Scorer, params: Mapping[str, Any], store: StoreLike) -> bool:
    try:
        scorer.check_params(dict(params), store)
    except UsageError:
        return True
    return False


def adapt_params(scorer: Scorer, params: Mapping[str, Any], fixed: Collection[str],
                 store: StoreLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`params` with every data-invalid value of a parameter NOT in `fixed` clamped into its
    valid range; returns (params, adjustments). UsageError when a range is empty."""
    out = dict(params)
    adjusted: list[dict[str, Any]] = []
    for param, rng in scorer.valid_ranges(out, store).items():
        if param in fixed:
            continue
        if rng.lo > rng.hi:
            raise UsageError(f"scorer {scorer.name!r}: no value of {param} is valid on store "
                             f"{str(store.path)!r}: {rng.why}")
        value = scorer.resolve_default(param, out[param], store)
        if _inside(value, rng) or not _refused(scorer, {**out, param: value}, store):
            continue
        used = _clamp(value, rng)
        out[param] = used
        reason = f"the default {param}={value} is out of range: {rng.why}"
        if note := scorer.degenerate(param, value, used, out, store):
            reason += f"; DEGENERATE: {note}"
        adjusted.append({"setting": {param: value}, "used": {param: used}, "reason": reason})
    return out, adjusted


def describe(adjustment: Mapping[str, Any]) -> str:
    """`dim=512 -> dim=119 (the default dim=512 is out of range: ...)`, or `... dropped`."""
    def fmt(s: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in s.items())

    used = adjustment.get("used")
    target = f"-> {fmt(used)}" if used is not None else "dropped"
    return f"{fmt(adjustment['setting'])} {target} ({adjustment['reason']})"
