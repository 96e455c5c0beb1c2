"""The experiment file (TOML): data, training methods, post-hoc scorers, seeds, tuning rule.

    name = "remote-sensing OSR on my data"
    arch = "resnet50"                       # torchvision name or module:callable(num_classes=)
    seeds = [0, 1, 2, 3, 4]                 # training seeds (and OSR class-division seeds)
    runs = 1                                # OSR: training runs per class division; run r of
                                            #   division seed s trains with seed s + 1000 r
                                            #   (the remote-sensing paper: 7 runs x 5 splits)
    device = "auto"                         # auto | cpu | cuda[:N]

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
    select_by = "auroc"                     #   only (the paper's rule); none: defaults

    [[method]]                              # one row of the results table
    name = "KNN"
    train = "ce"                            # featstore training method
    scorer = "knn"                          # post-hoc scorer on that model's store
    params = { K = 50 }                     # fixed scorer parameters (leave the grid)
    grid = { K = [1, 10, 20, 50, 100] }     # tuning grid (default: the scorer's own)
    train_params = {}                       # the training method's parameters
    extract = { mc_samples = 5 }            # extraction extras this row needs

Every (method row, data split, seed) is one run. Unknown keys are errors naming the valid ones.

The whole file is validated before anything trains (`parse_experiment`): every scorer name,
every fixed parameter and every grid value (each built with the scorer's own checks: an
unknown or out-of-range parameter names the row and the valid ones), every training method
and its parameters, the preset, the extraction extras each row's scorer reads (`mc_logits`
needs `extract.mc_samples`, `odin_logits` `extract.odin_grid`, `feature_maps`
`extract.feature_maps`, `confidence` / `godin_h` / `godin_g` / `head2_logits` the training
method confbranch / godin / mcd) and the outlier split OE and MCD train on ([data] aux, or a
spec split with role ood and usage "train").
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.specs.benchmark import load_spec
from featstore.training.methods import get_method
from featstore.training.presets import TRAIN_PRESETS, preset_values
from featstore.workflows.protocols.osr import VAL_OPEN_MODES, parse_ratio
from scorers import REGISTRY, check_scorers, get_scorer
from scorers.needs import Needs
from scorers.sweep import check_select_by

#: the most seeds an experiment may name (each one trains and extracts every model again)
MAX_SEEDS = 10_000
TOP_KEYS = ("name", "arch", "seeds", "runs", "device", "data", "train", "tune", "method",
            "executor", "model", "checkpoint")
#: run r of OSR division seed s trains with seed s + RUN_SEED_STRIDE * r
RUN_SEED_STRIDE = 1000
DATA_KEYS = ("spec", "osr", "stores", "aux", "aux_name")
OSR_KEYS = ("data", "ratios", "root", "image_size", "fractions", "val_open")
TRAIN_KEYS = ("preset", "epochs", "batch_size", "lr", "momentum", "weight_decay", "nesterov",
              "schedule", "augment", "num_workers", "finetune", "finetune_epochs",
              "finetune_lr")
TUNE_KEYS = ("rule", "select_by")
METHOD_KEYS = ("name", "train", "scorer", "params", "grid", "train_params", "extract")
EXTRACT_KEYS = ("mc_samples", "odin_grid", "feature_maps")
TUNE_RULES = ("val", "none")
#: A scorer's extra array -> (what provides it, how the row asks for it).
EXTRA_SOURCES: dict[str, tuple[str, str]] = {
    "mc_logits": ("extract", "mc_samples"), "odin_logits": ("extract", "odin_grid"),
    "feature_maps": ("extract", "feature_maps"), "confidence": ("train", "confbranch"),
    "godin_h": ("train", "godin"), "godin_g": ("train", "godin"),
    "head2_logits": ("train", "mcd")}
#: Training methods that train on auxiliary outliers (a spec split: role ood, usage train).
OUTLIER_METHODS = ("oe", "mcd")


@dataclass(frozen=True)
class MethodRow:
    """One row of the results table: a training method and the scorer of its model."""

    name: str
    train: str
    scorer: str
    params: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] | None = None
    train_params: dict[str, Any] = field(default_factory=dict)
    extract: dict[str, Any] = field(default_factory=dict)


@dataclass
class Experiment:
    """A parsed experiment file (see the module docstring)."""

    name: str
    arch: str | None
    seeds: list[int]
    rows: list[MethodRow]
    spec: str | None = None
    osr: dict[str, Any] | None = None
    aux: dict[str, Any] | None = None
    aux_name: str = "aux"
    device: str = "auto"
    train: dict[str, Any] = field(default_factory=dict)
    tune_rule: str = "val"
    select_by: str = "auroc"
    path: str | None = None
    runs: int = 1
    stores: list[str] | None = None        # existing stores, one per seed (existing.py)
    model: str | None = None               # an existing model: nothing is trained
    checkpoints: list[str] | None = None   #   its checkpoints, one per seed

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows"] = [asdict(r) for r in self.rows]
        return data

    def train_methods(self) -> list[str]:
        """The training methods the rows need, in row order; `ce` first when a row fine-tunes
        it (finetune = true)."""
        needed = list(dict.fromkeys(r.train for r in self.rows))
        if self.train.get("finetune") and any(m != "ce" for m in needed) and "ce" not in needed:
            needed.insert(0, "ce")
        return needed

    def extract_options(self, train_method: str) -> dict[str, Any]:
        """The union of the extraction extras of the rows using `train_method`."""
        merged: dict[str, Any] = {}
        for r in self.rows:
            if r.train == train_method:
                merged.update(r.extract)
        return merged


def digest(value: Any) -> str:
    """A short stable hash of a JSON-able value (recipes, settings)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _check_keys(table: dict[str, Any], valid: tuple[str, ...], where: str) -> None:
    if not isinstance(table, dict):
        raise InputError(f"{where}: expected a table")
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (valid: {', '.join(valid)})")


