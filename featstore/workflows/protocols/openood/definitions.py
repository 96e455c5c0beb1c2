"""OpenOOD v1.5's benchmarks as data, a user's copy of them checked, and the spec they make.

Each benchmark is `benchmarks/<name>.toml` beside this module (cifar10, cifar100,
imagenet200, imagenet1k: OpenOOD's `imagenet`): its OpenOOD name, class count, the test
preprocessing (`[preprocess]`: OpenOOD's `TestStandardPreProcessor`, Convert RGB ->
Resize(pre_size, bilinear) -> CenterCrop(img_size) -> ToTensor -> Normalize(mean, std)) and
one `[[split]]` per list of `DATA_INFO`: featstore split name, usage, OpenOOD dataset and
group, image folder (`data_dir`, under the data root) and list (`imglist`, under the data
root; `benchmark_imglist/...`). Split names: `id/train|val|test`; the one OOD val set as
`ood/val/<dataset>` (usage val: what OpenOOD's search tunes on); the near and far test sets
as `ood/near/<dataset>` and `ood/far/<dataset>` (OpenOOD's `nearood` / `farood` means are
featstore's group means); the covariate-shifted ID sets of full-spectrum OOD as
`csid/<dataset>`, only with `fsood`.

A list line is read as OpenOOD's `ImglistDataset.getitem` reads it (openood/datasets/
imglist_dataset.py at the commit of the data files): `line.strip('\\n').split(' ', 1)` ->
image name (relative to the data_dir; one starting with '/' is refused, as OpenOOD refuses
it) and an integer label, the two things featstore's list reader
(`featstore.extraction.datasets.parse_image_list`) then reads from the same line; a line either
would read otherwise (no label, a label that is not an integer, OpenOOD's dict-of-extras form)
is refused by name. `check_tree` reads every list and checks every image before
anything is extracted: a missing list or image is one InputError naming the file (and how many
more are missing).

One split OpenOOD preprocesses differently: ImageNet-C (`csid/imagenet_c`, full-spectrum only)
goes through `ImageNetCPreProcessor` (ToTensor + Normalize, no resize or crop); a featstore
spec has one transform for every split, so that split is left out of the spec and the run
says so (`SpecPlan.left_out`) rather than report numbers OpenOOD's preprocessing would not
give.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec

BENCHMARK_DIR = Path(__file__).parent / "benchmarks"
BENCHMARKS = ("cifar10", "cifar100", "imagenet200", "imagenet1k")
#: the one preprocessing a featstore spec applies to every split
STANDARD = "standard"


@dataclass(frozen=True)
class OpenoodSplit:
    """One `[[split]]` of a benchmark file."""

    name: str
    usage: str
    dataset: str
    group: str
    data_dir: str
    imglist: str
    preprocess: str = STANDARD


@dataclass(frozen=True)
class OpenoodBenchmark:
    """One benchmark file: OpenOOD's name, classes, preprocessing, splits and source."""

    benchmark: str
    openood_name: str
    num_classes: int
    preprocess: dict[str, Any]
    splits: tuple[OpenoodSplit, ...]
    source: dict[str, Any] = field(default_factory=dict)

    def transform(self) -> dict[str, Any]:
        """The spec's [transform]: OpenOOD's test preprocessing, on the PIL backend (PIL's
        bilinear resize, as torchvision's classic Resize does it)."""
        p = self.preprocess
        return {"resize": int(p["pre_size"]), "crop": int(p["img_size"]),
                "mean": [float(v) for v in p["mean"]], "std": [float(v) for v in p["std"]],
                "backend": "pil"}

    def groups(self) -> dict[str, list[str]]:
        """{"near": [datasets], "far": [...]} in OpenOOD's order."""
        out: dict[str, list[str]] = {}
        for s in self.splits:
            if s.group in ("near", "far"):
                out.setdefault(s.group, []).append(s.dataset)
        return out


def load_benchmark(name: str) -> OpenoodBenchmark:
    """The benchmark file of `name` (one of `BENCHMARKS`); UsageError naming the valid ones."""
    if name not in BENCHMARKS:
        raise UsageError(f"expected one of {', '.join(BENCHMARKS)}", param="benchmark",
                         value=name)
    data = tomllib.loads((BENCHMARK_DIR / f"{name}.toml").read_text(encoding="utf-8"))
    splits = tuple(OpenoodSplit(**s) for s in data["split"])
    return OpenoodBenchmark(data["benchmark"], data["openood_name"], int(data["num_classes"]),
                            dict(data["preprocess"]), splits, dict(data.get("source", {})))


