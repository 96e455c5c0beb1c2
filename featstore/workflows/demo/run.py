"""`featstore demo` and `featstore gscore gbench` (building the mini-Gbench) as one library
call each: validate the options, run the pipeline, and return the command's result as plain
data (the JSON document; the terminal renders it).

The terminal's progress displays are passed in as context-manager factories, so that this
module draws nothing itself and the CLI stays a parser and a printer:

- `extraction()` yields the per-split progress callback of `featstore.extraction.extract` (or None);
- `steps()` yields `begin(label)`, which starts the next named step (a spinner in the CLI).

Both default to doing nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from featstore.errors import InputError
from featstore.store.store import Store
from featstore.store.summary import store_summary
from featstore.workflows.demo.gbench import build_gbench
from featstore.workflows.demo.gbench_units import build_summary, check_backbones, gbench_builds
from featstore.workflows.demo.pipeline import (
    check_backbone,
    check_scale,
    id_test_accuracy,
    run_demo,
)
from featstore.workflows.demo.ten_methods import run_ten_methods
from featstore.workflows.report import write_report
from scorers.evaluate import evaluate
from scorers.gscore.spec import GBENCH_PAPER_ODIN
from scorers.stats import BootstrapSpec

ContextFactory = Callable[[], AbstractContextManager[Any]]


def no_progress() -> AbstractContextManager[Any]:
    """The default `extraction()`: no progress callback."""
    return nullcontext(None)


def no_steps() -> AbstractContextManager[Callable[[str], None]]:
    """The default `steps()`: a `begin(label)` that does nothing."""
    return nullcontext(lambda _label: None)


def demo_evaluation(store: Store) -> dict[str, Any]:
    """The demo's closing table's data: every scorer the store supports, with 95% intervals
    (1000 stratified-bootstrap resamples, percentile)."""
    # the demo's train bank has 650 rows: NNGuide's default 1% bank (6 rows) cannot hold K=100
    return evaluate(store, params={"nnguide": {"alpha": 1.0}}, ci=BootstrapSpec())


def run_demo_command(out: Path, *, methods: str | Sequence[str] | None = None,
                     backbone: str = "pretrained", scale: float = 1.0,
                     extraction: ContextFactory = no_progress,
                     steps: ContextFactory = no_steps, views: bool = False) -> dict[str, Any]:
    """The whole `featstore demo` (`views`: with the views of `pipeline.run_demo`): with
    `methods`, the ten-method table
    (`featstore.workflows.demo.ten_methods.run_ten_methods`'s result); else the demo store
    (`pipeline.run_demo`), the evaluation of every scorer (`demo_evaluation`) and the report
    (OUT/report.html + report.md), returned as {"out", "backbone", "scale", "store" (its
    summary), "id_test_accuracy", "evaluation", "report": {"html", "markdown"}}. Either
    result carries "seconds" (wall time of the whole run)."""
    check_backbone(backbone)
    check_scale(scale)
    out = Path(out)
    start = time.perf_counter()
    if methods is not None:
        with extraction() as progress:
            result = run_ten_methods(out, methods, progress=progress)
        result["seconds"] = time.perf_counter() - start
        return result
    with extraction() as progress:
        st = run_demo(out, backbone=backbone, scale=scale, progress=progress, views=views)

    with steps() as begin:
        begin(f"evaluating every scorer on {st.path}")
        evaluation = demo_evaluation(st)
        begin(f"writing the report {out / 'report.html'}")
        html_path, md_path = write_report(st.path, out / "report.html")
    return {"out": str(out), "backbone": backbone, "scale": scale,
            "store": store_summary(st), "id_test_accuracy": id_test_accuracy(st),
            "evaluation": evaluation,
            "report": {"html": str(html_path), "markdown": str(md_path)},
            "seconds": time.perf_counter() - start}


def build_gbench_command(out: Path, *, backbone: str | Sequence[str] = "pretrained",
                         weights: Path | None = None, epochs: int = 12,
                         extraction: ContextFactory = no_progress,
                         executor: Any = None, paper: bool = False) -> dict[str, Any]:
    """`featstore gscore gbench` without stores: check the options before anything is
    written (each `--backbone` one of `gbench.BACKBONES`, `--weights` an existing file, for
    one backbone), build the mini-Gbench store of each backbone (`gbench.build_gbench`; with
    `executor`, one unit per backbone: `gbench_units.gbench_builds`), and return its summary
    plus "ood_splits" (how many) and "seconds"; several backbones: {"stores": [summary,
    ...], "seconds"}. `paper`: the stores also hold ODIN's perturbed logits at the paper's
    (T, eps) (`scorers.gscore.spec.GBENCH_PAPER_ODIN`) for `gbench --paper`'s ODIN."""
    odin_grid = GBENCH_PAPER_ODIN if paper else ()
    backbones = [backbone] if isinstance(backbone, str) else list(backbone)
    check_backbones(backbones, weights)
    if weights is not None and not Path(weights).is_file():
        raise InputError(f"--weights {str(weights)!r}: file not found")
    start = time.perf_counter()
    if executor is not None:
        summaries = gbench_builds(executor, out, backbones, weights=weights, epochs=epochs,
                                  odin_grid=odin_grid)
    else:
        summaries = []
        for b in backbones:
            t0 = time.perf_counter()
            with extraction() as progress:
                st = build_gbench(out, backbone=b, weights=weights, epochs=epochs,
                                  progress=progress, odin_grid=odin_grid)
            summaries.append(build_summary(st, time.perf_counter() - t0))
    if len(summaries) == 1:
        return {**summaries[0], "seconds": time.perf_counter() - start}
    return {"stores": summaries, "seconds": time.perf_counter() - start}


__all__ = ["build_gbench_command", "demo_evaluation", "no_progress", "no_steps",
           "run_demo_command"]
