"""ImageFolder trees of real photos (skimage.data) and the benchmark spec files over them,
for the extraction, training, class-map and experiment tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from skimage import data as skdata

TRANSFORM = {"resize": 20, "crop": 16, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}


def make_image_tree(root: Path, per_class: int = 6) -> Path:
    """An ImageFolder of real photo crops: class a = astronaut, b = coffee, c = brick."""
    sources = {"a": skdata.astronaut(), "b": skdata.coffee(), "c": skdata.brick()}
    for cls, image in sources.items():
        (root / cls).mkdir(parents=True)
        for k in range(per_class):
            crop = image[20 * k:20 * k + 64, 30 * k:30 * k + 64]
            Image.fromarray(crop).save(root / cls / f"{k:02d}.png")
    return root


def write_spec(path: Path, splits: list[tuple[str, str]], transform: dict = TRANSFORM) -> Path:
    lines = ["[transform]"] + [f"{k} = {v!r}".replace("'", '"') for k, v in transform.items()]
    for name, source in splits:
        lines += ["", "[[split]]", f'name = "{name}"', f"source = {source}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_rgb_tree(root: Path, per_class: int = 6) -> Path:
    """ImageFolder of real photo crops: a = astronaut, b = coffee, c = brick."""
    sources = {"a": skdata.astronaut(), "b": skdata.coffee(), "c": skdata.brick()}
    for cls, image in sources.items():
        (root / cls).mkdir(parents=True)
        for k in range(per_class):
            crop = image[20 * k:20 * k + 64, 30 * k:30 * k + 64]
            if crop.ndim == 2:
                crop = np.repeat(crop[..., None], 3, axis=-1)
            Image.fromarray(crop).save(root / cls / f"{k:02d}.png")
    return root


def write_tree_spec(path: Path, tree: Path, with_train: bool = True) -> Path:
    """A spec over `tree` as id/train (or id/test when not `with_train`), resize 20, crop 16."""
    name = "id/train" if with_train else "id/test"
    path.write_text("[transform]\nresize = 20\ncrop = 16\nmean = [0.5, 0.5, 0.5]\n"
                    "std = [0.25, 0.25, 0.25]\n\n[[split]]\n"
                    f'name = "{name}"\nsource = {{ imagefolder = "{tree}" }}\n')
    return path


TRANSFORM_TOML = ("[transform]\nresize = 20\ncrop = 16\nmean = [0.5, 0.5, 0.5]\n"
             "std = [0.25, 0.25, 0.25]\n")


def image_folders(root: Path, folders: list[str], per_class: int = 2) -> Path:
    """`per_class` 40 x 40 crops of a different photo in each of `folders` under root."""
    images = [skdata.astronaut(), skdata.coffee(), skdata.brick(), skdata.chelsea(),
              skdata.rocket()]
    for k, (name, image) in enumerate(zip(folders, images, strict=False)):
        (root / name).mkdir(parents=True)
        for j in range(per_class):
            crop = np.asarray(image)[10 * j:10 * j + 40, 12 * k:12 * k + 40]
            Image.fromarray(crop if crop.ndim == 3 else np.stack([crop] * 3, -1)).save(
                root / name / f"{j}.png")
    return root


def random_crop_tree(root: Path, classes: dict[str, np.ndarray], per_class: int) -> None:
    """`per_class` random 24 x 24 RGB crops (seed 0) of each class's photo under root/<class>."""
    rng = np.random.default_rng(0)
    for name, image in classes.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        h, w = image.shape[:2]
        for i in range(per_class):
            y, x = rng.integers(0, h - 24), rng.integers(0, w - 24)
            Image.fromarray(image[y:y + 24, x:x + 24]).convert("RGB").save(
                root / name / f"{i}.png")
