"""The scorer contract (DESIGN §3-§5), shared by every module in `scorers/`.

A scorer is configured with keyword parameters (unknown names are a ValueError listing the
valid ones), fitted on a store (`fit(store)` reads only the splits its `needs` name), and then
scores any split of a store made by the same model: `score(split)` returns an (N,) float64
array, HIGHER = MORE IN-DISTRIBUTION. `score_grid(split, grid)` returns every setting of a
hyperparameter grid, sharing the expensive work; the base implementation here refits per
setting and is what scorers with a shared-work path must equal. Fits and scores run under the
thread policy of `scorers.threads` (BLAS/OpenMP threads by the work's size and the free cores).

Needs vocabulary: `logits`, `features`, `head`, `fit:<split>` (e.g. `fit:id/train`),
`extra:<name>`; `scorers.needs` parses them (`Needs.of(scorer)`).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from featstore.errors import (
    FeatstoreError,
    FeatstoreWarning,
    InputError,
    UsageError,
    wording,
)
from featstore.store.arraystore import ArrayStore
from featstore.store.interfaces import SplitLike, StoreLike
from featstore.store.values import require_finite

from .clamp import adapt_params, describe
from .needs import Needs, parse_need
from .paper import Paper
from .rowmap import map_rows, read_chunk_rows
from .threads import blas_threads, fit_work, score_work
from .usercode import call_hook, checked_scores

DEFAULT_CHUNK_ROWS = 8192

# How to produce each need that a store can lack, in the library's words (an interface words
# it its own way: featstore.errors.Wording.how_to).
_HOW_TO = {
    "fit:id/train": "extract it by naming an `id/train` split in the benchmark spec",
    "fit:id/val": "extract it by naming an `id/val` split in the benchmark spec",
    "extra:feature_maps": "extract with `ExtractOptions(feature_maps=True)`",
    "extra:mc_logits": "extract with `ExtractOptions(mc_samples=T)` on a model with dropout",
    "extra:odin_logits": "extract with `ExtractOptions(odin_grid=((T, eps), ...))`",
    "extra:layer_features": "extract with `ExtractOptions(feature_layers=(NAME, ...))`",
    "extra:layer_featurenorm": "extract with `ExtractOptions(feature_layers=(NAME, ...))`",
    "extra:layer_gram": "extract with `ExtractOptions(feature_layers=(NAME, ...), "
                        "gram_powers=5)`",
    "extra:adascale_features": "extract with `ExtractOptions(adascale_o=(0.05,))`",
    "extra:confidence": "train with `train(method='confbranch')`, then extract with the "
                        "checkpoint as `weights`",
    "extra:godin_h": "train with `train(method='godin')`, then extract with the checkpoint as "
                     "`weights`",
    "extra:godin_g": "train with `train(method='godin')`, then extract with the checkpoint as "
                     "`weights`",
    "extra:head2_logits": "train with `train(method='mcd')`, then extract with the checkpoint "
                          "as `weights`",
}

Grid = Mapping[str, Sequence[Any]]


@dataclass(frozen=True)
class ValidRange:
    """The closed range [lo, hi] of a parameter whose valid values depend on the store's data
    (D, the id/train rows, the bank size); `why` says what sets the bounds, e.g. `1 <= dim <
    min(D, N) = 120 (D = 1280 features, N = 120 rows of 'id/train')`. lo > hi: no valid value.
    `scorers.adapt` clamps a default into it (README "Data-dependent defaults")."""

    lo: float
    hi: float
    why: str


def expand_grid(grid: Grid) -> list[dict[str, Any]]:
    """Cartesian product of a grid in key order: [{k1: v, k2: w}, ...] (deterministic)."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(list(grid[k]) for k in keys))]


