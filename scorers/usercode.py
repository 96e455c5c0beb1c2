"""The Scorer contract enforced at the boundary with a user's code: what `Scorer.fit` and
`Scorer.score` do around the hooks `_fit` / `_score` a subclass implements.

- An exception raised inside the hook of a scorer that is not one of featstore's own
  (`is_own`: defined in `scorers.methods`) becomes a FeatstoreError naming the scorer, its
  class, the hook and the exception's first line (`call_hook`); featstore's own errors pass
  as they are. So `featstore score --method mymod:Mine` reports the user's bug in one line
  (exit 1), and `eval` lists the scorer as skipped with that reason.
- What `_score` returned must be one number per row (`checked_scores`): anything NumPy cannot
  turn into float64 (strings, None, objects), another shape than (N,), and, for a user's
  scorer on a split whose inputs are finite, NaN / inf, are a FeatstoreError naming the
  scorer, the split and what came back. Built-in scores are not checked for NaN here (their
  inputs' NaN propagate under `--allow-nonfinite`, and the metrics refuse them there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError
from featstore.store.interfaces import SplitLike
from featstore.store.interrupts import raise_if_interrupted

OWN_PREFIX = "scorers.methods."


def is_own(cls: type) -> bool:
    """Whether `cls` is one of featstore's own scorers (defined in scorers.methods)."""
    return cls.__module__.startswith(OWN_PREFIX)


def _who(scorer: Any) -> str:
    cls = type(scorer)
    return f"scorer {scorer.name!r} ({cls.__module__}:{cls.__qualname__})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def call_hook(scorer: Any, hook: str, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` (the scorer's `hook`, e.g. "_fit"); a user's scorer's exception other
    than a FeatstoreError becomes one naming it (module docstring)."""
    if is_own(type(scorer)):
        return fn(*args)
    try:
        return fn(*args)
    except FeatstoreError:
        raise
    except Exception as exc:
        raise_if_interrupted()  # a Ctrl-C surfacing as another exception stays an interrupt
        raise FeatstoreError(f"{_who(scorer)}: its {hook} raised {type(exc).__name__}: "
                             f"{_first_line(exc)}") from exc


def _described(raw: Any) -> str:
    shape = getattr(raw, "shape", None)
    dtype = getattr(raw, "dtype", None)
    if shape is not None and dtype is not None:
        return f"an array of shape {tuple(shape)} and dtype {dtype}"
    return f"{type(raw).__name__} {str(raw)[:60]!r}"


def _inputs_finite(fields: Sequence[str], split: SplitLike) -> bool:
    # featstore's splits record their NaN / inf rows at commit (featstore.store.values);
    # a split-like object without that record counts as finite
    record: dict[str, Any] = getattr(split, "nonfinite_record", dict)()
    return not any(k == f or k.startswith(f + "/") for f in fields for k in record)


def checked_scores(scorer: Any, split: SplitLike, raw: Any, fields: Sequence[str]
                   ) -> np.ndarray:
    """`raw` (what `_score` returned for `split`) as (N,) float64, or a FeatstoreError
    naming the scorer, the split and what came back (module docstring); `fields`: what the
    scorer reads (`scorers.base.value_fields`)."""
    where = f"{_who(scorer)}: _score returned"
    numbers = not (raw is None or isinstance(raw, str) or (
        isinstance(raw, np.ndarray) and raw.dtype.kind in "USOV"))
    try:
        scores = np.asarray(raw, dtype=np.float64) if numbers else None
    except (TypeError, ValueError):
        scores = None
    if scores is None:
        raise FeatstoreError(f"{where} {_described(raw)} for split {split.name!r}, not "
                             "numbers; return one float per row")
    if scores.shape != (split.num_rows,):
        raise FeatstoreError(f"{where} shape {scores.shape} for split {split.name!r} of "
                             f"{split.num_rows} rows; expected ({split.num_rows},): one score "
                             "per row")
    if not is_own(type(scorer)):
        bad = int(np.count_nonzero(~np.isfinite(scores)))
        if bad and _inputs_finite(fields, split):
            raise FeatstoreError(f"{where} {bad} NaN / inf scores of {split.num_rows} for "
                                 f"split {split.name!r}, whose inputs are finite")
    return scores
