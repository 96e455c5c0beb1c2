"""The experiment file (TOML): data, training methods, post-hoc scorers, seeds, tuning rule.

    name = "remote-sensing OSR on my data"
    arch = "resnet50"                       # torchvision name or module:callable(num_classes=)
    seeds = [0, 1, 2, 3, 4]                 # training seeds (and OSR class-division seeds)
    runs = 1                                # OSR: training runs per class division; run r of
                                            #   division seed s trains with seed s + 1000 r
                                            #   (the remote-sensing paper: 7 runs x 5 splits)
    device = "auto"                         # auto | cpu | cuda[:N]
    threads = 1                             # every unit's torch / BLAS threads, wherever it
                                            #   runs (default: $FEATSTORE_THREADS, else 1;
                                            #   `featstore run --threads N` wins; unitthreads.py)

    [data]                                  # exactly one of spec / osr
    spec = "bench.toml"                     # a benchmark spec (relative: to this file)
    # osr = { data = "images/", ratios = ["7/3", "5/5"], root = "...", image_size = 224,
    #         fractions = { train = 0.6, val = 0.15, test = 0.25 },   # per-class shares
    #         val_open = "heldout" }   # tune on held-out open classes; "paper": on val images
    #                                  #   of the tested open classes (protocols/osr.py)
    # aux = { builtin = "patches", images = ["camera"], count = 40 }   # OE / MCD outliers,
    #                                        added as ood/aux/<aux_name> with usage = "train"

    [train]                                 # TrainConfig fields and a preset (presets.py)
    preset = "remote-sensing"               # SGD 0.01, momentum 0.9, wd 5e-4, 100 epochs
    epochs = 100
    finetune = false                        # true: training-time methods fine-tune the ce
    finetune_epochs = 10                    #   model of the same split and seed
    finetune_lr = 0.01

    [tune]
    rule = "val"                            # val: grid search on id/val vs the val OOD splits
    select_by = "auroc"                     #   only, default grids fitted to the store;
                                            #   paper: the same over the default grids as
                                            #   they are (RS §2.5); none: defaults;
                                            #   openood: OpenOOD v1.5's search (AUROC)

    [[method]]                              # one row of the results table
    name = "KNN"
    train = "ce"                            # featstore training method
    scorer = "knn"                          # post-hoc scorer on that model's store
    params = { K = 50 }                     # fixed scorer parameters (leave the grid)
    grid = { K = [1, 10, 20, 50, 100] }     # tuning grid (default: the scorer's own)
    train_params = {}                       # the training method's parameters
    extract = { mc_samples = 5 }            # extraction extras this row needs

Every (method row, data split, seed) is one run. Unknown keys are errors naming the valid ones
and the closest one; a value of the wrong type is an error naming it.

The file is an object, `featstore.specs.experiment.Experiment` (`Experiment.load` reads it
with the strict TOML reader of `featstore.specs.toml`: keys, types, seeds, paths; `to_toml`
writes it). The whole file is validated before anything trains (`parse_experiment`, here: the
checks that need the scorers, the training methods and the protocols): every scorer name,
every fixed parameter and every grid value (each built with the scorer's own checks: an
unknown or out-of-range parameter names the row and the valid ones), every training method
and its parameters, the preset, the extraction extras each row's scorer reads (`mc_logits`
needs `extract.mc_samples`, `odin_logits` `extract.odin_grid`, `feature_maps`
`extract.feature_maps`, `layer_features` / `layer_featurenorm` `extract.feature_layers`,
`layer_gram` `extract.gram_powers`, `adascale_features` `extract.adascale_o`, `confidence` /
`godin_h` / `godin_g` / `head2_logits` the training method confbranch / godin / mcd)
and the outlier split OE and MCD train on ([data] aux, or a
spec split with role ood and usage "train").
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.specs.benchmark import load_spec
from featstore.specs.experiment import (
    DATA_KEYS,
    EXTRACT_KEYS,
    MAX_SEEDS,
    METHOD_KEYS,
    OSR_KEYS,
    RUN_SEED_STRIDE,
    TOP_KEYS,
    TRAIN_KEYS,
    TUNE_KEYS,
    TUNE_RULES,
    Experiment,
    MethodRow,
    parse_existing,
    parse_experiment_data,
)
from featstore.specs.toml import read_toml
from featstore.training.methods import get_method
from featstore.training.presets import TRAIN_PRESETS, preset_values
from featstore.workflows.protocols.osr import VAL_OPEN_MODES, parse_ratio
from scorers import REGISTRY, check_scorers, get_scorer
from scorers.needs import Needs
from scorers.sweep import check_rule, check_select_by

__all__ = ["DATA_KEYS", "EXTRACT_KEYS", "MAX_SEEDS", "METHOD_KEYS", "OSR_KEYS",
           "RUN_SEED_STRIDE", "TOP_KEYS", "TRAIN_KEYS", "TUNE_KEYS", "TUNE_RULES",
           "Experiment", "MethodRow", "check_experiment", "check_rows_untrained", "digest",
           "load_experiment", "parse_existing", "parse_experiment"]

#: A scorer's extra array -> (what provides it, how the row asks for it).
EXTRA_SOURCES: dict[str, tuple[str, str]] = {
    "mc_logits": ("extract", "mc_samples"), "odin_logits": ("extract", "odin_grid"),
    "feature_maps": ("extract", "feature_maps"), "confidence": ("train", "confbranch"),
    "godin_h": ("train", "godin"), "godin_g": ("train", "godin"),
    "head2_logits": ("train", "mcd"), "layer_features": ("extract", "feature_layers"),
    "layer_featurenorm": ("extract", "feature_layers"), "layer_gram": ("extract", "gram_powers"),
    "adascale_features": ("extract", "adascale_o")}
#: Training methods that train on auxiliary outliers (a spec split: role ood, usage train).
OUTLIER_METHODS = ("oe", "mcd")


def digest(value: Any) -> str:
    """A short stable hash of a JSON-able value (recipes, settings)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _check_scorer_settings(scorer: str, params: dict[str, Any], grid: Any, label: str) -> None:
    """Build the scorer at its fixed parameters and at every grid value (the scorer's own
    checks), so that a typo'd or out-of-range setting fails before any training."""
    try:
        get_scorer(scorer, **params)
    except (ValueError, UsageError) as exc:
        raise InputError(f"{label}: params: {exc}") from None
    if grid is None:
        return
    valid = sorted(REGISTRY[scorer].defaults)
    for key, values in grid.items():
        if key not in valid:
            raise InputError(f"{label}: grid: scorer {scorer!r} has no parameter {key!r} "
                             f"(valid: {', '.join(valid) or 'none'})")
        for value in values:
            try:
                get_scorer(scorer, **{**params, key: value})
            except (ValueError, UsageError) as exc:
                raise InputError(f"{label}: grid {key} = {value!r}: {exc}") from None


