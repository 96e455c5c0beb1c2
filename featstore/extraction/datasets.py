"""Split sources -> datasets of (image tensor, label, row index, error) for extraction.

Every source lists its rows up front (ids and labels), so a bad image is reported by path and
a resumed extraction can skip rows. Images are decoded to RGB and transformed by the spec's
transform (resize shorter side, center crop, to tensor, normalize). A row whose image cannot
be read yields an error string instead of raising inside a DataLoader worker; the extractor
turns it into a one-line error naming the file, or skips it with --skip-bad.
"""

from __future__ import annotations

import copy
import errno
import inspect
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms as v1
from torchvision.transforms import v2

from featstore.errors import InputError, UsageError
from featstore.extraction import builtin_data
from featstore.specs.benchmark import SAMPLING_KEYS

TRANSFORM_ERROR = "transform: "  # prefix of a row error that is the transform's fault
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


TRANSFORM_BACKENDS = ("tensor", "pil")


def build_transform(spec: dict[str, Any]) -> Callable[[Image.Image], torch.Tensor]:
    """PIL RGB image -> normalized float tensor: Resize(resize) of the shorter side,
    CenterCrop(crop), scale to [0, 1], Normalize(mean, std), by one of two backends
    (`backend` in the spec's [transform]):

    - "tensor" (default): torchvision.transforms.v2 on the image as a uint8 tensor
      (PILToTensor first): the resize is torch's bilinear interpolation with antialias on
      uint8, rounded back to uint8 before scaling.
    - "pil": the classic torchvision.transforms pipeline on the PIL image (Resize with PIL's
      bilinear filter, CenterCrop, ToTensor, Normalize): what most published ImageNet
      numbers and OpenOOD's loaders use.

    The two resize kernels differ slightly (a real EfficientNet-Lite0's logits by up to
    ~0.08, top-1 agreeing on ~99% of ImageNet-like images); choose "pil" to reproduce
    results computed with the classic pipeline. The backend is part of the store's
    provenance and of each split's fingerprint."""
    backend = spec.get("backend", "tensor")
    if backend not in TRANSFORM_BACKENDS:
        raise UsageError(f"[transform] backend {backend!r}: expected one of "
                         f"{', '.join(TRANSFORM_BACKENDS)}")
    if backend == "pil":
        return v1.Compose([
            v1.Resize(int(spec["resize"])),
            v1.CenterCrop(int(spec["crop"])),
            v1.ToTensor(),
            v1.Normalize(list(spec["mean"]), list(spec["std"])),
        ])
    return v2.Compose([
        v2.PILToTensor(),
        v2.Resize(int(spec["resize"]), antialias=True),
        v2.CenterCrop(int(spec["crop"])),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(list(spec["mean"]), list(spec["std"])),
    ])


def printable_id(value: object) -> str:
    """A row id as valid UTF-8: a file name's bytes that are not UTF-8 (Python holds them as
    surrogate escapes) are written as `\\xNN`, so the id can be stored and printed."""
    text = str(value)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class RowSource:
    """A split's rows: ids, labels, and a loader of row i as a PIL RGB image."""

    def __init__(self, ids: Sequence[str], labels: np.ndarray,
                 load: Callable[[int], Image.Image], describe: dict[str, Any],
                 class_names: list[str] | None = None):
        self.ids = [printable_id(i) for i in ids]
        self.labels = np.asarray(labels, dtype=np.int64)
        self.load = load
        self.describe = describe
        self.class_names = class_names

    def __len__(self) -> int:
        return len(self.ids)


class TransformedRows(Dataset):
    """Dataset over a RowSource: (tensor, label, index, error message or '')."""

    def __init__(self, rows: RowSource, transform: Callable, shape: tuple[int, int, int],
                 indices: Sequence[int] | None = None):
        self.rows = rows
        self.transform = transform
        self.shape = shape
        self.indices = list(range(len(rows))) if indices is None else list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int, str]:
        row = self.indices[i]
        try:
            image = self.rows.load(row).convert("RGB")
        except Exception as exc:  # any decode failure is reported by path
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return torch.zeros(self.shape), int(self.rows.labels[row]), row, msg
        try:
            tensor = self.transform(image)
        except Exception as exc:  # the transform's fault, not the image's: never skipped
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return torch.zeros(self.shape), int(self.rows.labels[row]), row, TRANSFORM_ERROR + msg
        return tensor, int(self.rows.labels[row]), row, ""


