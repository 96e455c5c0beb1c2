"""The papers' experiments as runner presets: the remote-sensing ten-method table (Wang et al.,
Remote Sensing 16(9):1501, 2024, Tables 5-16) and its OSR protocol.

The ten rows, in the paper's four families (score of each method as the benchmark uses it):

    post hoc        MSP, ViM, KNN        one `ce` model, post-hoc scorers
    train-time      ConfBranch (confidence), LogitNorm (MSP), G-ODIN (eq. 12)
    outlier         OE (MSP), MCD (eq. 14: entropy discrepancy of the two heads)
    model unc.      MC-Dropout (MC-averaged entropy), TempScaling (fitted on id/val)

Tuning (the paper, §2.5: "explored only the five most common values and selected
hyperparameters based on the performance of AUROC on the validation set"; shared/papers/
rs-ood-ten-methods-remote-sensing-2024.txt line 627; the paper does not list the values):
rows whose scorer has a sweep grid are tuned on the val splits by AUROC over the scorer's
default grid as it is (tuning rule "paper": `scorers.adapt`, not fitted to the store,
clamped only where a value is invalid, duplicates scored once): KNN over K 50, 100, 200,
500, 1000 (OpenOOD v1.5), ViM over its five most common principal dims 42, 128, 256, 512,
1000 (`scorers.methods.vim`, where each value's source is listed); the other rows have no
hyperparameter.
MC-Dropout is extracted with `MC_SAMPLES` stochastic passes. OE and MCD read the auxiliary
outliers of the experiment's [data] aux.

Paper settings where the scorer's own default differs (each row sets it):
- MCD: `variant = "entropy"`, d = H(p1) - H(p2), the paper's eq. 14 ("We used d(p1(y|x),
  p2(y|x)) to measure the divergence between the two softmax class probabilities", §2.4,
  eq. 14; shared/papers/rs-ood-ten-methods-remote-sensing-2024.txt line 432-439); the `mcd`
  scorer's default is Yu & Aizawa's / OpenOOD's L1 discrepancy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from featstore.errors import UsageError
from featstore.workflows.experiments.config import Experiment, MethodRow
from featstore.workflows.experiments.paper_layout import FAMILIES as FAMILIES  # the families
from featstore.workflows.protocols.osr import VAL_OPEN_MODES
from scorers import REGISTRY, unknown_scorer

MC_SAMPLES = 5


AUX_SPLIT = "ood/aux/skimage"
#: scikit-image images that load offline and that no demo OOD split uses
AUX_IMAGES = ["camera", "coins", "moon", "page", "text", "clock", "horse", "cell", "logo",
              "retina"]
AUX_COUNT = 40
#: the auxiliary outlier source (a builtin generator: offline, deterministic)
AUX_SOURCE = {"builtin": "patches", "images": AUX_IMAGES, "count": AUX_COUNT, "part": "train"}


def ten_method_rows(finetune: bool = False) -> list[MethodRow]:
    """The benchmark's ten rows. `finetune`: OE and MCD start from a trained `ce` model, so
    MCD needs no warm-up and both see one outlier batch per ID batch."""
    oe = {"aux_ratio": 1.0} if finetune else {}
    mcd = {"warmup_fraction": 0.0, "aux_ratio": 1.0} if finetune else {}
    return [
        MethodRow("MSP", "ce", "msp"),
        MethodRow("ViM", "ce", "vim"),
        MethodRow("KNN", "ce", "knn"),
        MethodRow("ConfBranch", "confbranch", "confbranch"),
        MethodRow("LogitNorm", "logitnorm", "msp"),
        MethodRow("G-ODIN", "godin", "godin"),
        MethodRow("OE", "oe", "msp", train_params=oe),
        MethodRow("MCD", "mcd", "mcd", params={"variant": "entropy"}, train_params=mcd),
        MethodRow("MC-Dropout", "mcdropout", "mcdropout", extract={"mc_samples": MC_SAMPLES}),
        MethodRow("TempScaling", "ce", "temp_scaling"),
    ]


def select_rows(methods: str | Sequence[str], rows: Sequence[MethodRow],
                allow_scorers: bool = False) -> list[MethodRow]:
    """`all`, or names (case-insensitive, comma-separated or a list) of the ten rows, in the
    table's order; with `allow_scorers`, any other name that is a scorer becomes a post-hoc
    row on `ce` (after the table's rows, in the order given)."""
    names = [methods] if isinstance(methods, str) else list(methods)
    names = [n.strip() for item in names for n in item.split(",") if n.strip()]
    if not names or names == ["all"]:
        return list(rows)
    by_key = {r.name.lower(): r for r in rows}
    out: list[MethodRow] = []
    for n in names:
        row = by_key.get(n.lower())
        if row is None and allow_scorers and n in REGISTRY:
            row = MethodRow(n, "ce", n)
        if row is None:
            valid = "all, " + ", ".join(r.name for r in rows)
            if allow_scorers:  # the registry's message, then the table's rows
                raise UsageError(f"{unknown_scorer(n, '--methods')}; or a method row: {valid}")
            raise UsageError(f"--methods: unknown method {n!r} (valid: {valid})")
        if row.name not in {r.name for r in out}:
            out.append(row)
    order = {r.name: i for i, r in enumerate(rows)}       # the table's order, then the rest
    return sorted(out, key=lambda r: order.get(r.name, len(order)))


def osr_experiment(data: str, ratios: Sequence[tuple[int, int]], seeds: int,
                   rows: Sequence[MethodRow], train: dict[str, Any], *,
                   arch: str | None = None, root: str | None = None,
                   image_size: int | None = None, fractions: dict[str, float] | None = None,
                   aux: dict[str, Any] | None = None, device: str = "auto",
                   tune_rule: str = "val", select_by: str = "auroc",
                   name: str = "OSR (Wang et al. 2024 §2.6.1)",
                   val_open: str = "heldout") -> Experiment:
    """The OSR protocol: per ratio and seed a class division (seed = the division's), every
    row's training method trained with that seed, tuned on `ood/osr/open_val` (held-out open
    classes by default; `val_open="paper"`: the tested classes' val images)."""
    if seeds < 1:
        raise UsageError(f"--seeds {seeds}: must be >= 1")
    if val_open not in VAL_OPEN_MODES:
        raise UsageError(f"--val-open {val_open!r}: expected one of {', '.join(VAL_OPEN_MODES)}")
    osr: dict[str, Any] = {"data": data, "ratios": [list(r) for r in ratios],
                           "val_open": val_open}
    if root is not None:
        osr["root"] = str(Path(root).resolve())
    if image_size:
        osr["image_size"] = int(image_size)
    if fractions:
        osr["fractions"] = dict(fractions)
    if data != "digits" and Path(data).exists():
        osr["data"] = str(Path(data).resolve())
    return Experiment(name=name, arch=arch, seeds=list(range(seeds)), rows=list(rows),
                      osr=osr, aux=aux, device=device, train=dict(train),
                      tune_rule=tune_rule, select_by=select_by)
