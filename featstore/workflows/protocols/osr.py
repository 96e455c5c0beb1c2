"""Open-set recognition (OSR) splits: closed/open class divisions, trained, extracted and
evaluated per split, aggregated as mean ± std over splits.

Protocol (Wang et al., "Ten methods for OOD detection in remote sensing", 2024, §2.6.1 and
Table 3): a labelled dataset's classes are divided at random into closed-set (ID) and open-set
(OOD) classes at a ratio c/o (7/3, 6/4, 5/5, ...); a model is trained on the closed classes
only and evaluated on the whole test set; the reported numbers are averages over five random
divisions.

As implemented:

- closed-class count: `floor(n * c / (c + o) + 1/2)` (round half up), kept in [1, n - 1]. This
  reproduces the paper's Table 3 counts: UCM (21 classes) 15/6, 13/8, 11/10; AID (30)
  21/9, 18/12, 15/15; EuroSAT (10) 7/3, 6/4, 5/5.
- division for seed s: `numpy.random.default_rng(s).permutation(n)`; the first k class
  indices are closed, the rest open, each sorted. Deterministic from the seed; seeds are
  0..k-1. Closed and open are disjoint and cover every class.
- samples: each class's samples are split train / val / test by a stratified, seeded
  partition that does not depend on the class division (fractions 0.6 / 0.15 / 0.25, as the
  demo's digits), so every division sees the same images in the same parts. Closed-class
  labels are re-indexed 0..k-1 in sorted order.
- spec per split: `id/train`, `id/val`, `id/test` (closed classes), `ood/osr/open` (usage
  test) and `ood/osr/open_val` (usage val: only for hyperparameter selection). Which open
  classes each holds is `val_open`:
  - "paper": the paper's test set. §2.6.1 evaluates "on the entire test set", so
    `ood/osr/open` is the test part of EVERY open class; §2.5 selects hyperparameters "based
    on the performance of AUROC on the validation set" without saying which classes its OOD
    validation set holds, so (featstore's reading) `ood/osr/open_val` is the val part of the
    same open classes (held-out images, not held-out classes: optimistic tuning). The
    default of `featstore protocol osr --layout paper` (`resolve_val_open`).
  - "heldout": featstore's addition, not the paper's (the default without `--layout
    paper` and in experiment files): validation never sees a class the test scores. h =
    round(o / 3) (round half up, in [1, o - 1]) of the division's o open classes, drawn with
    `numpy.random.default_rng([seed, 1])`, are validation-only: their val part is
    `ood/osr/open_val`, and they are LEFT OUT of the test; `ood/osr/open` is the test part
    of the other o - h open classes (so its numbers are not the paper's entire-test-set
    ones). A division with one open class cannot hold one out (an error naming `val_open =
    "paper"`).
- data: the demo digits (`digits`, all 10 classes: builtin sources), an ImageFolder
  directory, or an image list (`path label` lines) with a root.
- running: `featstore protocol osr` is a preset of the experiment runner
  (`featstore.workflows.experiments.presets.osr_experiment`): per division every requested method is
  trained with the division's seed (training seed = class-division seed), extracted, tuned on
  `ood/osr/open_val` and evaluated; every metric is aggregated over divisions as mean and
  population standard deviation (ddof = 0), with the skipped runs and their reasons listed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import InputError, UsageError
from featstore.extraction.datasets import imagefolder_rows, parse_image_list
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec
from featstore.store.fileio import atomic_write_output

DEFAULT_FRACTIONS = {"train": 0.6, "val": 0.15, "test": 0.25}
DEFAULT_METHODS = ("msp", "vim", "knn")
DIGITS_TRANSFORM = {"resize": 32, "crop": 32, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
DIGITS_ARCH = "featstore.extraction.zoo.demo_resnet:demo_resnet"
_RATIO = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_ratio(text: str) -> tuple[int, int]:
    """'7/3' -> (7, 3); a bad ratio is a UsageError."""
    m = _RATIO.match(text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise UsageError(f"--ratios: {text!r} is not a ratio like 7/3 (two positive integers)")
    return int(m.group(1)), int(m.group(2))


def parse_ratios(text: str) -> list[tuple[int, int]]:
    """'7/3,6/4,5/5' -> [(7, 3), (6, 4), (5, 5)]."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError("--ratios: give at least one ratio, e.g. 7/3,6/4,5/5")
    return [parse_ratio(t) for t in items]


