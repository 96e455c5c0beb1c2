"""OpenOOD v1.5's published results and the reference column beside a featstore result.

`published/openood_v1.5.csv` (beside this module) holds, per benchmark (cifar10, cifar100,
imagenet200: ResNet-18; imagenet1k: ResNet-50, torchvision's checkpoint), training
(`ce` = cross-entropy; `confbranch`, `godin`, `mcd`, `logitnorm`, `oe`: the models those
methods train) and featstore scorer, the near / far AUROC (mean and std over OpenOOD's three
training runs where it gives one) and the ID accuracy, as OpenOOD's leaderboard publishes them:
each row names its source file, line and commit (github.com/zjysteven/OpenOOD, branch
`leaderboard`, `results/<benchmark>.csv`). The leaderboard publishes no FPR@95: its columns are
empty. OpenOOD's names map to featstore's as: MSP msp, TempScale temp_scaling, ODIN
odin_perturbed (OpenOOD's ODIN perturbs the input), MDS mds, RMDS rmds, EBO energy, GradNorm
gradnorm, ReAct react, MLS mls, KLM kl_matching, VIM vim, KNN knn, DICE dice, RankFeat rankfeat,
ASH ash, SHE she, GEN gen, SCALE scale, fDBD fdbd, NCI nci; no ResNet row holds NNGuide.

`reference_rows(result_rows, benchmark)` puts the published value beside each of a result's
near / far AUROC (and FPR@95 where published) and marks it `outside` when it falls outside the
result's 95% interval; `CAUSES` lists what usually explains a gap.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featstore.errors import UsageError

from .definitions import BENCHMARKS, load_benchmark

PUBLISHED_FILE = Path(__file__).parent / "published" / "openood_v1.5.csv"
REFERENCES = ("openood-v1.5",)
#: the likely causes of a gap between a result and OpenOOD's published number
CAUSES = (
    "checkpoint: OpenOOD's ImageNet-1k rows use torchvision's ResNet-50 V1 weights "
    "(IMAGENET1K_V1, top-1 76.13); V2 weights (80.86) or another training give other numbers; "
    "its CIFAR-10/100 and ImageNet-200 rows are means over three ResNet-18 training runs",
    "splits: lists other than OpenOOD v1.5's benchmark_imglist (OpenOOD #307), or a subset",
    "tuning: OpenOOD tunes APS methods on its val sets with its grids (--tune openood); "
    "featstore's defaults or its own rule choose other settings",
    "preprocessing: OpenOOD resizes with PIL bilinear then center-crops; a tensor-backend "
    "resize or another crop moves the logits",
    "method: featstore's implementation differs where its docstring says (e.g. ODIN's "
    "perturbation, ViM's dim clamped to the features' rank)",
)


def load_published() -> list[dict[str, Any]]:
    """The rows of the published file, numbers as floats (None where empty)."""
    with open(PUBLISHED_FILE, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for key in ("near_auroc", "near_auroc_std", "far_auroc", "far_auroc_std", "id_acc",
                    "near_fpr95", "far_fpr95"):
            r[key] = float(r[key]) if r[key] else None
    return rows


def check_reference(name: str) -> str:
    if name not in REFERENCES:
        raise UsageError(f"expected one of {', '.join(REFERENCES)}", param="reference",
                         value=name)
    return name


def published_for(benchmark: str, method: str, training: str = "ce") -> dict[str, Any] | None:
    """The published row of (benchmark, featstore scorer, training), or None. A scorer that
    is a training method's own (confbranch, godin, mcd) has its row under that training only:
    with training "ce" that row is the one."""
    rows = [r for r in load_published()
            if (r["benchmark"], r["featstore_method"]) == (benchmark, method)]
    for want in (training, method if training == "ce" else None):
        for r in rows:
            if r["training"] == want:
                return r
    return None


def _outside(value: float | None, ci: Sequence[float] | None) -> bool | None:
    if value is None or not ci or ci[0] is None:
        return None
    return not (ci[0] <= value <= ci[1])


def reference_rows(summary: Sequence[Mapping[str, Any]], benchmark: str,
                   training: str = "ce") -> list[dict[str, Any]]:
    """Each summary row ({"method", "near_auroc", "near_auroc_ci", "far_auroc", ...,
    "near_fpr95", ...}) with the published values beside it: "<key>_published" and
    "<key>_outside" (True when the published value is outside the row's interval, None when
    either is missing), plus "source" (file:line@commit) of the published row."""
    out = []
    for row in summary:
        pub = published_for(benchmark, row["method"], training)
        new = dict(row)
        for key in ("near_auroc", "far_auroc", "near_fpr95", "far_fpr95"):
            value = pub[key] if pub else None
            new[f"{key}_published"] = value
            new[f"{key}_outside"] = _outside(value, row.get(f"{key}_ci"))
        new["source"] = (f"zjysteven/OpenOOD {pub['source_file']}:{pub['line']}@"
                         f"{pub['commit'][:12]}" if pub else None)
        out.append(new)
    return out


def infer_benchmark(ood_splits: Sequence[str], num_classes: int | None) -> str:
    """The OpenOOD benchmark whose near / far test splits (featstore names, as `protocol
    openood` writes them) are all among `ood_splits`, told apart by `num_classes` where two
    share them (ImageNet-200 and ImageNet-1k); UsageError when none or several fit."""
    have = set(ood_splits)
    fits = []
    for name in BENCHMARKS:
        bench = load_benchmark(name)
        wanted = {s.name for s in bench.splits if s.group in ("near", "far")}
        if wanted <= have and num_classes in (None, bench.num_classes):
            fits.append(name)
    if len(fits) != 1:
        raise UsageError(
            "cannot tell which OpenOOD v1.5 benchmark these results are "
            + (f"(both {' and '.join(fits)} fit)" if fits else
               "(their OOD splits are not one benchmark's ood/near/... and ood/far/... as "
               "`featstore protocol openood` names them)"), param="reference",
            value="openood-v1.5")
    return fits[0]
