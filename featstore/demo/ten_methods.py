"""`featstore demo --methods all`: the remote-sensing benchmark's ten-method table on the demo.

Wang et al. (Remote Sensing 16(9):1501, 2024) compare ten OOD methods in four families on one
backbone, reporting AUROC, FPR@95, AUPR-IN, AUPR-OUT, ID accuracy and compute time (Tables
5-16). This module reproduces that table on the demo benchmark (ID: digits 0-5; OOD groups
`near`: digits 6-9, `far`: photographs, textures, faces, noise), end to end on the CPU:

    post hoc                          MSP, ViM, KNN      one `ce` model, post-hoc scorers
    training-time reg. ("train-time") ConfBranch, LogitNorm, G-ODIN
    outlier exposure ("outlier")      OE, MCD            auxiliary outliers `ood/aux/skimage`
    model uncertainty ("model unc.")  MC-Dropout, TempScaling

Every model is the demo ResNet trained by `featstore.training.trainer.train` (SGD, momentum
0.9, weight decay 5e-4, cosine schedule, batch 32, random crops, seed 0). The `ce` baseline
trains from scratch for `EPOCHS` epochs at lr 0.05; every training-time method then fine-tunes
that baseline (warm start, `TrainConfig.init`) for `FINETUNE_EPOCHS` epochs at the benchmark's
lr 0.01 with its own loss and heads (new heads start from scratch). This departs from the
benchmark, which trains each method from scratch for 100 epochs: with a few CPU epochs from
scratch, LogitNorm (tau 0.04) does not converge on the demo (ID accuracy ~30% after 6
epochs), while fine-tuning a pre-trained model is OE's own protocol and MCD's (pre-train, then
fine-tune with the discrepancy). Each model is extracted into its own store
(`OUT/methods/<method>/store`; MC-Dropout with `MC_SAMPLES` stochastic passes) and scored with
the benchmark's score for the method: MSP for LogitNorm and OE (as the benchmark does), the
confidence for ConfBranch, max h for G-ODIN, the heads' L1 discrepancy for MCD, the
MC-averaged predictive entropy for MC-Dropout.

The auxiliary outliers of OE and MCD are crops of scikit-image photographs that no OOD test
split uses (`AUX_IMAGES`), as a spec split with `usage = "train"`, which evaluation never reads.

Compute time: training + extraction + scoring (fit + score), in seconds, measured on this
machine. Row `time s / method` is what the method adds: the scoring alone for post-hoc rows
(they reuse the one `ce` model, as in the benchmark's Table 10), fine-tuning + extraction +
scoring for training-time methods. Row `time s / total` adds the `ce` baseline's training
(and, for post-hoc rows, its extraction). Models, stores and timings are cached in
OUT/methods: a rerun retrains nothing unless the recipe changed, and re-scores everything.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..extract import ExtractOptions, Progress, extract
from ..fileio import sha256_file
from ..store import Store
from .pipeline import MODEL_SPEC, PHOTOS, TEXTURES, demo_spec_text, toml_value

EPOCHS = 6
FINETUNE_EPOCHS = 3
BATCH_SIZE = 32
LR = 0.05
FINETUNE_LR = 0.01
AUGMENT = "crop"
MC_SAMPLES = 5
AUX_SPLIT = "ood/aux/skimage"
#: scikit-image images that load offline and that no demo OOD split uses
AUX_IMAGES = ["camera", "coins", "moon", "page", "text", "clock", "horse", "cell", "logo",
              "retina"]
AUX_COUNT = 40
METRICS = (("auroc", "AUROC", max), ("fpr95", "FPR95", min), ("aupr_in", "AUPR-IN", max),
           ("aupr_out", "AUPR-OUT", max))


@dataclass(frozen=True)
class Row:
    """One column of the benchmark's table."""

    name: str
    family: str
    train: str                      # featstore training method
    scorer: str
    params: dict[str, Any] = field(default_factory=dict)


ROWS = (
    Row("MSP", "post hoc", "ce", "msp"),
    Row("ViM", "post hoc", "ce", "vim"),
    Row("KNN", "post hoc", "ce", "knn"),
    Row("ConfBranch", "train-time", "confbranch", "confbranch"),
    Row("LogitNorm", "train-time", "logitnorm", "msp"),
    Row("G-ODIN", "train-time", "godin", "godin"),
    Row("OE", "outlier", "oe", "msp"),
    Row("MCD", "outlier", "mcd", "mcd"),
    Row("MC-Dropout", "model unc.", "mcdropout", "mcdropout"),
    Row("TempScaling", "model unc.", "ce", "temp_scaling"),
)
#: method parameters for the demo's short schedule (defaults otherwise)
TRAIN_PARAMS: dict[str, dict[str, Any]] = {
    "oe": {"aux_ratio": 1.0},
    "mcd": {"warmup_fraction": 0.0, "aux_ratio": 1.0},   # the `ce` baseline is the pre-training
}
EXTRACT_OPTIONS: dict[str, dict[str, Any]] = {"mcdropout": {"mc_samples": MC_SAMPLES}}


