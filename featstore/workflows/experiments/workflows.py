"""Store-evaluation workflows as units of an executor (`featstore.workflows.experiments.executors`):
`featstore protocol shift-grid` (one unit per scorer on the store) and `featstore protocol
facets-table` (one unit per store, i.e. per dataset row group) with `--executor` /
`--workers` / `--work DIR`. (`featstore protocol osr` is an experiment: its units are the
runner's.)

Every unit is independent: it opens its store read-only for features (the score cache,
scores.h5, is written as by a local run), computes its part with the same function a local
run calls and returns it as JSON, which `executors.Tracked` writes atomically into
`WORK/units/<id>.json` (its log in `WORK/logs/<id>.log`; `WORK/plan.json` lists the units,
so `featstore run --status WORK` shows them). The driver assembles the parts in the local
order when all are done, so the result equals the local run's (every unit on the plan's
thread count, `unitthreads`). A unit's key digests its
settings and its store's manifest (model and split sha256s): a rerun reads back a finished
unit only when neither changed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featstore.store.fileio import sha256_file
from featstore.store.store import Store
from featstore.workflows.experiments import unitstate
from featstore.workflows.experiments.config import digest
from featstore.workflows.experiments.executors import Tracked
from featstore.workflows.experiments.runner import Log, _slug
from featstore.workflows.experiments.unitthreads import plan_threads


def store_fingerprint(path: str | Path) -> str:
    """A digest of the store's manifest (its model and every split's sha256)."""
    with Store.open(path) as st:
        return digest(json.loads(json.dumps(st.manifest, default=str)))


def run_units(executor: Any, out: Path, title: str, units: list[dict[str, Any]],
              body: Any, log: Log) -> list[Any]:
    """Run `body(unit, log)` for every unit on `executor` (plan in `out`); results in unit
    order. Every unit computes on the plan's thread count (`unitthreads.plan_threads()`:
    $FEATSTORE_THREADS, else 1), which its key holds."""
    count = plan_threads()
    units = [{**u, "threads": count, "key": digest({"key": u["key"], "threads": count})}
             for u in units]
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    unitstate.write_plan(out, executor.name, units)
    by_id = executor.run_calls(out, units, Tracked(body, str(out)), log, title)
    return [by_id[u["id"]] for u in units]


# ------------------------------------------------------------------------------- shift grid
def shift_grid_unit(unit: dict[str, Any], log: Log) -> dict[str, Any]:
    """One scorer's grid payload (`shift_run.shift_grids` on one method)."""
    from featstore.workflows.protocols.shift import load_degrees
    from featstore.workflows.protocols.shift_run import shift_grids

    o = unit["options"]
    degrees = load_degrees(o["degrees"]) if o["degrees"] else None
    with Store.open(unit["store"]) as st:
        res = shift_grids(st, [unit["method"]], o["metric"],
                          params={unit["method"]: unit["params"]}, levels=o["levels"],
                          binning=o["binning"], min_count=o["min_count"], degrees=degrees,
                          use_cache=o["use_cache"], levels_edges=o["levels_edges"], begin=log)
    return res["results"][0]


def shift_grid_units(executor: Any, out: Path, store: str | Path, methods: Sequence[str],
                     metric: str, *, params: Mapping[str, Mapping[str, Any]] | None = None,
                     levels: int, binning: str, min_count: int, degrees: str | Path | None,
                     use_cache: bool, levels_edges: Mapping[str, Sequence[float]] | None,
                     log: Log) -> dict[str, Any]:
    """`shift_run.shift_grids` with one unit per method: {"metric", "results"}."""
    store = str(Path(store).resolve())
    options = {"metric": metric, "levels": levels, "binning": binning, "min_count": min_count,
               "degrees": str(Path(degrees).resolve()) if degrees else None,
               "use_cache": use_cache,
               "levels_edges": {k: list(v) for k, v in levels_edges.items()}
               if levels_edges else None}
    ident = {"store": store_fingerprint(store), "options": options,
             "degrees": sha256_file(Path(degrees)) if degrees else None}
    units = []
    for m in methods:
        unit = {"id": _slug(f"shift-{m}"), "label": f"shift grid of {m}", "store": store,
                "method": m, "params": dict((params or {}).get(m, {})), "options": options}
        unit["key"] = digest({**ident, "unit": unit})
        units.append(unit)
    results = run_units(executor, out, f"shift-grid {Path(store).name}", units,
                        shift_grid_unit, log)
    return {"metric": metric, "results": results}


# ---------------------------------------------------------------------------- FACETS table
def facets_unit(unit: dict[str, Any], log: Log) -> dict[str, Any]:
    """One dataset's rows of the FACETS table (`facets.facets_dataset`)."""
    from featstore.workflows.protocols.facets import facets_dataset

    log(f"FACETS rows of {unit['label']}")
    with Store.open(unit["store"]) as st:
        rows, skipped, tuning = facets_dataset(unit["dataset"], st, unit["methods"],
                                               unit["used"], unit["use_cache"], unit["tune"],
                                               unit["select_by"])
    return {"rows": rows, "skipped": skipped, "tuning": tuning}


def facets_units(executor: Any, out: Path, stores: Sequence[tuple[str, str | Path]],
                 methods: Sequence[str], params: Mapping[str, Mapping[str, Any]] | None,
                 use_cache: bool, log: Log, tune: bool = True,
                 select_by: str = "auroc") -> dict[str, Any]:
    """`facets.facets_table` with one unit per (label, store path)."""
    from featstore.workflows.protocols.facets import assemble_table, facets_params

    used = facets_params(methods, params)
    units: list[dict[str, Any]] = []
    for i, (label, path) in enumerate(stores):
        path = str(Path(path).resolve())
        unit = {"id": _slug(f"facets-{i}-{label}"), "label": f"{label} ({path})",
                "dataset": label, "store": path, "methods": list(methods), "used": used,
                "use_cache": use_cache, "tune": tune, "select_by": select_by}
        unit["key"] = digest({"store": store_fingerprint(path), "unit": unit})
        units.append(unit)
    parts = run_units(executor, out, "facets-table", units, facets_unit, log)
    return assemble_table(methods, used, [(u["dataset"], p["rows"], p["skipped"], p["tuning"])
                                          for u, p in zip(units, parts, strict=True)])