class Scorer:
    """Base class of every post-hoc scorer. Subclasses set the class attributes below and
    implement `_fit(store)` (optional) and `_score(split)`; scorers with hyperparameters may
    override `_score_grid(split, settings)` to share work across settings."""

    name: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[dict[str, Any]] = {}
    grid: ClassVar[dict[str, list[Any]]] = {}
    paper: ClassVar[Paper | str] = ""  # scorers.paper.Paper (every built-in) or free text
    # the fewest classes the score is defined for: 2 where one class makes it a constant
    # (a softmax over one logit is 1 on every row) or undefined; fewer is a missing need
    min_classes: ClassVar[int] = 1

    def score_form(self) -> str:
        """"" for a score used as it is; "log_prob" where the score is the log of a
        probability (exp gives the probability back: `msp`, `odin`, ...), "log_odds" where it
        is log(p / (1 - p)); "unsaturated" for a score in its paper's form whose earlier
        computation lost digits where p rounds to 1.0 (`gen`, `mcd` l1). Part of the
        score-cache key, so scores cached in another form (or by that computation) are never
        read back."""
        return ""

    def __init__(self, **params: Any):
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            valid = ", ".join(sorted(self.defaults)) or "none"
            raise UsageError(
                f"scorer {self.name!r}: unknown parameter {unknown[0]!r} (valid: {valid})"
            )
        self.params: dict[str, Any] = {**self.defaults, **params}
        # the parameters the caller gave (an instance handed to evaluate/sweep runs with them;
        # `fit` clamps only the other defaults to the store: scorers.adapt, scorers.clamp)
        self.given: dict[str, Any] = dict(params)
        self.check_params(self.params)
        # the defaults `fit` clamped on its store: [{"setting", "used", "reason"}]
        self.adjusted: list[dict[str, Any]] = []
        self.store: StoreLike | None = None
        self.fitted = False
        self.model_sha256: str | None = None
        self.chunk_rows = DEFAULT_CHUNK_ROWS
        # facts about the fit worth reporting (e.g. an approximate index's recall@K)
        self.diagnostics: dict[str, Any] = {}
        # the settings `fit(store, grid)` was told score_grid will ask for
        self.fit_settings: list[dict[str, Any]] = []
        # `fit` and `score` refuse NaN / inf in the fields this scorer reads
        # (featstore.store.values) while this is True; False: the values are used as they are
        # (IEEE arithmetic propagates them; the metrics still refuse non-finite scores), with
        # --allow-nonfinite or where the caller checked them itself (scorers.evaluate: once
        # per split per call)
        self.check_finite = True

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    # ------------------------------------------------------------------ hooks
    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        """Validate a parameter setting; raise UsageError naming the value and the valid range.

        Called at construction (store=None) and again with the store at fit and for every
        grid setting (ranges that depend on the data, e.g. K <= bank size)."""

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        """The data-dependent ranges of this scorer's parameters for `store`, given the other
        parameters in `params` (e.g. K's range depends on the bank fraction); {} when no
        parameter's validity depends on the data. Integers stay integers."""
        return {}

    def degenerate(self, param: str, default: Any, used: Any, params: Mapping[str, Any],
                   store: StoreLike) -> str:
        """Why the DEFAULT `param`=`default` clamped to `used` on `store` leaves this scorer
        degenerate (a K below a sensible minimum, a whole bank), naming what the store lacks;
        "" when it does not (`scorers.clamp` appends it to the adjustment as DEGENERATE)."""
        return ""

    def fit_grid(self, grid: Grid, store: StoreLike) -> tuple[dict[str, list[Any]], str]:
        """This scorer's DEFAULT grid fitted to `store` (before the clamping of
        `scorers.adapt.adapt_grid`), with the reason of any change ("" when unchanged);
        default: the grid as it is."""
        return {k: list(v) for k, v in grid.items()}, ""

    def resolve_default(self, param: str, value: Any, store: StoreLike) -> Any:
        """The value a default stands for on `store` (ViM's dim None -> the paper's rule);
        default: the value itself."""
        return value

    def check_choice(self, params: Mapping[str, Any], param: str,
                     choices: Sequence[Any]) -> None:
        """UsageError unless params[param] is one of `choices` (names the value and them)."""
        if params[param] not in choices:
            raise UsageError(f"scorer {self.name!r}: {param}={params[param]!r} is not one of "
                             f"{', '.join(map(str, choices))}")

    def _fit(self, store: StoreLike) -> None:
        """Fit state from the store; default: nothing to fit."""

    def _score(self, split: SplitLike) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement _score")

    def _score_grid(self, split: SplitLike, settings: list[dict[str, Any]]) -> list[np.ndarray]:
        """Default: refit and rescore per setting (what a grid search without caching does)."""
        out = []
        for setting in settings:
            scorer = type(self)(**{**self.params, **setting})
            scorer.chunk_rows = self.chunk_rows
            scorer.fit(self.fitted_store)
            out.append(scorer.score(split))
        return out

    # ------------------------------------------------------------------ API
    def fit(self, store: StoreLike, grid: Grid | None = None) -> Scorer:
        """Fit on the store's default fit split(s); returns self.

        `grid` (optional): the grid `score_grid` will be asked for, so that a fit whose
        per-setting state comes from a pass over the fit split (ViM's alpha per dim) prepares
        every setting in the same pass; settings outside it are still scored, at the price of
        a further pass. Scores never depend on it."""
        check_needs(self, store)
        for name in fit_split_names(self):  # nothing to fit on: say so before any default
            if store.split(name).num_rows == 0:
                raise InputError(f"scorer {self.name!r} fits on split {name!r}, which has 0 "
                                 "rows")
        self._clamp_defaults(store)
        if self.check_finite:
            for name in fit_split_names(self):
                require_finite(store.split(name), value_fields(self), f"fitting {self.name!r}")
        self.check_params(self.params, store)
        self.fitted = False  # a failed _fit leaves the scorer unfitted
        self.fit_settings = expand_grid(grid) if grid else []
        self.store = store
        self.model_sha256 = store.model_sha256
        with blas_threads(fit_work(store, fit_split_names(self), value_fields(self))):
            call_hook(self, "_fit", self._fit, store)  # a user's exception named (usercode)
        self.fitted = True
        return self

    def fix_defaults(self, store: StoreLike) -> list[dict[str, Any]]:
        """The one defaults rule (scorers.adapt) applied on `store` ahead of `fit`, without
        warnings: every default the store makes invalid is clamped, the caller's own values
        never; returns the changes (also `self.adjusted`). Every parameter is then fixed (as
        if given), so `fit` changes none. The scoring walk (`scorers.evaluate`) calls it
        before its cache lookup, whose key holds the parameters."""
        self.params, self.adjusted = adapt_params(self, self.params, set(self.given), store)
        self.given = dict(self.params)
        return self.adjusted

    def _clamp_defaults(self, store: StoreLike) -> None:
        """The one defaults rule (scorers.adapt) for API callers: every default the store
        makes invalid is clamped (`self.adjusted`, a FeatstoreWarning each); the caller's own
        values are never changed. A no-op when every parameter was given (the CLI's paths
        build their scorers with the already clamped parameters)."""
        if set(self.given) >= set(self.defaults):
            return
        self.params, self.adjusted = adapt_params(self, {**self.defaults, **self.given},
                                                  set(self.given), store)
        for adjustment in self.adjusted:
            warnings.warn(f"scorer {self.name!r}: {describe(adjustment)}", FeatstoreWarning,
                          stacklevel=3)

    def _check_split(self, split: SplitLike, force: bool) -> None:
        if not self.fitted:
            raise FeatstoreError(f"scorer {self.name!r}: call fit(store) before score(split)")
        sha = split.model_sha256
        if sha != self.model_sha256 and not force:
            fitted = str(self.model_sha256)
            raise FeatstoreError(
                f"scorer {self.name!r} was fitted on a store of model {fitted[:12]}… "
                f"but split {split.name!r} comes from model {sha[:12]}…; pass force=True to "
                "score anyway"
            )
        for extra in Needs.of(self).extras:
            if not split.has_extra(extra):
                raise FeatstoreError(
                    f"scorer {self.name!r} needs 'extra:{extra}' in split {split.name!r}",
                    need=f"extra:{extra}", how=library_how_to(f"extra:{extra}"))
        if self.check_finite:
            require_finite(split, value_fields(self), f"{self.name!r} scores")

    def score(self, split: SplitLike, force: bool = False) -> np.ndarray:
        """(N,) float64 scores of a split, higher = more in-distribution."""
        self._check_split(split, force)
        with blas_threads(score_work(split, value_fields(self))):
            return checked_scores(self, split, call_hook(self, "_score", self._score, split),
                                  value_fields(self))

    def score_grid(
        self, split: SplitLike, grid: Grid | None = None, force: bool = False
    ) -> list[tuple[dict[str, Any], np.ndarray]]:
        """Every setting of `grid` (default: the scorer's default grid) with its scores.

        Settings are the Cartesian product in the grid's key order; parameters not in the grid
        keep this scorer's values. Each value is validated against the data first (the
        default grid as it is: `scorers.sweep.sweep` / `plan_settings` fit it to the store)."""
        self._check_split(split, force)
        grid = self.grid if grid is None else grid
        check_grid_keys(self, grid)
        settings = expand_grid(grid) if grid else [{}]
        for setting in settings:
            self.check_params({**self.params, **setting}, self.store)
        with blas_threads(score_work(split, value_fields(self))):
            scores = (call_hook(self, "_score_grid", self._score_grid, split, settings)
                      if grid else [self.score(split, force)])
        return [(dict(s), checked_scores(self, split, v, value_fields(self)))
                for s, v in zip(settings, scores, strict=True)]

    # ------------------------------------------------------------------ plain arrays
    def fit_arrays(self, train: Mapping[str, Any] | None = None,
                   val: Mapping[str, Any] | None = None, *,
                   head: tuple[Any, Any] | None = None, grid: Grid | None = None) -> Scorer:
        """`fit` on arrays (NumPy or torch): `train` / `val` are {"features", "logits",
        "labels", "extras"} dicts for the `id/train` / `id/val` splits a scorer fits on
        (`featstore.ArrayStore`, same numbers as a store of the same arrays); returns self."""
        splits = {k: v for k, v in (("id/train", train), ("id/val", val)) if v is not None}
        for name, arrays in splits.items():
            if not isinstance(arrays, Mapping):
                raise UsageError(f"fit_arrays: {'train' if name == 'id/train' else 'val'} is "
                                 f"{type(arrays).__name__}, expected a dict of arrays "
                                 "({'features': ..., 'labels': ...})")
        return self.fit(ArrayStore(head, splits=splits), grid)

    def score_arrays(self, features: ArrayLike, logits: ArrayLike | None = None,
                     extras: Mapping[str, Any] | None = None) -> np.ndarray:
        """(N,) float64 scores of rows given as arrays (logits computed from the fitted
        store's head when absent), higher = more in-distribution."""
        store = self.fitted_store
        head = store.head if logits is None else _head_or_none(store)
        rows = ArrayStore(head, splits={"id/arrays": {"features": features, "logits": logits,
                                                      "extras": extras or {}}},
                          model_sha256=store.model_sha256)
        return self.score(rows.split("id/arrays"))

    # ------------------------------------------------------------------ helpers
    @property
    def fitted_store(self) -> StoreLike:
        """The store `fit` was given (FeatstoreError before any fit)."""
        if self.store is None:
            raise FeatstoreError(f"scorer {self.name!r}: call fit(store) before score(split)")
        return self.store

    def chunks(self, split: SplitLike, *fields: str
               ) -> Iterator[tuple[slice, tuple[np.ndarray, ...]]]:
        """Row chunks of a split's fields as float32: about `rowmap.FIT_READ_BYTES` of the
        widest field per chunk, at most `self.chunk_rows` rows (bounded memory)."""
        rows = read_chunk_rows(split, fields, self.chunk_rows)
        return split.iter_chunks(*fields, chunk_rows=rows)

    def map_rows(self, split: SplitLike, fields: Sequence[str], fn: Callable[..., Any],
                 outputs: int | None = None) -> Any:
        """(N,) float64 `fn(*blocks)` over row blocks of `fields` (or a list of `outputs`
        such arrays when fn returns that many per block), in parallel and streaming
        (`scorers.rowmap`); fn must score rows independently and not modify its inputs."""
        return map_rows(split, fields, fn, chunk_rows=self.chunk_rows, outputs=outputs)

    def fit_split(self, store: StoreLike, name: str) -> SplitLike:
        return store.split(name)


