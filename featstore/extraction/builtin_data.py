"""Built-in image generators from real data that installs offline (DESIGN §6 `builtin` source).

Every generator returns `(images, labels, ids)`: uint8 (N, S, S, 3) RGB images, int64 labels
(-1 where there is no class) and string ids that trace each row to its origin. S is the source's
`size` (default 32; the pretrained demo uses 64). Everything is deterministic from the source
dict (seed included).

- `digits`: scikit-learn's bundled handwritten digits (1,797 real 8x8 scans), upsampled to SxS.
  `classes` picks the digits (labels are the index in that list); `part` picks a stratified,
  seeded share given by `fractions` (default train 0.6 / val 0.15 / test 0.25). Optional
  covariate shifts applied after upsampling: `rotate` (degrees), `blur` (Gaussian sigma in px
  of a 32x32 image: sigma * S / 32 at size S, so a shift looks the same at every size),
  `noise` (Gaussian std on [0, 1] intensities), `invert` (bool).
- `patches`: random square crops (side `crop`, default 96 px) of scikit-image's bundled
  photographs or textures named in `images`, resized to SxS; `count` per image; `part` val
  and test use disjoint seeds.
- `faces`: scikit-image's `lfw_subset` (200 real 25x25 faces), split val/test by `fractions`.
- `noise`: synthetic noise images (`kind` gaussian | uniform | saltpepper), `count` rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import ndimage
from skimage import data as skdata
from skimage.transform import resize

from featstore.errors import UsageError

SIZE = 32
PARTS = ("train", "val", "test")
DEFAULT_FRACTIONS = {"train": 0.6, "val": 0.15, "test": 0.25}
_PART_SEED = {"train": 0, "val": 1, "test": 2}


def _to_rgb_uint8(images: np.ndarray) -> np.ndarray:
    """(N, H, W) or (N, H, W, 3) floats in [0, 1] -> (N, H, W, 3) uint8."""
    images = np.clip(images, 0.0, 1.0)
    if images.ndim == 3:
        images = np.repeat(images[..., None], 3, axis=-1)
    return np.round(images * 255.0).astype(np.uint8)


def _size(source: dict[str, Any]) -> int:
    """The source's image side `size` (default 32), checked."""
    size = source.get("size", SIZE)
    if isinstance(size, bool) or not isinstance(size, int) or not 8 <= size <= 512:
        raise UsageError(f"builtin source: size {size!r}: expected an integer side in pixels "
                         "from 8 to 512")
    return size


def _upsample(images: np.ndarray, size: int) -> np.ndarray:
    """(N, h, w[, 3]) float -> (N, size, size[, 3]) bilinear with anti-aliasing."""
    shape = (size, size) + images.shape[3:]
    return np.stack([resize(im, shape, order=1, anti_aliasing=True) for im in images])


def _part_indices(n: int, part: str, fractions: dict[str, float], seed: int,
                  strata: np.ndarray | None = None) -> np.ndarray:
    """Indices of `part` in a seeded, stratified split of range(n) by `fractions`."""
    if part == "all":
        return np.arange(n)
    if part not in fractions:
        raise UsageError(f"builtin source: part {part!r} not in fractions {sorted(fractions)}")
    names = [p for p in PARTS if p in fractions]
    cuts = np.cumsum([fractions[p] for p in names])
    if cuts[-1] > 1.0 + 1e-9:
        raise UsageError(f"builtin source: fractions {fractions} sum to more than 1")
    strata = np.zeros(n, dtype=np.int64) if strata is None else strata
    rng = np.random.default_rng(seed)
    chosen = []
    for value in np.unique(strata):
        members = rng.permutation(np.flatnonzero(strata == value))
        bounds = np.concatenate([[0], np.round(cuts * len(members)).astype(int)])
        k = names.index(part)
        chosen.append(members[bounds[k]:bounds[k + 1]])
    return np.sort(np.concatenate(chosen))


def _covariate(images: np.ndarray, source: dict[str, Any], seed: int) -> np.ndarray:
    """Apply the optional covariate shifts to (N, S, S) float images in [0, 1]."""
    out = images
    if source.get("rotate"):
        out = np.stack([ndimage.rotate(im, float(source["rotate"]), reshape=False, order=1)
                        for im in out])
    if source.get("blur"):
        sigma = float(source["blur"]) * out.shape[1] / SIZE
        out = np.stack([ndimage.gaussian_filter(im, sigma) for im in out])
    if source.get("noise"):
        rng = np.random.default_rng(seed + 7)
        out = out + rng.normal(0.0, float(source["noise"]), size=out.shape)
    if source.get("invert"):
        out = 1.0 - out
    return out


