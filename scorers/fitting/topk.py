"""The percentile rule of ASH and SCALE on a store: a percentile p keeps k = D - round(D p / 100)
of the D activations (`scorers.kernels.topk.keep_count`), and must keep at least one.
"""

from __future__ import annotations

from featstore.errors import UsageError
from featstore.store.interfaces import StoreLike

from ..base import ValidRange
from ..kernels.topk import keep_count


def check_keep(scorer_name: str, percentile: float, store: StoreLike | None) -> None:
    """The percentile must keep at least one of the store's D activations."""
    if store is None:
        return
    d = int(store.head[0].shape[1])
    if keep_count(d, percentile) < 1:
        raise UsageError(
            f"scorer {scorer_name!r}: percentile {percentile!r} keeps no activation of D={d} "
            f"features (k = D - round(D * percentile / 100) = 0); use a percentile in (0, "
            f"{100.0 * (d - 0.5) / d:g})"
        )


def percentile_range(store: StoreLike) -> ValidRange:
    """The percentiles that keep at least one of D activations, as a closed range: (0, 100 (D -
    1) / D]; keep_count(D, 100 (D - 1) / D) = 1 (a slightly larger p may still keep one, but
    this bound is exact for every D)."""
    d = int(store.head[0].shape[1])
    return ValidRange(0.0, 100.0 * (d - 1) / d,
                      f"percentile <= 100 (D - 1) / D = {100.0 * (d - 1) / d:g} keeps at least "
                      f"one of the D = {d} features")


def percentile_degenerate(default: float, used: float, store: StoreLike) -> str:
    """The DEGENERATE note of a percentile clamped to keep one activation (it always is: the
    range's top keeps exactly one): the D the default percentile needs to keep one."""
    d = int(store.head[0].shape[1])
    if keep_count(d, used) > 1:
        return ""
    need = next(n for n in range(d + 1, 10 ** 6) if keep_count(n, default) >= 1)
    return (f"percentile={used:g} keeps a single one of the D = {d} features; the store lacks "
            f"features: the default percentile={default:g} needs D >= {need}")
