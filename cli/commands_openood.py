"""`featstore protocol openood`: an OpenOOD v1.5 benchmark end to end (its splits,
preprocessing, parameter search, table and published numbers); registered on `featstore
protocol` (`cli.commands_protocol.protocol_app`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .commands_protocol import OutDirOpt, protocol_app
from .common import BootOpt, BootSeedOpt, CiMethodOpt, CiOpt, ci_spec
from .console import JsonOpt, QuietOpt, emit, out, setup, split_progress


def openood_cmd(
    benchmark: Annotated[str, typer.Option(help="cifar10 | cifar100 | imagenet200 | "
                                                "imagenet1k (OpenOOD's 'imagenet').")],
    data_root: Annotated[Path, typer.Option(help="OpenOOD's data folder: images_classic/, "
                                                 "images_largescale/, benchmark_imglist/.")],
    model: Annotated[str, typer.Option(help="torchvision name, module:callable or "
                                            "TorchScript file.")],
    out_: OutDirOpt,
    imglists: Annotated[Path | None, typer.Option(help="Your benchmark_imglist folder "
                                                       "(default: DATA_ROOT/benchmark_imglist)."
                                                  )] = None,
    fsood: Annotated[bool, typer.Option("--fsood", help="Full-spectrum OOD too: the csid "
                                                        "sets join the ID side.")] = False,
    weights: Annotated[Path | None, typer.Option(help="Local weights file (state dict).")]
    = None,
    method: Annotated[list[str] | None, typer.Option(help="Scorer; repeatable (default: "
                                                          "every scorer OpenOOD has).")] = None,
    tune: Annotated[list[str] | None, typer.Option(
        help="defaults | featstore | openood; repeatable: each is evaluated and shown, the "
             "first is the main table (default: openood, then defaults and featstore).")]
    = None,
    reference: Annotated[str | None, typer.Option(
        help="openood-v1.5: OpenOOD's published near/far AUROC beside yours, marked where "
             "outside your interval.")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N]")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Images per batch.")] = 128,
    ci: CiOpt = 0.95,
    boot: BootOpt = 1000,
    ci_method: CiMethodOpt = "percentile",
    boot_seed: BootSeedOpt = 0,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """OpenOOD v1.5's benchmark on your model: checks every list and image of your copy of
    OpenOOD's data first, writes the spec (OpenOOD's splits, its test preprocessing),
    extracts once, evaluates at the defaults, with featstore's tuning and with OpenOOD's
    parameter search (APS), and writes OpenOOD's tables (OUT/<mode>/ood/<method>.csv) and
    OUT/results.json (guide: "Reproduce OpenOOD v1.5").

    Example: featstore protocol openood --benchmark imagenet1k --data-root data --model
    resnet50 --weights r50_v1.pth --out runs/oo-r50 --reference openood-v1.5
    """
    setup(json_, quiet)
    from featstore.extraction.extract import ExtractOptions
    from featstore.workflows.protocols.openood.run import openood_run

    spec = ci_spec(ci, boot, ci_method, boot_seed)
    modes = tune or ["openood", "defaults", "featstore"]
    with split_progress() as progress:
        result = openood_run(benchmark, data_root, model, out_, imglists=imglists, fsood=fsood,
                             weights=weights, methods=method, tune=modes, reference=reference,
                             ci=spec, options=ExtractOptions(device=device,
                                                             batch_size=batch_size),
                             progress=progress)
    emit(result, lambda: print_openood(result))


def print_openood(result: dict[str, Any]) -> None:
    """The main mode's summary (with the reference column), then each mode's settings."""
    from featstore.store.formatting import MISSING, setting_text, with_interval
    from featstore.store.textsafe import term_text

    primary = result["primary"]
    ref = result["reference"]
    rows = ref["rows"] if ref else result["modes"][primary]["summary"]
    table = Table(title=f"OpenOOD v1.5 {result['benchmark']} ({primary} tuning)",
                  header_style="bold", show_edge=False)
    cols = ["method", "near AUROC", "far AUROC", "near FPR@95", "far FPR@95"]
    if ref:
        cols[3:3] = ["near pub.", "far pub."]
    for c in cols:
        table.add_column(c, justify="left" if c == "method" else "right")
    for r in rows:
        cells = [term_text(r["method"])]
        for g in ("near", "far"):
            cells.append(with_interval(r[f"{g}_auroc"], r[f"{g}_auroc_ci"]))
        if ref:
            for g in ("near", "far"):
                pub = r[f"{g}_auroc_published"]
                mark = " *" if r[f"{g}_auroc_outside"] else ""
                cells.append(MISSING if pub is None else f"{pub:.2f}{mark}")
        for g in ("near", "far"):
            cells.append(with_interval(r[f"{g}_fpr95"], r[f"{g}_fpr95_ci"]))
        table.add_row(*cells)
    out.print(table)
    for mode, report in result["modes"].items():
        chosen = [f"{s['method']}: {setting_text(s['chosen'], '(defaults)')}"
                  for s in report["summary"] if s.get("chosen")]
        if chosen:
            out.print(f"{mode} tuning chose: " + term_text("; ".join(chosen)), highlight=False,
                      markup=False)
    if ref:
        out.print("* published value outside your 95% interval; likely causes:",
                  highlight=False)
        for cause in ref["causes"]:
            out.print(f"  - {cause}", highlight=False, markup=False)
    for name, why in result["left_out"].items():
        out.print(f"left out: {term_text(name)}: {term_text(why)}", highlight=False,
                  markup=False)
    out.print(f"wrote {term_text(result['spec'])}, {term_text(result['store'])} and the tables "
              "beside them", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    protocol_app.command("openood")(openood_cmd)
