"""Store commands: demo, extract, import, info."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from featstore.errors import InputError
from featstore.store.summary import human_bytes, store_summary, verified_summary
from featstore.store.textsafe import markup_text

from .commands_score import print_evaluation
from .common import open_store, parse_params
from .console import JsonOpt, QuietOpt, emit, out, setup, split_progress, status
from .tables import Column, hidden_note, print_fitted


def print_store_summary(summary: dict, wide: bool = False, id_accuracy: bool = True) -> None:
    """Store, model and transform lines, then one table row per split (the split name never
    cut; empty columns hidden; a `complete` column only when a split is incomplete), then each
    ID split's accuracy check (`id_accuracy=False`: its warnings only, where the caller prints
    the accuracy itself, as the demo's evaluation does with its interval)."""
    model = summary["model"]
    out.print(f"[bold]store[/] {markup_text(summary['path'])}  (format "
              f"v{summary['format_version']}, featstore {summary['featstore_version']})")
    out.print(f"[bold]model[/] {markup_text(model.get('name', '?'))} "
              f"{markup_text('[' + str(model.get('architecture', '?')) + ']')}  "
              f"sha256 {model['sha256'][:16]}…  D={summary['feature_dim']} "
              f"C={summary['num_classes']}", highlight=False)
    if model.get("transform"):
        out.print(f"[bold]transform[/] {markup_text(model['transform'])}", highlight=False)
    print_layers(summary.get("layers") or {})
    splits = summary["splits"]
    dims = [s["dims"] or {} for s in splits]
    cols = [Column("split", [s["name"] for s in splits], justify="left", priority=0),
            Column("role", [s["role"] for s in splits], justify="left", priority=2),
            Column("group", [s["group"] or "" for s in splits], justify="left", priority=2),
            Column("usage", [s["usage"] or "" for s in splits], justify="left", priority=2),
            Column("rows", [f"{s['num_rows']:,}" if s["num_rows"] is not None else ""
                            for s in splits], priority=0),
            Column("D", [str(d.get("features", "")) for d in dims], priority=1),
            Column("C", [str(d.get("logits", "")) for d in dims], priority=1),
            Column("dtype", [s["dtype"] or "" for s in splits], justify="left", priority=3),
            Column("size", [human_bytes(s["size_bytes"]) for s in splits], priority=3),
            Column("extras", [", ".join(s["extras"]) for s in splits], justify="left",
                   priority=4)]
    if not all(s["complete"] for s in splits):  # the column says something only then
        cols.append(Column("complete", ["yes" if s["complete"] else "NO" for s in splits],
                           justify="left", priority=0,
                           styles=[None if s["complete"] else "red" for s in splits]))
    hidden = print_fitted(out, cols, wide=wide)
    if (note := hidden_note(hidden)) is not None:
        out.print(note, highlight=False)
    for name, check in (summary.get("id_checks") or {}).items():
        if id_accuracy:
            out.print(f"[bold]{markup_text(name)}[/] ID accuracy {check['accuracy']:.2f}% over "
                      f"{check['rows']:,} rows (chance {check['chance']:.2f}%)", highlight=False)
        if check.get("warning"):
            # escaped: the text names spec keys in brackets ("[transform]"), not rich markup
            out.print(f"[bold red]WARNING[/] {markup_text(name)}: "
                      f"{markup_text(check['warning'])}",
                      highlight=False)


def print_layers(layers: dict) -> None:
    """The hooked layers: the feature's layer, and the head (W, b) or its absence."""
    if layers.get("has_head") and layers.get("head"):
        text = (f"features = input of {layers['head']!r}; logits = the model's output = "
                f"{layers['head']!r} (W, b stored)")
    elif not layers.get("has_head") and layers.get("feature"):
        text = (f"features = {layers.get('taken', 'output')} of {layers['feature']!r}; logits = "
                "the model's output; no head (W, b)")
    elif not layers.get("has_head", True):
        text = "no head (W, b): features and logits only"
    else:
        return
    out.print(f"[bold]layers[/] {markup_text(text)}", highlight=False)


StoreArg = Annotated[Path, typer.Argument(help="Store directory.")]
OutStoreOpt = Annotated[Path, typer.Option("--out", help="Store directory to write.")]
DtypeOpt = Annotated[str, typer.Option(help="Feature dtype: float32 | float16")]
WorkersOpt = Annotated[int | None, typer.Option(help=(
    "DataLoader worker processes (default min(4, cores), and none for a split of at most one "
    "batch); a value given here is used for every split."))]
FeatureLayerOpt = Annotated[str | None, typer.Option(
    help="The classifier nn.Linear to hook (default: the Linear whose output the model "
         "returns); a layer that is not a Linear gives its output as the feature (4-D maps "
         "average-pooled) with the model's own logits and no head (W, b).")]
