"""`featstore protocol ...`: evaluation protocols from the literature (OSR splits, WordNet /
tier class assignment, shift-level grids, image-list conversion)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from featstore.errors import UsageError

from .commands_train import train_progress
from .common import check_methods, method_params, require_rows
from .console import JsonOpt, QuietOpt, emit, err, log, out, progress_enabled, setup, status

protocol_app = typer.Typer(help="Evaluation protocols from the literature: OSR splits, WordNet "
                                "class assignment, shift-level grids, image-list conversion.",
                           no_args_is_help=True)

def _method_params(items: list[str] | None) -> dict[str, dict[str, Any]]:
    return method_params(items)


@protocol_app.command()
def osr(
    data: Annotated[str, typer.Option(help="'digits' (the demo digits, 10 classes), an "
                                           "ImageFolder directory or an image list.")],
    out_: Annotated[Path, typer.Option("--out", help="Output directory.")],
    ratios: Annotated[str, typer.Option(help="Closed/open class ratios.")] = "7/3,6/4,5/5",
    seeds: Annotated[int, typer.Option(help="Random class divisions per ratio (the training "
                                            "seed follows the division's).")] = 5,
    methods: Annotated[str, typer.Option(
        help="Comma-separated: 'all' or the ten rows (MSP, ViM, KNN, ConfBranch, LogitNorm, "
             "G-ODIN, OE, MCD, MC-Dropout, TempScaling: each trains its method) or any "
             "post-hoc scorer (on the ce model).")] = "msp,vim,knn",
    arch: Annotated[str | None, typer.Option(help="Architecture (default: the demo ResNet for "
                                                  "digits, else resnet50).")] = None,
    preset: Annotated[str | None, typer.Option(
        help="Training preset (default for file data: remote-sensing = SGD 0.01, momentum "
             "0.9, wd 5e-4, constant lr, 100 epochs).")] = None,
    epochs: Annotated[int | None, typer.Option(help="Epochs (default 6 for digits, else "
                                                    "100).")] = None,
    lr: Annotated[float | None, typer.Option(help="SGD lr (default 0.05 for digits, else "
                                                  "0.01).")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Batch size (default 32 for digits, "
                                                        "else 128).")] = None,
    augment: Annotated[str | None, typer.Option(help="none | flip | crop | flip+crop (default "
                                                     "crop for digits, else flip+crop).")] = None,
    image_size: Annotated[int | None, typer.Option(help="Resize and crop side for file "
                                                        "data.")] = None,
    root: Annotated[Path | None, typer.Option(help="Image root of an image-list --data.")] = None,
    aux: Annotated[Path | None, typer.Option(
        help="ImageFolder of auxiliary outliers for OE / MCD (digits: scikit-image "
             "crops).")] = None,
    no_tune: Annotated[bool, typer.Option("--no-tune", help="Score at default parameters "
                                                            "instead of tuning on "
                                                            "open_val.")] = False,
    param: Annotated[list[str] | None, typer.Option(help="method.k=v scorer parameter.")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N]")] = "auto",
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Open-set recognition (remote-sensing OOD benchmark, Wang et al. 2024): random
    closed/open class divisions per ratio and seed; every requested method trained on the
    closed classes with the division's seed, extracted, tuned on ood/osr/open_val (AUROC),
    evaluated on ood/osr/open; mean ± std over divisions; skipped runs listed with reasons.
    A preset of `featstore run`; a rerun resumes.

    Example: featstore protocol osr --data digits --ratios 7/3,6/4,5/5 --seeds 5 --out runs/osr
    """
    setup(json_, quiet)
    from dataclasses import replace

    from featstore.demo.ten_methods import AUX_SOURCE
    from featstore.experiments.presets import osr_experiment, select_rows, ten_method_rows
    from featstore.experiments.runner import run_experiment
    from featstore.protocols.osr import parse_ratios
    from featstore.training.presets import make_config

    from .commands_run import print_experiment

    ratio_list = parse_ratios(ratios)
    rows = select_rows(methods, ten_method_rows(finetune=False), allow_scorers=True)
    params = _method_params(param)
    rows = [replace(r, params={**r.params, **params.get(r.scorer, {})}) for r in rows]
    digits = data == "digits"
    if digits:
        train = {"epochs": 6, "batch_size": 32, "lr": 0.05, "augment": "crop",
                 "nesterov": True, "schedule": "cosine"}
    else:
        train = {"preset": preset or "remote-sensing", "batch_size": 128,
                 "augment": "flip+crop"}
    if preset is not None:
        train["preset"] = preset
    train.update({k: v for k, v in (("epochs", epochs), ("lr", lr), ("batch_size", batch_size),
                                    ("augment", augment)) if v is not None})
    make_config(**train)  # a bad value is an error before anything runs
    aux_source = ({"imagefolder": str(aux.resolve())} if aux is not None
                  else dict(AUX_SOURCE) if digits else None)
    exp = osr_experiment(data, ratio_list, seeds, rows, train, arch=arch,
                         root=str(root) if root else None, image_size=image_size,
                         aux=aux_source, device=device, tune_rule="none" if no_tune else "val")
    show = progress_enabled()
    start = time.perf_counter()
    result = run_experiment(exp, out_, log=log if show else None,
                            train_progress=(lambda label: train_progress(True, label))
                            if show else None)
    result["seconds"] = time.perf_counter() - start
    emit(result, lambda: print_experiment(result))


