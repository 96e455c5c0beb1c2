"""Mini-Gbench: the widest set of OOD splits the demo's real bundled data allows, for Gscore.

The paper's Gbench (Zhang, Deng & Zheng) is 200 real OOD datasets; what installs offline here
is scikit-learn's digits, scikit-image's photographs/textures and LFW faces, so the mini-Gbench
makes every available source its own OOD set (44 sets, easy to hard):

- `ood/near/digit6` ... `digit9`: each held-out digit class on its own (all of its rows);
- `ood/photo/<name>`: random 96 px crops of one scikit-image image each (astronaut, coffee,
  chelsea, rocket, hubble_deep_field, immunohistochemistry, camera, coins, moon, page, text,
  clock, horse, retina, cell, microaneurysms, logo, colorwheel, checkerboard,
  shepp_logan_phantom) and `ood/texture/<name>` (brick, grass, gravel); `cat` is the same
  picture as chelsea and `binary_blobs` is random per call, so both are left out; the other
  scikit-image data need pooch downloads and are unavailable offline;
- `ood/faces/lfw`: scikit-image's 200 LFW faces;
- `ood/noise/<kind>`: gaussian, uniform and salt-and-pepper noise images;
- `ood/cov/<shift><strength>`: the ID test digits under a covariate shift, as OOD sets:
  rotate 15/30/45/60/90 degrees, Gaussian blur sigma 0.5/1/1.5/2 px, additive Gaussian noise
  std 0.1/0.2/0.3, and inversion. They reuse the id/test images (like CIFAR-10-C is built
  from the CIFAR-10 test set), so a meta-set may hold a digit and its shifted copy.

Backbones (`BACKBONES`, `build_gbench(backbone=...)`, `featstore gscore gbench --backbone`):
`pretrained` (the default: the demo's frozen ImageNet EfficientNet-Lite0 with a linear head on
digits 0-5, 64 px images; featstore.workflows.demo.backbone), `scratch` (the demo's small ResNet
trained from scratch, 32 px), and for the cross-store evaluation `w8`, `w32` (the scratch ResNet at
width 8 / 32, trained with the same recipe and seed 1). The ID splits (digits 0-5, train / val
/ test, seed 0) and the transform are the demo's for the same backbone, so the checkpoint of
`featstore demo --backbone B` (`runs/demo/model.pt`) applies as is; without one it is trained
once with the demo's recipe (`featstore.workflows.demo.pipeline.ensure_model`).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from featstore.errors import InputError, UsageError
from featstore.extraction.extract import ExtractOptions, Progress, extract
from featstore.extraction.zoo.demo_resnet import DemoResNet
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec
from featstore.store.fileio import atomic_write_output
from featstore.store.store import Store, default_usage
from featstore.training.ce import random_shift, train_ce
from featstore.training.config import TrainConfig
from featstore.workflows.demo.pipeline import (
    ID_CLASSES,
    MODEL_SPECS,
    SCRATCH_EPOCHS,
    demo_id_splits,
    demo_threads,
    demo_transform,
    ensure_model,
    id_train_tensors,
    model_recipe,
    scaled_source,
    spec_comment,
    store_model_differs,
)

logger = logging.getLogger(__name__)

HELD_OUT_DIGITS = (6, 7, 8, 9)
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
          "immunohistochemistry", "camera", "coins", "moon", "page", "text", "clock", "horse",
          "retina", "cell", "microaneurysms", "logo", "colorwheel", "checkerboard",
          "shepp_logan_phantom")
TEXTURES = ("brick", "grass", "gravel")
NOISE_KINDS = ("gaussian", "uniform", "saltpepper")
COVARIATE: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("rotate", (15, 30, 45, 60, 90)),
    ("blur", (0.5, 1.0, 1.5, 2.0)),
    ("noise", (0.1, 0.2, 0.3)),
    ("invert", (True,)),
)
PATCH_COUNT = 200
NOISE_COUNT = 200


def demo_resnet_w8(num_classes: int = 6) -> DemoResNet:
    """The demo ResNet at width 8 (D = 32): a second backbone for cross-store Gscore."""
    return DemoResNet(num_classes=num_classes, width=8)


def demo_resnet_w32(num_classes: int = 6) -> DemoResNet:
    """The demo ResNet at width 32 (D = 128)."""
    return DemoResNet(num_classes=num_classes, width=32)


#: backbone name -> (extract model spec, the demo backbone whose spec and recipe it uses,
#: model factory for a ResNet width variant (None: the demo's own model), seed)
BACKBONES: dict[str, tuple[str, str, Callable[[int], DemoResNet] | None, int]] = {
    "pretrained": (MODEL_SPECS["pretrained"], "pretrained", None, 0),
    "scratch": (MODEL_SPECS["scratch"], "scratch", None, 0),
    "w8": ("featstore.workflows.demo.gbench:demo_resnet_w8", "scratch", demo_resnet_w8, 1),
    "w32": ("featstore.workflows.demo.gbench:demo_resnet_w32", "scratch", demo_resnet_w32, 1),
}
DEFAULT_BACKBONE = "pretrained"


def _fmt_strength(value: Any) -> str:
    if value is True:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def gbench_splits(patch_count: int = PATCH_COUNT, noise_count: int = NOISE_COUNT,
                  backbone: str = "scratch") -> list[tuple[str, dict[str, Any]]]:
    """Every OOD split of the mini-Gbench as (name, builtin source) for the demo `backbone`
    (pretrained: 64 px images; scratch: 32 px)."""
    out = _gbench_sources(patch_count, noise_count)
    return [(name, scaled_source(source, backbone)) for name, source in out]


def _gbench_sources(patch_count: int, noise_count: int) -> list[tuple[str, dict[str, Any]]]:
    """The OOD splits' sources before the backbone's image size is set."""
    out: list[tuple[str, dict[str, Any]]] = []
    for d in HELD_OUT_DIGITS:
        out.append((f"ood/near/digit{d}", {"builtin": "digits", "classes": [d], "part": "all"}))
    for name in PHOTOS:
        out.append((f"ood/photo/{name}", {"builtin": "patches", "images": [name],
                                          "count": patch_count, "part": "test"}))
    for name in TEXTURES:
        out.append((f"ood/texture/{name}", {"builtin": "patches", "images": [name],
                                            "count": patch_count, "part": "test"}))
    out.append(("ood/faces/lfw", {"builtin": "faces", "part": "all"}))
    for kind in NOISE_KINDS:
        out.append((f"ood/noise/{kind}", {"builtin": "noise", "kind": kind,
                                          "count": noise_count, "part": "test"}))
    for shift, strengths in COVARIATE:
        for value in strengths:
            out.append((f"ood/cov/{shift}{_fmt_strength(value)}",
                        {"builtin": "digits", "classes": list(ID_CLASSES), "part": "test",
                         shift: value}))
    return out


def gbench_spec(only: Sequence[str] | None = None, patch_count: int = PATCH_COUNT,
                noise_count: int = NOISE_COUNT, backbone: str = "scratch") -> BenchmarkSpec:
    """The benchmark spec: the demo's ID splits (not its CSID splits) and the mini-Gbench OOD
    splits for the demo `backbone` (pretrained | scratch; `only`: a subset of OOD split
    names, in that order; unknown names are an error)."""
    splits = dict(gbench_splits(patch_count, noise_count, backbone))
    names = list(splits) if only is None else list(only)
    unknown = [n for n in names if n not in splits]
    if unknown:
        raise UsageError(f"mini-Gbench has no OOD split {unknown[0]!r} "
                         f"(valid: {', '.join(splits)})")
    id_splits = [s for s in demo_id_splits(backbone) if s.role == "id"]
    ood = [SplitSpec(name, default_usage(name), splits[name]) for name in names]
    return BenchmarkSpec(None, id_splits + ood, demo_transform(backbone),
                         [str(c) for c in ID_CLASSES]).validated()


def gbench_spec_text(only: Sequence[str] | None = None, patch_count: int = PATCH_COUNT,
                     noise_count: int = NOISE_COUNT, backbone: str = "scratch") -> str:
    """`gbench_spec` as the TOML written to OUT/spec.toml."""
    return gbench_spec(only, patch_count, noise_count, backbone).to_toml(
        spec_comment(backbone, "featstore mini-Gbench (gscore)"))


def _train_backbone(spec_path: BenchmarkSpec | Path, out_file: Path,
                    factory: Callable[[int], DemoResNet], seed: int, epochs: int) -> None:
    """The demo's training recipe (featstore.workflows.demo.pipeline.train_demo_model) for another
    architecture and seed."""
    images, labels = id_train_tensors(spec_path)
    torch.manual_seed(seed)
    model = factory(len(ID_CLASSES))
    train_ce(model, images, labels,
             TrainConfig(epochs=epochs, batch_size=64, lr=0.01, seed=seed, nesterov=True,
                         schedule="onecycle"),
             on_epoch=lambda e, loss, acc: logger.info(
                 f"  epoch {e + 1:2d}/{epochs}  loss {loss:.3f}  train acc {acc:.1f}%"),
             augment=random_shift)
    buffer = io.BytesIO()   # never through a link planted at a fixed temporary name
    torch.save(model.state_dict(), buffer)
    atomic_write_output(out_file, buffer.getvalue())


def build_gbench(out: str | Path, *, backbone: str = DEFAULT_BACKBONE,
                 weights: str | Path | None = None, epochs: int = SCRATCH_EPOCHS,
                 only: Sequence[str] | None = None,
                 patch_count: int = PATCH_COUNT, noise_count: int = NOISE_COUNT,
                 progress: Progress | None = None,
                 odin_grid: Sequence[tuple[float, float]] = ()) -> Store:
    """Write OUT/spec.toml and extract the mini-Gbench into OUT/store (OUT/spec_<backbone>.toml
    and OUT/store_<backbone> for the other backbones). The checkpoint is `weights` if given,
    else OUT/model.pt (OUT/model_<backbone>.pt), trained once if missing or made by another
    recipe (recorded in the .json beside it). Completed splits are reused; a store made by
    another checkpoint is replaced. `odin_grid`: ODIN-perturbed logits per (T, eps) pair
    extracted too (`gscore gbench --paper`: the paper's ODIN perturbs its input)."""
    if backbone not in BACKBONES:
        raise UsageError(f"backbone {backbone!r}: expected one of {', '.join(BACKBONES)}")
    model_spec, family, factory, seed = BACKBONES[backbone]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if backbone == DEFAULT_BACKBONE else f"_{backbone}"
    spec_path = out / f"spec{suffix}.toml"
    spec = gbench_spec(only, patch_count, noise_count, family)
    text = spec.to_toml(spec_comment(family, "featstore mini-Gbench (gscore)"))
    if not spec_path.is_file() or spec_path.read_text(encoding="utf-8") != text:
        atomic_write_output(spec_path, text)
    spec.path = spec_path
    torch.set_num_threads(demo_threads())
    if weights is None:
        weights = out / f"model{suffix}.pt"
        if factory is None:
            ensure_model(spec, weights, family, model_recipe(family, epochs),
                         epochs=epochs)
        elif not weights.is_file():
            logger.info(f"training the {backbone} ResNet on digits {ID_CLASSES} ({epochs} "
                        "epochs, CPU)")
            _train_backbone(spec, weights, factory, seed, epochs)
        else:
            logger.info(f"reusing the trained model {weights}")
    elif not Path(weights).is_file():
        raise InputError(f"--weights {str(weights)!r}: file not found")
    store = out / f"store{suffix}"
    opts = ExtractOptions(device="cpu", batch_size=128, num_workers=0,
                          overwrite=store_model_differs(store, Path(weights)),
                          odin_grid=tuple((float(t), float(e)) for t, e in odin_grid))
    if opts.overwrite:
        logger.info(f"replacing {store}: it was extracted with another model")
    return extract(model_spec, spec, store, weights=weights, options=opts,
                   progress=progress)