def digits(source: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    from sklearn.datasets import load_digits  # lazy: scikit-learn stays off spec parsing

    bunch = load_digits()
    classes = [int(c) for c in source.get("classes", range(10))]
    seed = int(source.get("seed", 0))
    mask = np.isin(bunch.target, classes)
    index = np.flatnonzero(mask)
    target = bunch.target[index]
    fractions = dict(source.get("fractions", DEFAULT_FRACTIONS))
    pick = _part_indices(len(index), source.get("part", "all"), fractions, seed, target)
    rows = index[pick]
    images = _upsample(bunch.images[rows] / 16.0, _size(source))
    images = _covariate(images, source, seed)
    labels = np.asarray([classes.index(int(t)) for t in bunch.target[rows]], dtype=np.int64)
    return _to_rgb_uint8(images), labels, [f"digits/{i}" for i in rows]


def _sk_image(name: str) -> np.ndarray:
    loader = getattr(skdata, name, None)
    if loader is None:
        raise UsageError(f"builtin patches: scikit-image has no bundled image {name!r}")
    image = np.asarray(loader())
    if image.ndim == 3 and image.shape[2] == 4:
        image = image[..., :3]
    image = image.astype(np.float64)
    return image / 255.0 if image.max() > 1.0 else image


def patches(source: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    names = list(source.get("images", []))
    if not names:
        raise UsageError("builtin patches: 'images' must name scikit-image images")
    count = int(source.get("count", 100))
    crop = int(source.get("crop", 96))
    seed = int(source.get("seed", 0)) * 10 + _PART_SEED.get(source.get("part", "test"), 3)
    size = _size(source)
    rng = np.random.default_rng(seed)
    out, ids = [], []
    for name in names:
        image = _sk_image(name)
        h, w = image.shape[:2]
        side = min(crop, h, w)
        for k in range(count):
            y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
            patch = image[y:y + side, x:x + side]
            if patch.ndim == 2:
                patch = np.repeat(patch[..., None], 3, axis=-1)
            out.append(resize(patch, (size, size, 3), order=1, anti_aliasing=True))
            ids.append(f"patches/{name}/{source.get('part', 'test')}/{k}@{y},{x}")
    images = _covariate(np.stack(out), source, seed)
    return _to_rgb_uint8(images), np.full(len(ids), -1, dtype=np.int64), ids


def faces(source: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    images = skdata.lfw_subset()
    fractions = dict(source.get("fractions", {"val": 0.3, "test": 0.7}))
    pick = _part_indices(len(images), source.get("part", "all"), fractions,
                         int(source.get("seed", 0)))
    up = _upsample(images[pick], _size(source))
    return (_to_rgb_uint8(up), np.full(len(pick), -1, dtype=np.int64),
            [f"lfw_subset/{i}" for i in pick])


def noise(source: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    count = int(source.get("count", 200))
    kind = source.get("kind", "gaussian")
    seed = int(source.get("seed", 0)) * 10 + _PART_SEED.get(source.get("part", "test"), 3)
    rng = np.random.default_rng(seed)
    size = _size(source)
    shape = (count, size, size)
    if kind == "gaussian":
        images = rng.normal(0.5, 0.25, size=shape)
    elif kind == "uniform":
        images = rng.random(shape)
    elif kind == "saltpepper":
        images = (rng.random(shape) < 0.15).astype(np.float64)
    else:
        raise UsageError(f"builtin noise: kind {kind!r} not one of gaussian, uniform, saltpepper")
    return (_to_rgb_uint8(images), np.full(count, -1, dtype=np.int64),
            [f"noise/{kind}/{source.get('part', 'test')}/{i}" for i in range(count)])


GENERATORS = {"digits": digits, "patches": patches, "faces": faces, "noise": noise}
def generate(source: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Run the generator named by `source['builtin']`."""
    name = source.get("builtin")
    if name not in GENERATORS:
        raise UsageError(f"builtin source {name!r}: valid generators are "
                         f"{', '.join(GENERATORS)}")
    return GENERATORS[name](source)
