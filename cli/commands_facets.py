"""`featstore protocol facets-table`: FACETS' results (§VI Tables VI-VII) over one store per
dataset, OOD cells pooled over each group's splits, tuned on val where the paper tunes;
registered on `featstore protocol` (`cli.commands_protocol.protocol_app`)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from featstore.errors import UsageError
from featstore.store.textsafe import markup_text

from .commands_protocol import (
    ImagesRootOpt,
    MethodParamOpt,
    NoBalanceOpt,
    NoCacheOpt,
    OptionalOutDirOpt,
    SampleSeedOpt,
    ValFractionOpt,
    protocol_app,
)
from .common import check_methods, method_params, require_rows
from .console import JsonOpt, QuietOpt, emit, err, log, out, setup, status
from .executor_opts import (
    ExecutorConfigOpt,
    ExecutorOpt,
    WorkersOpt,
    WorkOpt,
    make_cli_executor,
    work_dir,
)

FacetsMethodOpt = Annotated[list[str] | None, typer.Option(
    help="Scorer; repeatable (default: FACETS' columns MSP = msp, TS = odin at T = 1000 "
         "without perturbation, MLV = mls, ODIN = odin_perturbed, IP TS MLV = ip_ts_mlv, "
         "OODL = oodl).")]
FACETS_METHODS = ["msp", "odin", "mls", "odin_perturbed", "ip_ts_mlv", "oodl"]


def facets_table_cmd(
    stores: Annotated[list[str], typer.Argument(help="Stores, one per dataset (e.g. the T40, "
                                                     "T45, T50 stores); LABEL=PATH names a "
                                                     "row (default: the store's folder "
                                                     "name).")],
    method: FacetsMethodOpt = None,
    param: MethodParamOpt = None,
    out_: Annotated[Path | None, typer.Option("--out", help="Markdown file to write.")] = None,
    no_tune: Annotated[bool, typer.Option("--no-tune", help="Every column at its default "
                                          "parameters (no tuning on val splits).")] = False,
    select_by: Annotated[str, typer.Option(help="Metric that chooses on val.")] = "auroc",
    layout: Annotated[str, typer.Option(
        "--layout", help="default: one row per dataset x OOD group, the misclassification "
        "row under each dataset | paper: FACETS' Table VI (one row per dataset, one cell per "
        "method) and Table VII (misclassification, one row per dataset).")] = "default",
    no_cache: NoCacheOpt = False,
    executor: ExecutorOpt = None,
    executor_config: ExecutorConfigOpt = None,
    workers: WorkersOpt = None,
    work: WorkOpt = None,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS' results (§VI Tables VI-VII): per dataset and OOD group, per method,
    FPR@95%TPR / Detection Error / AUROC, and each dataset's misclassification detection on
    id/test; best values marked; methods a store cannot score listed with the reason. As the
    paper (§IV: one OOD set per dataset) each OOD cell is POOLED, id/test against the group's
    OOD test splits concatenated; Detection Error = 0.5 (1 - TPR) + 0.5 FPR at the 95%-TPR
    threshold, at the TPR it achieves (`detection_error_tpr95`); the columns named as its
    methods (TS = softmax at T = 1000 without perturbation, featstore's reading); methods
    with hyperparameters tuned on each store's id/val vs val OOD splits (chosen values
    printed; a store without them is scored at defaults, and says so). --layout paper prints
    Tables VI and VII as the paper does. With --executor / --workers, one unit per store.

    Example: featstore protocol facets-table T40=runs/t40 T45=runs/t45 --method msp
    --method ip_ts_mlv --out facets.md
    """
    setup(json_, quiet)
    from featstore import Store
    from featstore.specs.labels import labelled_paths
    from featstore.workflows.protocols.facets import facets_table, write_markdown_table
    from scorers.sweep import check_select_by

    if layout not in ("default", "paper"):
        raise UsageError(f"--layout {layout!r}: expected one of default, paper")
    methods = check_methods(method or FACETS_METHODS)
    params = method_params(param)
    check_select_by(select_by)
    tuning: dict[str, Any] = {"tune": not no_tune, "select_by": select_by}
    runner = make_cli_executor(executor, executor_config, workers, "protocol facets-table")
    if runner is not None:
        table = _facets_units(runner, stores, methods, params, no_cache, work, tuning)
        if out_ is not None:
            table["report"] = str(write_markdown_table(out_, table, _md(layout)))
        emit(table, lambda: _print_facets(table, methods, out_, layout))
        return
    with ExitStack() as stack:
        opened = []
        for label, path in labelled_paths(stores, "STORES"):
            st = stack.enter_context(Store.open(path))
            require_rows(st)
            opened.append((label, st))
        with status() as begin:
            begin(f"FACETS table over {len(opened)} store(s)")
            table = facets_table(opened, methods, params, use_cache=not no_cache, **tuning)
    if out_ is not None:
        table["report"] = str(write_markdown_table(out_, table, _md(layout)))
    emit(table, lambda: _print_facets(table, methods, out_, layout))


