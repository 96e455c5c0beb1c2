"""Experiments over what the user already has: existing stores or existing models.

Two sources replace training (post-hoc scorers only; every run's numbers are aggregated into
the same mean ± std tables as trained runs):

    [data]
    stores = ["s0/store", "s1/store", "s2/store"]   # one store per seed (extracted by
                                                     #   featstore, imported, another tool)

    model = "mymodels:build"      # or a torchvision name; module:callable may load its own
    checkpoint = ["seed0.pt", "seed1.pt"]   # weights; one checkpoint per seed (or one path)
    [data]
    spec = "bench.toml"           # the existing model is extracted once per checkpoint

With `stores`, run i scores store i (seed i); with `checkpoint`, run i extracts checkpoint i
(seed i) with `model` (or `arch`) over the spec into `OUT/runs/spec/model<i>/store` (resumed
like any extraction) and scores it; `model` without `checkpoint` is one run. Nothing is
trained: rows take no `train` other than "ce" (the default), no `train_params`, and the file
has no [train] table and no `runs`; `seeds`, when given, must have one entry per store /
checkpoint. Every path is checked before any work: each store directory holds a store.json,
each checkpoint is a file, a module:callable's module can be found
(`config.parse_existing`). A run's `train_s` is 0; `extract_s` is the extraction of the
existing model (0 for a store given as is).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from featstore.extraction.extract import ExtractOptions, extract
from featstore.store.extra_keys import parse_odin_grid, view_options
from featstore.store.fileio import atomic_write_json, sha256_file
from featstore.store.store import Store
from featstore.workflows.experiments.config import Experiment, digest

Log = Callable[[str], None]


def existing_models(exp: Experiment, out: Path, log: Log) -> list[tuple[int, dict[str, Any]]]:
    """[(seed, model record)] with the store each run scores: a given store as is, or the
    existing model extracted (resumed) per checkpoint. The record has the fields
    `runner._run_row` reads (key, store, store_sha256, train_s, extract_s)."""
    found = []
    if exp.stores is not None:
        for seed, path in zip(exp.seeds, exp.stores, strict=True):
            with Store.open(path) as st:
                sha = st.model_sha256
            manifest = sha256_file(Path(path) / "store.json")
            found.append((seed, {"key": digest({"store": path, "manifest": manifest}),
                                 "store": path, "store_sha256": sha, "train_s": 0.0,
                                 "extract_s": 0.0}))
        return found
    assert exp.model is not None and exp.spec is not None
    ckpts: list[str | None] = list(exp.checkpoints) if exp.checkpoints else [None]
    for i, (seed, ckpt) in enumerate(zip(exp.seeds, ckpts, strict=True)):
        folder = out / "runs" / "spec" / f"model{i}"
        folder.mkdir(parents=True, exist_ok=True)
        opts_raw = exp.extract_options("ce")
        recipe = {"model": exp.model, "checkpoint": sha256_file(Path(ckpt)) if ckpt else None,
                  "spec": digest(Path(exp.spec).read_text(encoding="utf-8")),
                  "extract": opts_raw}
        record_path = folder / "model.json"
        old = json.loads(record_path.read_text(encoding="utf-8")) \
            if record_path.is_file() else {}
        log(f"existing model {exp.model}" + (f" checkpoint {ckpt}" if ckpt else "")
            + f" (seed {seed})")
        if isinstance(opts_raw.get("odin_grid"), str):
            opts_raw = {**opts_raw, "odin_grid": tuple(parse_odin_grid(opts_raw["odin_grid"]))}
        opts = ExtractOptions(device=exp.device, batch_size=256, num_workers=0,
                              progress=False, **view_options(opts_raw))
        # a store extracted from another checkpoint or recipe is re-extracted, never mixed
        opts.overwrite = bool(old) and old.get("key") != digest(recipe)
        t0 = time.perf_counter()
        extract(exp.model, exp.spec, folder / "store", weights=ckpt, options=opts).close()
        took = time.perf_counter() - t0
        extract_s = old["extract_s"] if old.get("key") == digest(recipe) else took
        record = {"key": digest(recipe), "recipe": recipe, "train_s": 0.0,
                  "extract_s": extract_s}
        atomic_write_json(record_path, record)
        with Store.open(folder / "store") as st:
            sha = st.model_sha256
        found.append((seed, {**record, "store": str(folder / "store"), "store_sha256": sha}))
    return found
