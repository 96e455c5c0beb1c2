"""Gather what a report shows: the evaluation result (computed from a store, or read from a
results JSON written by `featstore eval --out`), the scores behind the curves (from the
store's score cache), sweeps when tuned, and the provenance."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import InputError
from featstore.store.sanity import id_checks
from featstore.store.store import Store
from featstore.version import __version__
from scorers.compare import pairwise_tests, rank_results
from scorers.evaluate import ID_SPLIT, evaluate, score_splits
from scorers.results import eval_json_problem
from scorers.sweep import sweep, sweep_all
from scorers.uncertainty import add_intervals


@dataclass
class ReportData:
    """Everything the renderers need."""

    result: dict[str, Any]
    provenance: dict[str, Any]
    scores: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    sweeps: dict[str, dict[str, Any]] = field(default_factory=dict)
    extras: list[dict[str, Any]] = field(default_factory=list)
    pairwise: dict[str, Any] = field(default_factory=dict)     # scorers.compare.pairwise_tests
    rankings: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric -> rank_results
    notes: list[str] = field(default_factory=list)             # why a statistic is absent
    rows: dict[str, int] = field(default_factory=dict)         # evaluated split -> rows
    id_checks: dict[str, Any] = field(default_factory=dict)    # featstore.store.sanity.id_checks


def _provenance(store: Store | None, result: dict[str, Any]) -> dict[str, Any]:
    prov: dict[str, Any] = {"report date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                            "featstore version": __version__,
                            "store": result.get("store", "")}
    if store is not None:
        model = store.provenance
        prov.update({"model": model.get("name", "?"),
                     "architecture": model.get("architecture", "?"),
                     "weights": weights_line(model),
                     f"sha256 of the {hashed_what(model)}": store.model_sha256,
                     "store format version": store.manifest["format_version"],
                     "store written by featstore": store.manifest["featstore_version"],
                     "torch": model.get("torch_version", "–"),
                     "torchvision": model.get("torchvision_version", "–"),
                     "input transform": json.dumps(model.get("transform", {}))})
    else:
        prov["model sha256"] = result.get("model_sha256", "?")
    return prov


def hashed_what(model: dict[str, Any]) -> str:
    """What the store's model sha256 digests: the weights file given with --weights, or the
    state dict of the built model (weights a module:callable loaded itself, a TorchScript
    file's, or random ones). Older stores lack `sha256_of`: read it off `weights`."""
    if model.get("sha256_of"):
        return str(model["sha256_of"])
    if model.get("weights"):
        return "weights file"
    if model.get("kind") in ("torchvision", "callable", "torchscript"):
        return "state dict"
    return "head (W, b)"  # Store.create's digest when no model digest was recorded


def weights_line(model: dict[str, Any]) -> str:
    """`weights file r50.pth`, `the module:callable itself (no --weights)`, `random
    initialisation`, ..."""
    if model.get("weights"):
        return f"weights file {model['weights']}"
    return str(model.get("weights_source") or "not recorded (no --weights)")


def _statistics(data: ReportData, store: Store | None, ci: Any) -> None:
    """Intervals and paired tests (from the scores, when a store is at hand and `ci` is set)
    and rankings over the OOD test splits (from the metric values)."""
    result = data.result
    if store is not None and ci is not None and data.scores:
        dist = add_intervals(result, data.scores, store, ci)
        data.pairwise = pairwise_tests(result, data.scores, dist, ("auroc",))
    elif ci is not None:
        data.notes.append("p-value matrices need the scores: build the report from the store")
    n_methods, n_splits = len(result["methods"]), len(result.get("ood_splits", []))
    if n_methods >= 3 and n_splits >= 2:
        for metric in ("auroc", "fpr95"):
            data.rankings[metric] = rank_results([result], metric)
    else:
        data.notes.append(f"rankings need at least 3 scorers and 2 OOD test splits (here "
                          f"{n_methods} and {n_splits})")


def collect(source: Path, methods: list[str] | None = None, tune: bool = False,
            include: list[Path] | None = None,
            params: dict[str, dict[str, Any]] | None = None,
            use_cache: bool = True, ci: Any = None, rule: str = "featstore") -> ReportData:
    """Build the report data from a store directory or a results JSON file.

    From a store: every scorer when `methods` is None (one that cannot run is listed under
    "skipped" with its reason, `scorers.skipping`); the named `methods` must all run (a named
    scorer that cannot is an error, as in `featstore eval --method`). `params[name]` fixes a
    scorer's parameters; defaults the store makes invalid are clamped (`scorers.adapt`).
    `use_cache=False`: scores.h5 is neither read nor written.
    With `ci` (a scorers.stats.BootstrapSpec) every metric carries its interval and the report
    has the paired tests; rankings are computed whenever there are enough scorers and splits.
    `rule`: the tuning rule with `tune` (`scorers.sweep`)."""
    source = Path(source)
    store: Store | None = None
    sweeps: dict[str, dict[str, Any]] = {}
    if (source / "store.json").is_file():
        store = Store.open(source)
        if tune:
            found = sweep_all(store, methods, params, strict=methods is not None, rule=rule)
            for name in found["methods"]:
                sweeps[name] = sweep(store, name, base_params=(params or {}).get(name),
                                     rule=rule)
        else:
            found = evaluate(store, methods, params, strict=methods is not None,
                             use_cache=use_cache)
        result = dict(found)  # the report's own copy: it adds intervals and notes to it
    elif source.is_file():
        try:
            result = json.loads(source.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"report: {str(source)!r} is not a results JSON ({exc})") from exc
        if not isinstance(result, dict) or "methods" not in result:
            raise InputError(f"report: {str(source)!r} has no 'methods'; expected the JSON "
                             "written by `featstore eval --out`")
        problem = eval_json_problem(result)
        if problem:
            raise InputError(f"report: {str(source)!r}: {problem} (expected the JSON written "
                             "by `featstore eval --out`)")
        if result.get("store") and (Path(result["store"]) / "store.json").is_file():
            store = Store.open(result["store"])
            if store.model_sha256 != result.get("model_sha256"):
                store = None  # the store was rebuilt since; tables only
    else:
        what = "does not exist" if not source.exists() else "is not a store"
        raise InputError(f"report: {str(source)!r} {what}: it is neither a store directory nor "
                         "a results JSON file (make one with `featstore extract`, `featstore "
                         "import` or `featstore eval --out`)")
    data = ReportData(result=result, provenance=_provenance(store, result), sweeps=sweeps)
    if store is not None:
        names = [result["id_split"] if "id_split" in result else ID_SPLIT, *result["ood_splits"]]
        data.rows = {n: store.split(n).num_rows for n in names if store.has_split(n)}
        data.id_checks = id_checks(store)
        for name, res in result["methods"].items():
            scores, _, _ = score_splits(store, name, res.get("params", {}), names, use_cache)
            data.scores[name] = scores
    _statistics(data, store, ci)
    for path in include or []:
        try:
            data.extras.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"report --include {str(path)!r}: unreadable JSON ({exc})") from exc
    return data
