"""The demo, end to end on real bundled data: write the benchmark spec, get the model (cached
in the output directory), extract every split into a store.

ID: digits 0-5 (train / val / test, stratified, seed 0). OOD, each with a val and a test part:
held-out digits 6-9 (`ood/near`), photographs, textures, faces and noise (`ood/far`). CSID:
ID test digits rotated 30 degrees and blurred (`csid/...`).

Two backbones (`BACKBONES`):

- `pretrained` (the default): ImageNet-1k EfficientNet-Lite0, frozen, with a linear head
  trained on digits 0-5 (featstore.workflows.demo.backbone); images generated at 64 px, ImageNet
  mean/std. Training is one forward pass over id/train plus a logistic regression: seconds.
- `scratch`: the small ResNet of featstore.extraction.zoo.demo_resnet trained from scratch on 32 px
digits
  (12 epochs, CPU): what the training-time methods (`demo --methods`) and OSR protocols need,
  a network trained end to end.

`scale` (0 < scale <= 1) shrinks every evaluation split (val / test digit fractions, patch and
noise counts) for quick runs; id/train stays whole, so the model is the same at every scale;
1 is the demo. What the model was made from (backbone, recipe) is recorded in OUT/model.json:
a rerun with the same recipe reuses the model and the extracted splits (a split whose source
changed is re-extracted); a different recipe retrains and replaces the store.
"""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featstore.errors import UsageError
from featstore.extraction.datasets import TransformedRows, build_transform, rows_from_source
from featstore.extraction.extract import ExtractOptions, Progress, extract
from featstore.extraction.zoo import OWN_MODELS, lite0
from featstore.extraction.zoo.demo_resnet import demo_resnet
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec, load_spec
from featstore.store.fileio import atomic_write_output, sha256_file
from featstore.store.store import Store, default_usage
from featstore.training.ce import random_shift, train_ce
from featstore.training.config import TrainConfig
from featstore.workflows.demo import backbone as pretrained
from scorers.threads import user_threads

logger = logging.getLogger(__name__)

ID_CLASSES = [0, 1, 2, 3, 4, 5]
BACKBONES = ("pretrained", "scratch")
DEFAULT_BACKBONE = "pretrained"
#: the scratch ResNet's model spec (the ten-method demo and the scratch mini-Gbench use it)
MODEL_SPEC = OWN_MODELS["scratch"]
MODEL_SPECS = OWN_MODELS
#: `featstore demo --views`: the modules whose outputs `--feature-layers` stores per backbone
#: (EfficientNet-Lite0: the last block of its 40-, 112- and 320-channel stages; the scratch
#: ResNet: its three stages), Gram orders 1..5 and AdaSCALE's o = 0.05 (OpenOOD's defaults)
VIEW_LAYERS = {"pretrained": ("backbone._blocks.4", "backbone._blocks.10", "backbone._blocks.15"),
               "scratch": ("layer1", "layer2", "layer3")}
