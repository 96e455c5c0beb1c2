"""Checks and parsing shared by the commands: `k=v` parameters, method names, stores whose
splits must hold rows, and the labels of the fitting spinners."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from featstore import Store
from featstore.errors import InputError, UsageError
from featstore.store.formatting import with_interval


def parse_params(items: list[str] | None, what: str = "--param") -> dict[str, Any]:
    """k=v pairs; values parsed as JSON (numbers, true/false, null), else kept as strings."""
    params: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{what} {item!r}: expected key=value")
        try:
            params[key] = json.loads(text)
        except json.JSONDecodeError:
            params[key] = text
    return params


def check_methods(names: Iterable[str], what: str = "--method") -> list[str]:
    """The names, or UsageError naming the unknown one, the valid ones and a did-you-mean
    (`scorers.check_scorers`, the one scorer-name check)."""
    from scorers import check_scorers

    return check_scorers(names, what)


def check_params(method: str, params: dict[str, Any], what: str = "--param") -> str:
    """The method's registered name, after building the scorer once so that an unknown
    parameter or a bad value is a usage error before any work (rather than a method silently
    skipped)."""
    from scorers import REGISTRY

    name = check_methods([method], "--method")[0]
    try:
        REGISTRY[name](**params)
    except UsageError as exc:
        raise UsageError(f"{what}: {exc}") from None
    return name


def method_params(items: list[str] | None, what: str = "--param") -> dict[str, dict[str, Any]]:
    """`method.k=v` items -> {method: {k: v}}, each method known and each setting valid."""
    from scorers import REGISTRY, check_scorers, unknown_scorer

    params: dict[str, dict[str, Any]] = {}
    for key, value in parse_params(items, what).items():
        name, dot, p = key.rpartition(".")  # `mymodule:MyScorer.k=v` too
        if not dot or not p or name not in REGISTRY:
            why = unknown_scorer(name) if dot and p else "see `featstore scorers`"
            raise UsageError(f"{what} {key!r}: expected <method>.<param>=<value> with a "
                             f"registered method ({why})")
        params.setdefault(check_scorers([name])[0], {})[p] = value
    for method, method_params in params.items():
        check_params(method, method_params, what)
    return params


def open_store(path: Path | str) -> Store:
    """Store.open: a missing or corrupt store is an InputError (exit code 1)."""
    return Store.open(path)


ALLOW_NONFINITE_HELP = ("Score NaN / inf features or logits as they are (IEEE arithmetic "
                        "propagates them; non-finite scores still fail the metrics) instead "
                        "of the default error naming the split and rows.")


def cache_note(store: Store, no_cache: bool) -> bool:
    """Whether to use the score cache; says on stderr when a read-only store turns it off."""
    from scorers.cache import cache_off_reason

    from .console import err

    reason = None if no_cache else cache_off_reason(store)
    if reason is not None:
        err.print(f"note: {reason}", highlight=False)
    return not no_cache and reason is None


def require_rows(store: Store, names: Sequence[str] | None = None) -> None:
    """InputError for a split without rows among `names` (default: every split)."""
    for name in store.splits() if names is None else names:
        split = store.split(name)
        if split.num_rows == 0:
            raise InputError(f"store {str(store.path)!r}: split {name!r} is empty (0 rows); "
                             "re-extract it with data or remove it from the spec")


def fit_splits(method: str) -> list[str]:
    """The splits a scorer fits on (its `fit:<split>` needs)."""
    from scorers import REGISTRY
    from scorers.needs import Needs

    return Needs.of(REGISTRY[method]).fit_splits


def fit_label(store: Store, method: str, scored: int | None = None, verb: str = "") -> str:
    """The spinner's label of one scorer's step: `knn: fitting on id/train (100,000 x 2048),
    scoring 5 splits`, `msp: nothing to fit, scoring 5 splits`; `verb` ("tuning",
    "sweeping") leads: `tuning knn: fitting on ...`."""
    parts = []
    for name in fit_splits(method):
        if store.has_split(name):
            sp = store.split(name)
            parts.append(f"{name} ({sp.num_rows:,} x {sp.dims.get('features', '?')})")
    text = f"fitting on {', '.join(parts)}" if parts else "nothing to fit"
    if scored is not None:
        text += f", scoring {scored} split{'s' if scored != 1 else ''}"
    return f"{verb + ' ' if verb else ''}{method}: {text}"


def relabel_outcomes(steps: Any, labels: dict[str, int], result: Any) -> None:
    """After an evaluation, say on each scorer's spinner line what happened where its label
    ("fitting ...") no longer holds: its scores came from the cache, or it was skipped."""
    for name, index in labels.items():
        if name in (result.get("skipped") or {}):
            steps.relabel(index, f"{name}: skipped (the reason is listed below)")
        elif (result.get("methods") or {}).get(name, {}).get("cached"):
            steps.relabel(index, f"{name}: cached scores (nothing fitted or scored)")


ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", min=1, help="Threads for BLAS, FAISS and the row pool (default: 1 for small "
    "problems, else one per CPU; also $FEATSTORE_THREADS, which takes 'auto' to follow the "
    "machine's load). A fixed count gives the same bits whatever the load.")]


def apply_threads(threads: int | None) -> None:
    """`--threads N`: the thread count of every fit and score (`scorers.threads`)."""
    from scorers.threads import set_user_threads

    set_user_threads(threads)


CiOpt = Annotated[float, typer.Option(
    "--ci", help="Confidence level of the stratified-bootstrap intervals shown beside every "
                 "metric (0 turns them off).")]
BootOpt = Annotated[int, typer.Option("--boot", help="Bootstrap resamples per split.")]
CiMethodOpt = Annotated[str, typer.Option("--ci-method", help="Interval: percentile or bca "
                                                              "(BCa: exact jackknife, "
                                                              "O(N^2) per split).")]
BootSeedOpt = Annotated[int, typer.Option("--boot-seed", help="Seed of the resamples.")]


def ci_spec(ci: float, boot: int, method: str, seed: int) -> Any:
    """The BootstrapSpec of the --ci/--boot/--ci-method/--boot-seed options (None for --ci 0);
    a bad value is a UsageError naming the option."""
    from scorers.stats import BootstrapSpec

    if ci == 0:
        return None
    try:
        return BootstrapSpec(level=ci, n_boot=boot, method=method.lower(), seed=seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def fmt_ci(value: float | None, interval: Sequence[float] | None = None) -> str:
    """`72.95 [68.8, 77.0]` (`featstore.store.formatting.with_interval`, rich markup
    escaped); `–` for a missing value; the bare value without an interval."""
    return escape(with_interval(value, interval))


def ci_line(result: dict) -> str | None:
    """'[lo, hi]: 95% percentile intervals, stratified bootstrap (...), 1000 resamples, seed 0'
    for a result with intervals, else None."""
    ci = result.get("ci")
    if not ci:
        return None
    return (f"[lo, hi]: {100 * ci['level']:g}% {ci['method']} intervals, {ci['resampling']}, "
            f"{ci['resamples']} resamples, seed {ci['seed']}")


TuneRuleOpt = Annotated[str, typer.Option(
    "--tune-rule", help="featstore | openood: OpenOOD v1.5's parameter search instead (its "
                        "configs' grids, AUROC on id/val vs the pooled val OOD splits, first "
                        "best in its order; scorers.openood_aps).")]


def check_tune_rule(rule: str, select_by: str | None) -> None:
    """`scorers.sweep.check_rule` worded as the options."""
    from scorers.sweep import check_rule

    try:
        check_rule(rule, select_by or "auroc")
    except UsageError as exc:
        raise UsageError(f"--tune-rule {rule!r}: {exc}") from None
