"""`featstore protocol ...`: evaluation protocols from the literature (OSR splits, WordNet /
tier class assignment, shift-level grids, image-list conversion). Each command parses its
options, calls one function of `featstore.workflows.protocols` / `featstore.workflows.experiments`
and prints."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from featstore.errors import InputError, UsageError

from .commands_run import LayoutOpt
from .commands_train import train_progress
from .common import check_methods, method_params, require_rows
from .console import JsonOpt, QuietOpt, emit, err, log, out, progress_enabled, setup, status
from .executor_opts import (
    ExecutorConfigOpt,
    ExecutorOpt,
    WorkersOpt,
    WorkOpt,
    make_cli_executor,
    work_dir,
)

protocol_app = typer.Typer(help="Evaluation protocols from the literature: OSR splits, WordNet "
                                "class assignment, shift-level grids, image-list conversion.",
                           no_args_is_help=True)

OutDirOpt = Annotated[Path, typer.Option("--out", help="Output directory.")]
OptionalOutDirOpt = Annotated[Path | None, typer.Option("--out", help="Output directory.")]
MethodParamOpt = Annotated[list[str] | None, typer.Option(help="method.k=v scorer parameter.")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not read/write scores.h5.")]
ImagesRootOpt = Annotated[Path | None, typer.Option(help="Root of an --images list.")]
OsrDataOpt = Annotated[str, typer.Option(
    help="'digits' (the demo digits, 10 classes), an ImageFolder directory or an image list.")]
OsrSeedsOpt = Annotated[int, typer.Option(
    help="Random class divisions per ratio (the training seed follows the division's).")]
OsrRunsOpt = Annotated[int, typer.Option(
    help="Training runs per division (seed s + 1000 r): the paper's 7 runs x 5 divisions.")]
OsrMethodsOpt = Annotated[str, typer.Option(
    help="Comma-separated: 'all' or the ten rows (MSP, ViM, KNN, ConfBranch, LogitNorm, G-ODIN, "
         "OE, MCD, MC-Dropout, TempScaling: each trains its method) or any post-hoc scorer (on "
         "the ce model).")]
OsrArchOpt = Annotated[str | None, typer.Option(
    help="Architecture (default: the demo ResNet for digits, else resnet50).")]
OsrPresetOpt = Annotated[str | None, typer.Option(
    help="Training preset (default for file data: remote-sensing = SGD 0.01, momentum 0.9, wd "
         "5e-4, constant lr, 100 epochs).")]
OsrEpochsOpt = Annotated[int | None, typer.Option(help="Epochs (default 6 for digits, else "
                                                       "100).")]
OsrLrOpt = Annotated[float | None, typer.Option(help="SGD lr (default 0.05 for digits, else "
                                                     "0.01).")]
OsrBatchOpt = Annotated[int | None, typer.Option(help="Batch size (default 32 for digits, else "
                                                      "128).")]
OsrAugmentOpt = Annotated[str | None, typer.Option(
    help="none | flip | crop | flip+crop (default crop for digits, else flip+crop).")]
OsrAuxOpt = Annotated[Path | None, typer.Option(
    help="ImageFolder of auxiliary outliers for OE / MCD (digits: scikit-image crops).")]
NoTuneOpt = Annotated[bool, typer.Option(
    "--no-tune", help="Score at default parameters instead of tuning on ood/osr/open_val "
                      "(RS §2.5).")]
ThresholdOpt = Annotated[list[float] | None, typer.Option(
    help="Threshold(s) T; repeatable (default 0.40, 0.45, 0.50 = T40, T45, T50).")]
RuleOpt = Annotated[str, typer.Option(help="distance (ID when 1 - sim <= T, FACETS) | "
                                           "similarity (ID when sim >= T)")]
LevelsEdgesOpt = Annotated[str | None, typer.Option(
    help="Hand-set level edges of the degrees: 'e0,e1,...' for both axes or 'SEM;COV' (same "
         "count; replaces --levels/--binning).")]
RootMapOpt = Annotated[list[str] | None, typer.Option(
    help="TOPDIR=PATH: image root for the lists under DIR/TOPDIR; repeatable.")]
ClassesOpt = Annotated[str | None, typer.Option(
    help="The model's class list (a class-per-line file, names or wnids, or an ImageFolder): "
         "written into the spec; FACETS ID class fields are mapped through it.")]
OwnIndexOpt = Annotated[list[str] | None, typer.Option(
    help="FACETS source whose class indices are the model's own (e.g. places365); "
         "repeatable.")]
NoBalanceOpt = Annotated[bool, typer.Option(
    "--no-balance", help="Do not write balance = true (FACETS balances ID and OOD test "
                         "rows at extraction).")]
SampleSeedOpt = Annotated[int, typer.Option(help="Seed of the per-class draw and of the "
                                                 "balance (sample_seed, balance_seed).")]


ValFractionOpt = Annotated[float, typer.Option(help="Share of each class's images in the val "
                                                   "lists (FACETS: val/test halves); 0 = none.")]



@protocol_app.command()
def osr(
    data: OsrDataOpt,
    out_: OutDirOpt,
    ratios: Annotated[str, typer.Option(help="Closed/open class ratios.")] = "7/3,6/4,5/5",
    seeds: OsrSeedsOpt = 5,
    runs: OsrRunsOpt = 1,
    methods: OsrMethodsOpt = "msp,vim,knn",
    arch: OsrArchOpt = None,
    preset: OsrPresetOpt = None,
    epochs: OsrEpochsOpt = None,
    lr: OsrLrOpt = None,
    batch_size: OsrBatchOpt = None,
    augment: OsrAugmentOpt = None,
    image_size: Annotated[int | None, typer.Option(help="Resize and crop side for file "
                                                        "data.")] = None,
    root: Annotated[Path | None, typer.Option(help="Image root of an image-list --data.")] = None,
    aux: OsrAuxOpt = None,
    no_tune: NoTuneOpt = False,
    param: MethodParamOpt = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N]")] = "auto",
    val_open: Annotated[str | None, typer.Option(
        "--val-open", help="paper: test every open class (RS §2.6.1 'the entire test set'), "
                           "tune on val images of those classes (default with --layout "
                           "paper; optimistic) | heldout: featstore's addition, tune on open "
                           "classes held out of the test, which then lacks them (default "
                           "otherwise).")] = None,
    executor: ExecutorOpt = None,
    executor_config: ExecutorConfigOpt = None,
    workers: WorkersOpt = None,
    layout: LayoutOpt = "default",
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Open-set recognition (remote-sensing OOD benchmark, Wang et al. 2024): random
    closed/open class divisions per ratio and seed; every requested method trained on the
    closed classes with the division's seed, extracted, tuned on ood/osr/open_val (AUROC;
    with --layout paper the paper's protocol, every open class tested (§2.6.1); otherwise
    featstore's held-out open classes, left out of the test; --val-open chooses),
    evaluated on ood/osr/open; mean ± std over --runs training runs x --seeds divisions;
    skipped runs listed with reasons. --methods defaults to msp,vim,knn (one training per
    division; the ten rows train 8 models and OE / MCD need --aux): the paper's Tables 5-10
    are --methods all --runs 7 --seeds 5 --layout paper. A preset of `featstore run`; a
    rerun resumes; its units (division x seed x training method) run where --executor says,
    sharing --out (README "Run on a cluster").

    Example: featstore protocol osr --data digits --ratios 7/3,6/4,5/5 --seeds 5 --out runs/osr
    """
    setup(json_, quiet)
    from featstore.workflows.experiments.osr_run import osr_train_settings, run_osr
    from featstore.workflows.experiments.paper_layout import check_layout
    from featstore.workflows.protocols.osr import parse_ratios, resolve_val_open

    from .commands_run import paper_file, print_experiment

    check_layout(layout)
    parse_ratios(ratios)  # a bad ratio first, as before any other check
    params = method_params(param)
    train = osr_train_settings(data == "digits", preset, epochs, lr, batch_size, augment)
    show = progress_enabled()
    runner = make_cli_executor(executor, executor_config, workers, "protocol osr")
    result = run_osr(data, out_, ratios=ratios, seeds=seeds, runs=runs, methods=methods,
                     params=params,
                     train=train, arch=arch, root=root, image_size=image_size, aux=aux,
                     tune=not no_tune, device=device,
                     val_open=resolve_val_open(val_open, layout),
                     log=log if show else None, executor=runner,
                     train_progress=(lambda label: train_progress(True, label))
                     if show else None)
    paper_file(result, layout)
    emit(result, lambda: print_experiment(result, layout))


