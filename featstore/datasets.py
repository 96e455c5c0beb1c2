"""Split sources -> datasets of (image tensor, label, row index, error) for extraction.

Every source lists its rows up front (ids and labels), so a bad image is reported by path and
a resumed extraction can skip rows. Images are decoded to RGB and transformed by the spec's
transform (resize shorter side, center crop, to tensor, normalize). A row whose image cannot
be read yields an error string instead of raising inside a DataLoader worker; the extractor
turns it into a one-line error naming the file, or skips it with --skip-bad.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.transforms import v2

from .errors import InputError, UsageError

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
        from torchvision import transforms as v1

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


class RowSource:
    """A split's rows: ids, labels, and a loader of row i as a PIL RGB image."""

    def __init__(self, ids: Sequence[str], labels: np.ndarray,
                 load: Callable[[int], Image.Image], describe: dict[str, Any],
                 class_names: list[str] | None = None):
        self.ids = [str(i) for i in ids]
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
            image = self.rows.load(row)
            tensor = self.transform(image.convert("RGB"))
            return tensor, int(self.rows.labels[row]), row, ""
        except Exception as exc:  # any decode/transform failure is reported by path
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return torch.zeros(self.shape), int(self.rows.labels[row]), row, msg


def _open_image(path: Path) -> Image.Image:
    with Image.open(path) as im:
        im.load()
        return im.copy()


def imagefolder_rows(root: str) -> RowSource:
    """Class sub-directories (sorted) of image files (sorted), like torchvision's ImageFolder;
    a folder without sub-directories is read as one flat set of images (label -1,
    `class_names` None: fine for an OOD split, refused for an ID split by extraction)."""
    base = Path(root)
    if not base.is_dir():
        raise InputError(f"imagefolder {root!r}: directory not found")
    classes = sorted(d.name for d in base.iterdir() if d.is_dir())
    paths, labels = [], []
    for index, cls in enumerate(classes):
        for f in sorted((base / cls).rglob("*")):
            if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS:
                paths.append(f)
                labels.append(index)
    if not classes:
        paths = [f for f in sorted(base.iterdir())
                 if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS]
        labels = [-1] * len(paths)
    if not paths:
        raise InputError(f"imagefolder {root!r}: no image files "
                         f"({', '.join(IMAGE_EXTENSIONS)})")
    ids = [str(p.relative_to(base)) for p in paths]
    return RowSource(ids, np.asarray(labels), lambda i: _open_image(paths[i]),
                     {"imagefolder": str(base)}, class_names=classes or None)


def parse_image_list(list_file: str) -> list[tuple[str, int]]:
    """Parse `path label` lines (OpenOOD), `path` lines (IS-OOD; label -1) or FACETS
    `<0|1> <source> <class> <path>` lines.

    Blank lines and lines starting with '#' are skipped; a bad line is a UsageError naming the
    file, the line number and what was expected."""
    path = Path(list_file)
    if not path.is_file():
        raise InputError(f"image list {list_file!r}: file not found")
    rows: list[tuple[str, int]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
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
            raise UsageError(f"image list {list_file!r} line {lineno}: expected 'path label', "
                             f"'path' or '<0|1> <source> <class_index> <path>', got {text!r}")
        try:
            label = int(label_text)
        except ValueError:
            raise UsageError(f"image list {list_file!r} line {lineno}: label {label_text!r} is "
                             "not an integer") from None
        rows.append((rel, label))
    if not rows:
        raise UsageError(f"image list {list_file!r}: no entries")
    return rows


def imagelist_rows(list_file: str, root: str | None) -> RowSource:
    entries = parse_image_list(list_file)
    base = Path(root) if root else Path(list_file).parent
    if not base.is_dir():
        raise UsageError(f"image list {list_file!r}: root directory {str(base)!r} not found")
    ids = [rel for rel, _ in entries]
    labels = np.asarray([label for _, label in entries])
    return RowSource(ids, labels, lambda i: _open_image(base / ids[i]),
                     {"imagelist": list_file, "root": str(base)})


def torchvision_rows(name: str, root: str, kwargs: dict[str, Any]) -> RowSource:
    """A torchvision dataset class on local disk (download=False, always)."""
    import torchvision

    cls = getattr(torchvision.datasets, name, None)
    if cls is None:
        raise UsageError(f"torchvision dataset {name!r} does not exist in torchvision.datasets")
    import inspect

    if "download" in inspect.signature(cls).parameters:
        kwargs = {**kwargs, "download": False}
    try:
        ds = cls(root=root, **kwargs)
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"torchvision dataset {name!r} at {root!r}: {msg} (featstore never "
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
    """A generator of featstore.demo.data (arrays in memory)."""
    from .demo import data as demo_data

    images, labels, ids = demo_data.generate(source)
    return RowSource(ids, labels, lambda i: Image.fromarray(images[i]), dict(source))


def rows_from_source(source: dict[str, Any]) -> RowSource:
    """Dispatch a spec source to its RowSource."""
    if "imagefolder" in source:
        return imagefolder_rows(source["imagefolder"])
    if "imagelist" in source:
        return imagelist_rows(source["imagelist"], source.get("root"))
    if "torchvision" in source:
        return torchvision_rows(source["torchvision"], source.get("root", "."),
                                dict(source.get("kwargs", {})))
    if "builtin" in source:
        return builtin_rows(source)
    raise UsageError(f"unknown source {source!r}")
