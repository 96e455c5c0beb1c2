"""Runs over many scorers never die on one (DESIGN §9): the one skip mechanism of
`scorers.evaluate.evaluate`, `scorers.sweep.sweep_all`, the report, and any workflow that
loops over scorers.

A scorer that cannot run on a store says so by raising the library's own error
(`featstore.errors.FeatstoreError`, which includes UsageError and InputError): a need the store
lacks (`extra:feature_maps`, an `id/val` split), a parameter no value of which fits the data,
a class of the head without train rows (SHE), too few rows to fit. `run_each` records that
one-line message as the scorer's skip reason, or re-raises it when `strict` (the user named
the scorer: then the run stops with the error and its exit code, README "Exit codes"). Any
other exception is a bug and propagates: it is never turned into a skip.

`require_any` ends a run in which no scorer ran with an error listing every reason, so a run
never reports nothing as if it were a result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from featstore.errors import FeatstoreError
from featstore.store.interfaces import StoreLike
from featstore.store.interrupts import raise_if_interrupted

from .base import Scorer, how_to, too_few_classes
from .needs import Needs
from .registry import REGISTRY

ID_SPLIT = "id/test"
T = TypeVar("T")


def unsupported_reason(store: StoreLike, name: str | type[Scorer]) -> str | None:
    """Why the store lacks what scorer `name` (or a Scorer class) needs (a fit split, an
    extra, a second class), or None."""
    scorer = REGISTRY[name] if isinstance(name, str) else name
    few = too_few_classes(scorer, store)
    if few is not None:
        return few
    for need in Needs.of(scorer):
        if need.kind == "fit" and not store.has_split(need.arg):
            return f"needs split {need.arg!r}: {how_to(need.text)}"
        if (need.kind == "extra" and store.has_split(ID_SPLIT)
                and not store.split(ID_SPLIT).has_extra(need.arg)):
            return f"needs {need.text!r}: {how_to(need.text)}"
    return None


def check_supported(store: StoreLike, name: str) -> None:
    """FeatstoreError naming the scorer, the store and the missing need, if any."""
    why = unsupported_reason(store, name)
    if why is not None:
        raise FeatstoreError(f"scorer {name!r} {why} (store {str(store.path)!r})")


def run_each(names: Sequence[str], run: Callable[[str], T], *, strict: bool = False
             ) -> tuple[dict[str, T], dict[str, str]]:
    """{name: run(name)} for every name that ran, and {name: reason} for every one that raised
    a FeatstoreError (its one-line message); with `strict`, that error is raised instead."""
    done: dict[str, T] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            done[name] = run(name)
        except FeatstoreError as exc:
            raise_if_interrupted()  # a Ctrl-C that came out as a data error stops the run
            if strict:
                raise
            skipped[name] = str(exc)
    return done, skipped


def require_any(done: Mapping[str, Any], skipped: Mapping[str, str], store: StoreLike) -> None:
    """FeatstoreError listing every skip reason when no scorer ran."""
    if not done and skipped:
        reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        raise FeatstoreError(f"no scorer could run on store {str(store.path)!r} ({reasons})")


__all__ = ["check_supported", "require_any", "run_each", "unsupported_reason"]
