"""A miniature OpenOOD v1.5 CIFAR-10 data folder: OpenOOD's directory and list layout and
naming (`benchmark_imglist/cifar10/<part>_<dataset>.txt`, lines `<dataset>/<sub>/<file>
<label>` relative to `images_classic/`, as OpenOOD's imglist_generator.py writes them; OOD
labels -1), images made from scikit-learn's bundled digits (8x8, scaled to 32x32 RGB PNGs):
ID = digits 0-9 as CIFAR-10's ten classes; the OOD sets are the same digits transformed
(near: inverted, rotated; far: noise, blocks, stripes, shifted); csid (cifar10c): blurred."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter
from sklearn.datasets import load_digits

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck"]
#: OOD dataset -> (OpenOOD list name, transform of a digit image)
OOD = {"val_tin": "tin", "test_cifar100": "cifar100", "test_tin": "tin", "test_mnist": "mnist",
       "test_svhn": "svhn", "test_texture": "texture", "test_places365": "places365"}


def _digit(image: np.ndarray) -> Image.Image:
    gray = (image / 16.0 * 255).astype(np.uint8)
    return Image.fromarray(np.stack([gray] * 3, -1)).resize((32, 32), Image.NEAREST)


def _ood_image(kind: str, base: Image.Image, rng: np.random.Generator) -> Image.Image:
    if kind == "cifar100":
        return Image.fromarray(255 - np.asarray(base))
    if kind == "tin":
        return base.rotate(90)
    if kind == "mnist":
        return Image.fromarray(np.roll(np.asarray(base), 8, axis=1))
    if kind == "svhn":
        return Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    if kind == "texture":
        stripes = np.tile((np.arange(32) % 4 < 2)[None, :, None] * 255, (32, 1, 3))
        return Image.fromarray(stripes.astype(np.uint8))
    blocks = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    return Image.fromarray(blocks).resize((32, 32), Image.NEAREST)


def make_openood_tree(root: Path, per_class: int = 3, n_ood: int = 10) -> Path:
    """Write the tree under `root` (the data root) and return it."""
    digits = load_digits()
    rng = np.random.default_rng(0)
    classic = root / "images_classic"
    lists = root / "benchmark_imglist" / "cifar10"
    lists.mkdir(parents=True)
    by_class = {c: np.flatnonzero(digits.target == c) for c in range(10)}
    offsets = {"train": 0, "val": per_class, "test": 2 * per_class, "cifar10c": 3 * per_class}
    for part, offset in offsets.items():
        lines = []
        for c, name in enumerate(CLASSES):
            for k in range(per_class):
                image = _digit(digits.images[by_class[c][offset + k]])
                sub = "test" if part in ("val", "test") else "train"
                if part == "cifar10c":
                    image, rel = image.filter(ImageFilter.GaussianBlur(1.5)), \
                        f"cifar10c/{name}_{k}.png"
                else:
                    rel = f"cifar10/{sub}/{name}/{part}_{k}.png"
                (classic / rel).parent.mkdir(parents=True, exist_ok=True)
                image.save(classic / rel)
                lines.append(f"{rel} {c}")
        stem = "test_cifar10c" if part == "cifar10c" else f"{part}_cifar10"
        (lists / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    for stem, kind in OOD.items():
        lines = []
        for k in range(n_ood):
            base = _digit(digits.images[500 + 37 * k + len(stem)])
            rel = f"{kind}/{stem.split('_')[0]}/{k}.png"
            (classic / rel).parent.mkdir(parents=True, exist_ok=True)
            _ood_image(kind, base, rng).save(classic / rel)
            lines.append(f"{rel} -1")
        (lists / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    return root