NoHeadOpt = Annotated[bool, typer.Option(
    "--no-head", help="Store the --feature-layer's features and the model's own logits "
    "without a head (W, b): two-head, distilled or non-linear heads. Scorers that need W skip.")]
McSamplesOpt = Annotated[int, typer.Option(
    help="Also store T stochastic passes with dropout on as extra/mc_logits (T, N, C).")]
OdinGridOpt = Annotated[str | None, typer.Option(
    help="Also store ODIN-perturbed logits extra/odin_logits/<T>_<eps> for a grid "
         "'T:eps[,eps...][;T:eps...]', e.g. '1000:0.0014,0.0028'.")]
FeatureMapsOpt = Annotated[bool, typer.Option(
    "--feature-maps",
    help="Also store the map pooled into the feature as extra/feature_maps (N, Cmap, H, W), "
         "for rankfeat.")]
FeatureLayersOpt = Annotated[str | None, typer.Option(
    "--feature-layers",
    help="Also store views of named modules' outputs, 'NAME[,NAME...]' (e.g. "
         "'layer2,layer3,layer4'): extra/layer_features/NAME (global average pool, N x C) and "
         "extra/layer_featurenorm/NAME (mean channel L2 norm of the ReLU'd map), for "
         "mds_ensemble, featurenorm and oodl --param layer=NAME.")]
GramPowersOpt = Annotated[int, typer.Option(
    "--gram-powers",
    help="With --feature-layers: also store extra/layer_gram/NAME (N x P x C), the Gram "
         "matrices' row sums of orders p = 1..P, for gram (OpenOOD: P = 5); 0: none.")]
AdascaleOpt = Annotated[str | None, typer.Option(
    "--adascale-o",
    help="Also store the penultimate features of AdaSCALE's perturbed input "
         "extra/adascale_features/O (N x D) for each fraction O of moved input entries, "
         "e.g. '0.05', for adascale_a / adascale_l (one extra backward and forward pass).")]
UsageOpt = Annotated[list[str] | None, typer.Option(
    help="SPLIT=train|val|test, e.g. ood/near/ssb=val to flag an OOD split for validation "
         "(sweeps choose on val splits); repeatable.")]
DemoMethodsOpt = Annotated[str | None, typer.Option(
    help="Instead: the remote-sensing benchmark's ten-method table (MSP, ViM, KNN, ConfBranch, "
         "LogitNorm, G-ODIN, OE, MCD, MC-Dropout, TempScaling): 'all' or a comma list; trains "
         "each method on the demo digits (CPU, minutes).")]
DemoBackboneOpt = Annotated[str, typer.Option(
    help="pretrained (frozen ImageNet EfficientNet-Lite0 + a linear head on the digits) | "
         "scratch (the small ResNet trained from scratch, 32 px)")]
ScaleOpt = Annotated[float, typer.Option(
    help="Fraction (0, 1] of every split's images, for quick runs.")]


