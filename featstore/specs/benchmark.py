"""Benchmark specs (DESIGN §6): a TOML file naming every split and where its images come from.

    [transform]                  # optional: overrides the model's standard eval transform
    resize = 32                  # shorter side resized to this, then center-cropped
    crop = 32
    mean = [0.5, 0.5, 0.5]
    std = [0.5, 0.5, 0.5]
    backend = "pil"              # optional: "tensor" (default) | "pil" (extraction.datasets)

    classes = ["tench", "goldfish", ...]  # optional: the head's classes, one per output
    wnids = ["n01440764", ...]   # optional, beside classes: their WordNet ids
    class_map = { fish_a = 0, goldfish_pics = "goldfish" }   # optional: folder -> class

    ID/CSID ImageFolder class folders map to the head's classes by `featstore.extraction.classmap`'s
    rule: class_map first, else by class name or wnid when `classes` is given, else by sorted
    folder order only when there are exactly as many folders as head outputs; anything
    else is an error saying how to map.

    [[split]]
    name = "id/train"            # DESIGN §2 split name
    usage = "train"              # train | val | test (default: from the name, else test)
    source = { imagefolder = "data/train" }

    [[split]]
    name = "ood/near/ssb_hard"
    usage = "val"
    source = { imagelist = "lists/ssb_hard.txt", root = "images/" }

Sampling (FACETS' per-class image sampling and balanced ID / OOD counts): any source may carry
`per_class = 50` (that many rows per class label, seeded), `max_rows = N` and `sample_seed`
(default 0); a top-level `balance = true` (with `balance_seed`) subsamples, at extraction,
the larger side of `id/test` vs all OOD test splits to the smaller side's size, an OOD side
in its largest split first (`featstore.extraction.datasets.sample_rows`, `balance_id_ood`).

Sources: `imagefolder` (class sub-directories), `imagelist` + `root` (lines `path label`
as in OpenOOD/IS-OOD, or FACETS lines `<0|1> <source> <class_index> <path>`), `torchvision`
(a dataset class on local disk: `{torchvision = "CIFAR10", root = "data", kwargs = {train =
false}}`, never downloaded) and `builtin` (a generator of featstore.extraction.builtin_data).
Relative paths are resolved against the spec file's directory.

Specs are strict: a key the spec format does not define (at the top level, in [transform], in
a [[split]] or in its source) is an error naming the key, the valid ones and the closest
valid one, because an ignored misspelling changes results silently (a misspelled `usage`
would put a val split into test).

A spec is an object, `BenchmarkSpec`: `BenchmarkSpec.load(path or TOML text)` reads one
with the shared strict reader (`featstore.specs.toml`), `to_toml()` writes it (paths
absolute), `validated()` checks one built in code as a file is checked; extraction and
training take the object.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.specs.toml import check_keys, dumps, plain, read_toml
from featstore.store.names import parse_split_name
from featstore.store.store import USAGES, default_usage

SOURCE_KINDS = ("imagefolder", "imagelist", "torchvision", "builtin")
TRANSFORM_KEYS = ("resize", "crop", "mean", "std", "backend")
TOP_KEYS = ("classes", "wnids", "class_map", "balance", "balance_seed", "transform",
            "split")
SPLIT_KEYS = ("name", "usage", "source")
#: sampling keys any source takes (featstore.extraction.datasets)
SAMPLING_KEYS = ("per_class", "max_rows", "sample_seed")
# the keys of each source kind besides the kind itself and the sampling keys every source
# takes (SAMPLING_KEYS; builtin sources: GENERATOR_KEYS below)
SOURCE_KEYS = {"imagefolder": (), "imagelist": ("root",), "torchvision": ("root", "kwargs")}


_COVARIATE_KEYS = ("rotate", "blur", "noise", "invert")
#: the keys each builtin generator (featstore.extraction.builtin_data) reads from its source table
# (a spec's unknown key is an error)
GENERATOR_KEYS: dict[str, tuple[str, ...]] = {
    "digits": ("classes", "seed", "fractions", "part", "size", *_COVARIATE_KEYS),
    "patches": ("images", "count", "crop", "seed", "part", "size", *_COVARIATE_KEYS),
    "faces": ("fractions", "part", "seed", "size"),
    "noise": ("count", "kind", "seed", "part", "size"),
}


def _source_keys(source: Mapping[str, Any], kind: str, where: str) -> None:
    if kind == "builtin":
        extra = GENERATOR_KEYS.get(str(source.get("builtin")))
        if extra is None:
            raise InputError(f"{where}: builtin generator {source.get('builtin')!r} is not one "
                             f"of {', '.join(GENERATOR_KEYS)}")
    else:
        extra = SOURCE_KEYS[kind]
    check_keys(source, (kind, *extra, *SAMPLING_KEYS), where)


def _check_transform(transform: Mapping[str, Any], where: str) -> None:
    """InputError naming a [transform] value of the wrong kind: resize/crop integers >= 1,
    mean/std lists of 1 or 3 numbers (std non-zero)."""
    for key in ("resize", "crop"):
        value = transform.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise InputError(f"{where}: [transform] {key} = {value!r}: expected an integer "
                             ">= 1")
    for key in ("mean", "std"):
        value = transform.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or len(value) not in (1, 3) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            raise InputError(f"{where}: [transform] {key} = {value!r}: expected a list of 3 "
                             "numbers (one per RGB channel)")
        if key == "std" and any(v == 0 for v in value):
            raise InputError(f"{where}: [transform] std = {value!r}: must be non-zero")


@dataclass
class SplitSpec:
    """One split of a benchmark spec."""

    name: str
    usage: str
    source: dict[str, Any]
    # head class index of each class folder (sorted) of an ID/CSID ImageFolder source, set
    # by extraction from the spec's classes / wnids / class_map (featstore.extraction.classmap)
    label_map: list[int] | None = None

    @property
    def role(self) -> str:
        return parse_split_name(self.name).role


@dataclass
class BenchmarkSpec:
    """A parsed benchmark spec. Two specs are equal when they define the same benchmark
    (the file they were read from is not compared): `BenchmarkSpec.load(s.to_toml()) == s`.

    Workflows build one from `SplitSpec`s and call `validated()` (the checks and path
    resolution of a loaded file), hand it to extraction and training as an object, and
    write `to_toml()` only where a file is an output for the user."""

    path: Path | None = field(compare=False)
    splits: list[SplitSpec]
    transform: dict[str, Any] = field(default_factory=dict)
    classes: list[str] | None = None
    wnids: list[str] | None = None
    class_map: dict[str, Any] = field(default_factory=dict)
    #: FACETS' balanced ID / OOD counts: the larger side of id/test vs the OOD test splits
    #: is subsampled (seeded) to the smaller's size at extraction (`balance_id_ood`)
    balance: bool = False
    balance_seed: int = 0

    @classmethod
    def load(cls, source: str | Path, base: str | Path | None = None) -> BenchmarkSpec:
        """Read and validate a spec from a path or TOML text (`featstore.specs.toml.
        read_toml`); relative paths resolve against the file's directory (text: `base`,
        default the working directory)."""
        doc = read_toml(source, "spec", base)
        spec = parse_spec(doc.data, doc.base, doc.where)
        spec.path = doc.path
        return spec

    def to_data(self) -> dict[str, Any]:
        """The spec in the TOML data model (what `parse_spec` reads); defaults left out."""
        data: dict[str, Any] = {"classes": plain(self.classes), "wnids": plain(self.wnids),
                                "class_map": plain(self.class_map) or None}
        if self.balance:
            data.update(balance=True, balance_seed=self.balance_seed)
        data["transform"] = plain(self.transform) or None
        data["split"] = [{"name": s.name, "usage": s.usage, "source": plain(s.source)}
                         for s in self.splits]
        return {k: v for k, v in data.items() if v is not None}

    def to_toml(self, comment: str | None = None) -> str:
        """The spec as TOML text (`comment` lines first); paths are written as held
        (absolute once loaded or validated)."""
        return dumps(self.to_data(), inline=("class_map",), comment=comment)

    def validated(self, base: str | Path | None = None, where: str = "spec") -> BenchmarkSpec:
        """This spec checked as a loaded file is (`parse_spec`), relative source paths
        resolved against `base` (default: the working directory); a new object."""
        root = Path(base).resolve() if base is not None else Path.cwd()
        spec = parse_spec(self.to_data(), root, where)
        spec.path = self.path
        return spec


def _resolve(base: Path, value: str) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p))


def _parse_split(raw: Any, i: int, base: Path, where: str, seen: set[str]) -> SplitSpec:
    """One [[split]] table (the i-th, from 0): its name (unique: added to `seen`), usage and
    source (exactly one source kind, its keys checked, paths resolved against `base`)."""
    label = f"{where}: split #{i + 1}"
    if not isinstance(raw, dict):
        raise InputError(f"{label}: expected a [[split]] table")
    name = raw.get("name")
    if not isinstance(name, str):
        raise InputError(f"{label}: missing 'name'")
    check_keys(raw, SPLIT_KEYS, f"{where}: split {name!r}")
    try:
        parse_split_name(name)
    except UsageError as exc:
        raise InputError(f"{where}: {exc}") from None
    if name in seen:
        raise InputError(f"{where}: split {name!r} is named twice")
    seen.add(name)
    usage = raw.get("usage", default_usage(name))
    if usage not in USAGES:
        raise InputError(f"{where}: split {name!r}: usage {usage!r} is not one of {USAGES}")
    source = raw.get("source") or {}
    if not isinstance(source, dict):
        raise InputError(f"{where}: split {name!r}: source must be a table, e.g. "
                         "source = { imagefolder = \"data/train\" }")
    source = dict(source)
    kinds = [k for k in SOURCE_KINDS if k in source]
    if not kinds and any(difflib.get_close_matches(str(k), SOURCE_KINDS, n=1, cutoff=0.6)
                         for k in source):  # a misspelled kind: name it, did-you-mean
        check_keys(source, (*SOURCE_KINDS, "root", "kwargs", *SAMPLING_KEYS),
                   f"{where}: split {name!r}: source")
    if len(kinds) != 1:
        raise InputError(f"{where}: split {name!r}: source needs exactly one of "
                         f"{', '.join(SOURCE_KINDS)}")
    _source_keys(source, kinds[0], f"{where}: split {name!r}: source")
    for key in ("imagefolder", "imagelist", "root"):
        if isinstance(source.get(key), str):
            source[key] = _resolve(base, source[key])
    return SplitSpec(name, usage, source)


def parse_spec(data: dict[str, Any], base: Path, where: str) -> BenchmarkSpec:
    """Validate a spec dict (as loaded from TOML); `where` names it in errors."""
    check_keys(data, TOP_KEYS, where)
    raw_splits = data.get("split")
    if not isinstance(raw_splits, list) or not raw_splits:
        raise InputError(f"{where}: expected at least one [[split]] table")
    transform = data.get("transform", {})
    if not isinstance(transform, dict):
        raise InputError(f"{where}: [transform] must be a table")
    check_keys(transform, TRANSFORM_KEYS, f"{where}: [transform]")
    if transform.get("backend", "tensor") not in ("tensor", "pil"):
        raise InputError(f"{where}: [transform] backend {transform['backend']!r}: expected "
                         "'tensor' (default) or 'pil'")
    _check_transform(transform, where)
    splits: list[SplitSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_splits):
        splits.append(_parse_split(raw, i, base, where, seen))
    classes = data.get("classes")
    if classes is not None and (not isinstance(classes, list)
                                or not all(isinstance(c, str) for c in classes)):
        raise InputError(f"{where}: classes must be a list of strings")
    wnids = data.get("wnids")
    if wnids is not None:
        if not isinstance(wnids, list) or not all(isinstance(w, str) for w in wnids):
            raise InputError(f"{where}: wnids must be a list of strings")
        if classes is None or len(wnids) != len(classes):
            raise InputError(f"{where}: wnids lists {len(wnids)} ids but classes lists "
                             f"{len(classes or [])} names; give one wnid per class")
    class_map = data.get("class_map", {})
    if not isinstance(class_map, dict) or not all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))
            for v in class_map.values()):
        raise InputError(f"{where}: class_map must be a table of folder = class index or "
                         "class name, e.g. class_map = { goldfish_pics = 1 }")
    balance = data.get("balance", False)
    seed = data.get("balance_seed", 0)
    if not isinstance(balance, bool) or isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"{where}: balance must be true or false and balance_seed an integer")
    for sp in splits:
        for key in ("per_class", "max_rows"):
            value = sp.source.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise InputError(f"{where}: split {sp.name!r}: {key} = {value!r} must be an "
                                 "integer >= 1")
    return BenchmarkSpec(None, splits, dict(transform), list(classes) if classes else None,
                         list(wnids) if wnids else None, dict(class_map), balance, seed)


def load_spec(source: str | Path) -> BenchmarkSpec:
    """Read and validate a benchmark spec (a path or TOML text): `BenchmarkSpec.load`."""
    return BenchmarkSpec.load(source)