def _check_extras(scorer: str, train: str, extract: dict[str, Any], label: str) -> None:
    """Each extra array the scorer reads is produced by the row's extraction or training."""
    for name in Needs.of(REGISTRY[scorer]).extras:
        kind, what = EXTRA_SOURCES.get(name, ("", ""))
        if kind == "extract" and not extract.get(what):
            raise InputError(f"{label}: scorer {scorer!r} reads {name!r}; add "
                             f"extract = {{ {what} = ... }} to the row")
        if kind == "train" and train != what:
            raise InputError(f"{label}: scorer {scorer!r} reads {name!r}, which only a "
                             f"{what!r} model has; set train = {what!r}")


def _check_rows(rows: list[MethodRow], where: str) -> None:
    """Every row's scorer, its settings and extras, its training method and parameters."""
    for i, row in enumerate(rows):
        label = f"{where}: [[method]] #{i + 1}"
        check_scorers([row.scorer], label, InputError)
        try:
            get_method(row.train).resolve_params(row.train_params)
        except UsageError as exc:
            raise InputError(f"{label}: {exc}") from None
        _check_scorer_settings(row.scorer, row.params, row.grid, label)
        _check_extras(row.scorer, row.train, row.extract, label)


def check_rows_untrained(rows: list[Any], where: str) -> None:
    """Rows over existing stores / models train nothing."""
    for r in rows:
        if r.train != "ce" or r.train_params:
            raise InputError(f"{where}: row {r.name!r}: train = {r.train!r} needs training; "
                             "rows over existing stores / models run post-hoc scorers only")


def _ratio(value: Any) -> list[int]:
    """'7/3' (the file's form) or [7, 3] (as written back by `Experiment.to_toml`)."""
    if (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        value = f"{value[0]}/{value[1]}"
    return list(parse_ratio(str(value)))


def _check_osr(osr: dict[str, Any], where: str) -> None:
    """val_open (default "heldout") and the ratios (default 7/3, 6/4, 5/5) as [c, o] pairs."""
    if osr.setdefault("val_open", "heldout") not in VAL_OPEN_MODES:
        raise InputError(f"{where} [data] osr: val_open {osr['val_open']!r} (valid: "
                         f"{', '.join(VAL_OPEN_MODES)})")
    ratios = osr.get("ratios", ["7/3", "6/4", "5/5"])
    osr["ratios"] = [_ratio(r) for r in
                     (ratios if isinstance(ratios, list) else str(ratios).split(","))]


def check_experiment(exp: Experiment, where: str) -> Experiment:
    """The checks of the module docstring that need the scorers, the training methods and
    the protocols; normalises the OSR table in place; returns `exp`."""
    if exp.osr is not None:
        _check_osr(exp.osr, where)
    try:
        preset_values(exp.train.get("preset"))
    except UsageError:
        raise InputError(f"{where} [train]: preset {exp.train.get('preset')!r} is not a "
                         f"training preset (valid: {', '.join(TRAIN_PRESETS)})") from None
    try:
        check_select_by(exp.select_by)
        if exp.tune_rule == "openood":
            check_rule("openood", exp.select_by)
    except UsageError as exc:
        raise InputError(f"{where} [tune]: {exc}") from None
    _check_rows(exp.rows, where)
    if exp.stores is not None or exp.model is not None:
        check_rows_untrained(exp.rows, where)
    _check_outliers(exp.rows, exp.spec, exp.aux, where)
    return exp


def parse_experiment(data: dict[str, Any], base: Path, where: str) -> Experiment:
    """Validate an experiment dict (as loaded from TOML); relative paths resolve to `base`."""
    return check_experiment(parse_experiment_data(data, base, where), where)


def _check_outliers(rows: list[MethodRow], spec: str | None, aux: Any, where: str) -> None:
    """OE / MCD rows need an outlier split: [data] aux, or a spec split (ood, usage train)."""
    needing = [r.name for r in rows if r.train in OUTLIER_METHODS]
    if not needing or aux:
        return
    if spec is not None and any(s.role == "ood" and s.usage == "train"
                                for s in load_spec(spec).splits):
        return
    raise InputError(f"{where}: row {needing[0]!r} trains on auxiliary outliers, but there is "
                     "none: add [data] aux = { imagefolder = \"outliers/\" } (or a spec split "
                     "with role ood and usage = \"train\")")


def load_experiment(source: str | Path) -> Experiment:
    """Read and validate an experiment (a path or TOML text)."""
    doc = read_toml(source, "experiment")
    exp = parse_experiment(doc.data, doc.base, doc.where)
    exp.path = str(doc.path) if doc.path is not None else None
    return exp