def _read_classes(source: str) -> list[str]:
    from featstore.protocols.wordnet import read_class_list

    return read_class_list(source)


@protocol_app.command()
def wordnet(
    id_classes: Annotated[str, typer.Option(help="ID label set: a class-per-line file or an "
                                                 "ImageFolder directory.")],
    candidates: Annotated[str, typer.Option(help="Candidate classes (file or ImageFolder).")],
    mapping: Annotated[Path | None, typer.Option(help="'class synset [synset ...]' lines for "
                                                      "names WordNet cannot resolve.")] = None,
    auto_map: Annotated[bool, typer.Option(help="Map other names to their first noun "
                                                "sense.")] = False,
    threshold: Annotated[list[float] | None, typer.Option(
        help="Threshold(s) T; repeatable (default 0.40, 0.45, 0.50 = T40, T45, T50).")] = None,
    rule: Annotated[str, typer.Option(help="distance (ID when 1 - sim <= T, FACETS) | "
                                           "similarity (ID when sim >= T)")] = "distance",
    images: Annotated[str | None, typer.Option(help="Candidate images: ImageFolder or an image "
                                                    "list indexing --candidates.")] = None,
    images_root: Annotated[Path | None, typer.Option(help="Root of an --images list.")] = None,
    base_spec: Annotated[Path | None, typer.Option(help="Spec whose splits the written specs "
                                                        "extend.")] = None,
    out_: Annotated[Path | None, typer.Option("--out", help="Output directory.")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS WordNet class assignment: similarity (mean of path, normalised Leacock-Chodorow and
    Wu-Palmer, max over ID classes) of every candidate class to the ID label set, and its ID/OOD
    assignment at each threshold; writes assignment files, image lists and specs with --out.

    Example: featstore protocol wordnet --id-classes places.txt --candidates imagenet_wnids.txt
    --mapping places_synsets.txt --images imagenet/train --base-spec places.toml --out wn
    """
    setup(json_, quiet)
    from featstore.protocols import wordnet as wnp

    thresholds = threshold or list(wnp.DEFAULT_THRESHOLDS)
    for t in thresholds:
        wnp.assign_threshold([], t, rule)
    if base_spec is not None and images is None:
        raise UsageError("--base-spec needs --images (the candidate images to assign)")
    id_list, cand_list = _read_classes(id_classes), _read_classes(candidates)
    user_map = wnp.read_mapping(mapping) if mapping else None
    wn = wnp.load_wordnet()
    id_map = wnp.resolve_classes(id_list, user_map, auto_map, wn)
    cand_map = wnp.resolve_classes(cand_list, user_map, auto_map, wn)
    scores = wnp.score_candidates(cand_map, id_map)
    assignments = {wnp.threshold_tag(t): wnp.assign_threshold(scores, t, rule) for t in thresholds}
    files: dict[str, Any] = {}
    if out_ is not None:
        out_.mkdir(parents=True, exist_ok=True)
        (out_ / "similarity.tsv").write_text(
            "class\tsynset\tsim\tpath\tlch_norm\twup\tnearest_id_class\tnearest_synset\n"
            + "".join(f"{s.name}\t{s.synset}\t{s.sim:.6f}\t{s.path:.6f}\t{s.lch_norm:.6f}\t"
                      f"{s.wup:.6f}\t{s.nearest}\t{s.nearest_synset}\n" for s in scores),
            encoding="utf-8")
        imgs = wnp.candidate_images(images, cand_list, images_root) if images else None
        for tag, assignment in assignments.items():
            files[tag] = wnp.write_assignment(out_, tag, assignment, imgs, base_spec)
    result = {
        "rule": rule, "thresholds": {wnp.threshold_tag(t): t for t in thresholds},
        "id_classes": {"mapped": len(id_map.synsets), "unmapped": id_map.unmapped,
                       "how": id_map.how},
        "candidates": {"mapped": len(cand_map.synsets), "unmapped": cand_map.unmapped,
                       "how": cand_map.how},
        "scores": [s.__dict__ for s in scores],
        "assignments": assignments, "files": files,
    }
    for what, m in (("ID", id_map), ("candidate", cand_map)):
        if m.unmapped:
            err.print(f"unmapped {what} classes ({len(m.unmapped)}): {', '.join(m.unmapped)} "
                      "(map them with --mapping or --auto-map)", highlight=False)
    emit(result, lambda: _print_wordnet(rule, scores, assignments))


def _print_wordnet(rule: str, scores: list, assignments: dict) -> None:
    table = Table(title=f"WordNet assignment ({rule} rule): sim = mean(path, LCH/max, Wu-Palmer)"
                        ", max over ID classes", header_style="bold", show_edge=False)
    for col in ("candidate", "synset", "sim", "nearest ID class", *assignments):
        table.add_column(col, justify="right" if col == "sim" else "left")
    for s in sorted(scores, key=lambda s: -s.sim):
        table.add_row(s.name, s.synset, f"{s.sim:.3f}", f"{s.nearest} ({s.nearest_synset})",
                      *[a[s.name] for a in assignments.values()])
    out.print(table)
    for tag, a in assignments.items():
        n_id = sum(v == "id" for v in a.values())
        out.print(f"{tag}: {n_id} candidate classes ID, {len(a) - n_id} OOD")


@protocol_app.command()
def tiers(
    tiers_file: Annotated[Path, typer.Option("--tiers", help="'class tier' lines, tier 0-3.")],
    images: Annotated[str | None, typer.Option(help="Candidate images: ImageFolder or an image "
                                                    "list indexing the tier file's "
                                                    "classes.")] = None,
    images_root: Annotated[Path | None, typer.Option(help="Root of an --images list.")] = None,
    base_spec: Annotated[Path | None, typer.Option(help="Spec the written specs extend.")] = None,
    out_: Annotated[Path | None, typer.Option("--out", help="Output directory.")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS OODness tiers: T1 (tiers 0-1 ID, 2-3 OOD) and T2 (tiers 0-2 ID, 3 OOD).

    Example: featstore protocol tiers --tiers sun397_tiers.txt --images sun397/ --base-spec
    places.toml --out facets
    """
    setup(json_, quiet)
    from featstore.protocols import wordnet as wnp

    if base_spec is not None and images is None:
        raise UsageError("--base-spec needs --images (the candidate images to assign)")
    tier_map = wnp.read_tiers(tiers_file)
    assignments = {v: wnp.assign_tiers(tier_map, v) for v in wnp.TIERS}
    files: dict[str, Any] = {}
    if out_ is not None:
        imgs = wnp.candidate_images(images, list(tier_map), images_root) if images else None
        for tag, a in assignments.items():
            files[tag] = wnp.write_assignment(out_, tag, a, imgs, base_spec)

    def human() -> None:
        for tag, a in assignments.items():
            n_id = sum(v == "id" for v in a.values())
            out.print(f"{tag}: {n_id} classes ID, {len(a) - n_id} OOD")

    emit({"tiers": tier_map, "assignments": assignments, "files": files}, human)


def _fmt(v: float | None) -> str:
    return "N/A" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


@protocol_app.command("shift-grid")
def shift_grid_cmd(
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    method: Annotated[list[str], typer.Option(help="Scorer; repeatable.")],
    metric: Annotated[str, typer.Option(help="Metric of the grid and the table.")] = "auroc",
    levels: Annotated[int, typer.Option(help="Levels per axis (degrees binning).")] = 8,
    binning: Annotated[str, typer.Option(help="equal | quantile")] = "equal",
    levels_edges: Annotated[str | None, typer.Option(
        help="Hand-set level edges of the degrees: 'e0,e1,...' for both axes or 'SEM;COV' "
             "(same count; replaces --levels/--binning).")] = None,
    min_count: Annotated[int, typer.Option(help="Cells with fewer samples are N/A.")] = 10,
    degrees: Annotated[Path | None, typer.Option(help="Per-row shift degrees (.npz from "
                                                      "shift-degrees).")] = None,
    param: Annotated[list[str] | None, typer.Option(help="method.k=v scorer parameter.")] = None,
    no_cache: Annotated[bool, typer.Option(help="Do not read/write scores.h5.")] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """IS-OOD shift-level grid: a metric per (covariate, semantic) level cell against id/test,
    per-level means and correlation/sensitivity per scorer (IS-OOD Table 1 layout). Cells come
    from `ood/shift/cov<c>_sem<s>/...` splits, else from per-row degrees.

    Example: featstore protocol shift-grid runs/isood --method msp --method knn --metric auroc
    """
    setup(json_, quiet)
    from featstore import Store
    from featstore.protocols.shift import load_degrees, parse_level_edges, shift_grid
    from scorers.metrics import OOD_METRIC_NAMES

    check_methods(method)
    if metric not in OOD_METRIC_NAMES:
        raise UsageError(f"--metric {metric!r}: expected one of {', '.join(OOD_METRIC_NAMES)}")
    if min_count < 1:
        raise UsageError(f"--min-count {min_count}: must be >= 1")
    params = _method_params(param)
    edges = parse_level_edges(levels_edges) if levels_edges is not None else None
    deg = load_degrees(degrees) if degrees is not None else None
    results = []
    with Store.open(store) as st, status() as begin:
        require_rows(st)
        for m in method:
            begin(f"shift grid of {m} on {st.path}")
            results.append(shift_grid(st, m, params.get(m), levels, binning, min_count, deg,
                                      use_cache=not no_cache, levels_edges=edges))
    payload = [{"method": r["method"], "source": r["source"], "splits": r["splits"],
                "edges": r["edges"], "outside": r.get("outside", 0), **r["grid"].to_json(),
                "level_means": {a: [None if math.isnan(x) else float(x)
                                    for x in r["grid"].level_means(metric, a)]
                                for a in ("semantic", "covariate")},
                "sensitivity": r["grid"].sensitivity(metric)} for r in results]
    emit({"metric": metric, "results": payload},
         lambda: _print_shift_grid(results, payload, metric, min_count))


def _print_shift_grid(results: list, payload: list, metric: str, min_count: int) -> None:
    for r in results:
        grid = r["grid"]
        t = Table(title=f"{r['method']}: {metric} per cell (rows: covariate level, columns: "
                        f"semantic level; N/A: < {min_count} samples)", header_style="bold",
                  show_edge=False)
        t.add_column("")
        for s in range(grid.levels):
            t.add_column(f"sem_{s}", justify="right")
        t.add_column("mean", justify="right")
        cov_means = grid.level_means(metric, "covariate")
        for c in range(grid.levels):
            t.add_row(f"cov_{c}", *[_fmt(float(grid.values[metric][c, s]))
                                    for s in range(grid.levels)], _fmt(float(cov_means[c])))
        t.add_row("mean", *[_fmt(float(v)) for v in grid.level_means(metric, "semantic")], "")
        out.print(t)
        if r.get("outside"):
            out.print(f"{r['outside']} OOD rows lie outside --levels-edges and enter no cell",
                      highlight=False)
    t = Table(title=f"correlation / sensitivity of {metric} with the shift level (IS-OOD "
                    "Table 1)", header_style="bold", show_edge=False)
    t.add_column("method")
    for col in ("semantic corr", "semantic sens", "covariate corr", "covariate sens"):
        t.add_column(col, justify="right")
    for p in payload:
        s = p["sensitivity"]
        t.add_row(p["method"], _fmt(s["semantic"]["correlation"]),
                  _fmt(s["semantic"]["sensitivity"]), _fmt(s["covariate"]["correlation"]),
                  _fmt(s["covariate"]["sensitivity"]))
    out.print(t)


@protocol_app.command("shift-degrees")
def shift_degrees_cmd(
    store: Annotated[Path, typer.Argument(help="Reference store (e.g. CLIP image features).")],
    out_: Annotated[Path, typer.Option("--out", help="Degrees file to write (.npz).")],
    laid: Annotated[Path | None, typer.Option(help="LAID matrix (.npy from laid-fit).")] = None,
    sem_dims: Annotated[str | None, typer.Option(help="Semantic feature dims START:END "
                                                      "(without --laid).")] = None,
    cov_dims: Annotated[str | None, typer.Option(help="Covariate feature dims "
                                                      "START:END.")] = None,
    k: Annotated[int, typer.Option(help="k-th nearest ID neighbour (default 10 as the IS-OOD "
                                        "release; 1 = the paper's eq. 4).")] = 10,
    id_split: Annotated[str, typer.Option(help="ID reference split.")] = "id/train",
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Per-row semantic and covariate shift degrees of every OOD test split: cosine distance to
    the k-th nearest ID row in each subspace (FAISS). Use with `shift-grid --degrees`.

    Example: featstore protocol shift-degrees runs/clip --laid W.npy --k 10 --out degrees.npz
    """
    setup(json_, quiet)
    from featstore import Store
    from featstore.protocols.shift import parse_dims, save_degrees, store_degrees

    w = None
    if laid is not None:
        w = _load_npy(laid, "--laid")
    with Store.open(store) as st:
        st.split(id_split)
        require_rows(st)
        with status() as begin:
            begin(f"shift degrees of {st.path} against {id_split}")
            deg = store_degrees(st, w, parse_dims(sem_dims), parse_dims(cov_dims), k, id_split)
    save_degrees(out_, deg)
    summary = {n: {"rows": int(len(v)), "semantic_mean": float(v[:, 0].mean()),
                   "covariate_mean": float(v[:, 1].mean())} for n, v in deg.items()}

    def human() -> None:
        for n, s in summary.items():
            out.print(f"{n}: {s['rows']} rows, mean semantic {s['semantic_mean']:.4f}, "
                      f"covariate {s['covariate_mean']:.4f}", highlight=False)
        out.print(f"wrote {out_}")

    emit({"out": str(out_), "splits": summary}, human)


def _load_npy(path: Path, what: str) -> np.ndarray:
    from featstore.errors import InputError

    if not path.is_file():
        raise InputError(f"{what} {str(path)!r}: file not found")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{what} {str(path)!r}: not a .npy array ({exc})") from None


@protocol_app.command("laid-fit")
def laid_fit(
    standard: Annotated[Path, typer.Option(help="(N, l) .npy text features of standard texts.")],
    semantic_shift: Annotated[Path, typer.Option(help="(N, l) .npy: semantic-shift texts.")],
    covariate_shift: Annotated[Path, typer.Option(help="(N, l) .npy: covariate-shift texts.")],
    out_: Annotated[Path, typer.Option("--out", help="LAID matrix to write (.npy).")],
    margin: Annotated[float, typer.Option(help="Triplet margin alpha.")] = 0.5,
    orth_weight: Annotated[float, typer.Option(help="Weight of ||W^T W - I||^2.")] = 1.0,
    steps: Annotated[int, typer.Option(help="Adam steps.")] = 500,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 0.01,
    seed: Annotated[int, typer.Option(help="Seed of the batch sampling.")] = 0,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Learn the LAID decomposition matrix W (IS-OOD) from text-feature triplets; apply it to
    image features with `shift-degrees --laid`.

    Example: featstore protocol laid-fit --standard st.npy --semantic-shift ss.npy
    --covariate-shift cs.npy --out W.npy
    """
    setup(json_, quiet)
    from featstore.protocols.shift import LaidConfig, fit_laid

    arrays = [_load_npy(p, what) for p, what in ((standard, "--standard"),
                                                 (semantic_shift, "--semantic-shift"),
                                                 (covariate_shift, "--covariate-shift"))]
    start = time.perf_counter()
    with status() as begin:
        begin(f"fitting LAID ({steps} Adam steps)")
        w = fit_laid(*arrays, LaidConfig(margin=margin, orth_weight=orth_weight, lr=lr,
                                         steps=steps, seed=seed))
    out_.parent.mkdir(parents=True, exist_ok=True)
    np.save(out_, w)
    orth = float(np.linalg.norm(w.T @ w - np.eye(len(w))))
    emit({"out": str(out_), "shape": list(w.shape), "orthogonality_error": orth,
          "seconds": time.perf_counter() - start},
         lambda: out.print(f"wrote {out_}  ({w.shape[0]} x {w.shape[1]}, ||W^T W - I||_F = "
                           f"{orth:.4f})"))


@protocol_app.command("facets-table")
def facets_table_cmd(
    stores: Annotated[list[str], typer.Argument(help="Stores, one per dataset (e.g. the T40, "
                                                     "T45, T50 stores); LABEL=PATH names a "
                                                     "row.")],
    method: Annotated[list[str] | None, typer.Option(
        help="Scorer; repeatable (default: FACETS' msp, temp_scaling, mls, odin_perturbed, "
             "ip_ts_mlv, oodl).")] = None,
    param: Annotated[list[str] | None, typer.Option(help="method.k=v scorer parameter.")] = None,
    out_: Annotated[Path | None, typer.Option("--out", help="Markdown file to write.")] = None,
    no_cache: Annotated[bool, typer.Option(help="Do not read/write scores.h5.")] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS' results layout (Tables VI-VII): per dataset and OOD group, per method,
    FPR@95%TPR / detection error / AUROC, and each dataset's misclassification detection on
    id/test; best values marked; methods a store cannot score listed with the reason.

    Example: featstore protocol facets-table T40=runs/t40 T45=runs/t45 --method msp
    --method ip_ts_mlv --out facets.md
    """
    setup(json_, quiet)
    from contextlib import ExitStack

    from featstore import Store
    from featstore.protocols.facets import cell_text, facets_table, markdown_table

    methods = check_methods(method or ["msp", "temp_scaling", "mls", "odin_perturbed",
                                       "ip_ts_mlv", "oodl"])
    params = _method_params(param)
    with ExitStack() as stack:
        opened = []
        for item in stores:
            label, sep, path = item.partition("=")
            label, path = (label, path) if sep else (Path(item).name, item)
            st = stack.enter_context(Store.open(path))
            require_rows(st)
            opened.append((label, st))
        with status() as begin:
            begin(f"FACETS table over {len(opened)} store(s)")
            table = facets_table(opened, methods, params, use_cache=not no_cache)
    if out_ is not None:
        out_.parent.mkdir(parents=True, exist_ok=True)
        out_.write_text(markdown_table(table), encoding="utf-8")
        table["report"] = str(out_)

    def human() -> None:
        t = Table(title="FACETS layout: FPR@95%TPR ↓ / Detection Error ↓ / AUROC ↑ (%), best "
                        "in bold", header_style="bold", show_edge=False)
        t.add_column("dataset")
        t.add_column("rows")
        for m in methods:
            t.add_column(m, justify="right")
        for r in table["rows"]:
            what = ("misclassification" if r["kind"] == "misclassification"
                    else f"OOD {r['group']}")
            t.add_row(r["dataset"], what, *[cell_text(r["cells"][m], r["best"], m,
                                                      ("[bold]", "[/]")) for m in methods])
        out.print(t)
        for r in table["rows"]:
            for m, w in r["warnings"].items():
                err.print(f"warning: {r['dataset']} {m}: {w}", highlight=False)
        for d, ms in table["skipped"].items():
            for m, why in ms.items():
                out.print(f"{d}: {m} skipped ({why})", highlight=False)
        if out_ is not None:
            out.print(f"wrote {out_}", highlight=False)

    emit(table, human)


@protocol_app.command()
def lists2spec(
    directory: Annotated[Path, typer.Argument(help="Directory of image lists (*.txt).")],
    root: Annotated[Path, typer.Option(help="Image root the list paths are relative to.")],
    out_: Annotated[Path, typer.Option("--out", help="Spec file to write (TOML).")],
    id_name: Annotated[str | None, typer.Option("--id", help="ID dataset name (default: each "
                                                             "list's parent directory).")] = None,
    root_map: Annotated[list[str] | None, typer.Option(
        help="TOPDIR=PATH: image root for the lists under DIR/TOPDIR; repeatable.")] = None,
    classes: Annotated[str | None, typer.Option(
        help="The model's class list (a class-per-line file, names or wnids, or an "
             "ImageFolder): written into the spec; FACETS ID class fields are mapped through "
             "it.")] = None,
    own_index_source: Annotated[list[str] | None, typer.Option(
        help="FACETS source whose class indices are the model's own (e.g. places365); "
             "repeatable.")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Turn a directory of OpenOOD (`path label`), IS-OOD (`cov_<c>_sem_<s>.txt`) and FACETS
    (`<0|1> <source> <class> <path>`) image lists into a benchmark spec (rules: README).

    Example: featstore protocol lists2spec benchmark_imglist/cifar10 --root images_classic
    --out cifar10.toml
    """
    setup(json_, quiet)
    from featstore.protocols.lists import lists_to_spec

    mapping: dict[str, str] = {}
    for item in root_map or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"--root-map {item!r}: expected TOPDIR=PATH")
        mapping[key] = value
    if not root.is_dir():
        from featstore.errors import InputError

        raise InputError(f"--root {str(root)!r}: directory not found")
    class_list = _read_classes(classes) if classes is not None else None
    result = lists_to_spec(directory, root, out_, id_name, mapping, class_list,
                           tuple(own_index_source or ()))
    emit(result, lambda: _print_lists(result, out_))


def _print_lists(result: dict, out_: Path) -> None:
    table = Table(title=f"{out_}", header_style="bold", show_edge=False)
    for col in ("split", "usage", "rows", "rule", "lists"):
        table.add_column(col, justify="right" if col == "rows" else "left")
    for s in result["splits"]:
        table.add_row(s["name"], s["usage"], str(s["rows"]), s["rule"],
                      ", ".join(Path(p).name for p in s["lists"]))
    out.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(protocol_app, name="protocol")