def ten_methods_spec_text() -> str:
    """The demo spec plus the auxiliary outlier split (usage = "train")."""
    assert not set(AUX_IMAGES) & set(PHOTOS + TEXTURES), "aux images overlap the OOD tests"
    source = toml_value({"builtin": "patches", "images": AUX_IMAGES, "count": AUX_COUNT,
                         "part": "train"})
    return (demo_spec_text() + f'\n# auxiliary outliers for OE and MCD (never evaluated)\n'
            f'[[split]]\nname = "{AUX_SPLIT}"\nusage = "train"\nsource = {source}\n')


def select_rows(methods: str | Sequence[str]) -> list[Row]:
    """`all` or row names (case-insensitive, comma-separated or a list)."""
    names = [methods] if isinstance(methods, str) else list(methods)
    names = [n.strip() for item in names for n in item.split(",") if n.strip()]
    if not names or names == ["all"]:
        return list(ROWS)
    by_key = {r.name.lower(): r for r in ROWS}
    unknown = [n for n in names if n.lower() not in by_key]
    if unknown:
        raise UsageError(f"--methods: unknown method {unknown[0]!r} (valid: all, "
                         f"{', '.join(r.name for r in ROWS)})")
    return [r for r in ROWS if r.name.lower() in {n.lower() for n in names}]


def _recipe(method: str, epochs: int, finetune_epochs: int,
            init_sha: str | None) -> dict[str, Any]:
    scratch = method == "ce"
    return {"epochs": epochs if scratch else finetune_epochs, "lr": LR if scratch else FINETUNE_LR,
            "init": None if scratch else init_sha, "batch_size": BATCH_SIZE, "augment": AUGMENT,
            "seed": 0, "method_params": TRAIN_PARAMS.get(method, {}),
            "extract": EXTRACT_OPTIONS.get(method, {})}


def _split_digests(path: Path) -> dict[str, Any]:
    manifest = path / "store.json"
    if not manifest.is_file():
        return {}
    entries = json.loads(manifest.read_text(encoding="utf-8"))["splits"]
    return {k: v.get("sha256") for k, v in entries.items() if v.get("complete")}


def run_ten_methods(out: Path, methods: str | Sequence[str] = "all", *, epochs: int = EPOCHS,
                    finetune_epochs: int = FINETUNE_EPOCHS, log: Callable[[str], None] = print,
                    progress: Progress | None = None) -> dict[str, Any]:
    """Train, extract and score the selected methods; returns the table's data."""
    import torch

    from scorers.evaluate import evaluate

    from ..training.trainer import TrainConfig, train

    start = time.perf_counter()
    rows = select_rows(methods)
    base = Path(out) / "methods"
    base.mkdir(parents=True, exist_ok=True)
    spec_path = base / "spec.toml"
    spec_path.write_text(ten_methods_spec_text(), encoding="utf-8")
    timings_path = base / "timings.json"
    timings: dict[str, Any] = (json.loads(timings_path.read_text(encoding="utf-8"))
                               if timings_path.is_file() else {})
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    stores: dict[str, Store] = {}
    needed = list(dict.fromkeys(r.train for r in rows))
    if any(m != "ce" for m in needed) and "ce" not in needed:
        needed.insert(0, "ce")              # the baseline every other method fine-tunes
    for method in needed:
        folder = base / method
        ckpt = folder / "model.pt"
        init = base / "ce" / "model.pt"
        recipe = _recipe(method, epochs, finetune_epochs,
                         None if method == "ce" else sha256_file(init))
        record = timings.get(method, {})
        if ckpt.is_file() and record.get("recipe") == recipe and "train_s" in record:
            log(f"reusing the trained {method!r} model {ckpt}")
        else:
            log(f"training {method!r} ({recipe['epochs']} epochs"
                f"{'' if method == 'ce' else ', fine-tuning the ce model'}, CPU)")
            t0 = time.perf_counter()
            train(method, MODEL_SPEC, spec_path, ckpt, TrainConfig(
                epochs=recipe["epochs"], batch_size=BATCH_SIZE, lr=recipe["lr"],
                nesterov=True, schedule="cosine", augment=AUGMENT, seed=0, device="cpu",
                method_params=dict(TRAIN_PARAMS.get(method, {})),
                init=None if method == "ce" else str(init)),
                progress=_step_bar(progress, f"train {method}"))
            record = {"recipe": recipe, "train_s": time.perf_counter() - t0}
        if method in {r.train for r in rows}:
            before = _split_digests(folder / "store")
            t0 = time.perf_counter()
            opts = _overwriting(ExtractOptions(device="cpu", batch_size=128, num_workers=0,
                                               **EXTRACT_OPTIONS.get(method, {})),
                                folder / "store", ckpt)
            stores[method] = extract(MODEL_SPEC, spec_path, folder / "store", weights=ckpt,
                                     options=opts, progress=progress)
            if _split_digests(folder / "store") != before or "extract_s" not in record:
                record["extract_s"] = time.perf_counter() - t0
        timings[method] = record
        timings_path.write_text(json.dumps(timings, indent=2), encoding="utf-8")

    results = []
    groups: list[str] = []
    for row in rows:
        store = stores[row.train]
        res = evaluate(store, [row.scorer], params={row.scorer: row.params}, use_cache=False)
        if row.scorer not in res["methods"]:
            raise UsageError(f"{row.name}: scorer {row.scorer!r} cannot run on "
                             f"{store.path}: {res['skipped'].get(row.scorer)}")
        m = res["methods"][row.scorer]
        groups = groups or list(m["groups"])
        rec, base_train = timings[row.train], timings["ce"]["train_s"]
        score_s = m["fit_seconds"] + m["score_seconds"]
        own = rec["train_s"] + rec["extract_s"] + score_s
        results.append({
            "name": row.name, "family": row.family, "train_method": row.train,
            "scorer": row.scorer, "params": m["params"], "id_acc": res["id_acc"],
            "groups": {g: {k: m["groups"][g][k] for k, _, _ in METRICS} for g in m["groups"]},
            "train_s": rec["train_s"], "extract_s": rec["extract_s"], "score_s": score_s,
            "time_method_s": score_s if row.train == "ce" else own,
            "time_total_s": own if row.train == "ce" else own + base_train,
        })
    return {"rows": results, "groups": groups, "epochs": epochs,
            "finetune_epochs": finetune_epochs,
            "models": {k: {"train_s": v["train_s"], "extract_s": v.get("extract_s")}
                       for k, v in timings.items() if k in needed},
            "wall_s": time.perf_counter() - start}