def _open_image(path: Path) -> Image.Image:
    """The image at `path`, read only from a regular file: the file is opened non-blocking and
    fstat-ed first, so a FIFO, socket or device named by a list never blocks extraction (it
    is an unreadable image, named), and a dangling link is a missing file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such file (or a dangling link)") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)")
        with Image.open(fh) as im:
            im.load()
            return im.copy()


def _image_entry(path: Path) -> bool:
    """Whether a folder entry is one of the split's images: an image extension and not a
    directory. A dangling link or a FIFO is listed (and then reported by name when it cannot
    be read), never dropped silently."""
    return path.suffix.lower() in IMAGE_EXTENSIONS and not path.is_dir()


def imagefolder_rows(root: str) -> RowSource:
    """Class sub-directories (sorted) of image files (sorted), like torchvision's ImageFolder;
    a folder without sub-directories is read as one flat set of images (label -1,
    `class_names` None: fine for an OOD split, refused for an ID split by extraction)."""
    base = Path(root)
    paths, labels, classes = imagefolder_files(root)
    ids = [str(p.relative_to(base)) for p in paths]
    return RowSource(ids, np.asarray(labels), lambda i: _open_image(paths[i]),
                     {"imagefolder": str(base)}, class_names=classes or None)


def imagefolder_files(root: str) -> tuple[list[Path], list[int], list[str]]:
    """(image files by their real names, labels, class names) of `imagefolder_rows`."""
    base = Path(root)
    if not base.is_dir():
        raise InputError(f"imagefolder {root!r}: directory not found")
    classes = sorted(d.name for d in base.iterdir() if d.is_dir())
    paths, labels = [], []
    for index, cls in enumerate(classes):
        for f in sorted((base / cls).rglob("*")):
            if _image_entry(f):
                paths.append(f)
                labels.append(index)
    if not classes:
        paths = [f for f in sorted(base.iterdir()) if _image_entry(f)]
        labels = [-1] * len(paths)
    if not paths:
        raise InputError(f"imagefolder {root!r}: no image files "
                         f"({', '.join(IMAGE_EXTENSIONS)})")
    return paths, labels, classes


def parse_image_list(list_file: str) -> list[tuple[str, int]]:
    """Parse `path label` lines (OpenOOD), `path` lines (IS-OOD; label -1) or FACETS
    `<0|1> <source> <class> <path>` lines.

    Blank lines and lines starting with '#' are skipped; a bad line is an InputError naming the
    file, the line number and what was expected."""
    path = Path(list_file)
    if not path.is_file():
        raise InputError(f"image list {list_file!r}: file not found")
    rows: list[tuple[str, int]] = []
    text_lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    for lineno, line in enumerate(text_lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = text.split()
        if len(fields) == 4 and fields[0] in ("0", "1"):
            rel, label_text = fields[3], fields[2]
        elif len(fields) == 2:
            rel, label_text = fields
        elif len(fields) == 1:  # IS-OOD lists: a path per line, no label
            rel, label_text = fields[0], "-1"
        else:
            raise InputError(f"image list {list_file!r} line {lineno}: expected 'path label', "
                             f"'path' or '<0|1> <source> <class_index> <path>', got {text!r}")
        try:
            label = int(label_text)
        except ValueError:
            raise InputError(f"image list {list_file!r} line {lineno}: label {label_text!r} is "
                             "not an integer") from None
        rows.append((rel, label))
    if not rows:
        raise InputError(f"image list {list_file!r}: no entries")
    return rows


def imagelist_rows(list_file: str, root: str | None) -> RowSource:
    entries = parse_image_list(list_file)
    base = Path(root) if root else Path(list_file).parent
    if not base.is_dir():
        raise InputError(f"image list {list_file!r}: root directory {str(base)!r} not found")
    ids = [rel for rel, _ in entries]
    labels = np.asarray([label for _, label in entries])
    return RowSource(ids, labels, lambda i: _open_image(base / ids[i]),
                     {"imagelist": list_file, "root": str(base)})


def torchvision_rows(name: str, root: str, kwargs: dict[str, Any]) -> RowSource:
    """A torchvision dataset class on local disk (download=False, always)."""
    cls = getattr(torchvision.datasets, name, None)
    if cls is None:
        raise InputError(f"torchvision dataset {name!r} does not exist in torchvision.datasets")

    if "download" in inspect.signature(cls).parameters:
        kwargs = {**kwargs, "download": False}
    try:
        ds = cls(root=root, **kwargs)
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"torchvision dataset {name!r} at {root!r}: {msg} (featstore never "
                         "downloads: put the dataset on disk first)") from exc
    targets = getattr(ds, "targets", None)
    if targets is None:
        targets = [ds[i][1] for i in range(len(ds))]
    labels = np.asarray(targets, dtype=np.int64)

    def load(i: int) -> Image.Image:
        image = ds[i][0]
        return image if isinstance(image, Image.Image) else v2.functional.to_pil_image(image)

    return RowSource([str(i) for i in range(len(ds))], labels, load,
                     {"torchvision": name, "root": root, "kwargs": kwargs},
                     class_names=list(getattr(ds, "classes", []) or []) or None)


def builtin_rows(source: dict[str, Any]) -> RowSource:
    """A generator of featstore.extraction.builtin_data (arrays in memory)."""
    images, labels, ids = builtin_data.generate(source)
    return RowSource(ids, labels, lambda i: Image.fromarray(images[i]), dict(source))


#: source keys that subsample a source's rows (seeded; see `sample_rows`)


def rows_from_source(source: dict[str, Any]) -> RowSource:
    """Dispatch a spec source to its RowSource, subsampled by its sampling keys."""
    if "imagefolder" in source:
        rows = imagefolder_rows(source["imagefolder"])
    elif "imagelist" in source:
        rows = imagelist_rows(source["imagelist"], source.get("root"))
    elif "torchvision" in source:
        rows = torchvision_rows(source["torchvision"], source.get("root", "."),
                                dict(source.get("kwargs", {})))
    elif "builtin" in source:
        rows = builtin_rows({k: v for k, v in source.items() if k not in SAMPLING_KEYS})
    else:
        raise InputError(f"unknown source {source!r}")
    if any(k in source for k in ("per_class", "max_rows")):
        keep = sample_rows(rows.labels, source.get("per_class"), source.get("max_rows"),
                           int(source.get("sample_seed", 0)), str(source))
        rows = subset_rows(rows, keep)
    return rows


def sample_rows(labels: np.ndarray, per_class: int | None = None, max_rows: int | None = None,
                seed: int = 0, where: str = "source") -> np.ndarray:
    """Sorted row indices kept by the sampling keys (FACETS samples a fixed number of images
    per class and balances ID and OOD counts):

    - `per_class = k`: per class label (ascending), the first k rows of a permutation drawn
      from `numpy.random.default_rng(seed)` (all rows of a class with fewer); rows labelled
      -1 (unknown class) are refused, since they have no class to count;
    - `max_rows = m` (after per_class): the first m rows of a permutation drawn from
      `default_rng(seed + 1)` when more remain.

    Indices are returned sorted, so the rows keep their source order; same seed, same rows."""
    y = np.asarray(labels)
    keep = np.arange(len(y))
    for key, value in (("per_class", per_class), ("max_rows", max_rows)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise UsageError(f"{where}: {key} = {value!r} must be an integer >= 1")
    if per_class is not None:
        if (y < 0).any():
            raise UsageError(f"{where}: per_class needs a class label on every row "
                             f"({int((y < 0).sum())} rows are unlabelled, -1); use max_rows")
        rng = np.random.default_rng(seed)
        parts = [rng.permutation(np.flatnonzero(y == c))[:per_class] for c in np.unique(y)]
        keep = np.sort(np.concatenate(parts))
    if max_rows is not None and len(keep) > max_rows:
        keep = np.sort(np.random.default_rng(seed + 1).permutation(keep)[:max_rows])
    return keep


def subset_rows(rows: RowSource, keep: np.ndarray) -> RowSource:
    """The RowSource of the rows `keep` (indices into `rows`), loading through the original."""
    index = [int(i) for i in keep]
    return RowSource([rows.ids[i] for i in index], rows.labels[index],
                     lambda i: rows.load(index[i]), {**rows.describe, "rows": len(index)},
                     class_names=rows.class_names)


def balance_id_ood(bench: Any) -> Any:
    """A copy of the spec whose id/test and OOD test splits have equal total rows (when
    `bench.balance`): the larger side is cut to the smaller side's total through `max_rows`
    with `sample_seed = bench.balance_seed` (a split's own smaller max_rows and its seed are
    kept). An OOD side is cut in its LARGEST split only, the other sources kept whole, as
    FACETS (§IV Table V) keeps SUN397's and ImageNet-val's OOD rows and samples ImageNet-
    train's (T1: 7,530 + 16,100 + 50,232); when the largest split cannot absorb the excess,
    every split is cut in proportion to its rows (largest-remainder rounding). The totals
    come out equal; the paper's are within 1.5% of each other (Tables IV-V: 21,050 / 21,332,
    74,001 / 73,862), by a rule it does not state. Unchanged when balance is off, counts are
    already equal, or a side is missing."""
    if not getattr(bench, "balance", False):
        return bench
    id_test = [s for s in bench.splits if s.name == "id/test"]
    ood = [s for s in bench.splits if s.role == "ood" and s.usage == "test"]
    if not id_test or not ood:
        return bench
    n_id = len(rows_from_source(id_test[0].source))
    n_ood = [len(rows_from_source(s.source)) for s in ood]
    total = sum(n_ood)
    out = copy.deepcopy(bench)
    targets: dict[str, int] = {}
    big = max(range(len(ood)), key=lambda i: (n_ood[i], -i))
    if total > n_id and n_ood[big] - (total - n_id) >= 1:
        targets = {ood[big].name: n_ood[big] - (total - n_id)}
    elif total > n_id:
        shares = [n_id * n / total for n in n_ood]
        alloc = [int(x) for x in shares]
        order = sorted(range(len(ood)), key=lambda i: (-(shares[i] - alloc[i]), i))
        for i in order[:n_id - sum(alloc)]:
            alloc[i] += 1
        targets = {s.name: max(1, a) for s, a in zip(ood, alloc, strict=True)}
    elif total < n_id:
        targets = {"id/test": total}
    for sp in out.splits:
        if sp.name in targets:
            current = sp.source.get("max_rows")
            sp.source["max_rows"] = min(targets[sp.name], current or targets[sp.name])
            sp.source.setdefault("sample_seed", bench.balance_seed)
    return out
