"""The experiment file (TOML) as an object: data, training methods, post-hoc scorers, seeds,
tuning rule (the format: `featstore.workflows.experiments.config`).

`Experiment.load(path or text)` reads the file with the strict TOML reader
(`featstore.specs.toml`): every table's keys and every value's type are checked here, seeds
are normalised to a list, relative paths are resolved against the file's directory, and
existing stores, checkpoints and model modules are looked up. What needs the scorers, the
training methods or the protocols (scorer names and settings, training methods and presets,
OSR ratios, outlier splits) is checked by `featstore.workflows.experiments.config`
(`load_experiment` = this load + those checks). `Experiment.to_toml()` writes the file back:
`Experiment.load(e.to_toml()) == e`.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from featstore.errors import InputError
from featstore.specs.toml import check_keys, dumps, get, plain, read_toml

#: the most seeds an experiment may name (each one trains and extracts every model again)
MAX_SEEDS = 10_000
#: run r of OSR division seed s trains with seed s + RUN_SEED_STRIDE * r
RUN_SEED_STRIDE = 1000
TOP_KEYS = ("name", "arch", "seeds", "runs", "device", "threads", "data", "train", "tune",
            "method", "executor", "model", "checkpoint")
DATA_KEYS = ("spec", "osr", "stores", "aux", "aux_name")
OSR_KEYS = ("data", "ratios", "root", "image_size", "fractions", "val_open")
#: the [train] keys and their TOML types (`featstore.specs.toml.KINDS`)
TRAIN_TYPES: dict[str, str | tuple[str, ...]] = {
    "preset": "str", "epochs": "int", "batch_size": "int", "lr": "number",
    "momentum": "number", "weight_decay": "number", "nesterov": "bool", "schedule": "str",
    "augment": "str", "num_workers": "int", "finetune": "bool", "finetune_epochs": "int",
    "finetune_lr": "number"}
TRAIN_KEYS = tuple(TRAIN_TYPES)
TUNE_KEYS = ("rule", "select_by")
METHOD_KEYS = ("name", "train", "scorer", "params", "grid", "train_params", "extract")
EXTRACT_KEYS = ("mc_samples", "odin_grid", "feature_maps", "feature_layers", "gram_powers",
                "adascale_o")
#: val: tune on val over the default grids fitted to the store (`scorers.adapt`); paper: the
#: remote-sensing paper's rule (§2.5: "the five most common values"), tune on val over the
#: default grids as they are, clamped only where the store makes a value invalid; openood:
#: OpenOOD v1.5's search (`scorers.openood_aps`); none.
TUNE_RULES = ("val", "paper", "openood", "none")


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

    def to_data(self) -> dict[str, Any]:
        """The [[method]] table (empty settings left out)."""
        data = {"name": self.name, "train": self.train, "scorer": self.scorer,
                "params": plain(self.params) or None, "grid": plain(self.grid),
                "train_params": plain(self.train_params) or None,
                "extract": plain(self.extract) or None}
        return {k: v for k, v in data.items() if v is not None}


@dataclass
class Experiment:
    """An experiment file (the file it was read from, `path`, is not compared)."""

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
    path: str | None = field(default=None, compare=False)
    runs: int = 1
    stores: list[str] | None = None        # existing stores, one per seed (existing.py)
    model: str | None = None               # an existing model: nothing is trained
    checkpoints: list[str] | None = None   #   its checkpoints, one per seed
    executor: dict[str, Any] | None = None  # the [executor] table (executors.py)
    threads: int | None = None             # every unit's thread count (unitthreads.py)

    @classmethod
    def load(cls, source: str | Path, base: str | Path | None = None) -> Experiment:
        """Read an experiment from a path or TOML text (module docstring)."""
        doc = read_toml(source, "experiment", base)
        exp = parse_experiment_data(doc.data, doc.base, doc.where)
        exp.path = str(doc.path) if doc.path is not None else None
        return exp

    def to_data(self) -> dict[str, Any]:
        """The experiment in the TOML data model (what `parse_experiment_data` reads)."""
        source = ({"stores": self.stores} if self.stores is not None else
                  {"spec": self.spec} if self.spec is not None else {"osr": plain(self.osr)})
        data_t = {**source, "aux": plain(self.aux),
                  "aux_name": self.aux_name if self.aux_name != "aux" else None}
        data = {"name": self.name, "arch": self.arch, "model": self.model,
                "checkpoint": self.checkpoints, "seeds": list(self.seeds),
                "runs": self.runs if self.runs != 1 else None, "device": self.device,
                "threads": self.threads, "data": {k: v for k, v in data_t.items() if v is not None},
                "train": plain(self.train) or None,
                "tune": {"rule": self.tune_rule, "select_by": self.select_by},
                "executor": plain(self.executor),
                "method": [r.to_data() for r in self.rows]}
        return {k: v for k, v in data.items() if v is not None}

    def to_toml(self, comment: str | None = None) -> str:
        """The experiment file as TOML text (paths absolute, as held)."""
        return dumps(self.to_data(), comment=comment)

    def to_json(self) -> dict[str, Any]:
        """What the experiment computes, as JSON (without `executor`: where units run)."""
        data = asdict(self)
        del data["executor"]
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


def table(data: dict[str, Any], key: str, where: str, valid: tuple[str, ...]) -> dict[str, Any]:
    """The table `data[key]` ({} when absent), its keys checked against `valid`."""
    value = dict(get(data, key, "table", where, {}))
    check_keys(value, valid, f"{where} [{key}]")
    return value


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


def _data_source(data_t: dict[str, Any], base: Path,
                 where: str) -> tuple[str | None, dict[str, Any] | None]:
    """(spec path, osr table) of [data]; both None for [data] stores (existing.py)."""
    spec = osr = None
    if "spec" in data_t:
        p = Path(get(data_t, "spec", "str", f"{where} [data]")).expanduser()
        spec = str(p if p.is_absolute() else base / p)
        if not Path(spec).is_file():
            raise InputError(f"{where} [data]: spec {spec!r}: file not found")
    elif "osr" in data_t:
        osr = dict(get(data_t, "osr", "table", f"{where} [data]"))
        check_keys(osr, OSR_KEYS, f"{where} [data] osr")
        if "data" not in osr:
            raise InputError(f"{where} [data] osr: missing 'data' (digits, an ImageFolder or "
                             "an image list)")
        for key in ("data", "root"):
            value = get(osr, key, "str", f"{where} [data] osr")
            if isinstance(value, str) and value != "digits" and not Path(value).is_absolute():
                osr[key] = str(base / value)
    return spec, osr


def _seeds(data: dict[str, Any], where: str) -> list[int]:
    seeds = get(data, "seeds", ("int", "list"), where, [0])
    if isinstance(seeds, int):
        if not 1 <= seeds <= MAX_SEEDS:  # a count; never a list of 1e11 seeds in memory
            raise InputError(f"{where}: seeds = {seeds}: a count of seeds must lie in "
                             f"[1, {MAX_SEEDS}] (or give the list of seeds)")
        seeds = list(range(seeds))
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                            for s in seeds):
        raise InputError(f"{where}: seeds must be a non-empty list of integers >= 0 (or a count)")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"{where}: seeds {seeds} repeat a seed")
    return seeds


def _rows(raw: Any, where: str) -> list[MethodRow]:
    """The [[method]] tables: keys and types; a row's default name; names unique."""
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{where}: expected at least one [[method]] table")
    rows, names = [], set()
    for i, item in enumerate(raw):
        label = f"{where}: [[method]] #{i + 1}"
        if not isinstance(item, dict):
            raise InputError(f"{label}: expected a table")
        check_keys(item, METHOD_KEYS, label)
        scorer = item.get("scorer")
        if not isinstance(scorer, str):
            raise InputError(f"{label}: missing 'scorer' (a post-hoc scorer name)")
        train = get(item, "train", "str", label, "ce")
        name = get(item, "name", "str", label) or (scorer if train == "ce"
                                                    else f"{train}+{scorer}")
        if name in names:
            raise InputError(f"{label}: method name {name!r} is used twice")
        names.add(name)
        extract = dict(get(item, "extract", "table", label, {}))
        check_keys(extract, EXTRACT_KEYS, f"{label} extract")
        grid = get(item, "grid", "table", label)
        rows.append(MethodRow(name, train, scorer, dict(get(item, "params", "table", label, {})),
                              {k: list(v) if isinstance(v, list) else [v]
                               for k, v in grid.items()} if grid is not None else None,
                              dict(get(item, "train_params", "table", label, {})), extract))
    return rows