def _step_bar(progress: Progress | None, label: str) -> Any:
    """The trainer's per-step callback drawing `label`'s bar (batches over all epochs) on a
    split-progress callback progress(name, done, total); None without one."""
    if progress is None:
        return None

    def step(info: dict[str, Any]) -> None:
        total = info["epochs"] * info["batches"]
        progress(label, (info["epoch"] - 1) * info["batches"] + info["batch"], total)

    return step


def _overwriting(opts: ExtractOptions, store: Path, ckpt: Path) -> ExtractOptions:
    """Replace a store left by an older checkpoint of the same method (retrained)."""
    if (store / "store.json").is_file():
        manifest = json.loads((store / "store.json").read_text(encoding="utf-8"))
        if manifest.get("model", {}).get("sha256") != sha256_file(ckpt):
            opts.overwrite = True
    return opts


def render_tables(result: dict[str, Any]) -> list[Any]:
    """rich Tables: the benchmark's table (methods as columns) and the time breakdown."""
    from rich.table import Table

    rows, groups = result["rows"], result["groups"]
    table = Table(title=f"Ten OOD methods on the demo (Wang et al. 2024 layout; ce "
                        f"{result['epochs']} epochs, methods fine-tune it "
                        f"{result['finetune_epochs']} epochs; CPU)  ·  metrics in %, vs "
                        "id/test; group = unweighted mean",
                  header_style="bold", show_edge=False)
    table.add_column("metric")
    table.add_column("group")
    for r in rows:
        table.add_column(f"{r['name']}\n[dim]{r['family']}[/]", justify="right")

    def add(label: str, group: str, values: list[float], best: Callable | None,
            fmt: str = "{:.2f}") -> None:
        top = best(values) if best else None
        cells = [f"[bold green]{fmt.format(v)}[/]" if top is not None and v == top
                 else fmt.format(v) for v in values]
        table.add_row(label, group, *cells)

    for key, label, best in METRICS:
        for g in groups:
            add(label, g, [r["groups"][g][key] for r in rows], best)
        table.add_section()
    add("ID ACC", "id/test", [r["id_acc"] for r in rows], max)
    add("time s", "method", [r["time_method_s"] for r in rows], min)
    add("time s", "total", [r["time_total_s"] for r in rows], None, "{:.1f}")

    breakdown = Table(title="compute time (s): training (fine-tuning for training-time "
                            "methods) + extraction + scoring; post-hoc rows share the `ce` model",
                      header_style="bold", show_edge=False)
    for col in ("method", "model", "train", "extract", "score", "total"):
        breakdown.add_column(col, justify="left" if col in ("method", "model") else "right")
    for r in rows:
        breakdown.add_row(r["name"], f"{r['train_method']} -> {r['scorer']}",
                          f"{r['train_s']:.1f}", f"{r['extract_s']:.1f}", f"{r['score_s']:.2f}",
                          f"{r['time_total_s']:.1f}")
    return [table, breakdown]
