"""`featstore protocol openood`: an OpenOOD v1.5 benchmark, end to end, on the store.

1. `definitions.check_tree`: every list and image of the run checked (nothing is extracted
   when one is missing); the spec (OpenOOD's splits and test preprocessing) written to
   `OUT/spec.toml`.
2. `featstore.extraction.extract.extract` into `OUT/store` (a killed run resumes there).
3. Per tuning mode in `tune` (`TUNE_MODES`): "defaults" (`scorers.evaluate.evaluate`: every
   scorer at featstore's defaults), "featstore" (`sweep_all`: featstore's rule on the val
   splits) and "openood" (`sweep_all(rule="openood")`: OpenOOD's APS, `scorers.openood_aps`);
   each with featstore's bootstrap intervals (`ci`).
4. Per mode and method, OpenOOD's table (`table.method_rows`), written as OpenOOD writes it:
   `OUT/<mode>/ood/<method>.csv` (intervals in `<method>.ci.csv` beside it); with `fsood`,
   the full-spectrum table too (`OUT/<mode>/fsood/<method>.csv`: ID = id/test and every csid
   set together, as OpenOOD's `eval_ood(fsood=True)`, resampled as one ID stratum for its
   intervals); a summary per mode (near / far AUROC and FPR@95 with intervals, the chosen
   setting), and with `reference`, OpenOOD's published value beside the primary mode's
   (`published.reference_rows`). Everything in `OUT/results.json`, the Markdown in
   `OUT/table.md` (`render.openood_markdown`; `featstore table OUT` prints it again).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from featstore.errors import UsageError
from featstore.extraction.extract import ExtractOptions, extract
from featstore.extraction.models import load_model
from featstore.extraction.outputs import resolve_layers
from featstore.store.fileio import atomic_write_output
from featstore.store.interfaces import StoreLike
from scorers import get_scorer
from scorers.evaluate import evaluate
from scorers.metrics import id_accuracy_or_nan, ood_metrics
from scorers.openood_aps import OPENOOD_APS
from scorers.stats.bootstrap import BootstrapSpec, bootstrap_evaluation
from scorers.sweep import sweep_all
from scorers.uncertainty import id_correctness

from .definitions import OpenoodBenchmark, build_spec, check_tree, load_benchmark
from .published import CAUSES, check_reference, reference_rows
from .render import openood_markdown
from .table import METRIC_OF, intervals_csv, method_rows, ood_csv, summary_row

logger = logging.getLogger(__name__)

TUNE_MODES = ("defaults", "featstore", "openood")
#: the scorers run by default: every featstore scorer OpenOOD has a config for
DEFAULT_METHODS = tuple(OPENOOD_APS)


def check_model_classes(model: str, weights: str | Path | None,
                        bench: OpenoodBenchmark) -> None:
    """UsageError unless the model's head has the benchmark's class count (OpenOOD's labels
    index its classes: a 1000-way model on ImageNet-200 would score other classes), checked on
    a CPU probe before any extraction."""
    loaded = load_model(model, weights)
    resolve_layers(loaded, int(bench.preprocess["img_size"]), torch.device("cpu"), False)
    if loaded.num_classes != bench.num_classes:
        raise UsageError(f"the model has {loaded.num_classes} outputs; OpenOOD's "
                         f"{bench.benchmark} has {bench.num_classes} classes (its lists' "
                         "labels index them)", param="model", value=model)


def check_tune(tune: Sequence[str]) -> list[str]:
    modes = list(dict.fromkeys(tune))
    bad = [m for m in modes if m not in TUNE_MODES]
    if bad or not modes:
        raise UsageError(f"expected one or more of {', '.join(TUNE_MODES)}", param="tune",
                         value=",".join(tune))
    return modes


def evaluate_mode(store: StoreLike, mode: str, methods: Sequence[str],
                  ci: BootstrapSpec | None) -> dict[str, Any]:
    """One tuning mode's evaluation (module docstring, step 3), as plain JSON."""
    if mode == "defaults":
        result = evaluate(store, list(methods), ci=ci)
    else:
        result = sweep_all(store, list(methods), ci=ci, rule=mode)
    return dict(result)


FSOOD_ID = "id/test+csid"


def fsood_entry(store: StoreLike, method: str, params: Mapping[str, Any],
                groups: Mapping[str, Sequence[str]], ci: BootstrapSpec | None
                ) -> tuple[dict[str, Any], float, list[float] | None]:
    """Full-spectrum metrics of one method at `params`: ID = id/test and every csid split
    concatenated (OpenOOD's `eval_ood(fsood=True)`), one bootstrap stratum for that ID side
    (`scorers.stats.bootstrap_evaluation`, with `ci`); returns ({"splits", "groups"} with
    "<metric>_ci" beside each value, ACC over the same ID rows, its interval)."""
    scorer = get_scorer(method, **dict(params))
    scorer.fit(store)
    id_names = ["id/test", *store.splits(role="csid")]
    scores = {FSOOD_ID: np.concatenate([scorer.score(store.split(n)) for n in id_names])}
    logits = np.concatenate([np.asarray(store.split(n).logits) for n in id_names])
    labels = np.concatenate([np.asarray(store.split(n).labels) for n in id_names])
    names = {g: [f"ood/{g}/{d}" for d in ds if store.has_split(f"ood/{g}/{d}")]
             for g, ds in groups.items()}
    names = {g: n for g, n in names.items() if n}
    splits: dict[str, dict[str, Any]] = {}
    for name in (n for ns in names.values() for n in ns):
        scores[name] = scorer.score(store.split(name))
        splits[name] = dict(ood_metrics(scores[FSOOD_ID], scores[name], id_name=FSOOD_ID,
                                        ood_name=name))
    group_metrics: dict[str, dict[str, Any]] = {
        g: {k: float(np.mean([splits[n][k] for n in ns])) for k in METRIC_OF.values()}
        for g, ns in names.items()}
    acc_ci = None
    if ci is not None:
        correct, labelled = id_correctness(logits, labels)
        _, iv = bootstrap_evaluation(ci, FSOOD_ID, {method: scores}, names, correct, labelled)
        for where, target in (("splits", splits), ("groups", group_metrics)):
            for key, by_metric in iv["methods"][method][where].items():
                for metric, bounds in by_metric.items():
                    if metric in target[key]:
                        target[key][f"{metric}_ci"] = _bounds(bounds)
        acc_ci = _bounds(iv["id_acc"])
    return ({"splits": splits, "groups": group_metrics}, id_accuracy_or_nan(logits, labels),
            acc_ci)


