"""`featstore train`: train a classifier on a benchmark spec's `id/train` split (DESIGN §7).

The trainer is generic; what a method changes (network wrapping, the loss of a step, state
between steps, what the checkpoint holds) lives in a registered `TrainMethod`
(`featstore.training.methods`). The data, optimiser, schedule, seeding, progress and the
checkpoint are the trainer's:

- data: the `id/train` source of the spec (any featstore source: ImageFolder, image list,
  torchvision dataset on disk, builtin generator) through the spec's transform (the
  architecture's eval transform updated by the spec's `[transform]`, exactly what extraction
  applies), decoded once into memory when it fits (`preload`), else streamed by a DataLoader;
  optional augmentation on the transformed tensors: `flip` (horizontal flip with p = 0.5),
  `crop` (zero-pad by size/8 and crop back at a random offset, the CIFAR recipe) or
  `flip+crop`, per sample, drawn from the seeded generator;
- optimiser: SGD; the defaults are the remote-sensing OOD benchmark's stated setting (Wang et
  al. 2024 §2.5: lr 0.01, momentum 0.9, weight decay 5e-4, 100 epochs; no schedule and no
  Nesterov momentum stated, so plain momentum and a constant lr). `nesterov=True` and
  `schedule="cosine"` (a per-step cosine decay from lr to 1e-6, OpenOOD v1.5's `BaseTrainer`:
  `cosine_annealing(step, epochs * len(loader), 1, 1e-6 / lr)`) are explicit options; named
  presets per paper live in `featstore.training.presets`;
- determinism: `torch.manual_seed(seed)` before the model is built, one `torch.Generator`
  seeded with `seed` for the epoch permutations and augmentation, another (seed + 1) for the
  method's own randomness; on CUDA cuDNN runs in deterministic mode. Same seed, same data and
  same device give the same checkpoint;
- warm start: `init` (CLI `--init`) loads the weights of the plain model (e.g. a `ce`
  checkpoint) strictly into the backbone before the method wraps it, to fine-tune it with a
  training-time method; the method's parameter groups come from `TrainMethod.param_groups`
  (G-ODIN: h without weight decay);
- checkpoint: `torch.save({"state_dict", "method", "arch", "num_classes", "head_layout",
  "config", "transform", "classes", "history", "featstore_version"})`, plain tensors, strings
  and numbers only, so it loads with `torch.load(weights_only=True)` and is directly usable by
  `featstore extract --model ARCH --weights CKPT` (the loader unwraps `state_dict`). Written to
  a temporary file and renamed: an interrupted run leaves no checkpoint.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from featstore.errors import InputError, UsageError
from featstore.extraction.datasets import (
    RowSource,
    TransformedRows,
    build_transform,
    rows_from_source,
)
from featstore.extraction.heads import find_head
from featstore.extraction.models import (
    build_torchvision,
    default_transform,
    import_callable,
    load_checked,
    load_state_dict_file,
    resolve_device,
    torchvision_default_transform,
)
from featstore.specs.benchmark import BenchmarkSpec, load_spec
from featstore.store.fileio import atomic_write_output
from featstore.training.config import TrainConfig
from featstore.training.loop import run_epochs
from featstore.training.methods import TrainContext, get_method
from featstore.version import __version__

PRELOAD_LIMIT_BYTES = 2 * 1024**3

TrainProgress = Callable[[dict[str, Any]], None]


def build_model(arch: str, num_classes: int) -> tuple[nn.Module, dict[str, Any]]:
    """A freshly initialised model with a `num_classes` head and its default eval transform."""
    if ":" in arch and not Path(arch).exists():
        model = import_callable(arch, num_classes)
        _, head = find_head(model)
        if head.out_features != num_classes:
            raise UsageError(f"--arch {arch!r} built a head with {head.out_features} outputs; "
                             f"{num_classes} classes need a callable taking num_classes=")
        return model, default_transform()
    if arch in set(torchvision.models.list_models()):
        return build_torchvision(arch, num_classes), torchvision_default_transform(arch)
    raise UsageError(f"--arch {arch!r}: not a torchvision architecture or a module:callable "
                     "(e.g. resnet18, featstore.extraction.zoo.demo_resnet:demo_resnet)")


def _train_rows(bench: BenchmarkSpec) -> RowSource:
    split = next((s for s in bench.splits if s.name == "id/train"), None)
    if split is None:
        where = f" {str(bench.path)!r}" if bench.path else ""
        raise UsageError(f"spec{where} has no id/train split to train on")
    return rows_from_source(split.source)


def _num_classes(bench: BenchmarkSpec, rows: RowSource, given: int | None) -> int:
    if (rows.labels < 0).any():
        raise UsageError(f"id/train: {int((rows.labels < 0).sum())} rows have no class label "
                         "(-1); training needs a label for every row")
    n = given or (len(bench.classes) if bench.classes else None) or (
        len(rows.class_names) if rows.class_names else None) or int(rows.labels.max()) + 1
    if int(rows.labels.max()) >= n:
        raise UsageError(f"id/train: label {int(rows.labels.max())} does not fit {n} classes")
    return int(n)


class _Data:
    """The training rows as transformed tensors: preloaded, or decoded per batch."""

    def __init__(self, rows: RowSource, transform: dict[str, Any], preload: bool | None,
                 num_workers: int):
        crop = int(transform["crop"])
        self.rows = rows
        self.dataset = TransformedRows(rows, build_transform(transform), (3, crop, crop))
        self.labels = torch.as_tensor(rows.labels, dtype=torch.long)
        size = len(rows) * 3 * crop * crop * 4
        self.preload = size <= PRELOAD_LIMIT_BYTES if preload is None else preload
        self.num_workers = num_workers
        self.images: torch.Tensor | None = None
        if self.preload:
            self.images = torch.stack([self._item(i) for i in range(len(rows))])

    def _item(self, i: int) -> torch.Tensor:
        tensor, _, row, error = self.dataset[i]
        if error:
            raise InputError(f"id/train: cannot read {self.rows.ids[row]!r}: {error}")
        return tensor

    def batches(self, order: torch.Tensor, batch_size: int):
        chunks = [order[s:s + batch_size] for s in range(0, len(order), batch_size)]
        if self.images is not None:
            for idx in chunks:
                yield self.images[idx], self.labels[idx]
            return
        loader = torch.utils.data.DataLoader(
            self.dataset, batch_sampler=[c.tolist() for c in chunks],
            num_workers=self.num_workers)
        for x, y, index, errors in loader:
            bad = [e for e in errors if e]
            if bad:
                row = int(index[[bool(e) for e in errors].index(True)])
                raise InputError(f"id/train: cannot read {self.rows.ids[row]!r}: {bad[0]}")
            yield x, y.long()


def augment_batch(x: torch.Tensor, kind: str, gen: torch.Generator) -> torch.Tensor:
    """Per-sample horizontal flip (p = 0.5) and/or pad-and-random-crop (pad = size // 8)."""
    if kind == "none":
        return x
    x = x.clone()
    n = x.shape[0]
    if "flip" in kind:
        flip = torch.rand(n, generator=gen) < 0.5
        x[flip] = x[flip].flip(-1)
    if "crop" in kind:
        h, w = x.shape[-2:]
        pad = max(1, min(h, w) // 8)
        padded = F.pad(x, (pad, pad, pad, pad))
        offsets = torch.randint(0, 2 * pad + 1, (n, 2), generator=gen)
        x = torch.stack([padded[i, :, int(dy):int(dy) + h, int(dx):int(dx) + w]
                         for i, (dy, dx) in enumerate(offsets)])
    return x


def train(method: str = "ce", arch: str = "resnet18",
          spec: str | Path | BenchmarkSpec | None = None, out: str | Path = "model.pt",
          config: TrainConfig | None = None, num_classes: int | None = None,
          progress: TrainProgress | None = None) -> Path:
    """Train `arch` with `method` on the spec's id/train split; write the checkpoint to `out`.

    `progress` (optional) is called after every step with a dict: epoch, epochs, batch,
    batches, loss (running mean of the epoch), acc (running train accuracy, %), lr and the
    method's metrics. Returns the checkpoint path."""
    config = config or TrainConfig()
    config.validate()
    if spec is None:
        raise UsageError("train: a benchmark spec is required (--spec)")
    trainer_method = get_method(method)
    params = trainer_method.resolve_params(config.method_params)
    bench = spec if isinstance(spec, BenchmarkSpec) else load_spec(spec)
    rows = _train_rows(bench)
    n_classes = _num_classes(bench, rows, num_classes)
    device = _training_device(config.device)

    torch.manual_seed(config.seed)
    backbone, default_tf = build_model(arch, n_classes)
    if config.init is not None:
        _load_init(backbone, config.init)
    transform = {**default_tf, **bench.transform}
    data = _Data(rows, transform, config.preload, config.num_workers)
    gen = torch.Generator().manual_seed(config.seed)
    method_gen = torch.Generator().manual_seed(config.seed + 1)
    ctx = TrainContext(config=config, params=params, device=device, generator=method_gen,
                       num_classes=n_classes, spec=bench, transform=transform)
    model = trainer_method.wrap(backbone, ctx).to(device)
    trainer_method.prepare(model, ctx)
    history = run_epochs(model, trainer_method, ctx, config,
                         lambda order: data.batches(order, config.batch_size), len(rows), gen,
                         augment=lambda x, g: augment_batch(x, config.augment, g),
                         progress=progress)
    checkpoint = {
        "state_dict": trainer_method.export(model),
        "method": trainer_method.name,
        "arch": arch,
        "num_classes": n_classes,
        "head_layout": trainer_method.head_layout(model),
        "config": {**asdict(config), "method_params": params},
        "transform": transform,
        "classes": [str(c) for c in (bench.classes or rows.class_names or [])],
        "history": history,
        "featstore_version": __version__,
    }
    return _save_atomically(checkpoint, Path(out))


def _training_device(name: str) -> torch.device:
    """The device of `--device`; on CUDA, cuDNN in deterministic mode (same seed, same
    checkpoint)."""
    device = resolve_device(name)
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return device


def _save_atomically(checkpoint: dict[str, Any], out: Path) -> Path:
    """torch.save into memory, then `atomic_write_output` (a unique exclusive no-follow
    temporary, fsync, rename): an interrupted run leaves no checkpoint, and a link planted at
    the name or at a temporary name is never written through."""
    out.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    atomic_write_output(out, buffer.getvalue())
    return out


def _load_init(backbone: nn.Module, init: str) -> None:
    """Load warm-start weights strictly into the unwrapped backbone."""
    result = load_checked(backbone, load_state_dict_file(Path(init), "--init"),
                          f"--init {init!r}")
    bad = list(result.missing_keys) + list(result.unexpected_keys)
    if bad:
        raise UsageError(f"--init {init!r} does not fit the backbone (keys {bad[:5]}); pass "
                         "the weights of the plain model, e.g. a `ce` checkpoint")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A featstore training checkpoint (weights_only=True); UsageError if it is not one."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"checkpoint {str(path)!r}: file not found")
    obj = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(obj, dict) or "state_dict" not in obj or "arch" not in obj:
        raise InputError(f"checkpoint {str(path)!r}: not a featstore training checkpoint")
    return obj


def train_accuracy(history: list[list[float]]) -> float:
    """Final-epoch training accuracy (%) from a checkpoint's history."""
    return float(np.asarray(history, dtype=np.float64)[-1, 1]) if history else float("nan")