def _check_scorer_settings(scorer: str, params: dict[str, Any], grid: Any, label: str) -> None:
    """Build the scorer at its fixed parameters and at every grid value (the scorer's own
    checks), so that a typo'd or out-of-range setting fails before any training."""
    try:
        get_scorer(scorer, **params)
    except (ValueError, UsageError) as exc:
        raise InputError(f"{label}: params: {exc}") from None
    if grid is None:
        return
    if not isinstance(grid, dict):
        raise InputError(f"{label}: grid must be a table of lists, e.g. {{ K = [10, 50] }}")
    valid = sorted(REGISTRY[scorer].defaults)
    for key, values in grid.items():
        if key not in valid:
            raise InputError(f"{label}: grid: scorer {scorer!r} has no parameter {key!r} "
                             f"(valid: {', '.join(valid) or 'none'})")
        for value in values if isinstance(values, list) else [values]:
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


def _rows(raw: Any, where: str) -> list[MethodRow]:
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{where}: expected at least one [[method]] table")
    rows, names = [], set()
    for i, item in enumerate(raw):
        label = f"{where}: [[method]] #{i + 1}"
        _check_keys(item, METHOD_KEYS, label)
        scorer = item.get("scorer")
        if not isinstance(scorer, str):
            raise InputError(f"{label}: missing 'scorer' (a post-hoc scorer name)")
        check_scorers([scorer], label, InputError)
        train = item.get("train", "ce")
        try:
            method = get_method(train)
            method.resolve_params(item.get("train_params") or {})
        except UsageError as exc:
            raise InputError(f"{label}: {exc}") from None
        name = item.get("name") or (scorer if train == "ce" else f"{train}+{scorer}")
        if name in names:
            raise InputError(f"{label}: method name {name!r} is used twice")
        names.add(name)
        extract = dict(item.get("extract") or {})
        _check_keys(extract, EXTRACT_KEYS, f"{label} extract")
        grid = item.get("grid")
        _check_scorer_settings(scorer, dict(item.get("params") or {}), grid, label)
        _check_extras(scorer, train, extract, label)
        rows.append(MethodRow(name, train, scorer, dict(item.get("params") or {}),
                              {k: list(v) if isinstance(v, list) else [v]
                               for k, v in grid.items()} if grid is not None else None,
                              dict(item.get("train_params") or {}), extract))
    return rows


def _paths(value: Any, base: Path, what: str, where: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) and v for v in items):
        raise InputError(f"{where}: {what} must be a path or a non-empty list of paths")
    out = []
    for v in items:
        p = Path(v).expanduser()
        out.append(str(p if p.is_absolute() else base / p))
    return out