def list_path(split: OpenoodSplit, data_root: Path, imglists: Path | None) -> Path:
    """Where the user's copy of a split's list is: `imglists` replaces the data root's
    `benchmark_imglist` folder when given."""
    rel = Path(split.imglist)
    if imglists is not None and rel.parts[0] == "benchmark_imglist":
        return Path(imglists) / Path(*rel.parts[1:])
    return Path(data_root) / rel


def parse_openood_line(line: str, where: str) -> tuple[str, int]:
    """(image name, label) of one list line as OpenOOD's ImglistDataset reads it (module
    docstring); InputError naming `where` for a line OpenOOD or featstore would read
    differently or not at all."""
    tokens = line.strip("\n").split(" ", 1)
    if len(tokens) != 2 or not tokens[0]:
        raise InputError(f"{where}: expected '<image path> <label>' (one space), got "
                         f"{line.strip()!r}")
    image, extra = tokens
    if image.startswith("/"):
        raise InputError(f"{where}: image path {image!r} starts with '/' (OpenOOD refuses it: "
                         "paths are relative to the image folder)")
    try:
        label = int(extra)
    except ValueError:
        try:
            value = ast.literal_eval(extra.strip())
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, dict):  # OpenOOD reads it as label 0 with extras
            raise InputError(f"{where}: label {extra.strip()!r} is a dict of extras (OpenOOD "
                             "reads it as label 0); featstore's list reader takes an integer "
                             "label per line") from None
        raise InputError(f"{where}: label {extra.strip()!r} is not an integer") from None
    return image, label


def read_list(path: Path) -> list[tuple[str, int]]:
    """Every (image name, label) of a list file, OpenOOD's way; InputError naming the file
    when it is missing or a line is bad."""
    if not path.is_file():
        raise InputError(f"OpenOOD image list {str(path)!r}: file not found")
    rows = []
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                rows.append(parse_openood_line(line, f"OpenOOD image list {str(path)!r} line "
                                                     f"{n}"))
    if not rows:
        raise InputError(f"OpenOOD image list {str(path)!r}: no entries")
    return rows


@dataclass
class SpecPlan:
    """The splits of one run: `used` (with their list and rows), `left_out` {name: why}."""

    bench: OpenoodBenchmark
    used: list[tuple[OpenoodSplit, Path, int]]
    left_out: dict[str, str]


def check_tree(bench: OpenoodBenchmark, data_root: str | Path, imglists: str | Path | None,
               fsood: bool = False) -> SpecPlan:
    """Read every list of the run and check every image (module docstring): InputError naming
    the first missing list or image and the count of the others; an ID / CSID label outside
    [0, num_classes) is an error naming the list and line."""
    root = Path(data_root)
    if not root.is_dir():
        raise InputError(f"--data-root {str(root)!r}: directory not found")
    lists_dir = Path(imglists) if imglists is not None else None
    used, left_out = [], {}
    for split in bench.splits:
        if split.group == "csid" and not fsood:
            continue
        if split.preprocess != STANDARD:
            left_out[split.name] = (f"OpenOOD preprocesses {split.dataset} with "
                                    "ToTensor + Normalize only (ImageNetCPreProcessor); a "
                                    "featstore spec has one transform for every split")
            continue
        path = list_path(split, root, lists_dir)
        rows = read_list(path)
        image_dir = root / split.data_dir
        missing = [name for name, _ in rows if not (image_dir / name).is_file()]
        if missing:
            more = f" (and {len(missing) - 1} more of its {len(rows)} images)" \
                if len(missing) > 1 else ""
            raise InputError(f"OpenOOD image {str(image_dir / missing[0])!r} of list "
                             f"{str(path)!r} ({split.name}): file not found{more}")
        if split.name.startswith(("id/", "csid/")):
            for n, (_, label) in enumerate(rows, start=1):
                if not 0 <= label < bench.num_classes:
                    raise InputError(f"OpenOOD image list {str(path)!r} entry {n}: label "
                                     f"{label} is not a class of {bench.benchmark} (0.."
                                     f"{bench.num_classes - 1})")
        used.append((split, path, len(rows)))
    return SpecPlan(bench, used, left_out)


def build_spec(plan: SpecPlan, data_root: str | Path) -> BenchmarkSpec:
    """The benchmark spec of a checked plan: one imagelist split per used list, rooted at its
    image folder, OpenOOD's transform."""
    root = Path(data_root).resolve()
    splits = [SplitSpec(s.name, s.usage, {"imagelist": str(path.resolve()),
                                          "root": str(root / s.data_dir)})
              for s, path, _ in plan.used]
    return BenchmarkSpec(None, splits, transform=plan.bench.transform()).validated(
        root, where=f"OpenOOD {plan.bench.benchmark} spec")