VIEW_OPTIONS: dict[str, Any] = {"gram_powers": 5, "adascale_o": (0.05,)}
SCRATCH_EPOCHS = 12
PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry"]
TEXTURES = ["brick", "grass", "gravel"]
ID_FRACTIONS = {"train": 0.6, "val": 0.15, "test": 0.25}
_OOD_FRACTIONS = {"val": 0.3, "test": 0.7}
_TRANSFORMS: dict[str, dict[str, Any]] = {
    "scratch": {"resize": 32, "crop": 32, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
    "pretrained": lite0.TRANSFORM,
}
_CSID = (("rotate30", {"rotate": 30}), ("blur1", {"blur": 1.0}))
#: (group, name, source) of the OOD splits; counts and val / test fractions scale with `scale`
_OOD_SPLITS: list[tuple[str, str, dict]] = [
    ("near", "digits6to9", {"builtin": "digits", "classes": [6, 7, 8, 9],
                            "fractions": _OOD_FRACTIONS}),
    ("far", "photos", {"builtin": "patches", "images": PHOTOS, "count": 40}),
    ("far", "textures", {"builtin": "patches", "images": TEXTURES, "count": 80}),
    ("far", "faces", {"builtin": "faces", "fractions": _OOD_FRACTIONS}),
    ("far", "noise", {"builtin": "noise", "kind": "gaussian", "count": 200}),
]


def check_backbone(backbone: str) -> str:
    if backbone not in BACKBONES:
        raise UsageError(f"--backbone {backbone!r}: expected one of {', '.join(BACKBONES)}")
    return backbone


def demo_threads() -> int:
    """Torch's thread count for the demo's and mini-Gbench's training and extraction:
    $FEATSTORE_THREADS when set (`scorers.threads.user_threads`), else every CPU
    (`os.cpu_count()`). Never the machine's load: training's sums, hence its weights' bits,
    depend on the count."""
    return user_threads() or max(1, os.cpu_count() or 1)


def check_scale(scale: float) -> float:
    if not 0.0 < scale <= 1.0:
        raise UsageError(f"--scale {scale!r}: expected a fraction of the demo's images in "
                         "(0, 1]")
    return float(scale)


def scaled_source(source: dict[str, Any], backbone: str, scale: float = 1.0) -> dict[str, Any]:
    """A builtin source for `backbone` (the pretrained one generates 64 px images) with its
    counts and its val / test fractions multiplied by `scale` (unchanged at 1). The train
    fraction is kept, so id/train (and the model trained on it) is the same at every scale:
    the feature-space scorers' fits need its 650 rows (ViM's default 512-dim principal space
    at D = 1280 needs more than 512)."""
    out = dict(source)
    if scale != 1.0:
        if out["builtin"] in ("digits", "faces"):
            default = ID_FRACTIONS if out["builtin"] == "digits" else _OOD_FRACTIONS
            out["fractions"] = {k: v if k == "train" else round(v * scale, 6)
                                for k, v in out.get("fractions", default).items()}
        if "count" in out:
            out["count"] = max(1, round(out["count"] * scale))
    if backbone == "pretrained":
        out["size"] = lite0.INPUT_SIZE
    return out


def demo_transform(backbone: str = "scratch") -> dict[str, Any]:
    """The spec's [transform] for `backbone`."""
    t = _TRANSFORMS[check_backbone(backbone)]
    return {k: t[k] for k in ("resize", "crop", "mean", "std")}


def demo_id_splits(backbone: str = "scratch", scale: float = 1.0) -> list[SplitSpec]:
    """The spec's ID (train / val / test) and CSID splits for `backbone`."""
    id_source = {"builtin": "digits", "classes": ID_CLASSES}
    splits = [SplitSpec(f"id/{part}", part,
                        scaled_source({**id_source, "part": part}, backbone, scale))
              for part in ("train", "val", "test")]
    for name, shift in _CSID:
        src = scaled_source({**id_source, "part": "test", **shift}, backbone, scale)
        splits.append(SplitSpec(f"csid/{name}", default_usage(f"csid/{name}"), src))
    return splits


def demo_spec(backbone: str = "scratch", scale: float = 1.0) -> BenchmarkSpec:
    """The demo's benchmark spec for `backbone`; val parts have `usage = "val"`. (The default
    stays the scratch ResNet's spec: the ten-method demo's.)"""
    splits = demo_id_splits(backbone, scale)
    for group, name, source in _OOD_SPLITS:
        for part in ("val", "test"):
            split = f"ood/{group}/{name}" + ("_val" if part == "val" else "")
            splits.append(SplitSpec(split, part,
                                    scaled_source({**source, "part": part}, backbone, scale)))
    return BenchmarkSpec(None, splits, demo_transform(backbone),
                         [str(c) for c in ID_CLASSES]).validated()


def spec_comment(backbone: str, title: str = "featstore demo benchmark") -> str:
    """The first line of a written demo spec."""
    which = "" if backbone == "scratch" else f" ({backbone} backbone)"
    return f"{title}{which}: real bundled data, generated offline."


def demo_spec_text(backbone: str = "scratch", scale: float = 1.0) -> str:
    """The demo's benchmark spec as the TOML written to OUT/spec.toml."""
    return demo_spec(backbone, scale).to_toml(spec_comment(backbone))


def id_train_tensors(spec_path: BenchmarkSpec | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (N, 3, 32, 32), labels (N,)) of the spec's id/train split, transformed as the
    spec says: what the demo's ResNets train on."""
    spec = spec_path if isinstance(spec_path, BenchmarkSpec) else load_spec(spec_path)
    train = next(s for s in spec.splits if s.name == "id/train")
    rows = rows_from_source(train.source)
    data = TransformedRows(rows, build_transform(spec.transform), (3, 32, 32))
    return torch.stack([data[i][0] for i in range(len(data))]), torch.as_tensor(rows.labels)


def train_demo_model(spec_path: BenchmarkSpec | Path, out_file: Path, epochs: int = 12,
                     progress: Progress | None = None) -> dict:
    """Train the demo ResNet on id/train of the spec and save its state dict atomically;
    `progress(name, done, total)` (optional) is told each finished epoch."""
    images, labels = id_train_tensors(spec_path)
    torch.manual_seed(0)
    model = demo_resnet(len(ID_CLASSES))
    config = TrainConfig(epochs=epochs, batch_size=64, lr=0.01, seed=0, nesterov=True,
                         schedule="onecycle")
    history = train_ce(
        model, images, labels, config,
        on_epoch=lambda e, loss, acc: _epoch_done(progress, e, epochs, loss, acc),
        augment=random_shift,
    )
    buffer = io.BytesIO()   # never through a link planted at a fixed temporary name
    torch.save(model.state_dict(), buffer)
    atomic_write_output(out_file, buffer.getvalue())
    return {"epochs": epochs, "final_loss": history[-1][0], "final_train_acc": history[-1][1]}


def _epoch_done(progress: Progress | None, epoch: int,
                epochs: int, loss: float, acc: float) -> None:
    if progress is not None:
        progress("train demo ResNet (epochs)", epoch + 1, epochs)
    logger.info(f"  epoch {epoch + 1:2d}/{epochs}  loss {loss:.3f}  train acc {acc:.1f}%")


def model_recipe(backbone: str, epochs: int = SCRATCH_EPOCHS) -> dict[str, Any]:
    """What the demo's model is made from (id/train is the same at every scale); OUT/model.json
    records it."""
    recipe: dict[str, Any] = {"backbone": backbone, "model": MODEL_SPECS[backbone],
                              "train_split": "digits 0-5, part train, fraction 0.6, seed 0"}
    if backbone == "pretrained":
        recipe.update(head="logistic regression", C=pretrained.HEAD_C,
                      imagenet_weights_sha256=sha256_file(lite0.imagenet_weights_path()))
    else:
        recipe.update(epochs=epochs, batch_size=64, lr=0.01, seed=0)
    return recipe


def ensure_model(spec_path: BenchmarkSpec | Path, weights: Path, backbone: str,
                 recipe: dict[str, Any], *, epochs: int = SCRATCH_EPOCHS,
                 progress: Progress | None = None) -> bool:
    """Train `backbone`'s model on the spec's id/train into `weights` unless `weights` and its
    recipe record (`weights` with suffix .json) already match `recipe`; True if trained."""
    record_path = weights.with_suffix(".json")
    record = (json.loads(record_path.read_text(encoding="utf-8"))
              if record_path.is_file() else None)
    if weights.is_file() and record is not None and record.get("recipe") == recipe:
        logger.info(f"reusing the trained model {weights}")
        return False
    if backbone == "pretrained":
        logger.info(f"training a linear head on frozen ImageNet EfficientNet-Lite0 features, "
                    f"digits {ID_CLASSES} (CPU)")
        summary = pretrained.train_pretrained_head(spec_path, weights, len(ID_CLASSES))
    else:
        logger.info(f"training the demo ResNet on digits {ID_CLASSES} ({epochs} epochs, CPU)")
        summary = train_demo_model(spec_path, weights, epochs=epochs,
                                   progress=progress)
    atomic_write_output(record_path, json.dumps({"recipe": recipe, "summary": summary,
                                                 "sha256": sha256_file(weights)}, indent=2))
    return True


def store_model_differs(store: Path, weights: Path) -> bool:
    """A store at `store` made by another checkpoint than `weights` (to be replaced)."""
    manifest = store / "store.json"
    if not manifest.is_file():
        return False
    doc = json.loads(manifest.read_text(encoding="utf-8"))
    return doc.get("model", {}).get("sha256") != sha256_file(weights)


def run_demo(out: Path, *, backbone: str = DEFAULT_BACKBONE, scale: float = 1.0,
             progress: Progress | None = None,
             epochs: int = SCRATCH_EPOCHS, views: bool = False) -> Store:
    """Spec + (cached) model + extraction into OUT/store; returns the opened store. A store
    left in OUT by another model (another backbone or recipe) is replaced. `views`: also the
    layer views and AdaSCALE's perturbed features (`VIEW_LAYERS`, `VIEW_OPTIONS`), for
    mds_ensemble, gram, featurenorm, oodl's `layer` and adascale_a / adascale_l."""
    check_backbone(backbone)
    scale = check_scale(scale)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "spec.toml"
    spec = demo_spec(backbone, scale)
    text = spec.to_toml(spec_comment(backbone))
    if not spec_path.is_file() or spec_path.read_text(encoding="utf-8") != text:
        atomic_write_output(spec_path, text)
    spec.path = spec_path
    weights = out / "model.pt"
    torch.set_num_threads(demo_threads())
    ensure_model(spec, weights, backbone, model_recipe(backbone, epochs),
                 epochs=epochs, progress=progress)
    store = out / "store"
    extra: dict[str, Any] = ({"feature_layers": VIEW_LAYERS[backbone], **VIEW_OPTIONS}
                             if views else {})
    opts = ExtractOptions(device="cpu", batch_size=128, num_workers=0,
                          overwrite=store_model_differs(store, weights), **extra)
    if opts.overwrite:
        logger.info(f"replacing {store}: it was extracted with another model")
    return extract(MODEL_SPECS[backbone], spec, store, weights=weights, options=opts,
                   progress=progress)


def id_test_accuracy(store: Store) -> float:
    split = store.split("id/test")
    return float((np.asarray(split.logits).argmax(1) == np.asarray(split.labels)).mean() * 100)
