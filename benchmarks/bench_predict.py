"""Benchmark: `Detector.score_images` (what `featstore predict` runs) vs the bare model forward.

Run ``python -m benchmarks.bench_predict [--images 256] [--crop 64] [--repeat 3]
[--scorers msp,vim,knn] [--device cpu]``.

Setup (untimed): torchvision ``resnet18`` (4 classes) with random weights saved to a
temporary file, PNG crops of skimage.data photographs (astronaut, coffee, chelsea, rocket;
96x96) written to a temporary folder (train and val: one folder per photograph), a store
extracted from them (``id/train``, ``id/val``) and one detector per scorer fitted on it
(threshold at 95% TPR on id/val), saved and loaded back. The images to score are ``--images``
crops, transformed by Resize(crop + 8) + CenterCrop(crop).

- bare: a DataLoader over the same images (``featstore.extraction.datasets.TransformedRows``, the
same
  transform, batch size, no workers) and ``model(x)`` under ``torch.inference_mode``, logits
  moved to NumPy. No hook, no scorer, no threshold.
- predict: ``det.score_images(folder)`` on the loaded detector (the model loaded once in an
  untimed warm-up call, as a deployed detector keeps it): listing the folder, the same loader,
  the forward with the head hook, features and logits to NumPy, the scorer, the threshold.

Sides alternate in ABBA order after one warm-up each; the table gives the best wall seconds,
images/s, and predict/bare (goal <= 1.10) on wall and process CPU time. Output is Markdown.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import datetime as _dt
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from skimage import data as skdata
from torch.utils.data import DataLoader

import featstore
from benchmarks.machine import cpu_model, load_average, mem_total_gib
from featstore.extraction.datasets import RowSource, TransformedRows, _open_image, build_transform
from featstore.extraction.extract import ExtractOptions, extract
from featstore.extraction.extract_images import image_paths
from featstore.extraction.models import load_model

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")


def write_crops(root: Path, n: int, seed: int, by_class: bool = False) -> Path:
    """`n` 96x96 crops of the photographs at random offsets, as PNG files (in one folder per
    photograph with `by_class`: an ImageFolder of 4 classes)."""
    rng = np.random.default_rng(seed)
    for k in range(n):
        photo = PHOTOS[k % len(PHOTOS)]
        image = getattr(skdata, photo)()
        y = int(rng.integers(0, image.shape[0] - 96))
        x = int(rng.integers(0, image.shape[1] - 96))
        out = root / photo if by_class else root
        out.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(image[y:y + 96, x:x + 96, :3])).save(
            out / f"{k:04d}.png")
    return root


def spec_text(root: Path, crop: int) -> str:
    lines = ["[transform]", f"resize = {crop + 8}", f"crop = {crop}",
             "mean = [0.485, 0.456, 0.406]", "std = [0.229, 0.224, 0.225]"]
    for name, folder in (("id/train", "train"), ("id/val", "val")):
        lines += ["", "[[split]]", f'name = "{name}"',
                  f'source = {{ imagefolder = "{root / folder}" }}']
    return "\n".join(lines) + "\n"


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall s, process CPU s) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--crop", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scorers", default="msp,vim,knn")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # resnet18 without trained weights: said once below
    tmp = Path(tempfile.mkdtemp(prefix="bench_predict_"))
    weights = tmp / "resnet18.pt"
    torch.save(torchvision.models.resnet18(num_classes=len(PHOTOS)).state_dict(), weights)
    for split, seed in (("train", 1), ("val", 2)):
        write_crops(tmp / split, 96, seed, by_class=True)
    folder = write_crops(tmp / "new", args.images, 3)
    (tmp / "spec.toml").write_text(spec_text(tmp, args.crop))
    store = extract("resnet18", tmp / "spec.toml", tmp / "store", weights=weights,
                    options=ExtractOptions(device=args.device, batch_size=args.batch_size,
                                           num_workers=0, progress=False))
    device = torch.device(args.device)
    loaded = load_model("resnet18", weights)
    loaded.module.to(device)
    transform = store.provenance["transform"]
    paths = [str(p) for p in image_paths(folder)]
    rows = RowSource(paths, np.full(len(paths), -1), lambda i: _open_image(Path(paths[i])),
                     {})
    dataset = TransformedRows(rows, build_transform(transform), (3, args.crop, args.crop))

    def bare() -> None:
        with torch.inference_mode():
            for images, *_ in DataLoader(dataset, batch_size=args.batch_size, num_workers=0):
                loaded.module(images.to(device)).float().cpu().numpy()

    print(f"### Detector.score_images vs the bare forward ({_dt.date.today()})\n")
    print(f"- command: `python -m benchmarks.bench_predict {' '.join(sys.argv[1:])}`".rstrip())
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
          f"load average at start {load_average()}")
    print(f"- software: Python {platform.python_version()}, torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}, NumPy {np.__version__}")
    print(f"- data: {args.images} PNG crops 96x96 -> {args.crop}x{args.crop}; resnet18 "
          f"(random weights, D=512, C=4); batch {args.batch_size}; device {args.device}; "
          f"{args.threads} threads; best of {args.repeat} ABBA rounds\n")
    print("| scorer | side | best wall s | images/s | predict/bare wall | predict/bare CPU |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.scorers.split(","):
        det = featstore.Detector.fit(store, name)
        det = featstore.Detector.load(det.save(tmp / f"{name}.h5"))
        det.score_images(folder, device=args.device, batch_size=args.batch_size)  # warm-up
        bare()
        sides: dict[str, list[tuple[float, float]]] = {"bare": [], "predict": []}
        for r in range(args.repeat):
            order = ("bare", "predict") if r % 2 == 0 else ("predict", "bare")
            for side in order:
                fn = bare if side == "bare" else (
                    lambda d=det: d.score_images(folder, device=args.device,
                                                 batch_size=args.batch_size))
                sides[side].append(timed(fn))
        best = {s: min(v) for s, v in sides.items()}
        ratio_wall = best["predict"][0] / best["bare"][0]
        ratio_cpu = min(c for _, c in sides["predict"]) / min(c for _, c in sides["bare"])
        print(f"| {name} | bare | {best['bare'][0]:.3f} | {args.images / best['bare'][0]:.0f} "
              "| 1 | 1 |")
        print(f"| | predict | {best['predict'][0]:.3f} | "
              f"{args.images / best['predict'][0]:.0f} | **{ratio_wall:.3f}** | "
              f"{ratio_cpu:.3f} |")


if __name__ == "__main__":
    main()
