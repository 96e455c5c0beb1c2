"""Hyperparameter sweeps without recompute (DESIGN §4-§5): choose on val, report on test.

`sweep(store, method, grid)` fits the scorer ONCE and scores every setting of the grid with
`Scorer.score_grid` (which shares the expensive work across settings: one FAISS search at the
largest K, one eigendecomposition for every ViM dim, one row sort for every ASH percentile):

1. selection: `id/val` against every OOD split flagged `usage = "val"` in the benchmark spec
   (`store.splits(role="ood", usage="val")`). Each setting's `select_by` metric (any key of
   `metrics.OOD_METRIC_NAMES`; higher or lower is better per `METRIC_DIRECTIONS`) is the
   unweighted mean over those val OOD splits; the best mean wins and ties go to the first
   setting in grid order (the Cartesian product in the grid's key order, `expand_grid`).
2. report: only after the choice is fixed are `id/test` and the OOD test splits scored, for
   the chosen setting's test metrics (per split and per group, the structure of one method
   in `scorers.evaluate`) and, for reference, every setting's test metrics. Test numbers are
   never read by the choice (`choose` sees the val table only).

Grids and validity (decided here):
- `grid=None` means the scorer's default grid minus the parameters fixed in `base_params`.
  The default grid is a generic range (OpenOOD's ImageNet values) that does not know the
  store: a setting the store's data makes invalid (ViM dim >= min(D, id/train rows), KNN K
  larger than the train bank, ...) is CLAMPED into the parameter's valid range and settings
  that become equal are scored once: the one rule of `scorers.adapt`, also applied to every
  default parameter outside the grid. Each change is listed in the result's `"adjusted":
  [{"setting", "used", "reason"}]` (`used` None: a setting no range could mend, dropped). If
  no setting is left, a UsageError names the reason.
- An explicit `grid` is what the user asked for: any invalid value is a UsageError (also a
  ValueError) naming the value and the valid range; an unknown grid parameter is a UsageError
  naming the valid ones; a parameter in both `grid` and `base_params` is refused.
- A scorer without hyperparameters (or an empty grid) has one setting, `{}`.

Missing `id/val` or missing val-flagged OOD splits is a FeatstoreError naming what is missing
and how to flag splits. Missing `id/test` or OOD test splits is not an error: the choice is
made and `"test"` is None. The result is plain JSON (numbers, strings, lists, dicts, None).

Rules (`sweep`'s keyword arguments):
- `rule`: featstore's selection (above) or "openood", OpenOOD v1.5's search
  (`scorers.openood_aps`: its grid, or without APS its fixed arguments, for the default grid;
  AUROC of id/val vs the pooled val OOD splits, OpenOOD's arithmetic and order; an explicit
  `grid` is searched the same way; `select_by` must be "auroc"), recorded in "openood":
  {"postprocessor", "aps", "source", "commit", "note", "val_auroc"}.
- `grid_rule` ("fitted" | "paper") decides how a DEFAULT grid meets the store
  (`scorers.adapt`): "fitted" lets the scorer fit it (knn's K scaled to the bank, vim's dims
  to D), "paper" keeps its values, clamped only where invalid (the remote-sensing paper's
  "five most common values", §2.5).
- `select_on` ("mean" | "pooled"): the setting is chosen by `select_by` averaged over the val
  OOD splits, or on them concatenated (FACETS' one val set per dataset, §IV); "chosen"'s
  "val" holds those metrics.

`sweep_all(store, methods)` sweeps every method over its default grid and returns the same
structure as `scorers.evaluate.evaluate` (test metrics of each chosen setting), plus the
chosen setting per method: the tuned leaderboard of `featstore eval --tune`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import SplitLike, StoreLike

from .adapt import adapt_grid, adapt_params
from .base import Scorer, check_grid_keys, expand_grid
from .evaluate import (
    group_means,
    id_side_metrics,
    mean_of,
    pooled_groups,
    require_finite_inputs,
)
from .metrics import (
    METRIC_DIRECTIONS,
    OOD_METRIC_NAMES,
    id_accuracy_or_nan,
    ood_metrics,
)
from .misclassification import misclassification_or_none
from .openood_aps import (
    OPENOOD_COMMIT,
    OPENOOD_REPOSITORY,
    aps_config,
    openood_auroc,
    openood_choose,
    openood_grid,
    openood_rank,
)
from .registry import REGISTRY, get_scorer, resolve, resolve_methods
from .results import EvaluationResult, SweepResult
from .skipping import check_supported, require_any, run_each
from .stats.bootstrap import BootstrapSpec
from .uncertainty import add_intervals

VAL_ID_SPLIT = "id/val"
#: the tuning rules `sweep` / `sweep_all` take: featstore's (this module) and OpenOOD v1.5's
TUNING_RULES = ("featstore", "openood")
TEST_ID_SPLIT = "id/test"
#: How a default grid meets a store (`sweep`'s grid_rule; `scorers.adapt`).
GRID_RULES = ("fitted", "paper")
_FLAG_HINT = ('flag OOD splits for validation with `usage = "val"` in the benchmark spec '
              '(or usage="val" in Store.from_arrays / write_split)')


# --------------------------------------------------------------------------- helpers
def check_select_by(select_by: str) -> str:
    """The direction ("max"/"min") of a selection metric; UsageError naming the valid ones."""
    if select_by not in OOD_METRIC_NAMES:
        raise UsageError(f"select_by={select_by!r} is not an OOD metric "
                         f"(valid: {', '.join(OOD_METRIC_NAMES)})")
    return METRIC_DIRECTIONS[select_by]


def val_splits(store: StoreLike) -> list[str]:
    """The val OOD splits of a store; FeatstoreError naming what is missing otherwise."""
    missing = []
    if not store.has_split(VAL_ID_SPLIT):
        missing.append(f"no complete {VAL_ID_SPLIT!r} split (name one `id/val` in the spec)")
    ood = store.splits(role="ood", usage="val")
    if not ood:
        missing.append(f"no OOD split flagged usage 'val' ({_FLAG_HINT})")
    if missing:
        raise FeatstoreError(
            f"store {str(store.path)!r} cannot choose hyperparameters: it has "
            f"{' and '.join(missing)}; sweeps choose on {VAL_ID_SPLIT} against val OOD splits "
            "only, never on test splits"
        )
    return ood


def choose(values: Sequence[float], direction: str) -> int:
    """Index of the best value (max or min); ties go to the first index (grid order)."""
    if not values:
        raise ValueError("choose: no values")
    best = 0
    for i, v in enumerate(values):
        if (v > values[best]) if direction == "max" else (v < values[best]):
            best = i
    return best


def format_setting(setting: Mapping[str, Any]) -> str:
    """`K=50, alpha=0.01`, or `(defaults)` for the single setting of a scorer without a grid."""
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or "(defaults)"


def _plain(value: Any) -> Any:
    """JSON-native copy of a parameter value (NumPy scalars to Python, tuples to lists)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _as_values(key: str, values: Any) -> list[Any]:
    if isinstance(values, str) or not isinstance(values, Sequence | np.ndarray):
        return [values]
    out = list(values)
    if not out:
        raise UsageError(f"grid parameter {key!r} has no values")
    return out