def _head_or_none(store: StoreLike) -> tuple[np.ndarray, np.ndarray] | None:
    """The store's head, or None for a store without one (an ArrayStore with head=None)."""
    try:
        return store.head
    except FeatstoreError:
        return None


# how far stored logits may be from x @ W.T + b (float64), relative to the largest logit
# (at least 1), and still count as the head's output: float32 rounding of a real network's
# head is ~1e-6; float16/TF32 heads (~1e-3) and logits from another head fail.
LOGITS_ARE_HEAD_RTOL = 1e-4
LOGITS_PROBE_ROWS = 256


def stored_logits_are_head(store: StoreLike) -> bool:
    """Are the store's float32 logits the head's output, x @ W.T + b, to float32 rounding?
    Probed on the first `LOGITS_PROBE_ROWS` rows of the first float32 split (store order)
    that has logits; scorers that may start from the stored logits instead of a product with
    the head (ReAct, SCALE) use it with `head_logits_usable`. False when no split qualifies."""
    split = next((s for s in (store.split(n) for n in store.splits())
                  if "logits" in s.dims and s.dtype == "float32" and s.num_rows), None)
    if split is None:
        return False
    rows = slice(0, min(LOGITS_PROBE_ROWS, split.num_rows))
    weight, bias = store.head
    x = np.asarray(split.read("features", rows), dtype=np.float64)
    expected = x @ np.asarray(weight, dtype=np.float64).T + np.asarray(bias, dtype=np.float64)
    stored = np.asarray(split.read("logits", rows), dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(expected))))
    return bool(np.max(np.abs(stored - expected)) <= LOGITS_ARE_HEAD_RTOL * scale)


