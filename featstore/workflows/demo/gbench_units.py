"""`featstore gscore gbench` on an executor (`featstore.workflows.experiments.executors`:
`--executor local|slurm|ray`, `--workers N`): which Gbench work is a unit and where it runs.

- Building: one unit per backbone (`--backbone scratch,w8,...`): `gbench.build_gbench` of
  that backbone into the shared OUT (its own spec, checkpoint and store: `store_<backbone>`),
  returning the store's summary. A build unit is run every time it is asked for (its key
  holds a fresh nonce): `build_gbench` itself reuses a checkpoint made by the same recipe and
  every complete split, so a rerun costs little and never reads back a summary of a store
  that was since changed or removed.
- Evaluating (`gscore gbench STORES...`): the Gbench protocol over every store is one unit
  (`scorers.gscore.gbench_protocol`: its cross-store table needs all the stores at once),
  run where the executor puts it (a Slurm job with the CPUs, memory and time it asks for, a
  Ray task); its key digests the stores' manifests and the options, so a rerun with neither
  changed reads the result back.

The units' states, logs and plan.json live in the work directory (OUT for builds, `--work`
for evaluations; `featstore run --status DIR` reads them). Each unit calls the function a
run without an executor calls, on the plan's thread count wherever it runs (the driver, a
pool process, a Slurm job, a Ray task: `unitthreads`, $FEATSTORE_THREADS, else 1), which
`build_gbench` takes through `pipeline.demo_threads`, so every executor builds the same
bits. A build without an executor trains on `demo_threads()` (the CPUs unless
$FEATSTORE_THREADS is set): the units' bits where that count is the plan's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from featstore.errors import UsageError
from featstore.store.fileio import sha256_file
from featstore.store.store import Store
from featstore.store.summary import store_summary
from featstore.workflows.demo.gbench import BACKBONES, NOISE_COUNT, PATCH_COUNT, build_gbench
from featstore.workflows.experiments.config import digest
from featstore.workflows.experiments.workflows import run_units, store_fingerprint

Log = Callable[[str], None]


logger = logging.getLogger(__name__)

def build_summary(st: Store, seconds: float) -> dict[str, Any]:
    """What `gscore gbench` reports of a built store: its summary, "ood_splits" (how many)
    and "seconds"."""
    return {**store_summary(st), "ood_splits": len(st.splits(role="ood")), "seconds": seconds}


def build_unit(unit: dict[str, Any], log: Log) -> dict[str, Any]:
    """One backbone's mini-Gbench store (`gbench.build_gbench`) and its summary."""
    start = time.perf_counter()
    st = build_gbench(unit["out"], backbone=unit["backbone"], weights=unit["weights"],
                      epochs=unit["epochs"], only=unit["only"],
                      patch_count=unit["patch_count"], noise_count=unit["noise_count"],
                      odin_grid=tuple(tuple(p) for p in unit.get("odin_grid", ())))
    try:
        return build_summary(st, time.perf_counter() - start)
    finally:
        st.close()


def check_backbones(backbones: Sequence[str], weights: str | Path | None) -> None:
    """Every backbone known and named once; `weights` only with a single backbone."""
    unknown = [b for b in backbones if b not in BACKBONES]
    if unknown:
        raise UsageError(f"--backbone {unknown[0]!r}: expected one of {', '.join(BACKBONES)}")
    if len(set(backbones)) != len(backbones):
        raise UsageError(f"--backbone {','.join(backbones)}: a backbone is named twice")
    if weights is not None and len(backbones) > 1:
        raise UsageError("--weights applies to one --backbone; got "
                         f"{len(backbones)} ({', '.join(backbones)})")


def gbench_builds(executor: Any, out: str | Path, backbones: Sequence[str], *,
                  weights: str | Path | None = None, epochs: int = 12,
                  only: Sequence[str] | None = None, patch_count: int = PATCH_COUNT,
                  noise_count: int = NOISE_COUNT, work: str | Path | None = None,
                  log: Log = logger.info,
                  odin_grid: Sequence[tuple[float, float]] = ()) -> list[dict[str, Any]]:
    """Build the mini-Gbench store of every backbone in `backbones` (one unit each, on
    `executor`) into `out`; their summaries in that order. `weights` applies to a single
    backbone only; `work` (default `out`) holds the units' states and logs."""
    check_backbones(backbones, weights)
    out = str(Path(out).resolve())
    nonce = uuid.uuid4().hex
    units = []
    for b in backbones:
        unit = {"id": f"gbench-build-{b}", "label": f"mini-Gbench store of the {b} backbone",
                "out": out, "backbone": b,
                "weights": str(Path(weights).resolve()) if weights is not None else None,
                "epochs": epochs, "only": list(only) if only is not None else None,
                "patch_count": patch_count, "noise_count": noise_count,
                "odin_grid": [list(p) for p in odin_grid]}
        unit["key"] = digest({"unit": unit, "nonce": nonce,
                              "weights": sha256_file(Path(weights)) if weights else None})
        units.append(unit)
    return run_units(executor, Path(work or out), "gbench-build", units, build_unit, log)


def evaluation_unit(unit: dict[str, Any], log: Log) -> dict[str, Any]:
    """The Gbench protocol (`scorers.gscore.gbench_protocol`) over the unit's stores."""
    from scorers.gscore import gbench_protocol  # lazy: Numba, only where the unit runs

    stores = [Store.open(p) for p in unit["stores"]]
    try:
        return gbench_protocol(stores, **unit["options"], progress=log)
    finally:
        for st in stores:
            st.close()


def gbench_evaluation(executor: Any, work: str | Path, stores: Sequence[str | Path], *,
                      methods: Sequence[str] | None = None, repeats: int = 5,
                      splits: Sequence[str] | None = None,
                      exclude: Sequence[str] | None = None,
                      log: Log = logger.info, paper: bool = False) -> dict[str, Any]:
    """`gbench_protocol(stores, ...)` as one unit on `executor` (states in `work`)."""
    paths = [str(Path(p).resolve()) for p in stores]
    options = {"methods": list(methods) if methods else None, "repeats": repeats,
               "paper": paper,
               "splits": list(splits) if splits else None,
               "exclude": list(exclude) if exclude else None}
    unit = {"id": "gbench-evaluation", "label": f"Gbench protocol on {len(paths)} store(s)",
            "stores": paths, "options": options}
    unit["key"] = digest({"unit": unit, "stores": [store_fingerprint(p) for p in paths]})
    return run_units(executor, Path(work), "gbench", [unit], evaluation_unit, log)[0]
