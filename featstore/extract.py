"""`featstore extract`: one pass of a model over every split of a benchmark spec (DESIGN §6).

For each split the final Linear layer's input (the penultimate feature) and output (the
logits) are captured by a forward hook, streamed in batches to a `SplitWriter` on a background
thread (writing overlaps the next batch's compute), and committed when the split ends. Splits
already complete with the same fingerprint are skipped; an interrupted split resumes from its
last complete part. The store invariant logits == features @ W.T + b holds by construction
(both come from the same Linear call).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from .datasets import TransformedRows, build_transform, rows_from_source
from .errors import FeatstoreError, UsageError
from .extract_extras import ExtraOutputs
from .layout import FEATURE_DTYPES
from .models import LoadedModel, load_model
from .spec import BenchmarkSpec, SplitSpec, load_spec
from .store import Store
from .writer import SplitWriter


@dataclass
class ExtractOptions:
    """Knobs of one extraction run."""

    device: str = "auto"
    dtype: str = "float32"
    batch_size: int = 128
    num_workers: int | None = None
    part_batches: int = 16
    amp: bool = False
    skip_bad: bool = False
    overwrite: bool = False
    progress: bool = True
    # extras (DESIGN §2; featstore.extract_extras): opt-in, off by default
    mc_samples: int = 0
    odin_grid: tuple[tuple[float, float], ...] = ()
    feature_maps: bool = False


Progress = Callable[[str, int, int], None]


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {device!r}: CUDA is not available on this machine")
    if device != "cpu" and not device.startswith("cuda"):
        raise UsageError(f"--device {device!r}: expected auto, cpu or cuda[:N]")
    return torch.device(device)


class HeadHook:
    """Forward hook on the head Linear: keeps its last input (features) and output (logits)."""

    def __init__(self, loaded: LoadedModel):
        self.features: torch.Tensor | None = None
        self.logits: torch.Tensor | None = None
        self.handle = loaded.head.register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        self.features = inputs[0]
        self.logits = output

    def take(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.features is None or self.logits is None:
            raise FeatstoreError("the head layer was not called during the forward pass; name "
                                 "the classifier Linear with --feature-layer")
        feats, logits = self.features, self.logits
        self.features = self.logits = None
        if feats.ndim != 2:
            raise FeatstoreError(f"the head layer's input has shape {tuple(feats.shape)}; "
                                 "expected (batch, D) penultimate features")
        return feats, logits

    def close(self) -> None:
        self.handle.remove()


def open_or_create_store(out: Path, loaded: LoadedModel, classes: list[str] | None,
                         overwrite: bool) -> Store:
    """Open `out` if it holds this model's store, else create it; refuse another model's."""
    weight = loaded.head.weight.detach().cpu().float().numpy()
    bias = loaded.head.bias.detach().cpu().float().numpy()
    if (out / "store.json").is_file() and not overwrite:
        store = Store.open(out, mode="a")
        if store.model_sha256 != loaded.provenance["sha256"]:
            raise UsageError(
                f"store {str(out)!r} was made by another model (sha256 {store.model_sha256[:12]}…"
                f", this one {loaded.provenance['sha256'][:12]}…); pass --overwrite to replace it"
            )
        w_old, b_old = store.head
        if w_old.shape != weight.shape or not (np.array_equal(w_old, weight)
                                               and np.array_equal(b_old, bias)):
            raise UsageError(f"store {str(out)!r}: head {w_old.shape} differs from the model's "
                             f"{weight.shape}; pass --overwrite to replace it")
        return store
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UsageError(f"--out {str(out)!r} exists and is not a featstore store; choose an "
                         "empty path or pass --overwrite")
    return Store.create(out, head=(weight, bias), classes=classes,
                        provenance=loaded.provenance, overwrite=True)


def _fingerprint(split: SplitSpec, loaded: LoadedModel, transform: dict, opts: ExtractOptions,
                 part_rows: int) -> dict[str, Any]:
    return {"source": split.source, "usage": split.usage, "transform": transform,
            "model_sha256": loaded.provenance["sha256"], "dtype": opts.dtype,
            "batch_size": opts.batch_size, "part_rows": part_rows, "skip_bad": opts.skip_bad}


def extract_split(store: Store, split: SplitSpec, loaded: LoadedModel, transform: dict,
                  opts: ExtractOptions, device: torch.device,
                  progress: Progress | None = None) -> None:
    """Extract one split into the store (resuming from complete parts)."""
    rows = rows_from_source(split.source)
    if split.role == "ood":
        rows.labels = np.full(len(rows), -1, dtype=np.int64)
    else:
        num_classes = loaded.head.out_features
        bad = (rows.labels < -1) | (rows.labels >= num_classes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UsageError(f"split {split.name!r}: label {int(rows.labels[i])} of "
                             f"{rows.ids[i]!r} is outside the head's 0..{num_classes - 1}")
    part_rows = opts.batch_size * opts.part_batches
    fp = _fingerprint(split, loaded, transform, opts, part_rows)
    extras = ExtraOutputs(loaded, opts, transform, split.name)
    if extras.config:  # only then: plain extractions keep their fingerprints
        fp["extras"] = extras.config
    fp_digest = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()
    entry = store.manifest["splits"].get(split.name)
    if entry and entry.get("complete") and entry.get("fingerprint") == fp_digest:
        if progress:
            progress(split.name, len(rows), len(rows))
        return
    writer = SplitWriter(store, split.name, part_rows=part_rows, dtype=opts.dtype,
                         usage=split.usage, source=split.source, fingerprint=fp,
                         extra_row_axes=extras.row_axes)
    crop = int(transform["crop"])
    dataset = TransformedRows(rows, build_transform(transform), (3, crop, crop),
                              indices=range(writer.resume_rows, len(rows)))
    workers = opts.num_workers if opts.num_workers is not None else min(4, os.cpu_count() or 1)
    loader = DataLoader(dataset, batch_size=opts.batch_size, shuffle=False,
                        num_workers=workers if len(dataset) > opts.batch_size else 0,
                        pin_memory=device.type == "cuda")
    hook = HeadHook(loaded)
    pool = ThreadPoolExecutor(max_workers=1)
    pending: list[Future] = []
    done = writer.resume_rows
    try:
        for images, labels, index, errors in loader:
            bad = [k for k, e in enumerate(errors) if e]
            if bad and not opts.skip_bad:
                k = bad[0]
                raise UsageError(f"split {split.name!r}: cannot read image "
                                 f"{rows.ids[int(index[k])]!r} ({errors[k]}); fix or remove it, "
                                 "or pass --skip-bad")
            images = images.to(device, non_blocking=True)
            if device.type == "cuda":
                images = images.contiguous(memory_format=torch.channels_last)
            extras.before_forward(images)
            with torch.inference_mode(), torch.autocast(device.type, enabled=opts.amp):
                loaded.module(images)
            feats, logits = hook.take()
            extra = extras.compute(hook, images, feats, logits, int(index[0]))
            keep = np.asarray([not e for e in errors])
            batch = {
                "features": feats.float().cpu().numpy()[keep],
                "logits": logits.float().cpu().numpy()[keep],
                "labels": labels.numpy()[keep],
                "ids": np.asarray([rows.ids[int(i)] for i in index])[keep],
            }
            if extra:
                batch["extras"] = {k: np.compress(keep, v, axis=extras.row_axes.get(k, 0))
                                   for k, v in extra.items()}
            while pending and (pending[0].done() or len(pending) >= 2):
                pending.pop(0).result()
            pending.append(pool.submit(writer.append, **batch))
            done += len(index)
            if progress:
                progress(split.name, done, len(rows))
        for fut in pending:
            fut.result()
        written = set()
        skipped: list[str] = []
        if opts.skip_bad:
            written = set(_written_ids(writer))
            skipped = [i for i in rows.ids if i not in written]
        meta = {"fingerprint": fp_digest, "skipped": skipped, **extras.meta()}
        writer.finish(extra_meta=meta)
    except OSError as exc:
        raise FeatstoreError(f"split {split.name!r}: write error in store {str(store.path)!r}: "
                             f"{exc}; the split stays incomplete and resumes on rerun") from exc
    finally:
        pool.shutdown(wait=True)
        hook.close()
        extras.close()


def _written_ids(writer: SplitWriter) -> list[str]:
    import h5py

    if writer._buffered:
        writer._flush(writer._buffered)
    out: list[str] = []
    for part in writer._part_paths():
        with h5py.File(part, "r") as fh:
            out.extend(fh["ids"].asstr()[()])
    return out


def extract(model: str, spec: str | Path | BenchmarkSpec, out: str | Path, *,
            weights: str | Path | None = None, feature_layer: str | None = None,
            options: ExtractOptions | None = None,
            progress: Progress | None = None) -> Store:
    """Extract every split of `spec` with `model` into the store at `out`; returns it."""
    opts = options or ExtractOptions()
    if opts.dtype not in FEATURE_DTYPES:
        raise UsageError(f"--dtype {opts.dtype!r}: expected one of {', '.join(FEATURE_DTYPES)}")
    if opts.batch_size < 1:
        raise UsageError(f"--batch-size {opts.batch_size}: must be >= 1")
    if opts.mc_samples < 0:
        raise UsageError(f"--mc-samples {opts.mc_samples}: must be >= 0")
    bench = spec if isinstance(spec, BenchmarkSpec) else load_spec(spec)
    device = resolve_device(opts.device)
    loaded = load_model(model, weights, feature_layer=feature_layer)
    loaded.module.to(device)
    transform = {**loaded.transform, **bench.transform}
    loaded.provenance["transform"] = transform
    classes = bench.classes
    if classes is None:
        train = next((s for s in bench.splits if s.name == "id/train"), None)
        if train is not None and "imagefolder" in train.source:
            classes = rows_from_source(train.source).class_names
    if classes is not None and len(classes) != loaded.head.out_features:
        raise UsageError(f"spec lists {len(classes)} classes but the model's head has "
                         f"{loaded.head.out_features} outputs")
    store = open_or_create_store(Path(out), loaded, classes, opts.overwrite)
    for split in bench.splits:
        extract_split(store, split, loaded, transform, opts, device, progress)
    return Store.open(out)
