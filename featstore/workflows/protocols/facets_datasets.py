"""FACETS' two dataset-level benchmarks from the user's image folders (Recalcati et al., DSAA
2023, §IV): `Baseline` (Table II: Places365-Standard val as ID against SVHN, "generalized to
a single class" as OOD, "randomly sampled ... to ensure consistency in sample size") and
`InterDataset` (Table III: Places365-Standard val as ID against ImageNet-1K, "we removed the
32 common classes between ImageNet-1K and Places365-Standard", the OOD samples "collected
through stratified random sampling on all remaining classes").

As implemented (`dataset_assignment`): every candidate class (a sub-directory of `--images`,
or a class list) is assigned OOD, but for InterDataset the classes common to the ID set,
which are dropped: those the user lists (`common`, e.g. the paper's 32), else those whose
name equals an ID class's after `normal_name` (lower case, `_` / `-` as spaces, the last
`/` component: `bedroom` = `Bedroom`, `/b/bedroom` = `bedroom`); the dropped classes are
returned and printed, never dropped silently. The assignment is written by
`wordnet.write_assignment` (the lists and spec the WordNet and tier datasets use: val / test
halves of each class, `balance = true`, so extraction cuts the OOD side to the ID side's
size: uniform over the OOD rows, stratified by class in expectation only, where the paper
samples per class). The paper's Baseline OOD takes SVHN's multi-resolution train and test
images; which folders the user gives is theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from featstore.errors import UsageError
from featstore.workflows.protocols import wordnet as wnp
from featstore.workflows.protocols.facets_sampling import Sampling

KINDS = ("baseline", "interdataset")


def normal_name(name: str) -> str:
    """The comparison form of a class name: the last `/` component, lower case, `_` and `-`
    as spaces, runs of spaces as one."""
    last = name.strip("/").rsplit("/", 1)[-1]
    return " ".join(last.lower().replace("_", " ").replace("-", " ").split())


def dataset_assignment(kind: str, candidates: Sequence[str],
                       id_classes: Sequence[str] | None = None,
                       common: Sequence[str] | None = None
                       ) -> tuple[dict[str, str], list[str]]:
    """({candidate: "ood"}, the dropped common classes) of a FACETS dataset `kind` (module
    docstring)."""
    if kind not in KINDS:
        raise UsageError(f"--kind {kind!r}: expected one of {', '.join(KINDS)}")
    if kind == "baseline":
        return {c: "ood" for c in candidates}, []
    if common is not None:
        unknown = sorted(set(common) - set(candidates))
        if unknown:
            raise UsageError(f"--common: {len(unknown)} classes are not candidate classes "
                             f"(first: {', '.join(unknown[:3])})")
        drop = set(common)
    elif id_classes:
        ids = {normal_name(c) for c in id_classes}
        drop = {c for c in candidates if normal_name(c) in ids}
    else:
        raise UsageError("interdataset: give --id-classes (common classes found by name) or "
                         "--common (the classes to remove)")
    return {c: "ood" for c in candidates if c not in drop}, sorted(drop)


def build_dataset(kind: str, images: str, *, id_classes: str | None = None,
                  common: str | None = None, images_root: Path | None = None,
                  base_spec: Path | None = None, out: Path | None = None,
                  sampling: Sampling | None = None) -> dict[str, Any]:
    """{"kind", "assignment", "dropped", "files", "sampling"}: the assignment of `images`'
    classes (`dataset_assignment`) and, with `out`, its lists and spec
    (`wordnet.write_assignment`, tag = `kind`). `sampling` defaults to every image, val / test
    halves, balanced (`Sampling(per_class=None)`)."""
    sampling = sampling or Sampling(per_class=None)
    candidates = wnp.read_class_list(images)
    ids = wnp.read_class_list(id_classes) if id_classes else None
    common_list = wnp.read_class_list(common) if common else None
    assignment, dropped = dataset_assignment(kind, candidates, ids, common_list)
    if not assignment:
        raise UsageError(f"{kind}: no candidate class is left after removing "
                         f"{len(dropped)} common ones")
    files: dict[str, Any] = {}
    if out is not None:
        imgs = wnp.candidate_images(images, candidates, images_root)
        imgs = {c: v for c, v in imgs.items() if c in assignment}
        files = wnp.write_assignment(out, kind, assignment, imgs, base_spec, sampling)
    return {"kind": kind, "assignment": assignment, "dropped": dropped, "files": files,
            "sampling": sampling.to_json()}


__all__ = ["KINDS", "build_dataset", "dataset_assignment", "normal_name"]