def _md(layout: str) -> str:
    return "paper" if layout == "paper" else "rows"


def _facets_units(runner, stores: list[str], methods: list[str], params: dict,
                  no_cache: bool, work: Path | None, tuning: dict) -> dict:
    """facets-table on an executor: the stores checked here, one unit per store."""
    from featstore import Store
    from featstore.specs.labels import labelled_paths
    from featstore.workflows.experiments.workflows import facets_units

    labelled = []
    for label, path in labelled_paths(stores, "STORES"):
        with Store.open(path) as st:
            require_rows(st)
        labelled.append((label, path))
    with work_dir(runner, work, "protocol facets-table") as wd:
        return facets_units(runner, wd, labelled, methods, params, not no_cache, log, **tuning)


def _print_facets(table: dict, methods: list[str], out_: Path | None,
                  layout: str = "default") -> None:
    from featstore.workflows.protocols.facets import (
        GROUP_NOTE,
        TITLE,
        cell_text,
        paper_rows,
        tuning_notes,
    )

    def new(title: str, first: list[str]) -> Table:
        t = Table(title=title, header_style="bold", show_edge=False)
        for c in first:
            t.add_column(c)
        for m in methods:
            t.add_column(table["labels"][m], justify="right")
        return t

    def cells(r: Mapping[str, Any]) -> list[str]:
        return [cell_text(r["cells"][m], r["best"], m, ("[bold]", "[/]")) for m in methods]

    if layout == "paper":
        for name, kind in (("Table VI: OOD detection", "ood"),
                           ("Table VII: misclassification (id/test)", "misclassification")):
            t = new(f"{name}: {TITLE} (%), best in bold", ["dataset"])
            for label, r in paper_rows(table, kind):
                t.add_row(markup_text(label), *cells(r))
            out.print(t)
    else:
        t = new(f"{TITLE} (%), best in bold", ["dataset", "rows"])
        for r in table["rows"]:
            what = ("misclassification" if r["kind"] == "misclassification"
                    else f"OOD {r['group']}")
            t.add_row(markup_text(r["dataset"]), markup_text(what), *cells(r))
        out.print(t)
    out.print(GROUP_NOTE, highlight=False)
    for line in tuning_notes(table):
        out.print(line, highlight=False, markup=False)
    for r in table["rows"]:
        for m, w in r["warnings"].items():
            err.print(f"warning: {r['dataset']} {m}: {w}", highlight=False, markup=False)
    for d, ms in table["skipped"].items():
        for m, why in ms.items():
            out.print(f"{d}: {m} skipped ({why})", highlight=False, markup=False)
    if out_ is not None:
        out.print(f"wrote {out_}", highlight=False)