def info(
    store: StoreArg,
    verify: Annotated[bool, typer.Option("--verify",
                                         help="Recompute sha256 of every split file.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column at full width.")] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Splits, shapes, dtypes, sizes, provenance and completeness of a store.

    Example: featstore info runs/demo/store --verify
    """
    setup(json_, quiet)
    with open_store(store) as st:
        summary = verified_summary(st, verify)
    problems = summary.get("verify", {}).get("problems", [])

    def human() -> None:
        print_store_summary(summary, wide)
        if verify and not problems:
            out.print("[green]verify: every split file matches its sha256[/]")

    emit(summary, human)
    if problems:
        raise InputError(f"store {str(store)!r}: {len(problems)} split file(s) do not match "
                         f"the manifest: {'; '.join(problems)}")


def extract(
    model: Annotated[str, typer.Option(help="torchvision name, module:callable or TorchScript "
                                            "file.")],
    spec: Annotated[Path, typer.Option(help="Benchmark spec (TOML).")],
    out_: OutStoreOpt,
    weights: Annotated[Path | None, typer.Option(help="Local weights file (state dict).")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N]")] = "auto",
    dtype: DtypeOpt = "float32",
    batch_size: Annotated[int, typer.Option(help="Images per batch.")] = 128,
    workers: WorkersOpt = None,
    feature_layer: FeatureLayerOpt = None,
    no_head: NoHeadOpt = False,
    amp: Annotated[bool, typer.Option("--amp", help="Autocast on CUDA.")] = False,
    skip_bad: Annotated[bool, typer.Option(
        "--skip-bad", help="Skip unreadable images, recording them in the manifest.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a store made by another "
                                                 "model.")] = False,
    mc_samples: McSamplesOpt = 0,
    odin_grid: OdinGridOpt = None,
    feature_maps: FeatureMapsOpt = False,
    feature_layers: FeatureLayersOpt = None,
    gram_powers: GramPowersOpt = 0,
    adascale_o: AdascaleOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run the model once over every split of a benchmark spec and write a store.

    Example: featstore extract --model resnet50 --weights r50.pth --spec bench.toml
    --out runs/r50

    With the views of mds_ensemble, gram, featurenorm and adascale_a/l: ... --feature-layers
    layer2,layer3,layer4 --gram-powers 5 --adascale-o 0.05
    """
    setup(json_, quiet)
    from featstore.extraction.extract import ExtractOptions
    from featstore.extraction.extract import extract as run_extract
    from featstore.store.extra_keys import (
        parse_adascale_fractions,
        parse_feature_layers,
        parse_odin_grid,
    )

    opts = ExtractOptions(device=device, dtype=dtype, batch_size=batch_size,
                          num_workers=workers, amp=amp, skip_bad=skip_bad,
                          overwrite=overwrite, mc_samples=mc_samples,
                          odin_grid=tuple(parse_odin_grid(odin_grid)) if odin_grid else (),
                          feature_maps=feature_maps,
                          feature_layers=parse_feature_layers(feature_layers)
                          if feature_layers is not None else (),
                          gram_powers=gram_powers,
                          adascale_o=parse_adascale_fractions(adascale_o)
                          if adascale_o is not None else ())
    start = time.perf_counter()
    with split_progress() as progress:
        st = run_extract(model, spec, out_, weights=weights, feature_layer=feature_layer,
                         options=opts, progress=progress, no_head=no_head)
    summary = {**store_summary(st), "seconds": time.perf_counter() - start}

    def human() -> None:
        print_store_summary(summary)
        out.print(f"extracted in {summary['seconds']:.1f} s")

    emit(summary, human)


def import_(
    arrays: Annotated[Path, typer.Argument(help=".npz, .pt, .h5 or a directory of .npy")],
    out_: OutStoreOpt,
    dtype: DtypeOpt = "float32",
    overwrite: Annotated[bool, typer.Option("--overwrite",
                                            help="Replace an existing store.")] = False,
    usage: UsageOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Build a store from features extracted elsewhere.

    Keys: head/weight, head/bias, classes (optional), <split>/features, and optionally
    <split>/logits, <split>/labels, <split>/ids, <split>/usage. Without head/weight and
    head/bias every split needs its logits (scorers that need the head are skipped).
    Example: featstore import feats.npz --out runs/mine --usage ood/near/ssb_val=val
    """
    setup(json_, quiet)
    from featstore.extraction.importer import import_arrays

    flags = parse_params(usage, "--usage")
    st = import_arrays(arrays, out_, dtype=dtype, overwrite=overwrite,
                       usage={k: str(v) for k, v in flags.items()})
    summary = store_summary(st)
    emit(summary, lambda: print_store_summary(summary))


def demo(
    out_: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("runs/demo"),
    methods: DemoMethodsOpt = None,
    backbone: DemoBackboneOpt = "pretrained",
    scale: ScaleOpt = 1.0,
    views: Annotated[bool, typer.Option(
        "--views", help="Also extract the layer views (--feature-layers of three blocks, "
        "--gram-powers 5) and AdaSCALE's perturbed features (--adascale-o 0.05), so that "
        "mds_ensemble, gram, featurenorm and adascale_a/l run too; AdaSCALE's backward pass "
        "about triples the extraction's time, so it is not the default.")] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The embedded default, end to end on real bundled data (digits, photos, textures,
    faces, noise): a linear head on a frozen ImageNet EfficientNet-Lite0 (or, with
    --backbone scratch, a small ResNet trained from scratch), extract a store, evaluate
    every scorer, write the HTML report. --methods trains the scratch ResNet.

    Example: featstore demo --out runs/demo   ·   featstore demo --methods all
    """
    setup(json_, quiet)
    from featstore.workflows.demo.run import run_demo_command

    result = run_demo_command(out_, methods=methods, backbone=backbone, scale=scale,
                              extraction=split_progress, steps=status, views=views)
    emit(result, (lambda: print_ten_methods(result)) if methods is not None
         else (lambda: print_demo(result)))


def print_ten_methods(result: dict) -> None:
    from featstore.workflows.demo.ten_methods import render_tables

    for table in render_tables(result):
        out.print(table)
    out.print(f"ten-method demo finished in {result['seconds']:.1f} s")


def print_demo(summary: dict) -> None:
    """Store summary, the evaluation table with the ID accuracy (printed once, with its
    interval) and where the report went."""
    print_store_summary(summary["store"], id_accuracy=False)
    print_evaluation(summary["evaluation"], per_split=False)
    out.print(f"report: {summary['report']['html']}")
    out.print(f"demo finished in {summary['seconds']:.1f} s")


def register(app: typer.Typer) -> None:
    app.command()(info)
    app.command()(extract)
    app.command("import")(import_)
    app.command()(demo)
