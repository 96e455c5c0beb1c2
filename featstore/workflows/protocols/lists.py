"""`featstore protocol lists2spec`: a directory of image lists -> a benchmark spec.

Every `*.txt` under DIR (recursively, sorted) becomes one or more splits; every split reads its
images from `--root` (or the root given for the list's top directory with `--root-map
NAME=PATH`). Rules, first match wins:

1. IS-OOD cell lists `cov_<c>_sem_<s>.txt` (one path per line) -> `ood/shift/cov<c>_sem<s>/<set>`,
   `<set>` = the list's top directory under DIR (`imagenet21k`, `SynIS`), `isood` at top level.
   The lists of one cell in several sub-directories (IS-OOD's `imagenet21k/train/` and
   `imagenet21k/val/`) are concatenated into one split, as IS-OOD concatenates them.
2. FACETS split files (lines `<0|1> <source> <class> <path>`, recognised by content):
   rows with OODness 0 -> `id/<part>`, rows with OODness 1 ->
   `ood/facets/<source>` per source; `<part>` is `val` if the file name contains "val", else
   `test`, and val OOD splits are named `<source>_val` with usage val. An ID row's `<class>`
   is mapped through the model's class list (`classes`, CLI `--classes`) by class name or
   WordNet id (an entry `n01440764`, `n01440764 tench` or `/a/airfield` answers to its wnid,
   its name and its last path part); a class index is taken as the model's own only for the
   sources named in `own_index_sources` (CLI `--own-index-source places365`), since another
   dataset's indices mean other classes. Anything else is an error naming the list line:
   labels are never reinterpreted. The spec gets no sampling keys (`per_class`, `balance`):
   FACETS' released lists are the paper's own val/test samples, already drawn and balanced
   (Tables II-V of ../shared/papers/facets-realistic-ood-benchmark-dsaa-2023.md, lines
   179-258), and a second draw would change them.
3. OpenOOD `benchmark_imglist` names `<part>_<name>.txt` with part train | val | test:
   - `<name>` equal to the ID dataset (`--id NAME`, else the list's nearest enclosing
     directory that is not a group directory, DIR itself included, as in
     `benchmark_imglist/cifar10/test_cifar10.txt` with DIR `benchmark_imglist` or
     `benchmark_imglist/cifar10`) -> `id/<part>`;
   - otherwise OOD (or CSID): the group is the nearest enclosing directory named `near`,
     `far`, `simi`, `nearood`, `farood`, `osr` or `csid` (`nearood` -> near, `farood` -> far,
     `csid` -> role csid), else OpenOOD v1.5's grouping of its datasets (`OPENOOD_GROUPS`),
     else `other`; test -> `ood/<group>/<name>` (usage test), val -> `ood/<group>/<name>_val`
     (usage val), train -> `ood/<group>/<name>_train` (usage train: outlier-exposure data).
4. Any other list -> `ood/other/<stem>`.

A plan with no `id/` split is refused (an error naming the datasets the lists hold and
`--id`): a spec whose every split is OOD would turn the ID set into OOD.

Split-name components are sanitised to [A-Za-z0-9_.+-]. Lists that are used as they are stay
where they are; derived lists (merged cells, FACETS parts) are written beside the spec in
`<spec stem>_lists/`. Two lists mapping to one split name (other than IS-OOD cells) are an
error naming both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec
from featstore.store.fileio import atomic_write_output
from featstore.store.names import parse_split_name

ISOOD_CELL = re.compile(r"^cov_(\d+)_sem_(\d+)$")
OPENOOD_NAME = re.compile(r"^(train|val|test)_(.+)$")
GROUP_DIRS = {"near": "near", "far": "far", "simi": "simi", "nearood": "near",
              "farood": "far", "osr": "osr", "csid": "csid"}
#: OpenOOD v1.5's near/far/csid datasets (configs/datasets/*/…_ood.yml)
OPENOOD_GROUPS = {
    "cifar10": "near", "cifar100": "near", "tin": "near", "ssb_hard": "near", "ninco": "near",
    "mnist": "far", "svhn": "far", "texture": "far", "textures": "far", "places365": "far",
    "places": "far", "inaturalist": "far", "openimage_o": "far", "openimageo": "far",
    "imagenet_v2": "csid", "imagenet_c": "csid", "imagenet_r": "csid", "imagenet_es": "csid",
}
_BAD = re.compile(r"[^A-Za-z0-9_.+-]+")


def clean(component: str) -> str:
    """A valid split-name component (DESIGN §2 names)."""
    text = _BAD.sub("_", component).strip("_") or "x"
    text = re.sub("_{2,}", "_", text)
    return text if text[0].isalnum() else f"x{text}"


@dataclass
class PlannedSplit:
    name: str
    usage: str
    root: Path
    lists: list[Path] = field(default_factory=list)
    lines: list[str] | None = None     # derived content (FACETS parts)
    rule: str = ""


def _first_line(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            text = line.strip()
            if text and not text.startswith("#"):
                return text.split()
    return []


def _role_group(rel: Path) -> str | None:
    for part in reversed(rel.parts[:-1]):
        if part.lower() in GROUP_DIRS:
            return GROUP_DIRS[part.lower()]
    return None


_WNID = re.compile(r"^n\d{8}$")


def class_keys(classes: list[str]) -> dict[str, int | None]:
    """{key: class index} for FACETS class fields: each entry, its wnid and name when it reads
    `<wnid> <name>`, and its last `/` part; a key two entries share maps to None (ambiguous)."""
    keys: dict[str, int | None] = {}

    def add(key: str, index: int) -> None:
        key = key.strip()
        if key:
            keys[key] = index if keys.get(key, index) == index else None

    for i, entry in enumerate(classes):
        add(entry, i)
        first, _, rest = entry.strip().partition(" ")
        if _WNID.match(first):
            add(first, i)
            add(rest, i)
        add(entry.rstrip("/").split("/")[-1], i)
    return keys


def facets_label(field: str, source: str, keys: dict[str, int | None] | None,
                 n_classes: int | None, own_index_sources: tuple[str, ...],
                 where: str) -> int:
    """The model's class index of a FACETS ID row's class field (module docstring, rule 2)."""
    if keys is not None and field in keys:
        if keys[field] is None:
            raise UsageError(f"{where}: class {field!r} matches several entries of the class "
                             "list; name it uniquely")
        return int(keys[field])  # type: ignore[arg-type]
    if field.isdigit() and source in own_index_sources:
        index = int(field)
        if n_classes is not None and index >= n_classes:
            raise UsageError(f"{where}: class index {index} does not fit the {n_classes} "
                             "classes of the class list")
        return index
    if keys is None:
        raise UsageError(f"{where}: ID class {field!r} of source {source!r} cannot be mapped to "
                         "the model's classes: give the class list (--classes, names or wnids)"
                         f" or, if {source!r} indices are the model's own, --own-index-source "
                         f"{source}")
    raise UsageError(f"{where}: ID class {field!r} of source {source!r} is not in the model's "
                     f"class list ({n_classes} classes, by name or wnid)"
                     + ("; a class index is read only for --own-index-source sources"
                        if field.isdigit() else ""))


def facets_lines(f: Path, part: str, keys: dict[str, int | None] | None,
                 n_classes: int | None, own_index_sources: tuple[str, ...]
                 ) -> dict[str, list[str]]:
    """A FACETS list file (`<0|1> <source> <class_index> <path>` per line) as
    {split name: ['<path> <label>', ...]}: ID rows (0) into id/<part> with their model class
    (`facets_label`), OOD rows (1) into ood/facets/<source>[_val] with label -1."""
    by_name: dict[str, list[str]] = {}
    for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 4 or fields[0] not in ("0", "1"):
            raise UsageError(f"{str(f)!r} line {n}: expected '<0|1> <source> "
                             f"<class_index> <path>', got {line.strip()!r}")
        if fields[0] == "0":
            label = facets_label(fields[2], fields[1], keys, n_classes,
                                 tuple(own_index_sources), f"{str(f)!r} line {n}")
            by_name.setdefault(f"id/{part}", []).append(f"{fields[3]} {label}")
        else:
            leaf = clean(fields[1]) + ("_val" if part == "val" else "")
            by_name.setdefault(f"ood/facets/{leaf}", []).append(f"{fields[3]} -1")
    return by_name


def plan(directory: str | Path, root: str | Path, id_name: str | None = None,
         root_map: dict[str, str] | None = None, classes: list[str] | None = None,
         own_index_sources: tuple[str, ...] = ()) -> list[PlannedSplit]:
    """The splits the lists in `directory` become (see the module docstring)."""
    keys = class_keys(classes) if classes else None
    n_classes = len(classes) if classes else None
    base = Path(directory)
    if not base.is_dir():
        raise InputError(f"lists2spec: {str(base)!r} is not a directory")
    files = sorted(p for p in base.rglob("*.txt") if p.is_file())
    if not files:
        raise UsageError(f"lists2spec: no *.txt image lists under {str(base)!r}")
    root_map = dict(root_map or {})
    planned: dict[str, PlannedSplit] = {}

    def add(name: str, usage: str, rel: Path, list_file: Path | None, lines: list[str] | None,
            rule: str, merge: bool = False) -> None:
        top = rel.parts[0] if len(rel.parts) > 1 else ""
        split_root = Path(root_map.get(top, root)).resolve()
        if name in planned:
            p = planned[name]
            if merge and list_file is not None:
                p.lists.append(list_file)
                return
            if lines is not None and p.lines is not None and p.rule == rule:
                p.lines += lines
                return
            raise UsageError(f"lists2spec: {str(rel)!r} and {str(p.lists[0] if p.lists else '')!r}"
                             f" both map to split {name!r}")
        planned[name] = PlannedSplit(name, usage, split_root,
                                     [list_file] if list_file is not None else [],
                                     lines, rule)

    for f in files:
        rel = f.relative_to(base)
        stem = f.stem
        cell = ISOOD_CELL.match(stem)
        if cell:
            subset = clean(rel.parts[0]) if len(rel.parts) > 1 else "isood"
            add(f"ood/shift/cov{int(cell.group(1))}_sem{int(cell.group(2))}/{subset}", "test",
                rel, f.resolve(), None, "isood", merge=True)
            continue
        first = _first_line(f)
        if len(first) == 4 and first[0] in ("0", "1"):
            part = "val" if "val" in stem.lower() else "test"
            by_name = facets_lines(f, part, keys, n_classes, own_index_sources)
            for name, lines in by_name.items():
                add(name, part, rel, None, lines, f"facets:{rel}")
            continue
        m = OPENOOD_NAME.match(stem)
        if m:
            part, dataset = m.group(1), m.group(2)
            dirs = [d for d in (base.resolve().name, *rel.parts[:-1])
                    if d.lower() not in GROUP_DIRS]
            ident = id_name or (dirs[-1] if dirs else None)
            if ident is not None and dataset.lower() == ident.lower():
                add(f"id/{part}", part, rel, f.resolve(), None, "openood-id")
                continue
            group = _role_group(rel) or OPENOOD_GROUPS.get(dataset.lower(), "other")
            suffix = {"test": "", "val": "_val", "train": "_train"}[part]
            name = (f"csid/{clean(dataset)}{suffix}" if group == "csid"
                    else f"ood/{group}/{clean(dataset)}{suffix}")
            add(name, part, rel, f.resolve(), None, "openood")
            continue
        group = _role_group(rel) or "other"
        name = f"csid/{clean(stem)}" if group == "csid" else f"ood/{group}/{clean(stem)}"
        add(name, "test", rel, f.resolve(), None, "plain")
    if not any(name.startswith("id/") for name in planned):
        datasets = sorted({m.group(2) for f in files if (m := OPENOOD_NAME.match(f.stem))})
        raise UsageError(
            f"lists2spec: no ID list under {str(base)!r}"
            + (f" for --id {id_name!r}" if id_name else "")
            + (f" (OpenOOD datasets found: {', '.join(datasets)})" if datasets else "")
            + "; name the ID dataset with --id NAME (its lists <train|val|test>_NAME.txt), "
            "a spec without id/ splits cannot be evaluated")
    return list(planned.values())


def lists_to_spec(directory: str | Path, root: str | Path, out: str | Path,
                  id_name: str | None = None, root_map: dict[str, str] | None = None,
                  classes: list[str] | None = None,
                  own_index_sources: tuple[str, ...] = ()) -> dict[str, Any]:
    """Write the spec (and any derived lists); returns {spec, splits: [{name, usage, rule,
    lists, rows}]}. `classes` (the model's class list) is written into the spec and maps
    FACETS class fields; see `plan`."""
    out = Path(out)
    splits = plan(directory, root, id_name, root_map, classes, tuple(own_index_sources))
    derived_dir = out.parent / f"{out.stem}_lists"
    spec_splits = []
    summary = []
    for s in splits:
        parse_split_name(s.name)
        if s.lines is not None or len(s.lists) > 1:
            derived_dir.mkdir(parents=True, exist_ok=True)
            target = derived_dir / f"{s.name.replace('/', '__')}.txt"
            content = s.lines if s.lines is not None else [
                line for f in s.lists for line in f.read_text(encoding="utf-8").splitlines()
                if line.strip()]
            atomic_write_output(target, "\n".join(content) + "\n")
            list_file, rows = target, len(content)
        else:
            list_file = s.lists[0]
            rows = sum(1 for line in list_file.read_text(encoding="utf-8").splitlines()
                       if line.strip() and not line.lstrip().startswith("#"))
        spec_splits.append(SplitSpec(s.name, s.usage,
                                     {"imagelist": str(list_file), "root": str(s.root)}))
        summary.append({"name": s.name, "usage": s.usage, "rule": s.rule,
                        "lists": [str(p) for p in s.lists] or [str(list_file)], "rows": rows})
    # paths made here are relative to the working directory: validated() makes them absolute
    spec = BenchmarkSpec(None, spec_splits, classes=list(classes) if classes else None
                         ).validated(where=f"spec {str(out)!r}")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_output(out, spec.to_toml(
        f"generated by featstore protocol lists2spec from {Path(directory).resolve()}"))
    return {"spec": str(out), "splits": summary}
