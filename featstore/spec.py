"""Benchmark specs (DESIGN §6): a TOML file naming every split and where its images come from.

    [transform]                  # optional: overrides the model's standard eval transform
    resize = 32                  # shorter side resized to this, then center-cropped
    crop = 32
    mean = [0.5, 0.5, 0.5]
    std = [0.5, 0.5, 0.5]
    backend = "pil"              # optional: "tensor" (default) | "pil" (featstore.datasets)

    classes = ["tench", "goldfish", ...]  # optional: the head's classes, one per output
    wnids = ["n01440764", ...]   # optional, beside classes: their WordNet ids
    class_map = { fish_a = 0, goldfish_pics = "goldfish" }   # optional: folder -> class

    ID/CSID ImageFolder class folders map to the head's classes by `featstore.classmap`'s rule:
    class_map first, else by class name or wnid when `classes` is given, else by sorted
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
the larger side of `id/test` vs all OOD test splits to the smaller side's size
(`featstore.datasets.sample_rows`, `balance_id_ood`).

Sources: `imagefolder` (class sub-directories), `imagelist` + `root` (lines `path label`
as in OpenOOD/IS-OOD, or FACETS lines `<0|1> <source> <class_index> <path>`), `torchvision`
(a dataset class on local disk: `{torchvision = "CIFAR10", root = "data", kwargs = {train =
false}}`, never downloaded) and `builtin` (a generator of featstore.demo.data). Relative paths
are resolved against the spec file's directory.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, UsageError
from .names import parse_split_name
from .store import USAGES, default_usage

SOURCE_KINDS = ("imagefolder", "imagelist", "torchvision", "builtin")
TRANSFORM_KEYS = ("resize", "crop", "mean", "std", "backend")


@dataclass
class SplitSpec:
    """One split of a benchmark spec."""

    name: str
    usage: str
    source: dict[str, Any]
    # head class index of each class folder (sorted) of an ID/CSID ImageFolder source, set
    # by extraction from the spec's classes / wnids / class_map (featstore.classmap)
    label_map: list[int] | None = None

    @property
    def role(self) -> str:
        return parse_split_name(self.name).role


@dataclass
class BenchmarkSpec:
    """A parsed benchmark spec."""

    path: Path | None
    splits: list[SplitSpec]
    transform: dict[str, Any] = field(default_factory=dict)
    classes: list[str] | None = None
    wnids: list[str] | None = None
    class_map: dict[str, Any] = field(default_factory=dict)
    #: FACETS' balanced ID / OOD counts: the larger side of id/test vs the OOD test splits
    #: is subsampled (seeded) to the smaller's size at extraction (`balance_id_ood`)
    balance: bool = False
    balance_seed: int = 0


def _resolve(base: Path, value: str) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p))


def parse_spec(data: dict[str, Any], base: Path, where: str) -> BenchmarkSpec:
    """Validate a spec dict (as loaded from TOML); `where` names it in errors."""
    raw_splits = data.get("split")
    if not isinstance(raw_splits, list) or not raw_splits:
        raise InputError(f"{where}: expected at least one [[split]] table")
    transform = data.get("transform", {})
    if not isinstance(transform, dict):
        raise InputError(f"{where}: [transform] must be a table")
    unknown = sorted(set(transform) - set(TRANSFORM_KEYS))
    if unknown:
        raise InputError(f"{where}: [transform] has unknown key {unknown[0]!r} "
                         f"(valid: {', '.join(TRANSFORM_KEYS)})")
    if transform.get("backend", "tensor") not in ("tensor", "pil"):
        raise InputError(f"{where}: [transform] backend {transform['backend']!r}: expected "
                         "'tensor' (default) or 'pil'")
    splits: list[SplitSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_splits):
        label = f"{where}: split #{i + 1}"
        if not isinstance(raw, dict):
            raise InputError(f"{label}: expected a [[split]] table")
        name = raw.get("name")
        if not isinstance(name, str):
            raise InputError(f"{label}: missing 'name'")
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
        if len(kinds) != 1:
            raise InputError(f"{where}: split {name!r}: source needs exactly one of "
                             f"{', '.join(SOURCE_KINDS)}")
        for key in ("imagefolder", "imagelist", "root"):
            if isinstance(source.get(key), str):
                source[key] = _resolve(base, source[key])
        splits.append(SplitSpec(name, usage, source))
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


def load_spec(path: str | Path) -> BenchmarkSpec:
    """Read and validate a benchmark spec TOML file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--spec {str(path)!r}: file not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"--spec {str(path)!r}: invalid TOML ({exc})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--spec {str(path)!r}: unreadable ({exc})") from exc
    spec = parse_spec(data, path.parent.resolve(), f"spec {str(path)!r}")
    spec.path = path
    return spec
