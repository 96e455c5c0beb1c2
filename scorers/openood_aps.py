"""OpenOOD v1.5's automatic parameter search (APS) as a tuning rule: `sweep(..., rule="openood")`.

Facts, from github.com/Jingkang50/OpenOOD at commit 3c35632ee91b54b09d1f085d04f94744cece7d0b:

- Grids: `configs/postprocessors/<name>.yml`. `APS_mode: True` methods search their
  `postprocessor_sweep` (keys in file order); `APS_mode: False` methods (and those without
  the key) run at `postprocessor_args`, with no search. `OPENOOD_APS` below transcribes every
  file of a method featstore has, under featstore's parameter names.
- Selection: `openood/evaluation_api/evaluator.py`, `Evaluator.hyperparam_search`:
  1. the combinations come from `recursive_generator(values, n)`: for the last key's values
     (outermost), for every combination of the keys before it, so the FIRST key varies
     fastest and the LAST slowest (`openood_order`), the reverse of `itertools.product`;
  2. each combination scores the ID val loader and the ONE OOD val loader
     (`DATA_INFO[...]['ood']['val']`, e.g. `val_tin.txt` for CIFAR, `val_openimage_o.txt`
     for ImageNet); its AUROC is `compute_all_metrics(conf, label, pred)[1]`
     (`openood/evaluators/metrics.py`): `sklearn.metrics.auc(*roc_curve(ood_indicator,
     -conf)[:2])`, a fraction in float64 (`openood_auroc`; several val OOD splits in a store
     are pooled into the one set, as one loader over their lists would be);
  3. `if auroc > max_auroc` with `max_auroc = 0` at the start: the first combination in that
     order with the highest AUROC wins (ties: the earliest); a search where every AUROC is 0
     leaves `final_index = None` and OpenOOD fails, here a FeatstoreError
     (`openood_choose`).

featstore's own rule (`scorers.sweep`) differs in three ways a user sees in its result: the
grid (featstore's default grids, scaled to the store), the order of ties (the grid's
Cartesian product, last key fastest) and the val metric (the mean over the val OOD splits of
exact AUROCs in percent, or any `select_by` metric).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError

OPENOOD_COMMIT = "3c35632ee91b54b09d1f085d04f94744cece7d0b"
OPENOOD_REPOSITORY = "Jingkang50/OpenOOD"


@dataclass(frozen=True)
class ApsConfig:
    """One `configs/postprocessors/<postprocessor>.yml`, under featstore's names: `aps` is its
    `APS_mode`; `sweep` its `postprocessor_sweep` ({featstore param: values}, file key order);
    `args` the `postprocessor_args` featstore's scorer takes (the setting without search);
    `note` what does not carry over."""

    postprocessor: str
    aps: bool
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def source(self) -> str:
        return f"configs/postprocessors/{self.postprocessor}.yml"


#: featstore scorer -> its OpenOOD postprocessor config (transcribed; module docstring)
OPENOOD_APS: dict[str, ApsConfig] = {
    "msp": ApsConfig("msp", False),
    "mls": ApsConfig("mls", False),
    "temp_scaling": ApsConfig("temp_scaling", False),
    "energy": ApsConfig("ebo", True, {"temperature": [1]}, {"temperature": 1}),
    "odin": ApsConfig("odin", True, {"temperature": [1, 10, 100, 1000]}, {"temperature": 1000},
                      "OpenOOD's ODIN also sweeps noise [0.0014, 0.0028]: featstore's odin has "
                      "no input perturbation (odin_perturbed has)"),
    "odin_perturbed": ApsConfig("odin", True, {"temperature": [1, 10, 100, 1000],
                                               "epsilon": [0.0014, 0.0028]},
                                {"temperature": 1000, "epsilon": 0.0014},
                                "OpenOOD's `noise` is featstore's `epsilon`"),
    "mds": ApsConfig("mds", False),
    "rmds": ApsConfig("rmds", False),
    "kl_matching": ApsConfig("klm", False),
    "gradnorm": ApsConfig("gradnorm", False),
    "react": ApsConfig("react", True, {"percentile": [85, 90, 95, 99]}, {"percentile": 90}),
    "vim": ApsConfig("vim", True, {"dim": [256, 1000]}, {"dim": 256}),
    "residual": ApsConfig("residual", False, {}, {"dim": 512},
                          "residual.yml has no APS_mode key; it runs at dim 512"),
    "knn": ApsConfig("knn", True, {"K": [50, 100, 200, 500, 1000]}, {"K": 50}),
    "dice": ApsConfig("dice", False, {}, {"p": 90}),
    "rankfeat": ApsConfig("rankfeat", False, {}, {"temperature": 1.0}),
    "ash": ApsConfig("ash", True, {"percentile": [65, 70, 75, 80, 85, 90, 95]},
                     {"percentile": 90}),
    "she": ApsConfig("she", False),
    "gen": ApsConfig("gen", True, {"gamma": [0.01, 0.1, 0.5, 1, 2, 5, 10],
                                   "M": [10, 50, 100, 200, 500, 1000]},
                     {"gamma": 0.1, "M": 100}),
    "nnguide": ApsConfig("nnguide", False, {}, {"K": 100, "alpha": 0.01}),
    "scale": ApsConfig("scale", True, {"percentile": [65, 70, 75, 80, 85, 90, 95]},
                       {"percentile": 85}),
    "fdbd": ApsConfig("fdbd", True, {"distance_as_normalizer": [True, False]},
                      {"distance_as_normalizer": True}),
    "nci": ApsConfig("nci", True, {"alpha": [0.0001, 0.001, 0.01, 0.1]}, {"alpha": 0.0001}),
    "confbranch": ApsConfig("conf_branch", False),
    "godin": ApsConfig("godin", False),
    "mcd": ApsConfig("mcd", False),
    "mcdropout": ApsConfig("dropout", False),
}


def aps_config(method: str) -> ApsConfig | None:
    """The OpenOOD config of a featstore scorer, or None when OpenOOD has no such method (its
    search then has nothing to search: the scorer runs at featstore's defaults)."""
    return OPENOOD_APS.get(method)


def openood_grid(method: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """(grid, fixed parameters) of `method` under OpenOOD's rule: an APS method searches its
    `postprocessor_sweep` (fixed: nothing); any other runs at its `postprocessor_args` (grid
    empty: one setting)."""
    cfg = aps_config(method)
    if cfg is None:
        return {}, {}
    if cfg.aps:
        return {k: list(v) for k, v in cfg.sweep.items()}, {}
    return {}, dict(cfg.args)


def openood_order(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of `grid` in `recursive_generator`'s order: the first key varies
    fastest, the last slowest."""
    keys = list(grid)
    combos: list[dict[str, Any]] = [{}]
    for key in keys:  # each later key wraps the combinations of the keys before it
        combos = [{**c, key: v} for v in grid[key] for c in combos]
    return combos


def openood_rank(setting: Mapping[str, Any], grid: Mapping[str, Sequence[Any]]) -> tuple[int, ...]:
    """The sort key of `setting` in `openood_order(grid)`: its value positions, last key
    first."""
    return tuple(list(grid[k]).index(setting[k]) for k in reversed(list(grid)))


def openood_auroc(id_scores: np.ndarray, ood_scores: np.ndarray) -> float:
    """AUROC as a fraction, computed as OpenOOD's `auc_and_fpr_recall` computes it: OOD
    positive, `roc_curve(ood_indicator, -conf)` (sklearn's default drop_intermediate),
    `auc(fpr, tpr)` (the trapezoid in float64)."""
    from sklearn import metrics as skm  # lazy: scikit-learn only for OpenOOD's own arithmetic

    conf = np.concatenate([np.asarray(id_scores, np.float64), np.asarray(ood_scores,
                                                                        np.float64)])
    ood = np.concatenate([np.zeros(len(id_scores), np.int64), np.ones(len(ood_scores),
                                                                      np.int64)])
    fpr, tpr, _ = skm.roc_curve(ood, -conf)
    return float(skm.auc(fpr, tpr))


def openood_choose(aurocs: Sequence[float], ranks: Sequence[tuple[int, ...]]) -> int:
    """The index (into `aurocs`) OpenOOD's search keeps: walking the settings in OpenOOD's
    order (`ranks`, `openood_rank`), the first whose AUROC is strictly above the best so far,
    starting from 0. FeatstoreError when no AUROC is above 0 (OpenOOD's `final_index` stays
    None)."""
    best, chosen = 0.0, None
    for i in sorted(range(len(aurocs)), key=lambda j: ranks[j]):
        if aurocs[i] > best:
            best, chosen = aurocs[i], i
    if chosen is None:
        raise FeatstoreError("OpenOOD's parameter search chooses nothing: every setting has "
                             "AUROC 0 on the val splits")
    return chosen


__all__ = ["OPENOOD_APS", "OPENOOD_COMMIT", "ApsConfig", "aps_config", "openood_auroc",
           "openood_choose", "openood_grid", "openood_order", "openood_rank"]