def _bounds(bounds: Sequence[float] | None) -> list[float] | None:
    if bounds is None or any(b != b for b in bounds):
        return None
    return [float(b) for b in bounds]


def _write_tables(out: Path, mode: str, kind: str, tables: Mapping[str, list[dict[str, Any]]]
                  ) -> None:
    folder = out / mode / kind
    folder.mkdir(parents=True, exist_ok=True)
    for method, rows in tables.items():
        atomic_write_output(folder / f"{method}.csv", ood_csv(rows))
        atomic_write_output(folder / f"{method}.ci.csv", intervals_csv(rows))


def mode_report(store: StoreLike, bench: OpenoodBenchmark, result: Mapping[str, Any],
                fsood: bool, ci: BootstrapSpec | None) -> dict[str, Any]:
    """Tables and summary of one mode's evaluation."""
    groups = bench.groups()
    tables, fs_tables, summary = {}, {}, []
    for method, entry in result["methods"].items():
        tables[method] = method_rows(entry, groups, result.get("id_acc"),
                                     result.get("id_acc_ci"))
        summary.append(summary_row(method, entry))
        if fsood and store.splits(role="csid"):
            fs_entry, acc, acc_ci = fsood_entry(store, method, entry["params"], groups, ci)
            fs_tables[method] = method_rows(fs_entry, groups, acc, acc_ci)
    return {"tables": tables, "fsood_tables": fs_tables or None, "summary": summary}


def openood_run(benchmark: str, data_root: str | Path, model: str, out: str | Path, *,
                imglists: str | Path | None = None, fsood: bool = False,
                weights: str | Path | None = None, methods: Sequence[str] | None = None,
                tune: Sequence[str] = ("openood",), reference: str | None = None,
                ci: BootstrapSpec | None = None, options: ExtractOptions | None = None,
                progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Run one OpenOOD v1.5 benchmark (module docstring); returns what `OUT/results.json`
    holds: {"benchmark", "openood_name", "source", "spec", "store", "left_out", "splits",
    "modes": {mode: {"evaluation", "tables", "fsood_tables", "summary"}}, "primary",
    "reference": {"name", "rows", "causes"} | None}. The first of `tune` is the primary mode
    (the one the reference column sits beside)."""
    modes = check_tune(tune)
    if reference is not None:
        check_reference(reference)
    bench = load_benchmark(benchmark)
    plan = check_tree(bench, data_root, imglists, fsood)  # every list and image, first
    check_model_classes(model, weights, bench)
    spec = build_spec(plan, data_root)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_output(out / "spec.toml", spec.to_toml(
        f"OpenOOD v1.5 {bench.benchmark} ({bench.openood_name}), written by featstore "
        f"protocol openood from {Path(data_root).resolve()}"))
    for name, why in plan.left_out.items():
        logger.warning("%s left out: %s", name, why)
    store = extract(model, spec, out / "store", weights=weights,
                    options=options or ExtractOptions(), progress=progress)
    reports: dict[str, Any] = {}
    for mode in modes:
        logger.info("evaluating: %s", mode)
        result = evaluate_mode(store, mode, methods or DEFAULT_METHODS, ci)
        report = mode_report(store, bench, result, fsood, ci)
        _write_tables(out, mode, "ood", report["tables"])
        if report["fsood_tables"]:
            _write_tables(out, mode, "fsood", report["fsood_tables"])
        reports[mode] = {"evaluation": result, **report}
    primary = modes[0]
    ref = None
    if reference is not None:
        ref = {"name": reference, "causes": list(CAUSES),
               "rows": reference_rows(reports[primary]["summary"], bench.benchmark)}
    doc = {"benchmark": bench.benchmark, "openood_name": bench.openood_name,
           "source": bench.source, "fsood": fsood, "spec": str(out / "spec.toml"),
           "store": str(out / "store"), "left_out": plan.left_out,
           "splits": [{"name": s.name, "list": str(p), "rows": n} for s, p, n in plan.used],
           "modes": reports, "primary": primary, "reference": ref}
    atomic_write_output(out / "results.json", json.dumps(doc, indent=1, default=_json))
    atomic_write_output(out / "table.md", openood_markdown(doc))
    return doc


def _json(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")