def check_grid(method: str, params: Mapping[str, Any], grid: Mapping[str, Any],
               what: str = "--grid") -> None:
    """Check an explicit grid as far as it can be told without a store: every key a parameter
    of the scorer (`base.check_grid_keys`), every value one the scorer accepts with the fixed
    `params`; UsageError naming `what`, the key and the value. The sweep itself checks each
    setting against the store's data ranges later."""
    check_grid_keys(REGISTRY[method], grid, what)
    for key, values in grid.items():
        for value in _as_values(key, values):
            try:
                get_scorer(method, **{**params, key: value})
            except UsageError as exc:
                raise UsageError(f"{what} {key}={value!r}: {exc}") from None
            except (TypeError, ValueError) as exc:
                raise UsageError(f"{what} {key}={value!r}: invalid value for {method} "
                                 f"({exc})") from None


class _Plan:
    """The parameters and settings to score, the grid to hand to `score_grid`, and the
    defaults clamped to this store (`scorers.adapt`)."""

    def __init__(self, probe: Scorer, grid: Mapping[str, Any] | None,
                 base: Mapping[str, Any], store: StoreLike,
                 rule_grid: tuple[str, Mapping[str, Any], Mapping[str, Any]] | None = None,
                 grid_rule: str = "fitted"):
        name = probe.name
        # rule_grid: (source, grid, implicit params) of a tuning rule other than featstore's
        # (OpenOOD's: scorers.openood_aps), clamped to the store as a default grid is
        source, default_grid, implicit = rule_grid or ("default", probe.grid, {})
        implicit = {k: v for k, v in implicit.items() if k not in base and k not in (grid or {})}
        if grid is None:
            self.source = source
            self.grid = {k: list(v) for k, v in default_grid.items() if k not in base}
        else:
            self.source = "explicit"
            check_grid_keys(probe, grid)
            both = sorted(set(grid) & set(base))
            if both:
                raise UsageError(f"scorer {name!r}: parameter {both[0]!r} is given both as a "
                                 "fixed parameter and in the grid; give it once")
            self.grid = {k: _as_values(k, v) for k, v in grid.items()}
        # the parameters outside the grid: the user's `base`, the rest defaults (clamped)
        params, self.adjusted = adapt_params(probe, {**probe.params, **implicit},
                                             {*base, *self.grid}, store)
        self.base = {k: v for k, v in params.items()
                     if k in base or k in implicit or v != probe.params[k]}
        probe = type(probe)(**self.base)
        if self.source != "explicit":
            settings, grid_adjusted = adapt_grid(
                probe, self.grid, set(base), store,
                fit_to_store=self.source == "default" and grid_rule != "paper")
            self.adjusted += grid_adjusted
        else:
            settings = expand_grid(self.grid) if self.grid else [{}]
        self.settings: list[dict[str, Any]] = []
        for setting in settings:
            try:
                probe.check_params({**probe.params, **setting}, store)
            except UsageError as exc:
                if self.source == "explicit":
                    raise
                self.adjusted.append({"setting": _plain(setting), "used": None,
                                      "reason": str(exc)})
            else:
                self.settings.append(setting)
        self.adjusted = _plain(self.adjusted)
        if not self.settings:
            raise UsageError(
                f"scorer {name!r}: no setting of its default grid "
                f"{format_setting(self.grid)} is valid for store {str(store.path)!r} "
                f"({self.adjusted[-1]['reason']}); pass an explicit grid or fix the parameter")
        # score_grid takes a grid: when the settings form a Cartesian product (the usual
        # case), hand it that grid; else score per setting.
        pruned = {k: list(dict.fromkeys(s[k] for s in self.settings)) for k in self.grid}
        self.product = (expand_grid(pruned) if pruned else [{}]) == self.settings
        self.pruned = pruned

    def score(self, scorer: Scorer, split: SplitLike) -> list[np.ndarray]:
        """Scores of every setting on one split, in settings order."""
        if self.product:
            return [s for _, s in scorer.score_grid(split, self.pruned)]
        return [scorer.score_grid(split, {k: [v] for k, v in setting.items()})[0][1]
                for setting in self.settings]