def facets_graph_cmd(
    store: Annotated[Path, typer.Argument(help="A store (e.g. FACETS T1's).")],
    split: Annotated[list[str] | None, typer.Option(
        "--split", help="Splits to read; repeatable (default: all but id/train, id/val).")
    ] = None,
    min_weight: Annotated[int, typer.Option(help="Drop edges of fewer rows (the paper's "
                                                 "threshold is not stated).")] = 1,
    keep_id_sources: Annotated[bool, typer.Option(
        "--keep-id-sources", help="Keep edges from the ID splits' rows.")] = False,
    keep_same_names: Annotated[bool, typer.Option(
        "--keep-same-names", help="Keep edges between identically named classes.")] = False,
    top: Annotated[int, typer.Option(help="Edges to print, heaviest first.")] = 20,
    out_: Annotated[Path | None, typer.Option("--out", help="Write every edge as TSV.")
                    ] = None,
    similarity: Annotated[bool, typer.Option(
        "--similarity", help="Also Figs. 2-3: the WordNet similarity (path + Wu-Palmer) / 2 "
                             "of ground truth and prediction, per class (needs WordNet).")
    ] = False,
    mapping: Annotated[Path | None, typer.Option(
        help="With --similarity: 'class synset' lines (as protocol wordnet's).")] = None,
    auto_map: Annotated[bool, typer.Option(
        "--auto-map", help="With --similarity: map other names to their first noun sense.")
    ] = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS' confusion graph (§V, behind Fig. 4): an edge from each ground-truth class
    (the row's label, else its image's folder; prefixed by its split) to the ID class the
    classifier predicts, weighted by the rows; pruned as the paper: self-loops, edges from
    the ID splits, edges between identically named classes (compared exactly: an underscore
    keeps two names apart, Fig. 4), edges under --min-weight. Heaviest edges printed.
    --similarity adds §V's Figs. 2-3: per ground-truth and per predicted class, the mean
    WordNet similarity of ground truth and prediction, the 10 best and worst classes.

    Example: featstore protocol facets-graph runs/t1 --min-weight 5 --out t1_graph.tsv
    """
    setup(json_, quiet)
    from featstore import Store
    from featstore.store.fileio import atomic_write_output
    from featstore.store.textsafe import term_text
    from featstore.workflows.protocols.facets_graph import (
        GraphOptions,
        confusion_graph,
        graph_tsv,
    )

    opts = GraphOptions(drop_id_sources=not keep_id_sources,
                        drop_same_names=not keep_same_names, min_weight=min_weight)
    with Store.open(store) as st:
        require_rows(st)
        graph = confusion_graph(st, split or None, opts)
        if similarity:
            from featstore.workflows.protocols.facets_similarity import prediction_similarity
            from featstore.workflows.protocols.wordnet import read_mapping

            graph["similarity"] = prediction_similarity(
                st, split or None, read_mapping(mapping) if mapping else None, auto_map)
    if out_ is not None:
        out_.parent.mkdir(parents=True, exist_ok=True)
        graph["report"] = str(atomic_write_output(out_, graph_tsv(graph)))

    def show() -> None:
        t = Table(title=f"FACETS confusion graph: {len(graph['nodes'])} nodes, "
                        f"{len(graph['edges'])} edges from {graph['rows']} rows",
                  header_style="bold", show_edge=False)
        for c in ("ground truth", "predicted", "rows"):
            t.add_column(c, justify="right" if c == "rows" else "left")
        for a, b, w in graph["edges"][:max(top, 0)]:
            t.add_row(term_text(a), term_text(b), str(w))
        out.print(t)
        out.print("pruned: " + ", ".join(f"{k} {v}" for k, v in graph["pruned"].items()),
                  highlight=False)
        if "similarity" in graph:
            _print_similarity(graph["similarity"])
        if out_ is not None:
            out.print(f"wrote {out_}", highlight=False)

    emit(graph, show)


def _print_similarity(sim: dict) -> None:
    """Figs. 2-3's best and worst classes, and what was left out."""
    from featstore.store.textsafe import term_text
    from featstore.workflows.protocols.facets_similarity import best_and_worst

    for what, key in (("ground-truth class (Fig. 2)", "by_truth"),
                      ("predicted ID class (Fig. 3)", "by_predicted")):
        best, worst = best_and_worst(sim[key])
        for label, names in (("best", best), ("worst", worst)):
            out.print(f"similarity per {what}, {label} 10: " + ", ".join(
                f"{term_text(n)} {sim[key][n]['sim']:.3f}" for n in names),
                highlight=False, markup=False)
    out.print(f"similarity over {sim['rows_scored']} rows; {sim['rows_skipped']} rows of "
              f"{len(sim['unmapped'])} unmapped classes left out", highlight=False)


def facets_dataset_cmd(
    kind: Annotated[str, typer.Option(help="baseline (Table II: ID vs SVHN-like OOD) | "
                                           "interdataset (Table III: ID vs ImageNet-like "
                                           "OOD without the common classes).")],
    images: Annotated[str, typer.Option(help="OOD candidate images: an ImageFolder or an "
                                             "image list.")],
    id_classes: Annotated[str | None, typer.Option(
        help="interdataset: the ID classes (a class-per-line file or an ImageFolder); "
             "candidates of the same name are removed.")] = None,
    common: Annotated[str | None, typer.Option(
        help="interdataset: the classes to remove (e.g. the paper's 32), instead of the "
             "name match.")] = None,
    images_root: ImagesRootOpt = None,
    base_spec: Annotated[Path | None, typer.Option(help="Spec the written spec extends (its "
                                                        "ID splits).")] = None,
    out_: OptionalOutDirOpt = None,
    no_balance: NoBalanceOpt = False,
    sample_seed: SampleSeedOpt = 0,
    val_fraction: ValFractionOpt = 0.5,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """FACETS' Baseline and InterDataset benchmarks (§IV, Tables II-III) from your folders:
    every candidate class OOD (InterDataset: the classes common to the ID set removed and
    listed); with --out, val / test lists and (with --base-spec) a spec that balances ID and
    OOD test rows, as `protocol wordnet` and `tiers` write them.

    Example: featstore protocol facets-dataset --kind interdataset --images imagenet/train
    --id-classes places365_classes.txt --base-spec places.toml --out facets
    """
    setup(json_, quiet)
    from featstore.workflows.protocols.facets_datasets import build_dataset
    from featstore.workflows.protocols.facets_sampling import Sampling

    res = build_dataset(kind, images, id_classes=id_classes, common=common,
                        images_root=images_root, base_spec=base_spec, out=out_,
                        sampling=Sampling.of(0, not no_balance, sample_seed, val_fraction))

    def human() -> None:
        out.print(f"{kind}: {len(res['assignment'])} OOD classes; removed "
                  f"{len(res['dropped'])} common classes"
                  + (f": {', '.join(res['dropped'])}" if res["dropped"] else ""),
                  highlight=False, markup=False)
        for key, path in res["files"].items():
            out.print(f"wrote {key}: {path}", highlight=False, markup=False)

    emit(res, human)


def register(app: typer.Typer) -> None:
    """`facets-table` and `facets-graph` on the `protocol` group (cli.app registers the
    group itself)."""
    protocol_app.command("facets-table")(facets_table_cmd)
    protocol_app.command("facets-graph")(facets_graph_cmd)
    protocol_app.command("facets-dataset")(facets_dataset_cmd)
