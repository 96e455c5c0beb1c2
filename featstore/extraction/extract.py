"""`featstore extract`: one pass of a model over every split of a benchmark spec (DESIGN §6).

For each split the head Linear's input (the penultimate feature) is captured by a forward
hook and the model's forward output is the logits, checked on every batch against the head's
output (or, without a head, the feature layer's output and the model's logits:
featstore.extraction.outputs), streamed in batches to a `SplitWriter` on a background
thread (writing overlaps the next batch's compute) as part files of `batch_size * part_batches`
rows, and assembled and committed when every part exists. Splits already complete with the
same fingerprint are skipped; an interrupted split resumes by extracting its missing parts.
Under torchrun the parts of every split are sharded across the ranks and rank 0 assembles
(featstore.extraction.distributed); the store is the same bytes as a single process's. The store
invariant logits == features @ W.T + b holds by construction (both come from the same Linear
call, whose output the model returns).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader

from featstore.errors import FeatstoreError, FeatstoreWarning, InputError, UsageError
from featstore.extraction import distributed
from featstore.extraction.classmap import check_class_list, map_folders
from featstore.extraction.datasets import (
    TRANSFORM_ERROR,
    RowSource,
    TransformedRows,
    balance_id_ood,
    build_transform,
    rows_from_source,
)
from featstore.extraction.distributed import Context
from featstore.extraction.extract_extras import ExtraOutputs
from featstore.extraction.models import LoadedModel, load_model, resolve_device
from featstore.extraction.outputs import (
    LayerHook,
    check_rows,
    head_arrays,
    resolve_layers,
    run_model,
)
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec, load_spec
from featstore.store.fileio import make_real_dir
from featstore.store.layout import FEATURE_DTYPES
from featstore.store.lock import StoreLock
from featstore.store.sanity import id_checks, warnings_of
from featstore.store.store import MANIFEST, Store, is_own_layout
from featstore.store.writer import SplitWriter, wait_for


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
    # extras (DESIGN §2; featstore.extraction.extract_extras): opt-in, off by default
    mc_samples: int = 0
    odin_grid: tuple[tuple[float, float], ...] = ()
    feature_maps: bool = False
    feature_layers: tuple[str, ...] = ()
    gram_powers: int = 0
    adascale_o: tuple[float, ...] = ()


Progress = Callable[[str, int, int], None]


def open_or_create_store(out: Path, loaded: LoadedModel, classes: list[str] | None,
                         overwrite: bool) -> Store:
    """Open `out` if it holds this model's store, else create it; refuse another model's.
    The caller holds the store lock (featstore.store.lock)."""
    head = head_arrays(loaded)
    if os.path.lexists(out / MANIFEST) and not overwrite:
        store = Store.open(out, mode="a")
        if store.model_sha256 != loaded.provenance["sha256"]:
            raise UsageError(
                f"store {str(out)!r} was made by another model (sha256 {store.model_sha256[:12]}…"
                f", this one {loaded.provenance['sha256'][:12]}…)", change={"overwrite": True},
                effect="to replace it")
        if store.has_head != (head is not None):
            raise UsageError(f"store {str(out)!r} was extracted "
                             f"{'with' if store.has_head else 'without'} a head (W, b), this "
                             f"run {'with' if head is not None else 'without'}",
                             change={"overwrite": True}, effect="to replace it")
        if head is not None:
            (w_old, b_old), (weight, bias) = store.head, head
            if w_old.shape != weight.shape or not (np.array_equal(w_old, weight)
                                                   and np.array_equal(b_old, bias)):
                raise UsageError(f"store {str(out)!r}: head {w_old.shape} differs from the "
                                 f"model's {weight.shape}", change={"overwrite": True},
                                 effect="to replace it")
        return store
    if not is_own_layout(out):
        raise UsageError("exists and is not a featstore store, which is never replaced: choose "
                         "an empty or new path", param="out", value=out)
    # a featstore store (with overwrite), an empty directory, or an unfinished creation
    # (killed between model.h5 and store.json): Store.create replaces only the store's files
    return Store.create(out, head=head, classes=classes, provenance=loaded.provenance,
                        overwrite=True, dims=(loaded.num_classes, loaded.feature_dim))


def lock_out(out: Path) -> StoreLock:
    """Create `out` if needed (a real directory, not a link to one) and take its lock."""
    if os.path.lexists(out) and not out.is_dir():
        raise UsageError("exists and is not a directory", param="out", value=out)
    make_real_dir(out, "output directory") if not out.exists() else None
    lock = StoreLock(out, command="featstore extract")
    lock.acquire()
    return lock


def _fingerprint(split: SplitSpec, loaded: LoadedModel, transform: dict, opts: ExtractOptions,
                 part_rows: int) -> dict[str, Any]:
    return {"source": split.source, "usage": split.usage, "transform": transform,
            "model_sha256": loaded.provenance["sha256"], "dtype": opts.dtype,
            "batch_size": opts.batch_size, "part_rows": part_rows, "skip_bad": opts.skip_bad}


@dataclass
class SplitJob:
    """One split to extract: its rows, its fingerprint and the parts layout."""

    split: SplitSpec
    rows: RowSource
    fingerprint: dict[str, Any]
    digest: str
    part_rows: int
    extra_row_axes: dict[str, int]

    def writer(self, store: Store, opts: ExtractOptions, manage: bool,
               fs_wait_s: float = 0.0) -> SplitWriter:
        return SplitWriter(store, self.split.name, part_rows=self.part_rows, dtype=opts.dtype,
                           usage=self.split.usage, source=self.split.source,
                           fingerprint=self.fingerprint, num_rows=len(self.rows),
                           extra_row_axes=self.extra_row_axes, manage=manage,
                           fs_wait_s=fs_wait_s)


def plan_split(split: SplitSpec, loaded: LoadedModel, transform: dict,
               opts: ExtractOptions) -> SplitJob:
    """Read a split's row list, check its labels and compute its fingerprint."""
    rows = rows_from_source(split.source)
    if split.role == "ood":
        rows.labels = np.full(len(rows), -1, dtype=np.int64)
    else:
        if split.label_map is not None and split.label_map != list(range(len(split.label_map))):
            rows.labels = np.asarray(split.label_map, dtype=np.int64)[rows.labels]
        num_classes = loaded.num_classes
        bad = (rows.labels < -1) | (rows.labels >= num_classes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UsageError(f"split {split.name!r}: label {int(rows.labels[i])} of "
                             f"{rows.ids[i]!r} is outside the head's 0..{num_classes - 1}")
    part_rows = opts.batch_size * opts.part_batches
    fp = _fingerprint(split, loaded, transform, opts, part_rows)
    if split.label_map is not None and split.label_map != list(range(len(split.label_map))):
        fp["label_map"] = split.label_map  # only then: identity maps keep old fingerprints
    extras = ExtraOutputs(loaded, opts, transform, split.name)
    if extras.config:  # only then: plain extractions keep their fingerprints
        fp["extras"] = extras.config
    digest = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()
    return SplitJob(split, rows, fp, digest, part_rows, extras.row_axes)


def is_complete(store: Store, job: SplitJob) -> bool:
    """Whether the store holds the split complete under the same fingerprint, and its file
    is the one committed (present, a regular file, its size and sha256: Store.check_committed;
    the sha256 is recomputed only when the file's stat changed since it was recorded). A
    missing, truncated or damaged split file makes the split be extracted again."""
    entry = store.manifest["splits"].get(job.split.name)
    if not (entry and entry.get("complete") and entry.get("fingerprint") == job.digest):
        return False
    try:
        store.check_committed(job.split.name)
    except FeatstoreError:
        return False
    return True


def loader_workers(workers: int, rows: int, opts: ExtractOptions) -> int:
    """DataLoader processes for `rows` rows: `--workers` as given when the user set it; by
    default none for work of at most one batch (starting worker processes costs more than
    decoding one batch in-process; the rows are the same either way)."""
    if opts.num_workers is not None:
        return opts.num_workers
    return workers if rows > opts.batch_size else 0


def extract_parts(writer: SplitWriter, job: SplitJob, parts: range, loaded: LoadedModel,
                  transform: dict, opts: ExtractOptions, device: torch.device,
                  progress: Progress | None = None, workers_default: int | None = None) -> None:
    """Extract the parts of `parts` that have no part file yet (featstore.store.writer)."""
    split, rows = job.split, job.rows
    indices = [i for k in writer.missing_parts(parts) for i in range(*writer.part_bounds(k))]
    total = sum(stop - start for start, stop in map(writer.part_bounds, parts))
    done = total - len(indices)
    if progress:
        progress(split.name, done, total)
    if not indices:
        return
    crop = int(transform["crop"])
    dataset = TransformedRows(rows, build_transform(transform), (3, crop, crop),
                              indices=indices)
    workers = opts.num_workers if opts.num_workers is not None else (
        workers_default if workers_default is not None else min(4, os.cpu_count() or 1))
    # part_rows is a multiple of the batch size and only the split's last part can be short,
    # so these batches are exactly those of an uninterrupted single-process run
    loader = DataLoader(dataset, batch_size=opts.batch_size, shuffle=False,
                        num_workers=loader_workers(workers, len(dataset), opts),
                        pin_memory=device.type == "cuda")
    extras = ExtraOutputs(loaded, opts, transform, split.name)
    hook = LayerHook(loaded)
    hook.where = f"split {split.name!r}"
    pool = ThreadPoolExecutor(max_workers=1)
    pending: list[Future] = []
    try:
        for images, labels, index, errors in loader:
            bad = [k for k, e in enumerate(errors) if e]
            transform_failed = [k for k in bad if errors[k].startswith(TRANSFORM_ERROR)]
            if transform_failed:
                k = transform_failed[0]
                raise InputError(f"split {split.name!r}: the [transform] {transform} fails on "
                                 f"image {rows.ids[int(index[k])]!r} "
                                 f"({errors[k][len(TRANSFORM_ERROR):]}); fix the spec's "
                                 "[transform]")
            if bad and not opts.skip_bad:
                k = bad[0]
                raise InputError(f"split {split.name!r}: cannot read image "
                                 f"{rows.ids[int(index[k])]!r} ({errors[k]}); fix or remove it, "
                                 "or pass --skip-bad")
            images = images.to(device, non_blocking=True)
            if device.type == "cuda":
                images = images.contiguous(memory_format=torch.channels_last)
            extras.before_forward(images)
            writer.part_meta = extras.meta()
            with torch.inference_mode(), torch.autocast(device.type, enabled=opts.amp):
                output = run_model(loaded, images, f"split {split.name!r}")
            feats, logits = hook.take(output)
            check_rows(feats, images, loaded, f"split {split.name!r}")
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
            pending.append(pool.submit(writer.append, first_row=int(index[0]),
                                       source_rows=len(index), **batch))
            done += len(index)
            if progress:
                progress(split.name, done, total)
        for fut in pending:
            fut.result()
    except OSError as exc:
        raise _write_error(split.name, writer.store, exc) from exc
    finally:
        pool.shutdown(wait=True)
        hook.close()
        extras.close()


def finish_split(writer: SplitWriter, job: SplitJob, opts: ExtractOptions) -> None:
    """Assemble every part into the split file and commit it (the single writer's step)."""
    try:
        skipped: list[str] = []
        if opts.skip_bad:
            written = set(writer.written_ids())
            skipped = [i for i in job.rows.ids if i not in written]
            if skipped and not written:
                raise InputError(f"split {job.split.name!r}: every one of its {len(skipped)} "
                                 f"images was unreadable (first: {skipped[0]!r}); nothing to "
                                 "store. Check the source and the [transform], then rerun")
        meta = {"fingerprint": job.digest, "skipped": skipped, **writer.stored_part_meta()}
        writer.finish(extra_meta=meta)
    except OSError as exc:
        raise _write_error(job.split.name, writer.store, exc) from exc


def _write_error(name: str, store: Store, exc: OSError) -> FeatstoreError:
    return FeatstoreError(f"split {name!r}: write error in store {str(store.path)!r}: {exc}; "
                          "the split stays incomplete and resumes on rerun")


def extract_split(store: Store, split: SplitSpec, loaded: LoadedModel, transform: dict,
                  opts: ExtractOptions, device: torch.device,
                  progress: Progress | None = None, ctx: Context | None = None) -> None:
    """Extract one split into the store, resuming from its complete parts.

    With a distributed `ctx`, every rank calls this for the same split: rank 0 prepares the
    parts directory and the manifest, each rank extracts its shard of parts, rank 0 assembles
    and commits (featstore.extraction.distributed).
    """
    ctx = ctx or Context()
    job = ctx.everywhere(lambda: plan_split(split, loaded, transform, opts))
    main_writer: list[SplitWriter] = []

    def prepare() -> bool:
        if is_complete(store, job):
            return False
        main_writer.append(job.writer(store, opts, manage=True, fs_wait_s=ctx.fs_wait_s))
        return True

    if not ctx.on_main(prepare):
        if progress:
            progress(split.name, len(job.rows), len(job.rows))
        return
    workers = None
    if ctx.distributed:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        workers = min(4, max(1, (os.cpu_count() or 1) // max(1, local_world)))

    def run_shard() -> None:
        writer = main_writer[0] if ctx.is_main else job.writer(store, opts, manage=False,
                                                                fs_wait_s=ctx.fs_wait_s)
        extract_parts(writer, job, ctx.shard(writer.num_parts), loaded, transform, opts,
                      device, progress, workers)

    ctx.everywhere(run_shard)
    ctx.on_main(lambda: finish_split(main_writer[0], job, opts))


def extract(model: str, spec: str | Path | BenchmarkSpec, out: str | Path, *,
            weights: str | Path | None = None, feature_layer: str | None = None,
            options: ExtractOptions | None = None,
            progress: Progress | None = None, no_head: bool = False) -> Store:
    """Extract every split of `spec` with `model` into the store at `out`; returns it.
    `no_head`: store the features of `feature_layer` and the model's own logits, no (W, b)
    (featstore.extraction.outputs).

    Under torchrun (WORLD_SIZE set) every rank calls this with the same arguments and the
    splits are sharded across the ranks (featstore.extraction.distributed); only rank 0 reports
    progress.
    """
    opts = options or ExtractOptions()
    if opts.dtype not in FEATURE_DTYPES:
        raise UsageError(f"expected one of {', '.join(FEATURE_DTYPES)}", param="dtype",
                         value=opts.dtype)
    if opts.batch_size < 1:
        raise UsageError("must be >= 1", param="batch_size", value=opts.batch_size)
    if opts.part_batches < 1:
        raise UsageError("must be >= 1", param="part_batches", value=opts.part_batches)
    if opts.mc_samples < 0:
        raise UsageError("must be >= 0", param="mc_samples", value=opts.mc_samples)
    bench = spec if isinstance(spec, BenchmarkSpec) else load_spec(spec)
    bench = balance_id_ood(bench)
    check_has_id(bench, Path(out))
    if opts.num_workers is not None and opts.num_workers < 0:
        raise UsageError("must be >= 0", param="num_workers", value=opts.num_workers)
    ctx, device = distributed.from_env(resolve_device(opts.device))
    lock: list[StoreLock] = []
    try:
        if not ctx.is_main:
            progress = None
        loaded = ctx.everywhere(lambda: load_model(model, weights, feature_layer=feature_layer,
                                                   no_head=no_head))
        loaded.module.to(device)
        transform = {**loaded.transform, **bench.transform}
        check_transform(transform)
        resolve_layers(loaded, int(transform["crop"]), device, feature_layer is not None)
        loaded.provenance["transform"] = transform
        classes = ctx.everywhere(lambda: _classes(bench, loaded))
        created: list[Store] = []

        def create() -> None:  # rank 0 writes model.h5 and the manifest; the others then read
            lock.append(lock_out(Path(out)))  # held by rank 0 until the extraction ends
            created.append(open_or_create_store(Path(out), loaded, classes, opts.overwrite))

        ctx.on_main(create)
        if ctx.is_main:
            store = created[0]
        else:  # on another node the new store.json may take a moment to show
            wait_for(lambda: (Path(out) / MANIFEST).is_file(), ctx.fs_wait_s)
            store = Store.open(out)
        for split in bench.splits:
            extract_split(store, split, loaded, transform, opts, device, progress, ctx)
        final = Store.open(out)
        if ctx.is_main:
            for line in warnings_of(id_checks(final)):
                warnings.warn(line, FeatstoreWarning, stacklevel=2)
        return final
    finally:
        for held in lock:
            held.release()
        ctx.close()



def check_has_id(bench: BenchmarkSpec, out: Path) -> None:
    """UsageError before any work when neither the spec nor the store at `out` has an id/
    split: a store without ID rows cannot be evaluated, and extracting one is hours lost."""
    if any(split.role == "id" for split in bench.splits):
        return
    if (out / MANIFEST).is_file():
        with contextlib.suppress(FeatstoreError):
            if Store.open(out).splits(role="id"):
                return  # OOD splits added to a store that holds its ID splits
    where = f"spec {str(bench.path)!r}" if bench.path else "the spec"
    raise UsageError(f"{where} has no id/ split (splits: "
                     f"{', '.join(s.name for s in bench.splits) or 'none'}) and --out holds "
                     "none; add id/train and id/test (lists2spec: name the ID dataset with --id)")


def check_transform(transform: dict[str, Any]) -> None:
    """InputError naming the [transform] if it cannot transform an image (run on a blank one):
    a bad transform must never pass for unreadable images."""
    try:
        side = max(int(transform["crop"]), int(transform["resize"]), 1)
        out = build_transform(transform)(Image.new("RGB", (side, side)))
        if tuple(out.shape) != (3, int(transform["crop"]), int(transform["crop"])):
            raise ValueError(f"gives shape {tuple(out.shape)}")
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"[transform] {transform}: cannot transform an image ({msg}); "
                         "expected resize and crop >= 1 and mean / std of 3 numbers "
                         "(std non-zero)") from None


def _classes(bench: BenchmarkSpec, loaded: LoadedModel) -> list[str] | None:
    """The head's class names for model.h5, and each ID/CSID ImageFolder split's folder ->
    head class map (`SplitSpec.label_map`, featstore.extraction.classmap), checked before the store
    is created: a wrong mapping is an error naming the folders, never a silent relabelling."""
    num_outputs = loaded.num_classes
    where = f"spec {str(bench.path)!r}" if bench.path else "the spec"
    classes = bench.classes
    if classes is not None:
        check_class_list(classes, num_outputs, where)
    folders_of: dict[str, list[str]] = {}
    for split in bench.splits:
        if split.role == "ood" or "imagefolder" not in split.source:
            continue
        folders = rows_from_source(split.source).class_names
        if folders is None:
            raise InputError(f"split {split.name!r}: imagefolder "
                             f"{split.source['imagefolder']!r} has no class sub-directories; "
                             "an ID split needs one folder per class")
        folders_of[split.name] = folders
    train = folders_of.get("id/train")
    if classes is None and train is not None and len(train) == num_outputs \
            and not bench.class_map:
        classes = list(train)  # the head was trained on exactly these folders, in this order
    for split in bench.splits:
        if split.name in folders_of:
            split.label_map = map_folders(folders_of[split.name], num_outputs, split=split.name,
                                          classes=classes, wnids=bench.wnids,
                                          class_map=bench.class_map)
    return classes