def head_logits_usable(split: SplitLike, logits_are_head: bool) -> bool:
    """May a scorer fitted with `logits_are_head` (= `stored_logits_are_head(store)`) read
    `split`'s logits in place of x @ W.T + b? Only float32 splits with logits."""
    return logits_are_head and split.dtype == "float32" and "logits" in split.dims


def check_grid_keys(scorer: Scorer | type[Scorer], grid: Mapping[str, Any],
                    what: str | None = None) -> None:
    """UsageError naming the first (sorted) grid key that is not a parameter of the scorer,
    and the valid ones; `what` (e.g. `--grid`) prefixes the message with the key."""
    unknown = sorted(set(grid) - set(scorer.defaults))
    if unknown:
        valid = ", ".join(sorted(scorer.defaults)) or "none"
        prefix = f"{what} {unknown[0]!r}: " if what else ""
        raise UsageError(f"{prefix}scorer {scorer.name!r}: unknown grid parameter "
                         f"{unknown[0]!r} (valid: {valid})")


def library_how_to(need: str) -> str:
    """How to produce a need a store lacks (a `fit:` split or an `extra:` array), in the
    library's words."""
    if parse_need(need).kind == "fit":
        return _HOW_TO.get(need, "extract it")
    group = need.partition("/")[0]   # `extra:layer_features/<L>` -> its group's recipe
    return _HOW_TO.get(need, _HOW_TO.get(group, "extract it with the method that writes it"))