@protocol_app.command()
def wordnet(
    id_classes: Annotated[str, typer.Option(help="ID label set: a class-per-line file or an "
                                                 "ImageFolder directory.")],
    candidates: Annotated[str, typer.Option(help="Candidate classes (file or ImageFolder).")],
    mapping: Annotated[Path | None, typer.Option(help="'class synset [synset ...]' lines for "
                                                      "names WordNet cannot resolve.")] = None,
    auto_map: Annotated[bool, typer.Option("--auto-map", help="Map other names to their first noun "
                                                "sense.")] = False,
    threshold: ThresholdOpt = None,
    rule: RuleOpt = "distance",
    images: Annotated[str | None, typer.Option(help="Candidate images: ImageFolder or an image "
                                                    "list indexing --candidates.")] = None,
    images_root: ImagesRootOpt = None,
    base_spec: Annotated[Path | None, typer.Option(help="Spec whose splits the written specs "
                                                        "extend.")] = None,
    out_: OptionalOutDirOpt = None,
    per_class: Annotated[int, typer.Option(help="Images per ID-assigned candidate class "
                                                "(FACETS Table IV: 50); 0 = every "
                                                "image.")] = 50,
    no_balance: NoBalanceOpt = False,
    sample_seed: SampleSeedOpt = 0,
    val_fraction: ValFractionOpt = 0.5,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS WordNet class assignment: similarity (mean of path, normalised Leacock-Chodorow and
    Wu-Palmer, max over ID classes) of every candidate class to the ID label set, and its ID/OOD
    assignment at each threshold; writes assignment files, image lists and specs with --out
    (as the paper: 50 images per ID-assigned class, balance = true).

    Example: featstore protocol wordnet --id-classes places.txt --candidates imagenet_wnids.txt
    --mapping places_synsets.txt --images imagenet/train --base-spec places.toml --out wn
    """
    setup(json_, quiet)
    from featstore.workflows.protocols.facets_sampling import Sampling
    from featstore.workflows.protocols.wordnet_run import wordnet_assignment

    result = wordnet_assignment(id_classes, candidates, mapping=mapping, auto_map=auto_map,
                                thresholds=threshold, rule=rule, images=images,
                                images_root=images_root, base_spec=base_spec, out=out_,
                                sampling=Sampling.of(per_class, not no_balance, sample_seed,
                                                     val_fraction))
    for what, key in (("ID", "id_classes"), ("candidate", "candidates")):
        if unmapped := result[key]["unmapped"]:
            err.print(f"unmapped {what} classes ({len(unmapped)}): {', '.join(unmapped)} "
                      "(map them with --mapping or --auto-map)", highlight=False, markup=False)
        for cls, senses in result[key]["ambiguous"].items():
            err.print(f"warning: --auto-map: {what} class {cls!r} has {len(senses)} noun "
                      f"senses; used {senses[0]} (others: {', '.join(senses[1:4])}"
                      f"{', ...' if len(senses) > 4 else ''}); pin it with --mapping",
                      highlight=False, markup=False)
    emit(result, lambda: _print_wordnet(result))


def _print_wordnet(result: dict) -> None:
    assignments = result["assignments"]
    table = Table(title=f"WordNet assignment ({result['rule']} rule): sim = mean(path, LCH/max, "
                        "Wu-Palmer), max over ID classes", header_style="bold", show_edge=False)
    for col in ("candidate", "synset", "sim", "nearest ID class", *assignments):
        table.add_column(col, justify="right" if col == "sim" else "left")
    for s in sorted(result["scores"], key=lambda s: -s["sim"]):
        table.add_row(s["name"], s["synset"], f"{s['sim']:.3f}",
                      f"{s['nearest']} ({s['nearest_synset']})",
                      *[a[s["name"]] for a in assignments.values()])
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
    images_root: ImagesRootOpt = None,
    base_spec: Annotated[Path | None, typer.Option(help="Spec the written specs extend.")] = None,
    out_: OptionalOutDirOpt = None,
    skip_untiered: Annotated[bool, typer.Option(
        "--skip-untiered", help="Leave out (and count) images of classes the tier file does "
                                "not list, instead of stopping.")] = False,
    per_class: Annotated[int, typer.Option(help="Images per ID-assigned class; 0 = every "
                                                "image (FACETS Table V).")] = 0,
    no_balance: NoBalanceOpt = False,
    sample_seed: SampleSeedOpt = 0,
    val_fraction: ValFractionOpt = 0.5,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS OODness tiers: T1 (tiers 0-1 ID, 2-3 OOD) and T2 (tiers 0-2 ID, 3 OOD).
    Images of a class without a tier stop the command unless --skip-untiered. Written specs
    balance ID and OOD test rows (balance = true) as the paper.

    Example: featstore protocol tiers --tiers sun397_tiers.txt --images sun397/ --base-spec
    places.toml --out facets
    """
    setup(json_, quiet)
    from featstore.workflows.protocols.facets_sampling import Sampling
    from featstore.workflows.protocols.wordnet_run import tier_assignment

    result = tier_assignment(tiers_file, images=images, images_root=images_root,
                             base_spec=base_spec, out=out_, skip_untiered=skip_untiered,
                             sampling=Sampling.of(per_class, not no_balance, sample_seed,
                                                  val_fraction))

    def human() -> None:
        for tag, a in result["assignments"].items():
            n_id = sum(v == "id" for v in a.values())
            out.print(f"{tag}: {n_id} classes ID, {len(a) - n_id} OOD")
        if result["untiered"]:
            out.print(f"left out: {sum(result['untiered'].values())} images of "
                      f"{len(result['untiered'])} classes without a tier", highlight=False)

    emit(result, human)


def _fmt(v: float | None) -> str:
    return "N/A" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


@protocol_app.command("shift-grid")
def shift_grid_cmd(
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    method: Annotated[list[str], typer.Option(help="Scorer; repeatable.")],
    metric: Annotated[str, typer.Option(help="Metric of the grid and the table.")] = "auroc",
    levels: Annotated[int, typer.Option(help="Levels per axis (degrees binning).")] = 8,
    binning: Annotated[str, typer.Option(help="equal | quantile")] = "equal",
    levels_edges: LevelsEdgesOpt = None,
    min_count: Annotated[int, typer.Option(help="Cells with fewer samples are N/A.")] = 10,
    degrees: Annotated[Path | None, typer.Option(help="Per-row shift degrees (.npz from "
                                                      "shift-degrees).")] = None,
    param: MethodParamOpt = None,
    no_cache: NoCacheOpt = False,
    executor: ExecutorOpt = None,
    executor_config: ExecutorConfigOpt = None,
    workers: WorkersOpt = None,
    work: WorkOpt = None,
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
    from featstore.workflows.protocols.shift import load_degrees, parse_level_edges
    from featstore.workflows.protocols.shift_run import shift_grids

    check_methods(method)
    params = method_params(param)
    edges = parse_level_edges(levels_edges) if levels_edges is not None else None
    deg = load_degrees(degrees) if degrees is not None else None
    runner = make_cli_executor(executor, executor_config, workers, "protocol shift-grid")
    if runner is not None:
        from featstore.workflows.experiments.workflows import shift_grid_units

        with Store.open(store) as st:
            require_rows(st)
        with work_dir(runner, work, "protocol shift-grid") as wd:
            result = shift_grid_units(runner, wd, store, method, metric, params=params,
                                      levels=levels, binning=binning, min_count=min_count,
                                      degrees=degrees, use_cache=not no_cache,
                                      levels_edges=edges, log=log)
        emit(result, lambda: _print_shift_grid(result, min_count))
        return
    with Store.open(store) as st, status() as begin:
        require_rows(st)
        result = shift_grids(st, method, metric, params=params, levels=levels, binning=binning,
                             min_count=min_count, degrees=deg, use_cache=not no_cache,
                             levels_edges=edges, begin=begin)
    emit(result, lambda: _print_shift_grid(result, min_count))


def _print_shift_grid(result: dict, min_count: int) -> None:
    metric = result["metric"]
    for p in result["results"]:
        levels, values = p["levels"], p["values"][metric]
        t = Table(title=f"{p['method']}: {metric} per cell (rows: covariate level, columns: "
                        f"semantic level; N/A: < {min_count} samples)", header_style="bold",
                  show_edge=False)
        t.add_column("")
        for s in range(levels):
            t.add_column(f"sem_{s}", justify="right")
        t.add_column("mean", justify="right")
        cov_means = p["level_means"]["covariate"]
        for c in range(levels):
            t.add_row(f"cov_{c}", *[_fmt(values[c][s]) for s in range(levels)],
                      _fmt(cov_means[c]))
        t.add_row("mean", *[_fmt(v) for v in p["level_means"]["semantic"]], "")
        out.print(t)
        if p.get("outside"):
            out.print(f"{p['outside']} OOD rows lie outside --levels-edges and enter no cell",
                      highlight=False)
    t = Table(title=f"correlation / sensitivity of {metric} with the shift level (IS-OOD "
                    "Table 1)", header_style="bold", show_edge=False)
    t.add_column("method")
    for col in ("semantic corr", "semantic sens", "covariate corr", "covariate sens"):
        t.add_column(col, justify="right")
    for p in result["results"]:
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
    from featstore.workflows.protocols.shift_run import store_shift_degrees

    with Store.open(store) as st:
        st.split(id_split)
        require_rows(st)
        with status() as begin:
            result = store_shift_degrees(st, out_, laid=laid, sem_dims=sem_dims,
                                         cov_dims=cov_dims, k=k, id_split=id_split, begin=begin)

    def human() -> None:
        for n, s in result["splits"].items():
            out.print(f"{n}: {s['rows']} rows, mean semantic {s['semantic_mean']:.4f}, "
                      f"covariate {s['covariate_mean']:.4f}", highlight=False)
        out.print(f"wrote {out_}")

    emit(result, human)


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
    from featstore.workflows.protocols.shift import LaidConfig
    from featstore.workflows.protocols.shift_run import fit_laid_files

    config = LaidConfig(margin=margin, orth_weight=orth_weight, lr=lr, steps=steps, seed=seed)
    with status() as begin:
        result = fit_laid_files(standard, semantic_shift, covariate_shift, out_, config, begin)
    rows, cols = result["shape"]
    emit(result, lambda: out.print(f"wrote {out_}  ({rows} x {cols}, ||W^T W - I||_F = "
                                   f"{result['orthogonality_error']:.4f})"))


@protocol_app.command()
def lists2spec(
    directory: Annotated[Path, typer.Argument(help="Directory of image lists (*.txt).")],
    root: Annotated[Path, typer.Option(help="Image root the list paths are relative to.")],
    out_: Annotated[Path, typer.Option("--out", help="Spec file to write (TOML).")],
    id_name: Annotated[str | None, typer.Option("--id", help="ID dataset name (default: each "
                                                             "list's nearest enclosing directory, "
                                                             "DIRECTORY included).")] = None,
    root_map: RootMapOpt = None,
    classes: ClassesOpt = None,
    own_index_source: OwnIndexOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Turn a directory of OpenOOD (`path label`), IS-OOD (`cov_<c>_sem_<s>.txt`) and FACETS
    (`<0|1> <source> <class> <path>`) image lists into a benchmark spec (rules: README).

    Example: featstore protocol lists2spec benchmark_imglist/cifar10 --root images_classic
    --out cifar10.toml
    """
    setup(json_, quiet)
    from featstore.workflows.protocols.lists import lists_to_spec
    from featstore.workflows.protocols.wordnet import read_class_list

    mapping: dict[str, str] = {}
    for item in root_map or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"--root-map {item!r}: expected TOPDIR=PATH")
        mapping[key] = value
    if not root.is_dir():
        raise InputError(f"--root {str(root)!r}: directory not found")
    class_list = read_class_list(classes) if classes is not None else None
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