def plan_settings(store: StoreLike, method: str, grid: Mapping[str, Any] | None = None,
                  base_params: Mapping[str, Any] | None = None
                  ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """What `sweep(store, method, grid, base_params=...)` will score, without scoring: (the
    fixed parameters, defaults outside the grid clamped to the store; the settings in grid
    order; the "adjusted" notes). The one rule for anything that sweeps (the CLI, the
    benchmarks): a default grid value the store makes invalid is clamped and noted, not
    dropped in silence. UsageError as `sweep` raises it when no setting is left."""
    plan = _Plan(get_scorer(method, **dict(base_params or {})), grid, dict(base_params or {}),
                 store)
    return dict(plan.base), [dict(s) for s in plan.settings], list(plan.adjusted)


def _split_metrics(plan: _Plan, scorer: Scorer, store: StoreLike, id_name: str,
                   ood_names: Sequence[str], keep: dict[str, np.ndarray] | None = None,
                   keep_index: int = 0, pooled: list[dict[str, float]] | None = None
                   ) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    """Scores of the ID split per setting, and per setting {ood split: metrics}. With `keep`,
    setting `keep_index`'s scores of every split are stored in it (for its intervals). With
    `pooled` (a list, filled), per setting the metrics against every OOD split concatenated."""
    id_scores = plan.score(scorer, store.split(id_name))
    if keep is not None:
        keep[id_name] = id_scores[keep_index]
    per_setting: list[dict[str, dict[str, float]]] = [{} for _ in plan.settings]
    held: list[list[np.ndarray]] = [[] for _ in plan.settings]
    for ood in ood_names:
        for i, scores in enumerate(plan.score(scorer, store.split(ood))):
            per_setting[i][ood] = ood_metrics(id_scores[i], scores, id_name=id_name,
                                              ood_name=ood)
            if pooled is not None:
                held[i].append(scores)
            if keep is not None and i == keep_index:
                keep[ood] = scores
    if pooled is not None:
        pooled += [ood_metrics(id_scores[i], np.concatenate(h), id_name=id_name,
                               ood_name="the val OOD splits pooled") for i, h in enumerate(held)]
    return id_scores, per_setting


def _val_rows(plan: _Plan, scorer: Scorer, store: StoreLike, val_ood: Sequence[str],
              pool: bool) -> list[dict[str, Any]]:
    """Per setting its val metrics: {"mean", "groups", "splits"} and with `pool` "pooled"
    (on the val OOD splits concatenated)."""
    pooled: list[dict[str, float]] | None = [] if pool else None
    _, per_split = _split_metrics(plan, scorer, store, VAL_ID_SPLIT, val_ood, pooled=pooled)
    return [{"mean": _mean(ps), "groups": group_means(ps, store), "splits": ps,
             **({"pooled": pooled[i]} if pooled is not None else {})}
            for i, ps in enumerate(per_split)]


def _mean(per_split: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {m: mean_of([v[m] for v in per_split.values()]) for m in OOD_METRIC_NAMES}


def _test_report(plan: _Plan, scorer: Scorer, store: StoreLike, method: str, index: int,
                 chosen_params: dict[str, Any], fit_s: float, val_s: float,
                 ci: BootstrapSpec | None, keep_scores: dict[str, np.ndarray] | None
                 ) -> tuple[list[str], list[dict[str, Any] | None], dict[str, Any] | None,
                            float]:
    """Step 2 of `sweep`, run once the choice (`index`) is fixed: every setting's metrics on
    the test splits, and the chosen setting's test report (ID-side and misclassification
    metrics, intervals with `ci`; its scores into `keep_scores`). Returns (test OOD splits,
    per-setting test rows, the report or None without test splits, the seconds taken)."""
    test_ood = store.splits(role="ood", usage="test")
    has_test = store.has_split(TEST_ID_SPLIT) and bool(test_ood)
    test_rows: list[dict[str, Any] | None] = [None] * len(plan.settings)
    test: dict[str, Any] | None = None
    t0 = time.perf_counter()
    kept: dict[str, np.ndarray] = {} if keep_scores is None else keep_scores
    if has_test:
        id_scores, test_split_metrics = _split_metrics(plan, scorer, store, TEST_ID_SPLIT,
                                                       test_ood, kept, index)
        test_rows = [{"groups": group_means(ps, store), "splits": ps}
                     for ps in test_split_metrics]
        id_split = store.split(TEST_ID_SPLIT)
        # undefined values (every row right, or none labelled) are JSON null, not NaN
        id_side = {k: None if v != v else v for k, v in id_side_metrics(
            id_scores[index], np.asarray(id_split.logits), np.asarray(id_split.labels)).items()}
        mis_table = misclassification_or_none(id_scores[index], np.asarray(id_split.logits),
                                              np.asarray(id_split.labels))
    test_s = time.perf_counter() - t0
    if has_test:
        test = {"params": _plain(chosen_params), "adjusted": plan.adjusted, "fit_seconds": fit_s,
                "score_seconds": val_s + test_s, "cached": False,
                "diagnostics": _plain(scorer.diagnostics),
                **id_side, "misclassification": mis_table,
                **test_rows[index]}  # type: ignore[dict-item]
        # own copies: the intervals go into the chosen test metrics, not into "settings"
        test["splits"] = {k: dict(v) for k, v in test["splits"].items()}
        test["groups"] = {k: dict(v) for k, v in test["groups"].items()}
        test["pooled"] = pooled_groups(kept[TEST_ID_SPLIT], {s: kept[s] for s in test_ood},
                                       store, TEST_ID_SPLIT)
        if ci is not None:
            holder = {"id_split": TEST_ID_SPLIT, "methods": {method: test}}
            add_intervals(holder, {method: kept}, store, ci)
            test["ci"] = holder["ci"]
            if "id_acc_ci" in holder:
                test["id_acc_ci"] = holder["id_acc_ci"]
    return test_ood, test_rows, test, test_s


def check_rule(rule: str, select_by: str = "auroc", grid_rule: str = "fitted",
               select_on: str = "mean") -> None:
    """UsageError unless `rule` is a tuning rule ("featstore", "openood") and, for OpenOOD's,
    `select_by` is its metric (AUROC); `grid_rule` one of GRID_RULES; `select_on` "mean" or
    "pooled"."""
    if grid_rule not in GRID_RULES or select_on not in ("mean", "pooled"):
        raise UsageError(f"grid_rule {grid_rule!r} / select_on {select_on!r}: expected one "
                         f"of {', '.join(GRID_RULES)} / mean, pooled")
    if rule not in TUNING_RULES:
        raise UsageError(f"rule={rule!r} is not a tuning rule (valid: "
                         f"{', '.join(TUNING_RULES)})")
    if rule == "openood" and select_by != "auroc":
        raise UsageError(f"select_by={select_by!r}: OpenOOD's parameter search selects by "
                         "AUROC only; drop select_by or use rule='featstore'")


def _openood_choice(plan: _Plan, scorer: Scorer, store: StoreLike, val_ood: Sequence[str]
                    ) -> tuple[int, dict[str, Any]]:
    """OpenOOD's choice among `plan.settings` (`scorers.openood_aps`): per setting the AUROC
    (a fraction, OpenOOD's arithmetic) of id/val against the val OOD splits pooled into one
    set, the first best in OpenOOD's order of the grid."""
    id_scores = plan.score(scorer, store.split(VAL_ID_SPLIT))
    per_split = [plan.score(scorer, store.split(name)) for name in val_ood]
    aurocs = [openood_auroc(id_scores[i], np.concatenate([s[i] for s in per_split]))
              for i in range(len(plan.settings))]
    ranks = [openood_rank(s, plan.pruned) for s in plan.settings]
    index = openood_choose(aurocs, ranks)
    cfg = aps_config(scorer.name)
    return index, {
        "postprocessor": cfg.postprocessor if cfg else None, "aps": bool(cfg and cfg.aps),
        "source": (f"{OPENOOD_REPOSITORY} {cfg.source}" if cfg else
                   "not an OpenOOD postprocessor: featstore's defaults"),
        "commit": OPENOOD_COMMIT, "note": cfg.note if cfg else "", "val_auroc": aurocs}


# --------------------------------------------------------------------------- API
def sweep(store: StoreLike, method: str | type[Scorer] | Scorer,
          grid: Mapping[str, Any] | None = None,
          select_by: str = "auroc", base_params: Mapping[str, Any] | None = None,
          ci: BootstrapSpec | None = None, keep_scores: dict[str, np.ndarray] | None = None,
          rule: str = "featstore", grid_rule: str = "fitted", select_on: str = "mean"
          ) -> SweepResult:
    """Choose `method`'s setting on the val splits, then report its test metrics. `method`
    is a registered name, `module:Class`, a Scorer subclass or an instance (whose given
    parameters are fixed, outside the grid). `rule`, `grid_rule`, `select_on`: the module
    docstring's "Rules". With `ci`, the chosen setting's test metrics carry stratified-bootstrap
    intervals (`scorers.uncertainty.add_intervals`; test["ci"] echoes the method).
    `keep_scores`, if given, receives the chosen setting's test scores {split: scores}.

    Returns a `scorers.results.SweepResult` (a read-only dict too): {"store",
    "model_sha256", "method", "select_by", "direction", "grid",
    "grid_source" ("default"|"explicit"|"openood"), "base_params", "val_splits": {"id", "ood"},
    "test_splits": {"id", "ood"} | None, "chosen": {"index", "setting", "params", "val"},
    "test": {"params", "fit_seconds", "score_seconds", "cached", "diagnostics" (the fitted
    scorer's, e.g. an approximate index's recall@K), "misclassification_auroc",
    "misclassification", "aurc", "augrc", "splits", "groups" (mean over each group's
    splits), "pooled" (on each group's splits concatenated: `scorers.evaluate.
    pooled_groups`)} | None, "settings":
    [{"setting", "params", "val": {"mean", "groups", "splits"}, "test": {"groups", "splits"}
    | None}],
    "adjusted": [{"setting", "used", "reason"}], "rule", "openood",
    "fit_seconds", "val_seconds", "test_seconds"}; see the module docstring."""
    direction = check_select_by(select_by)
    check_rule(rule, select_by, grid_rule, select_on)
    base = dict(base_params or {})
    if isinstance(method, Scorer):  # an instance: its given parameters are fixed
        base = {**method.given, **base}
    method = resolve(method)
    probe = get_scorer(method, **base)   # an unknown method or parameter: UsageError here
    require_finite_inputs(store, method, [])  # before any data-dependent range: NaN named
    val_ood = val_splits(store)
    rule_grid = ("openood", *openood_grid(method)) if rule == "openood" else None
    plan = _Plan(probe, grid, base, store, rule_grid, grid_rule)

    scorer = get_scorer(method, **{**plan.base, **plan.settings[0]})
    t0 = time.perf_counter()
    scorer.fit(store, plan.grid)
    fit_s = time.perf_counter() - t0

    # ---- 1. selection: validation splits only
    t0 = time.perf_counter()
    val_rows = _val_rows(plan, scorer, store, val_ood, select_on == "pooled")
    val_s = time.perf_counter() - t0
    index, openood = (_openood_choice(plan, scorer, store, val_ood) if rule == "openood" else
                      (choose([row[select_on][select_by] for row in val_rows], direction),
                       None))
    chosen_setting = plan.settings[index]
    chosen_params = {**scorer.params, **chosen_setting}

    # ---- 2. report: test splits, scored only after the choice is fixed
    test_ood, test_rows, test, test_s = _test_report(
        plan, scorer, store, method, index, chosen_params, fit_s, val_s, ci, keep_scores)
    has_test = test is not None

    return SweepResult(**{
        "store": str(store.path), "model_sha256": store.model_sha256, "method": method,
        "select_by": select_by, "direction": direction,
        "grid": _plain(plan.grid), "grid_source": plan.source, "base_params": _plain(base),
        "val_splits": {"id": VAL_ID_SPLIT, "ood": list(val_ood)},
        "test_splits": {"id": TEST_ID_SPLIT, "ood": list(test_ood)} if has_test else None,
        "chosen": {"index": index, "setting": _plain(chosen_setting),
                   "params": _plain(chosen_params), "val": val_rows[index][select_on]},
        "test": test,
        "settings": [{"setting": _plain(s), "params": _plain({**scorer.params, **s}),
                      "val": v, "test": t}
                     for s, v, t in zip(plan.settings, val_rows, test_rows, strict=True)],
        "adjusted": plan.adjusted, "rule": rule if rule != "featstore" else None,
        "openood": openood,
        "fit_seconds": fit_s, "val_seconds": val_s, "test_seconds": test_s,
    })


def sweep_all(store: StoreLike, methods: Sequence[str | type[Scorer] | Scorer] | None = None,
              params: Mapping[str, Mapping[str, Any]] | None = None,
              select_by: str = "auroc",
              progress: Callable[[str], None] | None = None,
              strict: bool = False, ci: BootstrapSpec | None = None,
              rule: str = "featstore", select_on: str = "mean") -> EvaluationResult:
    """Sweep every method over its default grid on val; the tuned leaderboard on test.

    Returns `scorers.evaluate.evaluate`'s `EvaluationResult` ({"store", "model_sha256", "id_split",
    "id_acc", "ood_splits", "methods": {name: test metrics of the chosen setting}, "skipped"})
    where each method also carries "chosen" (its setting), "fixed" (`params[name]`), "val"
    (the chosen setting's mean val metrics), "grid", "settings_scored" and "adjusted"; plus
    "tuned": True, "select_by", "val_splits" and "ci" (with `ci`: every chosen setting's
    test metrics with intervals from one bootstrap over every method, common resamples).
    `params[name]` fixes parameters of a method (they leave its grid); `select_on` as
    `sweep`'s. A method that cannot
    run on this store is skipped with the reason (`scorers.skipping`), or, with `strict`,
    raises; when none ran, FeatstoreError lists every reason. `rule` is `sweep`'s (each
    method's "openood" record is kept beside "chosen"; the result echoes "rule")."""
    check_select_by(select_by)
    check_rule(rule, select_by)
    methods, params = resolve_methods(methods or list(REGISTRY), params)
    if not store.has_split(TEST_ID_SPLIT):
        raise FeatstoreError(f"store {str(store.path)!r} has no complete {TEST_ID_SPLIT!r} "
                             "split; the tuned evaluation reports test metrics against it")
    test_ood = store.splits(role="ood", usage="test")
    if not test_ood:
        raise FeatstoreError(f"store {str(store.path)!r} has no OOD test split to evaluate")
    val_ood = val_splits(store)
    id_split = store.split(TEST_ID_SPLIT)
    kept: dict[str, dict[str, np.ndarray]] = {}

    def run(name: str) -> dict[str, Any]:
        check_supported(store, name)
        if progress:
            progress(name)
        kept[name] = {}
        res = sweep(store, name, None, select_by, params.get(name, {}),
                    keep_scores=kept[name], rule=rule, select_on=select_on)
        extra = {"openood": res["openood"]} if rule == "openood" else {}
        return {**res["test"], "chosen": res["chosen"]["setting"], "fixed": res["base_params"],
                "val": res["chosen"]["val"], "grid": res["grid"],
                "settings_scored": len(res["settings"]), "adjusted": res["adjusted"], **extra}

    done, skipped = run_each(methods, run, strict=strict)
    require_any(done, skipped, store)
    result: dict[str, Any] = {
        "store": str(store.path), "model_sha256": store.model_sha256,
        "id_split": TEST_ID_SPLIT,
        "id_acc": id_accuracy_or_nan(np.asarray(id_split.logits), np.asarray(id_split.labels)),
        "ood_splits": test_ood, "methods": done, "skipped": skipped, "tuned": True,
        "select_by": select_by, "val_splits": {"id": VAL_ID_SPLIT, "ood": val_ood},
        "ci": None, **({"rule": rule} if rule != "featstore" else {}),
    }
    if ci is not None:  # one bootstrap over every method: the same resamples for all
        add_intervals(result, kept, store, ci)
    return EvaluationResult(**result)


__all__ = ["TUNING_RULES", "check_rule", "check_select_by", "choose", "format_setting",
           "plan_settings", "sweep", "sweep_all", "val_splits"]