def how_to(need: str) -> str:
    """`library_how_to(need)` in the wording in use (featstore.errors.wording)."""
    return wording().how_to(need, library_how_to(need))


def value_fields(scorer: Scorer | type[Scorer]) -> list[str]:
    """The row fields a scorer reads values from: `features`, `logits`, `extra:<name>`."""
    return Needs.of(scorer).value_fields


def fit_split_names(scorer: Scorer | type[Scorer]) -> list[str]:
    """The splits a scorer fits on (its `fit:<split>` needs)."""
    return Needs.of(scorer).fit_splits


def store_classes(store: StoreLike) -> int:
    """The store's class count C (the manifest's `num_classes`, else the logits' width)."""
    count = store.manifest.get("num_classes")
    if count is None:
        names = list(store.manifest.get("splits") or {})
        return int(store.split(names[0]).dims["logits"]) if names else 0
    return int(count)


def too_few_classes(scorer: Scorer | type[Scorer], store: StoreLike) -> str | None:
    """Why `store` has too few classes for the scorer (`Scorer.min_classes`), or None."""
    classes = store_classes(store)
    if classes >= scorer.min_classes:
        return None
    return (f"needs at least {scorer.min_classes} classes (the store has {classes}: with "
            "fewer its score is the same on every row, or undefined)")


def check_needs(scorer: Scorer, store: StoreLike) -> None:
    """Raise FeatstoreError naming the first missing need and how to produce it."""
    few = too_few_classes(scorer, store)
    if few is not None:
        raise FeatstoreError(f"scorer {scorer.name!r} {few} (store {str(store.path)!r})",
                             need="classes")
    needs = Needs.of(scorer)
    for need in needs:
        if need.kind == "head" and store.manifest.get("has_head", True) is False:
            raise FeatstoreError(
                f"scorer {scorer.name!r} needs the classifier head (W, b); store "
                f"{str(store.path)!r} has none (features and logits only)")
        if need.kind == "fit" and not store.has_split(need.arg):
            raise FeatstoreError(
                f"scorer {scorer.name!r} needs split {need.arg!r} in store "
                f"{str(store.path)!r}", need=need.text, how=library_how_to(need.text))
        if need.kind == "extra":
            for split in needs.fit_splits:
                if not store.split(split).has_extra(need.arg):
                    raise FeatstoreError(
                        f"scorer {scorer.name!r} needs {need.text!r} in split {split!r}",
                        need=need.text, how=library_how_to(need.text))