def _check_module(model: str, where: str) -> None:
    if ":" not in model:
        return
    module = model.split(":", 1)[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise InputError(f"{where}: model {model!r}: module {module!r} cannot be found "
                         "(is it on PYTHONPATH?)")


def parse_existing(data: dict[str, Any], data_t: dict[str, Any], base: Path,
                   where: str) -> dict[str, Any]:
    """{"stores", "model", "checkpoints", "seeds"} of an existing-model / existing-store file
    (all None when the file trains); InputError naming the file and key otherwise."""
    stores = model = checkpoints = None
    if "stores" in data_t:
        stores = _paths(data_t["stores"], base, "[data] stores", where)
        for s in stores:
            if not (Path(s) / "store.json").is_file():
                raise InputError(f"{where} [data]: stores: {s!r} is not a featstore store "
                                 "(no store.json)")
        if "model" in data or "checkpoint" in data:
            raise InputError(f"{where}: give [data] stores or model / checkpoint, not both")
    if "checkpoint" in data:
        checkpoints = _paths(data["checkpoint"], base, "checkpoint", where)
        for c in checkpoints:
            if not Path(c).is_file():
                raise InputError(f"{where}: checkpoint {c!r}: file not found")
    if "model" in data or checkpoints is not None:
        model = data.get("model") or data.get("arch")
        if not isinstance(model, str) or not model:
            raise InputError(f"{where}: checkpoint needs model = \"module:callable\" or a "
                             "torchvision name")
        _check_module(model, where)
        if checkpoints is None and ":" not in model:
            raise InputError(f"{where}: model {model!r} without checkpoint would evaluate "
                             "untrained weights; give checkpoint = \"model.pt\"")
        if "spec" not in data_t:
            raise InputError(f"{where}: an existing model is extracted over [data] spec; "
                             "give spec = \"bench.toml\"")
    if stores is None and model is None:
        return {"stores": None, "model": None, "checkpoints": None, "seeds": None}
    n = len(stores) if stores is not None else len(checkpoints or [None])
    for key in ("train", "runs"):
        if key in data:
            raise InputError(f"{where}: {key!r} does not apply to existing "
                             f"{'stores' if stores else 'models'} (nothing is trained)")
    seeds = data.get("seeds", list(range(n)))
    seeds = list(range(seeds)) if isinstance(seeds, int) and not isinstance(seeds, bool) \
        else seeds
    if not isinstance(seeds, list) or len(seeds) != n:
        raise InputError(f"{where}: seeds must list one seed per "
                         f"{'store' if stores else 'checkpoint'} ({n}), got {seeds!r}")
    return {"stores": stores, "model": model, "checkpoints": checkpoints, "seeds": seeds}


def check_rows_untrained(rows: list[Any], where: str) -> None:
    """Rows over existing stores / models train nothing."""
    for r in rows:
        if r.train != "ce" or r.train_params:
            raise InputError(f"{where}: row {r.name!r}: train = {r.train!r} needs training; "
                             "rows over existing stores / models run post-hoc scorers only")


def _data_source(data_t: dict[str, Any], base: Path,
                 where: str) -> tuple[str | None, dict[str, Any] | None]:
    """(spec path, osr table) of [data]; both None for [data] stores (existing.py)."""
    spec = osr = None
    if "spec" in data_t:
        p = Path(str(data_t["spec"])).expanduser()
        spec = str(p if p.is_absolute() else base / p)
        if not Path(spec).is_file():
            raise InputError(f"{where} [data]: spec {spec!r}: file not found")
    elif "osr" in data_t:
        osr = dict(data_t["osr"])
        _check_keys(osr, OSR_KEYS, f"{where} [data] osr")
        if "data" not in osr:
            raise InputError(f"{where} [data] osr: missing 'data' (digits, an ImageFolder or "
                             "an image list)")
        if osr.setdefault("val_open", "heldout") not in VAL_OPEN_MODES:
            raise InputError(f"{where} [data] osr: val_open {osr['val_open']!r} (valid: "
                             f"{', '.join(VAL_OPEN_MODES)})")
        ratios = osr.get("ratios", ["7/3", "6/4", "5/5"])
        osr["ratios"] = [list(parse_ratio(r)) for r in
                         (ratios if isinstance(ratios, list) else str(ratios).split(","))]
        for key in ("data", "root"):
            value = osr.get(key)
            if isinstance(value, str) and value != "digits" and not Path(value).is_absolute():
                osr[key] = str(base / value)
    return spec, osr


def parse_experiment(data: dict[str, Any], base: Path, where: str) -> Experiment:
    """Validate an experiment dict (as loaded from TOML); relative paths resolve to `base`."""
    _check_keys(data, TOP_KEYS, where)
    seeds = data.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if not 1 <= seeds <= MAX_SEEDS:  # a count; never a list of 1e11 seeds in memory
            raise InputError(f"{where}: seeds = {seeds}: a count of seeds must lie in "
                             f"[1, {MAX_SEEDS}] (or give the list of seeds)")
        seeds = list(range(seeds))
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0
                                                           for s in seeds):
        raise InputError(f"{where}: seeds must be a non-empty list of integers >= 0 (or a count)")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"{where}: seeds {seeds} repeat a seed")
    data_t = data.get("data")
    if data_t is None:
        raise InputError(f"{where}: missing [data] (spec = \"bench.toml\" or osr = {{...}})")
    _check_keys(data_t, DATA_KEYS, f"{where} [data]")
    if sum(k in data_t for k in ("spec", "osr", "stores")) != 1:
        raise InputError(f"{where} [data]: give exactly one of spec, osr and stores")
    existing = parse_existing(data, data_t, base, where)
    if existing["seeds"] is not None:
        seeds = existing["seeds"]
        if not all(isinstance(s, int) and s >= 0 for s in seeds) or len(set(seeds)) < len(seeds):
            raise InputError(f"{where}: seeds must be distinct integers >= 0, got {seeds}")
    spec, osr = _data_source(data_t, base, where)
    train = dict(data.get("train") or {})
    _check_keys(train, TRAIN_KEYS, f"{where} [train]")
    try:
        preset_values(train.get("preset"))
    except UsageError:
        raise InputError(f"{where} [train]: preset {train.get('preset')!r} is not a training "
                         f"preset (valid: {', '.join(TRAIN_PRESETS)})") from None
    tune = dict(data.get("tune") or {})
    _check_keys(tune, TUNE_KEYS, f"{where} [tune]")
    rule = tune.get("rule", "val")
    if rule not in TUNE_RULES:
        raise InputError(f"{where} [tune]: rule {rule!r} (valid: {', '.join(TUNE_RULES)})")
    select_by = tune.get("select_by", "auroc")

    try:
        check_select_by(select_by)
    except UsageError as exc:
        raise InputError(f"{where} [tune]: {exc}") from None
    aux = data_t.get("aux")
    if aux is not None and not isinstance(aux, dict):
        raise InputError(f"{where} [data]: aux must be a source table, e.g. {{ imagefolder = "
                         "\"outliers/\" }")
    rows = _rows(data.get("method"), where)
    if existing["seeds"] is not None:
        check_rows_untrained(rows, where)
    _check_outliers(rows, spec, aux, where)
    runs = data.get("runs", 1)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise InputError(f"{where}: runs must be an integer >= 1, got {runs!r}")
    if runs > 1 and osr is None:
        raise InputError(f"{where}: runs = {runs} applies to OSR class divisions; with a "
                         "spec, list the training seeds in seeds")
    if runs > 1 and max(seeds) >= RUN_SEED_STRIDE:
        raise InputError(f"{where}: with runs > 1 the division seeds must be below "
                         f"{RUN_SEED_STRIDE} (training seeds are seed + {RUN_SEED_STRIDE} r)")
    return Experiment(name=str(data.get("name") or "experiment"), arch=data.get("arch"),
                      seeds=[int(s) for s in seeds], rows=rows,
                      spec=spec, osr=osr, aux=dict(aux) if aux else None,
                      aux_name=str(data_t.get("aux_name", "aux")),
                      device=str(data.get("device", "auto")), train=train, tune_rule=rule,
                      select_by=select_by, runs=int(runs), stores=existing["stores"],
                      model=existing["model"], checkpoints=existing["checkpoints"])


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


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment TOML file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"experiment {str(path)!r}: file not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"experiment {str(path)!r}: invalid TOML ({exc})") from None
    exp = parse_experiment(data, path.parent.resolve(), f"experiment {str(path)!r}")
    exp.path = str(path)
    return exp