def closed_count(num_classes: int, ratio: tuple[int, int]) -> int:
    """Closed-set class count: round-half-up of n * c / (c + o), within [1, n - 1]."""
    if num_classes < 2:
        raise UsageError(f"OSR needs at least 2 classes, the data has {num_classes}")
    c, o = ratio
    k = math.floor(num_classes * c / (c + o) + 0.5)
    return min(max(k, 1), num_classes - 1)


@dataclass(frozen=True)
class ClassSplit:
    """One closed/open division: class indices into the dataset's sorted class list."""

    ratio: tuple[int, int]
    seed: int
    closed: tuple[int, ...]
    open: tuple[int, ...]

    @property
    def tag(self) -> str:
        return f"r{self.ratio[0]}-{self.ratio[1]}"


VAL_OPEN_MODES = ("heldout", "paper")


def resolve_val_open(val_open: str | None, layout: str = "default") -> str:
    """`val_open` when given, else the paper's ("paper": every open class tested, §2.6.1)
    under the paper's layout and featstore's "heldout" otherwise (module docstring)."""
    if val_open is not None:
        return val_open
    return "paper" if layout == "paper" else "heldout"


def open_val_test(split: ClassSplit, val_open: str = "heldout"
                  ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(open classes whose val part tunes, open classes whose test part is tested) of a
    division under `val_open` (module docstring)."""
    if val_open == "paper":
        return split.open, split.open
    if val_open != "heldout":
        raise UsageError(f"val_open {val_open!r}: expected one of {', '.join(VAL_OPEN_MODES)}")
    o = len(split.open)
    if o < 2:
        raise UsageError(f"OSR division {split.ratio[0]}/{split.ratio[1]} seed {split.seed} has "
                         "one open class: no class can be held out for validation; use "
                         "val_open = \"paper\" (tunes on held-out images of the tested class)")
    h = min(max(int(math.floor(o / 3 + 0.5)), 1), o - 1)
    held = np.random.default_rng([split.seed, 1]).choice(np.asarray(split.open), h,
                                                          replace=False)
    held_set = {int(c) for c in held}
    return (tuple(sorted(held_set)), tuple(c for c in split.open if c not in held_set))


def class_splits(num_classes: int, ratio: tuple[int, int],
                 seeds: Sequence[int]) -> list[ClassSplit]:
    """The divisions of `num_classes` classes at `ratio`, one per seed (see module docstring)."""
    k = closed_count(num_classes, ratio)
    out = []
    for seed in seeds:
        perm = np.random.default_rng(int(seed)).permutation(num_classes)
        out.append(ClassSplit(ratio, int(seed), tuple(sorted(int(i) for i in perm[:k])),
                              tuple(sorted(int(i) for i in perm[k:]))))
    return out


# ---------------------------------------------------------------------------------- data
@dataclass
class LabelledData:
    """A labelled dataset: class names and, for file data, (relative path, class) rows."""

    kind: str                                 # "digits" | "files"
    classes: list[str]
    root: Path | None = None
    paths: list[str] | None = None
    labels: np.ndarray | None = None
    describe: str = ""


def load_data(data: str, root: str | Path | None = None) -> LabelledData:
    """`digits`, an ImageFolder directory, or an image list file (`path label`) + root."""
    if data == "digits":
        return LabelledData("digits", [str(d) for d in range(10)], describe="digits")
    path = Path(data)
    if path.is_dir():
        rows = imagefolder_rows(str(path))
        return LabelledData("files", list(rows.class_names or []), path.resolve(),
                            list(rows.ids), rows.labels.copy(), describe=str(path))
    if path.is_file():
        entries = parse_image_list(str(path))
        base = Path(root) if root is not None else path.parent
        if not base.is_dir():
            raise InputError(f"--root {str(base)!r}: directory not found")
        raw = np.asarray([label for _, label in entries], dtype=np.int64)
        if (raw < 0).any():
            raise UsageError(f"--data {data!r}: {int((raw < 0).sum())} rows have no class label")
        values = sorted(set(raw.tolist()))
        remap = {v: i for i, v in enumerate(values)}
        return LabelledData("files", [str(v) for v in values], base.resolve(),
                            [rel for rel, _ in entries],
                            np.asarray([remap[v] for v in raw.tolist()]), describe=str(path))
    raise UsageError(f"--data {data!r}: expected 'digits', an ImageFolder directory or an image "
                     "list file")


def sample_parts(labels: np.ndarray, fractions: dict[str, float] = DEFAULT_FRACTIONS,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Stratified train/val/test row indices: per class (sorted), a seeded permutation cut at
    round(cumulative fraction * class size)."""
    rng = np.random.default_rng(seed)
    names = [p for p in ("train", "val", "test") if p in fractions]
    cuts = np.cumsum([fractions[p] for p in names])
    parts: dict[str, list[np.ndarray]] = {p: [] for p in names}
    for value in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == value))
        bounds = np.concatenate([[0], np.round(cuts * len(members)).astype(int)])
        for i, p in enumerate(names):
            parts[p].append(members[bounds[i]:bounds[i + 1]])
    return {p: np.sort(np.concatenate(v)) for p, v in parts.items()}


