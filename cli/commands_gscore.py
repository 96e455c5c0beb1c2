"""`featstore gscore`: unsupervised evaluation of OOD detection (scorers.gscore) — fit, predict,
evaluate — and `gscore gbench`, which builds the mini-Gbench store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from featstore import Store
from featstore.errors import InputError, UsageError
from featstore.store.fileio import atomic_write_result_json

from .common import check_methods, check_params, method_params, parse_params, require_rows
from .console import (
    JsonOpt,
    QuietOpt,
    emit,
    err,
    log,
    out,
    setup,
    split_progress,
    status,
    step_progress,
)
from .executor_opts import (
    ExecutorConfigOpt,
    ExecutorOpt,
    WorkersOpt,
    make_cli_executor,
    work_dir,
)
from .gscore_output import announce_config, print_gscore_evaluation


def _items(values: list[str] | None) -> list[str]:
    """Repeatable options that also accept comma-separated lists."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def _size(text: str | None) -> int | None:
    if text is None or text.lower() in ("", "max", "none"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--size {text!r}: expected an integer >= 2 or 'max'") from None
    if value < 2:
        raise UsageError(f"--size {value}: a meta-set needs at least 2 samples")
    return value


def _id_fraction(pools: str, fraction: float) -> float | None:
    if pools not in ("disjoint", "shared"):
        raise UsageError(f"--id-pools {pools!r}: expected disjoint or shared")
    if pools == "disjoint" and not 0.0 < fraction < 1.0:
        raise UsageError(f"--id-train-fraction {fraction}: must lie in (0, 1)")
    return fraction if pools == "disjoint" else None


def _tau_from(text: str) -> str | None:
    return None if text.strip().lower() in ("each", "none", "") else text.strip()


def _open_all(paths: list[Path]) -> list[Store]:
    stores = [Store.open(p) for p in paths]
    for st in stores:
        require_rows(st)
    return stores


def _print_fit(model_: Any, method: str, target: str, out_: Path) -> None:
    from scorers.gscore import parse_model

    mt = model_.meta_train
    tau_text = "–" if model_.tau is None else f"{model_.tau:.2f}"
    if mt.get("tau_from"):
        tau_text += f" (tuned on {mt['tau_from']}'s meta-train sets)"
    title = parse_model(f"{model_.modelling}-{model_.distance}").title
    out.print(f"[bold]{title}[/] for {method} -> {target}: tau {tau_text}, "
              f"{target} = {model_.theta1:.6g} * G + {model_.theta0:.6g}", highlight=False)
    out.print(f"meta-train: {mt['n_sets']} sets from {len(mt['splits'])} OOD splits "
              f"(mean {mt['mean_n_id']:.0f} ID + {mt['mean_n_ood']:.0f} OOD); train RMSE "
              f"{mt['train_rmse']:.2f}, Pearson {mt['pearson']:+.3f}, Spearman "
              f"{mt['spearman']:+.3f}", highlight=False)
    cv = mt.get("cv")
    if cv:
        out.print(f"cross-validated over the OOD splits ({cv['folds']} folds, each split held "
                  f"out once): RMSE {cv['rmse']:.2f}; 95% of |residuals| <= "
                  f"{cv['abs_residual_q95']:.2f} (the prediction interval's half-width)",
                  highlight=False)
    fits = mt.get("gmm_fits") or {}
    if fits.get("not_converged") or fits.get("collapsed"):
        err.print(f"warning: {fits['not_converged']} of {fits['sets']} GMM fits did not "
                  f"converge, {fits['collapsed']} collapsed", highlight=False)
    out.print(f"wrote {out_}", highlight=False)


def _print_predict(res: dict, truth: bool) -> None:
    p = res["parts"]
    out.print(f"{' + '.join(res['splits'])} ({res['n']} rows, {res['scorer']}): predicted "
              f"{res['target']} [bold]{res['predicted']:.2f}[/]"
              + (f" (95% prediction interval {res['interval'][0]:.2f} to "
                 f"{res['interval'][1]:.2f}, from the fit's cross-validated residuals)"
                 if res.get("interval") else " (no interval: the model has no cross-validated "
                                             "residuals; refit it)")
              + f"  (Gscore {res['gscore']:.6g}, {res['model']})", highlight=False)
    out.print(f"IND part mu {p['mu_ind']:.6g} sd {p['sd_ind']:.4g} (n {p['n_ind']:.0f}); "
              f"OOD part mu {p['mu_ood']:.6g} sd {p['sd_ood']:.4g} (n {p['n_ood']:.0f})",
              highlight=False)
    fit = p.get("gmm")
    if fit and (fit["collapsed"] or not fit["converged"]):
        err.print(f"warning: the GMM fit {'collapsed' if fit['collapsed'] else 'did not converge'}"
                  f" after {fit['em_steps']} EM steps; this Gscore is unreliable",
                  highlight=False)
    if truth:
        t = res.get("truth")
        out.print(f"true {res['target']}: " + ("– (needs id/ and ood/ splits)" if t is None
                                               else f"{t:.2f}"), highlight=False)


def _run_gbench_protocol(paths: list[Path], methods: list[str] | None, repeats: int,
                         splits: list[str] | None, exclude: list[str] | None,
                         results: Path | None, executor: Any = None,
                         work: Path | None = None, paper: bool = False) -> None:
    from scorers.gscore import gbench_protocol
    from scorers.gscore.spec import GBENCH_METHODS, GBENCH_PAPER_METHODS

    method_list = check_methods(_items(methods), "--methods") if methods else None
    sts = _open_all(paths)
    if executor is not None:
        from featstore.workflows.demo.gbench_units import gbench_evaluation

        for st in sts:
            st.close()
        with work_dir(executor, work, "gscore gbench") as units_dir:
            res = gbench_evaluation(executor, units_dir, paths, methods=method_list,
                                    repeats=repeats, splits=_items(splits) or None,
                                    exclude=_items(exclude) or None, log=log, paper=paper)
    else:
        with step_progress("gscore gbench") as steps:
            res = gbench_protocol(
                sts, paper=paper, methods=method_list, repeats=repeats,
                splits=_items(splits) or None, exclude=_items(exclude) or None,
                announce=announce_config(method_list or list(
                    GBENCH_PAPER_METHODS if paper else GBENCH_METHODS), ["fpr95", "auroc"]),
                progress=(lambda m: steps(description=m)) if steps else None,
                step_progress=(lambda done, total: steps(done, total)) if steps else None)
    if results is not None:
        atomic_write_result_json(results, res)
    emit(res, lambda: print_gscore_evaluation(res))


# ----------------------------------------------------------------------------- options
StoresArg = Annotated[list[Path], typer.Argument(help="Store directories.")]
TargetOpt = Annotated[str, typer.Option(help="fpr95 | auroc | fpr@tpr80 | fpr@tpr60 | aupr_in | "
                                             "aupr_out | detection_error")]
ModelOpt = Annotated[str, typer.Option(help="<kmeans|gmm|ude>-<l2|kl|kl_rev|wasserstein|w2>"
                                            "[@tau]")]
ParamOpt = Annotated[list[str] | None, typer.Option(help="k=v scorer parameter; repeatable.")]
TauOpt = Annotated[str | None, typer.Option(help="auto | none | a value in [0, 1] (default: "
                                                 "auto for UDE, none for GMM)")]
RatioOpt = Annotated[str, typer.Option(help="IND:OOD ratio of meta-sets.")]
SizeOpt = Annotated[str | None, typer.Option(help="Meta-set size (default: the largest the "
                                                  "pools allow).")]
SetsPerSplitOpt = Annotated[int, typer.Option(
    help="Seeded subsamples (meta-sets) per OOD split (1 = one meta-set per OOD dataset, as in "
         "the paper).")]
SeedOpt = Annotated[int, typer.Option(help="Seed.")]
TauFromOpt = Annotated[str, typer.Option(
    help="Detector whose meta-train sets tune a searched tau, reused for every detector (the "
         "paper: msp) | each (this detector's own).")]
HeterogeneousOpt = Annotated[bool, typer.Option(
    "--heterogeneous", help="Meta-sets with a random size and IND:OOD ratio each "
                            "(supplementary C) instead of --ratio/--size.")]
SplitsOpt = Annotated[list[str] | None, typer.Option(
    "--splits", help="Use only these OOD splits (shell patterns, comma-separated or repeated, "
                     "e.g. 'ood/photo/*').")]
ExcludeOpt = Annotated[list[str] | None, typer.Option(
    help="Leave out these OOD splits (shell patterns), e.g. class-overlapping sets (the "
         "paper's Appendix F).")]
KernelOpt = Annotated[str, typer.Option(help="UDE similarity: gauss (2 sigma^2) | paper (2 "
                                             "sigma, as printed)")]
AllowOtherOpt = Annotated[bool, typer.Option(
    "--allow-other-model", help="Use stores made by different models (pooled fit stores, or "
                                "a cross-backbone prediction).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not read/write scores.h5.")]
MethodsOpt = Annotated[list[str] | None, typer.Option(
    "--methods", "--method", help="Detectors (comma-separated or repeated); default msp.")]
ModelsOpt = Annotated[list[str] | None, typer.Option(
    "--models", "--model", help="Gscore variants; default the paper's Table 6: kmeans-l2, "
                                "gmm-kl, gmm-wasserstein, ude-kl, ude-wasserstein.")]
TargetsOpt = Annotated[list[str] | None, typer.Option(
    "--targets", "--target", help="Metrics to predict: fpr95, auroc, fpr@tpr80, fpr@tpr60, "
                                  "aupr_in, aupr_out, detection_error; default fpr95,auroc.")]
RatiosOpt = Annotated[list[str] | None, typer.Option(
    help="Robustness: other IND:OOD ratios, e.g. 1:100,1:10,10:1,100:1.")]
SizesOpt = Annotated[list[str] | None, typer.Option(
    help="Robustness: other set sizes at the main ratio, e.g. 50,100.")]
RobustModelsOpt = Annotated[list[str] | None, typer.Option(
    help="Variants in the robustness table (default: all).")]
PaperOpt = Annotated[bool, typer.Option(
    "--paper",
    help="The paper's settings where the defaults differ: one meta-set per split (§6.1), "
         "GMM with a searched tau (§5.2), the printed UDE kernel (2 sigma, §5.1), no "
         "clipping (§5.2), correlations on meta-train sets (§6.2), the tau refinement at "
         "+-0.5 step 0.01 (§5.2), Kmeans by Lloyd's algorithm from two random centroids "
         "(§5.1) (overrides --sets-per-split, --kernel). The defaults are featstore's "
         "protocol (the guide lists each difference).")]
IdPoolsOpt = Annotated[str, typer.Option(
    help="disjoint (default, featstore's: meta-train and meta-test sets draw ID rows from "
         "disjoint random parts of id/test; the paper's meta-train ID rows are a held-out "
         "fifth of the train set, §6.1) | shared (both use all id/test rows; optimistic)")]
IdTrainFractionOpt = Annotated[float, typer.Option(
    help="With disjoint pools: the share of id/test rows for meta-train sets.")]
RobustHeterogeneousOpt = Annotated[bool, typer.Option(
    "--robust-heterogeneous", help="Add a heterogeneous-sets row to the robustness table.")]
SpecFileOpt = Annotated[Path | None, typer.Option(
    "--spec", metavar="FILE", help="Gscore spec (TOML): the evaluation's settings in a file "
                                   "(the options that set them stay at their defaults).")]
MethodParamOpt = Annotated[list[str] | None, typer.Option(
    help="method.k=v scorer parameter, e.g. odin.temperature=1000.")]


def fit(
    stores: Annotated[list[Path], typer.Argument(help="Store directories (meta-train).")],
    method: Annotated[str, typer.Option(help="Scorer (detector).")] = "msp",
    target: TargetOpt = "fpr95",
    model: ModelOpt = "ude-wasserstein",
    out_: Annotated[Path, typer.Option("--out", help="Model JSON to write.")] = Path(
        "gscore.json"),
    param: ParamOpt = None,
    tau: TauOpt = None,
    ratio: RatioOpt = "1:1",
    size: SizeOpt = None,
    sets_per_split: SetsPerSplitOpt = 10,
    seed: Annotated[int, typer.Option(help="Subsampling seed.")] = 0,
    tau_from: TauFromOpt = "msp",
    heterogeneous: HeterogeneousOpt = False,
    splits: SplitsOpt = None,
    exclude: ExcludeOpt = None,
    kernel: KernelOpt = "gauss",
    allow_other_model: AllowOtherOpt = False,
    no_cache: NoCacheOpt = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Fit a Gscore regression (tau searched on meta-train sets) on every OOD test split
    of the stores, mixed with id/test rows; write it as JSON.

    Example: featstore gscore fit runs/gbench/store --method msp --target fpr95
    --model ude-wasserstein --out gscore.json
    """
    setup(json_, quiet)
    from scorers.gscore import fit_gscore

    params = parse_params(param)
    check_params(method, params)
    sts = _open_all(stores)
    with status() as begin:
        begin(f"fitting the {model} Gscore of {method} -> {target} on "
              f"{len(sts)} store{'s' if len(sts) != 1 else ''}")
        model_ = fit_gscore(sts, method, target, model, params=params,
                            tau="default" if tau is None else tau, ratio=ratio,
                            size=_size(size), sets_per_split=sets_per_split, seed=seed,
                            tau_from=_tau_from(tau_from), heterogeneous=heterogeneous,
                            splits=_items(splits) or None, exclude=_items(exclude) or None,
                            ude_kernel=kernel, allow_other_model=allow_other_model,
                            use_cache=not no_cache)
    model_.save(out_)
    emit({"out": str(out_), "model": json.loads(out_.read_text())},
         lambda: _print_fit(model_, method, target, out_))


def predict(
    model_file: Annotated[Path, typer.Argument(help="Model JSON from `gscore fit`.")],
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    split: Annotated[list[str], typer.Option(help="Split(s) forming the unlabelled set; "
                                                  "repeatable (rows concatenated).")],
    allow_other_model: AllowOtherOpt = False,
    truth: Annotated[bool, typer.Option("--truth", help="Also print the true metric when the set "
                                             "holds id/ and ood/ splits.")] = False,
    no_cache: NoCacheOpt = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Predict the detector's metric on an unlabelled set (labels are ignored).

    Example: featstore gscore predict gscore.json runs/gbench/store --split id/test
    --split ood/photo/astronaut
    """
    setup(json_, quiet)
    from scorers.gscore import GscoreModel, predict_gscore

    try:
        model_ = GscoreModel.load(model_file)
    except UsageError as exc:  # missing file, bad JSON, not a model: the input is wrong
        raise InputError(str(exc)) from None
    with Store.open(store) as st:
        for name in split:
            st.split(name)
        require_rows(st, split)
        res = predict_gscore(model_, st, split, force=allow_other_model,
                             use_cache=not no_cache, with_truth=truth)
    if res["forced"]:
        err.print("warning: the store comes from another model than the fit stores",
                  highlight=False)
    emit(res, lambda: _print_predict(res, truth))


def evaluate(
    stores: StoresArg,
    methods: MethodsOpt = None,
    models: ModelsOpt = None,
    targets: TargetsOpt = None,
    ratio: Annotated[str, typer.Option(help="IND:OOD ratio of the main meta-sets.")] = "1:1",
    size: Annotated[str | None, typer.Option(help="Main meta-set size (default: max).")] = None,
    ratios: RatiosOpt = None,
    sizes: SizesOpt = None,
    robust_models: RobustModelsOpt = None,
    repeats: Annotated[int, typer.Option(help="Random meta-train/test partitions.")] = 5,
    sets_per_split: SetsPerSplitOpt = 10,
    train_fraction: Annotated[float, typer.Option(help="Share of OOD splits used for "
                                                       "meta-train.")] = 0.75,
    seed: SeedOpt = 0,
    id_pools: IdPoolsOpt = "disjoint",
    id_train_fraction: IdTrainFractionOpt = 0.5,
    tau_from: TauFromOpt = "msp",
    heterogeneous: HeterogeneousOpt = False,
    robust_heterogeneous: RobustHeterogeneousOpt = False,
    splits: SplitsOpt = None,
    exclude: ExcludeOpt = None,
    param: MethodParamOpt = None,
    baselines: Annotated[bool, typer.Option(
        "--baselines/--no-baselines", help="The confidence-score and auto-evaluation "
                                           "(Fréchet distance) baselines on the same sets.")
    ] = True,
    cv: Annotated[int | None, typer.Option(
        help="K-fold cross-validation over the OOD splits instead of random partitions: each "
             "round tests every split once (K folds).")] = None,
    rounds: Annotated[int, typer.Option(help="With --cv: rounds of cross-validation (every "
                                             "split tested this many times).")] = 10,
    paper: PaperOpt = False,
    kernel: KernelOpt = "gauss",
    spec_file: SpecFileOpt = None,
    no_cache: NoCacheOpt = False,
    out_: Annotated[Path | None, typer.Option("--out", help="Write results JSON.")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Gscore's evaluation protocol (featstore's by default, --paper for the paper's settings
    where they differ): meta-train / meta-test partitions of the OOD splits, RMSE of
    the predicted metric (Table 1/6 style), Pearson/Spearman, baselines, robustness to the
    IND:OOD ratio and set size, and (several stores) the cross-store table.

    Example: featstore gscore evaluate runs/gbench/store --methods msp,energy,odin
    --ratios 1:100,1:10,10:1,100:1 --sizes 50,100 --repeats 5
    """
    setup(json_, quiet)
    from featstore.specs.gscore import GscoreSpec
    from scorers.gscore import DEFAULT_MODELS, evaluate_gscore

    if rounds < 1:
        raise UsageError(f"--rounds {rounds}: must be >= 1")
    _id_fraction(id_pools, id_train_fraction)
    spec = _chosen_spec(spec_file, GscoreSpec(
        methods=_items(methods) or ["msp"], models=_items(models) or list(DEFAULT_MODELS),
        targets=_items(targets) or ["fpr95", "auroc"], ratio=ratio, size=_size(size),
        heterogeneous=heterogeneous, sets_per_split=sets_per_split,
        repeats=rounds if cv else repeats, seed=seed, train_fraction=train_fraction,
        id_pools=id_pools, id_train_fraction=id_train_fraction,
        tau_from=_tau_from(tau_from) or "each", splits=_items(splits) or None,
        exclude=_items(exclude) or None, baselines=baselines, ude_kernel=kernel, cv=cv,
        paper=paper, ratios=list(_items(ratios)), sizes=[_size(s) for s in _items(sizes)],
        robust_heterogeneous=robust_heterogeneous,
        robust_models=_items(robust_models) or None, params=method_params(param)))
    sts = _open_all(stores)
    with step_progress("gscore evaluate") as steps:
        res = evaluate_gscore(
            sts, **spec.options(), use_cache=not no_cache,
            announce=announce_config(spec.methods, spec.targets), **_step_callbacks(steps))
    if out_ is not None:
        atomic_write_result_json(out_, res)
    emit(res, lambda: print_gscore_evaluation(res))


def _chosen_spec(spec_file: Path | None, given: Any) -> Any:
    """The settings: the options' (`given`, its detectors checked), or the --spec file's
    (then an option that sets what the file sets is a UsageError naming it)."""
    from dataclasses import fields

    from featstore.specs.gscore import GscoreSpec

    if spec_file is None:
        given.methods = check_methods(given.methods, "--methods")
        return given
    default = GscoreSpec()
    for f in fields(GscoreSpec):
        if f.name != "path" and getattr(given, f.name) != getattr(default, f.name):
            option = {"ude_kernel": "kernel", "params": "param"}.get(f.name, f.name)
            raise UsageError(f"--spec {str(spec_file)!r} sets the evaluation's settings; "
                             f"drop --{option.replace('_', '-')} (or set it in the spec)")
    return _spec_from_file(spec_file)


def _spec_from_file(spec_file: Path) -> Any:
    """The --spec file's GscoreSpec with its detector names and [params] checked (a bad
    name or setting in the file is an InputError naming it)."""
    from featstore.specs.gscore import GscoreSpec
    from scorers import check_scorers, get_scorer

    spec = GscoreSpec.load(spec_file)
    where = f"gscore spec {str(spec_file)!r}"
    spec.methods = check_scorers(spec.methods, f"{where}: methods", InputError)
    params = {}
    for method, table in spec.params.items():
        name = check_scorers([method], f"{where} [params]", InputError)[0]
        try:
            get_scorer(name, **table)
        except (ValueError, UsageError) as exc:
            raise InputError(f"{where} [params.{method}]: {exc}") from None
        params[name] = table
    spec.params = params
    return spec


def _step_callbacks(steps: Any) -> dict[str, Any]:
    """`progress` (a step's description) and `step_progress` (done, total) for the Gscore
    protocol, drawing on a `step_progress` bar (none with --quiet)."""
    if not steps:
        return {"progress": None, "step_progress": None}
    return {"progress": lambda m: steps(description=m),
            "step_progress": lambda done, total: steps(done, total)}


def gbench(
    stores: Annotated[list[Path] | None, typer.Argument(
        help="Your own stores (many OOD splits, one or several stores): run the Gbench "
             "protocol on them instead of building the mini-Gbench.")] = None,
    out_: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path(
        "runs/gbench"),
    backbone: Annotated[list[str] | None, typer.Option(
        help="pretrained (the demo's frozen ImageNet EfficientNet-Lite0 + linear head) | "
             "scratch (the demo's small ResNet) | w8 | w32 (the scratch ResNet at width 8 / "
             "32); several (comma-separated or repeated): one store each (default "
             "pretrained).")] = None,
    weights: Annotated[Path | None, typer.Option(
        help="Checkpoint to reuse, e.g. runs/demo/model.pt of `featstore demo` with the same "
             "--backbone (default: OUT/model.pt, trained once if missing).")] = None,
    epochs: Annotated[int, typer.Option(help="Training epochs if a scratch ResNet is "
                                             "trained.")] = 12,
    methods: Annotated[list[str] | None, typer.Option(
        "--methods", help="With STORES: detectors (default msp,odin,energy,mls).")] = None,
    repeats: Annotated[int, typer.Option(help="With STORES: random partitions.")] = 5,
    splits: Annotated[list[str] | None, typer.Option(
        "--splits", help="With STORES: OOD splits to use (shell patterns).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        help="With STORES: OOD splits to leave out (shell patterns).")] = None,
    results: Annotated[Path | None, typer.Option(
        help="With STORES: write the results JSON here.")] = None,
    paper: Annotated[bool, typer.Option(
        "--paper", help="The paper's settings (`gscore evaluate --paper`) and its ODIN with "
                        "input perturbation (ref. [33]): building, the stores also hold "
                        "ODIN's perturbed logits at T = 1000, eps = 0.0014; with STORES, "
                        "odin_perturbed replaces odin (the stores need those logits: "
                        "extract with --odin-grid 1000:0.0014).")] = False,
    executor: ExecutorOpt = None,
    executor_config: ExecutorConfigOpt = None,
    workers: WorkersOpt = None,
    work: Annotated[Path | None, typer.Option(
        "--work", help="With STORES and --executor/--workers: the units' directory (states, "
        "logs, plan.json), reached by every worker (default with the local executor: a "
        "temporary directory). Building: OUT holds them.")] = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Build the mini-Gbench store: 44 OOD sets from the demo's real bundled data (held-out
    digits, scikit-image photographs and textures, faces, noise, covariate-shifted
    digits), extracted with the demo's pretrained backbone (or --backbone scratch). Given
    STORES, run the Gbench protocol (`gscore evaluate` with the paper's detectors, variants,
    targets and the robustness rows: IND:OOD 1:100..100:1, sizes 100/50, heterogeneous
    sets) on them instead. --executor slurm|ray (or --workers N) runs each backbone's build,
    or the protocol on STORES, as a unit there (README "Run on a cluster").

    Example: featstore gscore gbench --out runs/gbench --weights runs/demo/model.pt;
    featstore gscore gbench --backbone w8,w32 --out /shared/gbench --executor slurm;
    featstore gscore gbench my/store_a my/store_b --exclude 'ood/faces/*'
    """
    setup(json_, quiet)
    runner = make_cli_executor(executor, executor_config, workers, "gscore gbench")
    if stores:
        _run_gbench_protocol(stores, methods, repeats, splits, exclude, results, runner, work,
                             paper)
        return
    from featstore.workflows.demo.run import build_gbench_command

    summary = build_gbench_command(out_, backbone=_items(backbone) or "pretrained",
                                   weights=weights, epochs=epochs,
                                   extraction=split_progress, executor=runner, paper=paper)
    emit(summary, lambda: print_gbench_store(summary))


def print_gbench_store(summary: dict) -> None:
    from .commands_store import print_store_summary

    for one in summary.get("stores", [summary]):
        print_store_summary(one)
        out.print(f"mini-Gbench store {one['path']}: {one['ood_splits']} OOD splits, built "
                  f"in {one['seconds']:.1f} s", highlight=False)


def register(app: typer.Typer) -> None:
    gs = typer.Typer(name="gscore", no_args_is_help=True, rich_markup_mode="rich",
                     help="Unsupervised evaluation of OOD detection (Gscore, Zhang, Deng & "
                          "Zheng): predict a detector's AUROC / FPR95 on an unlabelled set.")
    app.add_typer(gs, name="gscore")
    for command in (fit, predict, evaluate, gbench):
        gs.command()(command)