def parse_experiment_data(data: dict[str, Any], base: Path, where: str) -> Experiment:
    """An Experiment from a dict as loaded from TOML (the checks of the module docstring);
    relative paths resolve to `base`; `where` names the file in errors."""
    check_keys(data, TOP_KEYS, where)
    seeds = _seeds(data, where)
    if "data" not in data:
        raise InputError(f"{where}: missing [data] (spec = \"bench.toml\" or osr = {{...}})")
    data_t = table(data, "data", where, DATA_KEYS)
    if sum(k in data_t for k in ("spec", "osr", "stores")) != 1:
        raise InputError(f"{where} [data]: give exactly one of spec, osr and stores")
    existing = parse_existing(data, data_t, base, where)
    if existing["seeds"] is not None:
        seeds = existing["seeds"]
        if not all(isinstance(s, int) and s >= 0 for s in seeds) or len(set(seeds)) < len(seeds):
            raise InputError(f"{where}: seeds must be distinct integers >= 0, got {seeds}")
    spec, osr = _data_source(data_t, base, where)
    train = table(data, "train", where, TRAIN_KEYS)
    for key, kind in TRAIN_TYPES.items():
        value = get(train, key, kind, f"{where} [train]")
        least = 1 if key in ("epochs", "batch_size", "finetune_epochs") else 0
        if kind in ("number", "int") and value is not None and not (
                math.isfinite(value) and value >= least and (value > 0 or "lr" not in key)):
            raise InputError(f"{where} [train]: {key} = {value!r}: expected a finite number "
                             f"{'> 0' if 'lr' in key else f'>= {least}'}")
    tune = table(data, "tune", where, TUNE_KEYS)
    rule = get(tune, "rule", "str", f"{where} [tune]", "val")
    if rule not in TUNE_RULES:
        raise InputError(f"{where} [tune]: rule {rule!r} (valid: {', '.join(TUNE_RULES)})")
    aux = data_t.get("aux")
    if aux is not None and not isinstance(aux, dict):
        raise InputError(f"{where} [data]: aux must be a source table, e.g. {{ imagefolder = "
                         "\"outliers/\" }")
    rows = _rows(data.get("method"), where)
    runs = data.get("runs", 1)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise InputError(f"{where}: runs must be an integer >= 1, got {runs!r}")
    if runs > 1 and osr is None:
        raise InputError(f"{where}: runs = {runs} applies to OSR class divisions; with a "
                         "spec, list the training seeds in seeds")
    if runs > 1 and max(seeds) >= RUN_SEED_STRIDE:
        raise InputError(f"{where}: with runs > 1 the division seeds must be below "
                         f"{RUN_SEED_STRIDE} (training seeds are seed + {RUN_SEED_STRIDE} r)")
    threads = get(data, "threads", "int", where)
    if threads is not None and threads < 1:
        raise InputError(f"{where}: threads = {threads}: expected an integer >= 1")
    return Experiment(name=str(get(data, "name", "str", where) or "experiment"),
                      arch=get(data, "arch", "str", where),
                      seeds=[int(s) for s in seeds], rows=rows,
                      spec=spec, osr=osr, aux=dict(aux) if aux else None,
                      aux_name=get(data_t, "aux_name", "str", f"{where} [data]", "aux"),
                      device=get(data, "device", "str", where, "auto"), train=train,
                      tune_rule=rule,
                      select_by=get(tune, "select_by", "str", f"{where} [tune]", "auroc"),
                      runs=int(runs), stores=existing["stores"],
                      model=existing["model"], checkpoints=existing["checkpoints"],
                      executor=get(data, "executor", "table", where), threads=threads)