def _write_list(path: Path, rel: Sequence[str], labels: Sequence[int]) -> Path:
    lines = []
    for r, y in zip(rel, labels, strict=True):
        if any(ch.isspace() for ch in r):
            raise UsageError(f"image path {r!r} contains whitespace, which image lists cannot hold")
        lines.append(f"{r} {int(y)}")
    if not lines:
        raise UsageError(f"OSR split list {path.name}: no images (too few samples per class?)")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_output(path, "\n".join(lines) + "\n")
    return path


def split_spec(data: LabelledData, split: ClassSplit, directory: Path,
               transform: dict[str, Any] | None,
               fractions: dict[str, float] | None = None,
               val_open: str = "heldout") -> BenchmarkSpec:
    """The benchmark spec of one division; file data also gets its lists written.
    `fractions` (train / val / test shares per class, default `DEFAULT_FRACTIONS`; their sum
    may be below 1 to use fewer rows) cut every class the same way; `val_open` chooses the
    open classes of `ood/osr/open_val` and `ood/osr/open` (`open_val_test`)."""
    closed_names = [data.classes[i] for i in split.closed]
    val_cls, test_cls = open_val_test(split, val_open)
    entries: list[tuple[str, str, dict[str, Any]]] = []
    if data.kind == "digits":
        closed = [int(data.classes[i]) for i in split.closed]
        val_open_cls = [int(data.classes[i]) for i in val_cls]
        test_open_cls = [int(data.classes[i]) for i in test_cls]
        extra = {"fractions": dict(fractions)} if fractions else {}
        for part in ("train", "val", "test"):
            entries.append((f"id/{part}", part,
                            {"builtin": "digits", "classes": closed, "part": part, **extra}))
        entries.append(("ood/osr/open_val", "val",
                        {"builtin": "digits", "classes": val_open_cls, "part": "val", **extra}))
        entries.append(("ood/osr/open", "test",
                        {"builtin": "digits", "classes": test_open_cls, "part": "test",
                         **extra}))
    else:
        assert data.labels is not None and data.paths is not None and data.root is not None
        parts = sample_parts(data.labels, fractions or DEFAULT_FRACTIONS)
        index = {c: i for i, c in enumerate(split.closed)}
        lists = directory / "lists"
        for part in ("train", "val", "test"):
            rows = [r for r in parts[part] if int(data.labels[r]) in index]
            f = _write_list(lists / f"{part}.txt", [data.paths[r] for r in rows],
                            [index[int(data.labels[r])] for r in rows])
            entries.append((f"id/{part}", part, {"imagelist": str(f), "root": str(data.root)}))
        for part, name, opened in (("val", "ood/osr/open_val", set(val_cls)),
                                   ("test", "ood/osr/open", set(test_cls))):
            rows = [r for r in parts[part] if int(data.labels[r]) in opened]
            f = _write_list(lists / f"open_{part}.txt", [data.paths[r] for r in rows],
                            [-1] * len(rows))
            entries.append((name, part, {"imagelist": str(f), "root": str(data.root)}))
    return BenchmarkSpec(None, [SplitSpec(name, usage, source)
                                for name, usage, source in entries],
                         dict(transform or {}), closed_names).validated(directory)


def split_comment(data: LabelledData, split: ClassSplit, val_open: str = "heldout") -> str:
    """The lines a written division spec starts with: the division and its classes."""
    val_cls, test_cls = open_val_test(split, val_open)
    return "\n".join([
        f"OSR split {split.ratio[0]}/{split.ratio[1]} seed {split.seed} of {data.describe}",
        f"closed: {' '.join(data.classes[i] for i in split.closed)}",
        f"open: {' '.join(data.classes[i] for i in split.open)}",
        f"val_open = {val_open}: open_val {' '.join(data.classes[i] for i in val_cls)}"
        f" | open (test) {' '.join(data.classes[i] for i in test_cls)}"])
