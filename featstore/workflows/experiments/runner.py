"""Run an experiment: every (method row, data split, seed) trained, extracted once per model,
tuned on val splits only, evaluated; one results file with every run and mean ± std.

Per data split (the spec, or one OSR class division per ratio and seed) and seed:

1. the split's spec is written to `OUT/runs/<split>/seed<s>/spec.toml` (the user spec with
   its sources as absolute paths and its classes / wnids / class_map / balance kept, or the
   OSR division's lists; plus the auxiliary outlier split
   `ood/<aux_name>/outliers` with usage "train" when [data] aux is given);
2. each training method the rows need is trained once (`featstore.training.trainer.train`, seed
   = the run's seed; for OSR with `runs = R`, run r of division seed s trains with seed
   s + 1000 r in `runs/<ratio>/seed<s>-run<r>` (r = 0: `seed<s>`, seed s), so the runs of a
   division share its classes and differ in training only) into
   `models/<method>/model.pt` and extracted once into `models/<method>/store` (with the union
   of its rows' extraction extras); with `finetune = true`, training-time methods start from
   the `ce` model of the same split and seed;
3. each row's scorer runs on its model's store: with `[tune] rule = "val"` and a non-empty
   grid (the row's, else the scorer's default grid), `scorers.sweep.sweep` chooses the
   setting on id/val against the val-flagged OOD splits only (OSR: `ood/osr/open_val`) by
   `select_by`, then scores the test splits; otherwise `scorers.evaluate.evaluate` at the row's
   parameters. The run's record (per OOD group and split: every metric of
   `scorers.metrics.ood_metrics`; ID accuracy; misclassification AUROC; the chosen setting;
   train / extract / score seconds) is written to `results/<row>.json`.

Resuming: a model whose checkpoint and `train.json` recipe match is not retrained; a store
resumes its extraction (complete splits are kept, `featstore.extraction.extract`); a run whose
record exists with the same key (row, model recipe, tuning rule) is read back, never recomputed. A
killed experiment therefore continues where it stopped when the same command runs again (a
model killed mid-training restarts that model's training).

A run that cannot be trained, extracted, tuned or scored is recorded as skipped with the
reason (a one-line error), listed in `results.json` (`skipped`), the terminal tables and the
Markdown report, and left out of the aggregates, which carry their `n`. Timings: `train_s`
is the model's training (for a fine-tuned model, the fine-tuning; `base_train_s` holds the
`ce` model's), `extract_s` its extraction, `score_s` the scorer's fit + scoring (with tuning:
fit + val + test scoring); all wall-clock seconds on this machine, recorded when computed.
"""

from __future__ import annotations

import functools
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from featstore.errors import FeatstoreError, InputError, UsageError
from featstore.extraction.extract import ExtractOptions, extract
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec, load_spec, parse_spec
from featstore.store.extra_keys import parse_odin_grid, view_options
from featstore.store.fileio import atomic_write_json, atomic_write_output, sha256_file
from featstore.store.interrupts import (
    deferred,
    interrupted,
    raise_if_interrupted,
    received,
)
from featstore.store.lock import StoreLock
from featstore.store.store import Store
from featstore.store.textsafe import one_line
from featstore.training import trainer
from featstore.training.presets import make_config
from featstore.workflows.experiments import unitstate
from featstore.workflows.experiments.aggregate import aggregate_runs
from featstore.workflows.experiments.config import RUN_SEED_STRIDE, Experiment, MethodRow, digest
from featstore.workflows.experiments.existing import existing_models
from featstore.workflows.experiments.render import markdown_report
from featstore.workflows.experiments.rowscore import score_row
from featstore.workflows.experiments.unitthreads import plan_threads, unit_threads
from featstore.workflows.protocols.osr import (
    DIGITS_ARCH,
    DIGITS_TRANSFORM,
    class_splits,
    load_data,
    open_val_test,
    split_comment,
    split_spec,
)
from scorers.adapt import describe

Log = Callable[[str], None]
RESULTS_FILE = "results.json"
REPORT_FILE = "results.md"


# ------------------------------------------------------------------------------- splits
def _data_splits(exp: Experiment) -> list[dict[str, Any]]:
    """[{label, tag, seed, train_seed, run, ratio}] in order: spec -> one per seed; OSR ->
    ratio x division seed x run (training seed = seed + RUN_SEED_STRIDE * run)."""
    if exp.spec is not None:
        return [{"label": "spec", "tag": "spec", "seed": s, "train_seed": s, "run": 0,
                 "ratio": None} for s in exp.seeds]
    assert exp.osr is not None
    return [{"label": f"{c}/{o}", "tag": f"r{c}-{o}", "seed": s,
             "train_seed": s + RUN_SEED_STRIDE * r, "run": r, "ratio": (c, o)}
            for c, o in exp.osr["ratios"] for s in exp.seeds for r in range(exp.runs)]


def run_spec(exp: Experiment, split: dict[str, Any], directory: Path,
             labelled: Any) -> tuple[BenchmarkSpec, str, dict[str, Any]]:
    """The split's benchmark spec, the comment its written copy starts with, and a
    description (OSR: closed / open classes)."""
    info: dict[str, Any] = {}
    if exp.spec is not None:
        bench = load_spec(exp.spec)
        splits = list(bench.splits)
        comment = f"{one_line(exp.name)}: {one_line(exp.spec)}"
    else:
        osr = exp.osr or {}
        division = class_splits(len(labelled.classes), split["ratio"], [split["seed"]])[0]
        transform = dict(DIGITS_TRANSFORM) if labelled.kind == "digits" else {}
        if osr.get("image_size"):
            size = int(osr["image_size"])
            transform.update({"resize": size, "crop": size})

        val_open = osr.get("val_open", "heldout")
        bench = split_spec(labelled, division, directory, transform, osr.get("fractions"),
                           val_open)
        splits = list(bench.splits)
        comment = split_comment(labelled, division, val_open)
        val_cls, test_cls = open_val_test(division, val_open)
        info = {"closed": [labelled.classes[i] for i in division.closed],
                "open": [labelled.classes[i] for i in test_cls],
                "open_val": [labelled.classes[i] for i in val_cls]}
    if exp.aux is not None:   # auxiliary outliers for OE / MCD (usage train: never evaluated)
        splits.append(SplitSpec(f"ood/{exp.aux_name}/outliers", "train", dict(exp.aux)))
    spec = replace(bench, path=None, splits=splits).validated(directory, "run spec")
    return spec, comment, info


# ------------------------------------------------------------------------------- models
def _arch(exp: Experiment, labelled: Any) -> str:
    if exp.arch:
        return exp.arch
    if labelled is not None and labelled.kind == "digits":
        return DIGITS_ARCH
    raise InputError(f"experiment {exp.name!r}: name the architecture (arch = \"resnet50\")")


def _train_settings(exp: Experiment, method: str, seed: int) -> dict[str, Any]:
    """TrainConfig fields of `method` at `seed` (preset, overrides, fine-tuning)."""
    t = dict(exp.train)
    finetune = bool(t.pop("finetune", False)) and method != "ce"
    ft_epochs, ft_lr = t.pop("finetune_epochs", None), t.pop("finetune_lr", None)
    preset = t.pop("preset", None)
    if finetune:
        if ft_epochs is not None:
            t["epochs"] = ft_epochs
        if ft_lr is not None:
            t["lr"] = ft_lr
    params: dict[str, Any] = {}
    for r in exp.rows:
        if r.train == method and r.train_params:
            if params and params != r.train_params:
                raise UsageError(f"rows train {method!r} with different train_params "
                                 f"({params} and {r.train_params}); give them once")
            params = dict(r.train_params)
    return {"preset": preset, **t, "seed": seed, "device": exp.device,
            "method_params": params, "finetune": finetune}


def _extract_options(exp: Experiment, method: str) -> dict[str, Any]:
    opts = exp.extract_options(method)
    if isinstance(opts.get("odin_grid"), str):
        opts["odin_grid"] = tuple(parse_odin_grid(opts["odin_grid"]))
    return view_options(opts)


def _complete_digests(store_dir: Path) -> dict[str, Any]:
    manifest = store_dir / "store.json"
    if not manifest.is_file():
        return {}
    entries = json.loads(manifest.read_text(encoding="utf-8")).get("splits", {})
    return {k: v.get("sha256") for k, v in entries.items() if v.get("complete")}


def _model(exp: Experiment, arch: str, method: str, run_dir: Path, bench: BenchmarkSpec,
           seed: int, log: Log, train_progress: Any, threads: int | None) -> dict[str, Any]:
    """Train (or reuse) and extract (or resume) one model on the unit's `threads` (part of
    its recipe: another count trains other weights); returns its record."""
    folder = run_dir / "models" / method
    folder.mkdir(parents=True, exist_ok=True)
    ckpt, record_path = folder / "model.pt", folder / "train.json"
    settings = _train_settings(exp, method, seed)
    finetune = settings.pop("finetune")
    init = run_dir / "models" / "ce" / "model.pt" if finetune else None
    extract_opts = _extract_options(exp, method)
    recipe = {"arch": arch, "method": method, "train": dict(settings), "threads": threads,
              "init": sha256_file(init) if init is not None else None,
              "spec": digest(bench.to_data()),
              "extract": {k: list(v) if isinstance(v, tuple) else v
                          for k, v in extract_opts.items()}}
    key = digest(recipe)
    record = (json.loads(record_path.read_text(encoding="utf-8"))
              if record_path.is_file() else {})
    if ckpt.is_file() and record.get("key") == key and "train_s" in record:
        log(f"  reusing {method} model {ckpt}")
    else:
        log(f"  training {method} (seed {seed}{', fine-tuning ce' if finetune else ''})")
        preset = settings.pop("preset")
        config = make_config(preset, **settings,
                             init=str(init) if init is not None else None)
        ctx = train_progress(f"train {method} seed {seed}") if train_progress else None
        t0 = time.perf_counter()
        if ctx is None:
            trainer.train(method, arch, bench, ckpt, config)
        else:
            with ctx as progress:
                trainer.train(method, arch, bench, ckpt, config, progress=progress)
        record = {"key": key, "recipe": recipe, "train_s": time.perf_counter() - t0}
        atomic_write_json(record_path, record)
    store_dir = folder / "store"
    before = _complete_digests(store_dir)
    opts = ExtractOptions(device=exp.device, batch_size=256, num_workers=0, progress=False,
                          **extract_opts)
    if (store_dir / "store.json").is_file():
        manifest = json.loads((store_dir / "store.json").read_text(encoding="utf-8"))
        if manifest.get("model", {}).get("sha256") != sha256_file(ckpt):
            opts.overwrite = True          # a store of an older checkpoint of this method
    t0 = time.perf_counter()
    store = extract(arch, bench, store_dir, weights=ckpt, options=opts)
    store.close()
    if "extract_s" not in record or _complete_digests(store_dir) != before:
        record["extract_s"] = time.perf_counter() - t0
        atomic_write_json(record_path, record)
    record["store"] = str(store_dir)
    record["store_sha256"] = Store.open(store_dir).model_sha256
    return record


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _slug(name: str) -> str:
    """A file name for row `name`: the name itself when it is safe, else its safe characters
    and a digest of the name, so that two names ("A/B", "A_B") never share a file."""
    slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    if slug == name and not name.startswith("."):
        return slug
    return f"_{slug[1:]}-{digest(name)[:8]}" if slug.startswith(".") else \
        f"{slug}-{digest(name)[:8]}"


def check_executor(exp: Experiment, executor: Any) -> None:
    """UsageError when `executor` asks to run `exp` elsewhere (Slurm, Ray, a pool) but `exp`
    scores existing stores or models, which run in this process: never run here silently
    what the caller asked to run elsewhere."""
    if (exp.stores is not None or exp.model is not None) and executor is not None and (
            executor.name != "local" or getattr(executor, "workers", 1) > 1):
        kind = "local with workers" if executor.name == "local" else executor.name
        raise UsageError(f"experiment {exp.name!r} scores existing "
                         f"{'stores' if exp.stores is not None else 'models'}: nothing to "
                         "train, so it runs in this process; drop --executor / --workers "
                         f"(executor {kind})")


def _output_locked(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """Run `fn(exp, out, ...)` holding OUT's lock (`featstore.store.lock`, flock on
    OUT/.featstore.lock): a second runner on the same output is refused naming the first."""
    @functools.wraps(fn)
    def locked(exp: Experiment, out: str | Path, **kw: Any) -> dict[str, Any]:
        check_executor(exp, kw.get("executor"))  # before anything is written
        out = Path(out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        with StoreLock(out, command="featstore run", what="output directory"):
            return fn(exp, out, **kw)
    return locked


# ------------------------------------------------------------------------------- runner
class Executor(Protocol):
    """Runs units (see `featstore.workflows.experiments.executors`): `per_method` splits a data
    split's training methods into units of their own; `run` returns each unit's run records."""

    name: str
    per_method: bool

    def run(self, exp: Experiment, out: Path, arch: str, units: list[dict[str, Any]],
            log: Log) -> dict[str, list[dict[str, Any]]]: ...


def plan_units(exp: Experiment, out: Path, arch: str, labelled: Any,
               per_method: bool, threads: int | None = None) -> list[dict[str, Any]]:
    """The experiment's units in run order, each a (data split, seed, training methods) piece
    with its rows, its thread count (`threads`: `unitthreads`) and its benchmark spec
    (`spec`, as `BenchmarkSpec.to_data()`: the unit's training and extraction take it as an
    object); writes a copy of each split's spec for the user
    (`OUT/runs/<split>/seed<s>/spec.toml`). One unit
    per split and seed, or (`per_method`) one per training method too, except that fine-tuned
    methods stay in their `ce` model's unit."""
    units: list[dict[str, Any]] = []
    ident = {k: v for k, v in exp.to_json().items() if k != "path"}
    for split in _data_splits(exp):
        seed = split["seed"]
        run_part = f"-run{split['run']}" if split["run"] else ""
        run_dir = out / "runs" / split["tag"] / f"seed{seed}{run_part}"
        run_dir.mkdir(parents=True, exist_ok=True)
        bench, comment, info = run_spec(exp, split, run_dir, labelled)
        text = bench.to_toml(comment)
        spec_path = run_dir / "spec.toml"
        if not spec_path.is_file() or spec_path.read_text(encoding="utf-8") != text:
            atomic_write_output(spec_path, text)
        methods = exp.train_methods()
        groups = [[m] for m in methods] if per_method and not exp.train.get("finetune") \
            else [methods]
        for group in groups:
            suffix = f"-{'+'.join(group)}" if per_method else ""
            unit = {"id": _slug(f"{split['tag']}-seed{seed}{run_part}{suffix}"),
                    "label": f"{split['label']} seed {seed}{run_part.replace('-', ' ')}"
                             + (f" {'+'.join(group)}" if per_method else ""),
                    "split": split, "info": info, "run_dir": str(run_dir), "methods": group,
                    "spec": bench.to_data(), "threads": threads,
                    "rows": [r.name for r in exp.rows if r.train in group]}
            unit["key"] = digest({"experiment": ident, "arch": arch, "unit": unit})
            units.append(unit)
    return units


def run_unit(exp: Experiment, arch: str, unit: dict[str, Any], *, log: Log,
             train_progress: Callable[[str], Any] | None = None,
             on_run: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train and extract the unit's models (or reuse / resume them) and score its rows;
    returns their run records in row order."""
    split, info, seed = unit["split"], unit["info"], unit["split"]["seed"]
    train_seed = split["train_seed"]
    run_dir = Path(unit["run_dir"])
    spec_path = run_dir / "spec.toml"   # the unit's spec, written for the user by plan_units
    bench = parse_spec(unit["spec"], run_dir, f"spec {str(spec_path)!r}")
    bench.path = spec_path
    log(f"{split['label']} seed {seed}" + (
        f" run {split['run']} (training seed {train_seed})" if exp.runs > 1 else "") + (
        f": closed {' '.join(info['closed'])} | open {' '.join(info['open'])}"
        f" | open_val {' '.join(info.get('open_val', []))}"
        if info else ""))
    models: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for method in unit["methods"]:
        if method != "ce" and "ce" in failed and exp.train.get("finetune"):
            failed[method] = f"the ce model it fine-tunes failed: {failed['ce']}"
            continue
        try:
            models[method] = _model(exp, arch, method, run_dir, bench, train_seed,
                                    log, train_progress, unit.get("threads"))
        except FeatstoreError as exc:
            raise_if_interrupted()
            failed[method] = f"training/extraction of {method!r} failed: {_error_line(exc)}"
            log(f"  {failed[method]}")
    runs: list[dict[str, Any]] = []
    for row in exp.rows:
        if row.train not in unit["methods"]:
            continue
        base = {"split": split["label"], "seed": seed, "train_seed": train_seed,
                "run": split["run"], "method": row.name,
                "train": row.train, "scorer": row.scorer, **info}
        if row.train in failed:
            record = {**base, "status": "skipped", "reason": failed[row.train]}
        else:
            record = _run_row(exp, row, base, models, run_dir, Store, log)
        runs.append(record)
        if on_run is not None:
            on_run(record)
    return runs


def run_tracked(out: Path, unit: dict[str, Any], body: Callable[[dict[str, Any], Log], Any],
                log: Log | None = None) -> Any:
    """`body(unit, log)` with the unit's state in `OUT/units/<id>.json` (running, then done
    with its JSON result as the records, or failed with the error line) and its log in
    `OUT/logs/<id>.log` (and `log`); returns the result as plain JSON values. A signal
    (Ctrl-C, a Slurm job's SIGTERM, submitit's requeue exit) leaves the state interrupted."""
    uid, key = unit["id"], unit["key"]
    logfile = unitstate.log_path(out, uid)
    logfile.parent.mkdir(parents=True, exist_ok=True)
    unitstate.mark_running(out, uid, key)
    with open(logfile, "a", encoding="utf-8") as fh:
        def tee(message: str) -> None:
            fh.write(message + "\n")
            fh.flush()
            if log is not None:
                log(message)
        try:
            with unit_threads(unit.get("threads")) as count:   # the plan's (unitthreads)
                if count is not None:
                    tee(f"computing on {count} threads (the plan's)")
                result = body(unit, tee)
        except Exception as exc:
            if interrupted():                # a signal that surfaced as another error
                _stopped(out, unit, tee, received() or "KeyboardInterrupt")
                raise
            tee(traceback.format_exc())
            unitstate.mark_finished(out, uid, key, error=f"{type(exc).__name__}: "
                                                         f"{_error_line(exc)}")
            raise
        except BaseException as exc:         # Ctrl-C, SIGTERM (Slurm), submitit's requeue exit
            _stopped(out, unit, tee, received() or type(exc).__name__)
            raise
    result = json.loads(json.dumps(result, default=float))
    unitstate.mark_finished(out, uid, key, records=result)
    return result


def _stopped(out: Path, unit: dict[str, Any], tee: Log, what: str) -> None:
    """The unit was stopped by a signal (not a failure of its own): state interrupted (a
    signal that follows, e.g. Slurm's SIGTERM after submitit's requeue, waits for the write)."""
    with deferred():
        tee(f"interrupted ({what}): the unit's files keep what it finished; a requeued job "
            "or a rerun redoes the rest")
        unitstate.mark_interrupted(out, unit["id"], unit["key"], what)


def run_unit_tracked(exp: Experiment, out: Path, arch: str, unit: dict[str, Any], *,
                     log: Log | None = None, train_progress: Callable[[str], Any] | None = None,
                     on_run: Callable[[dict[str, Any]], None] | None = None
                     ) -> list[dict[str, Any]]:
    """`run_unit` through `run_tracked` (its state file and log)."""
    return run_tracked(Path(out), unit, lambda u, tee: run_unit(
        exp, arch, u, log=tee, train_progress=train_progress, on_run=on_run), log)


@_output_locked
def run_experiment(exp: Experiment, out: str | Path, *, log: Log | None = None,
                   train_progress: Callable[[str], Any] | None = None,
                   on_run: Callable[[dict[str, Any]], None] | None = None,
                   executor: Executor | None = None,
                   threads: int | None = None) -> dict[str, Any]:
    """Run (or resume) `exp` into `out`; returns and writes `OUT/results.json` (and the
    Markdown report `OUT/results.md`). Every unit, and the scoring of existing stores,
    computes on `unitthreads.plan_threads(threads or exp.threads)` threads, recorded as
    `threads`. `on_run(record)` is called after each run is
    finished (computed or read back; in this process only). `executor` runs the units
    (`featstore.workflows.experiments.executors`); None: here, one after the other, in order (an
    exception stops the run). The aggregation runs when every unit is done. See the module
    docstring."""
    log = log or (lambda _m: None)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    count = plan_threads(threads if threads is not None else exp.threads)
    if exp.stores is not None or exp.model is not None:
        arch: str | None = exp.model  # existing stores / models: scored here, no units
        with unit_threads(count):
            runs = _existing_runs(exp, out, log, on_run)
    else:
        arch, runs = _trained_runs(exp, out, log, train_progress, on_run, executor, count)
    result = {
        "experiment": exp.to_json(), "arch": arch, "threads": count, "out": str(out),
        "runs": runs,
        "skipped": [{k: r[k] for k in ("split", "seed", "method", "reason")}
                    for r in runs if r["status"] != "ok"],
        "aggregate": aggregate_runs(runs),
        "wall_s": time.perf_counter() - start,
    }
    result = json.loads(json.dumps(result, default=float))
    atomic_write_json(out / RESULTS_FILE, result)
    atomic_write_output(out / REPORT_FILE, markdown_report(result))
    return result


def _trained_runs(exp: Experiment, out: Path, log: Log,
                  train_progress: Callable[[str], Any] | None,
                  on_run: Callable[[dict[str, Any]], None] | None,
                  executor: Executor | None, threads: int) -> tuple[str, list[dict[str, Any]]]:
    """(arch, run records in unit and row order) of an experiment that trains."""
    labelled = load_data(exp.osr["data"], exp.osr.get("root")) if exp.osr else None
    arch = _arch(exp, labelled)
    if exp.osr is not None:  # every division's open_val / open classes, before any training
        assert labelled is not None  # loaded above when exp.osr is set
        for c, o in exp.osr["ratios"]:
            for division in class_splits(len(labelled.classes), (c, o), exp.seeds):
                open_val_test(division, exp.osr.get("val_open", "heldout"))
    units = plan_units(exp, out, arch, labelled, executor is not None and executor.per_method,
                       threads)
    unitstate.write_plan(out, executor.name if executor is not None else "local", units)
    if executor is None:
        by_unit = {u["id"]: run_unit_tracked(exp, out, arch, u, log=log,
                                             train_progress=train_progress, on_run=on_run)
                   for u in units}
    else:
        by_unit = executor.run(exp, out, arch, units, log)
    runs = [r for u in units for r in by_unit[u["id"]]]
    order = {(u["split"]["label"], u["split"]["seed"], u["split"]["run"]): i
             for i, u in enumerate(units)}
    rank = {r.name: i for i, r in enumerate(exp.rows)}
    runs.sort(key=lambda r: (order[(r["split"], r["seed"], r["run"])], rank[r["method"]]))
    return arch, runs


def _existing_runs(exp: Experiment, out: Path, log: Log,
                   on_run: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
    """Every row over the existing stores / models (`existing.py`): no training."""
    label = "stores" if exp.stores is not None else "spec"
    runs = []
    for i, (seed, model) in enumerate(existing_models(exp, out, log)):
        run_dir = out / "runs" / label / f"{'store' if exp.stores is not None else 'model'}{i}"
        run_dir.mkdir(parents=True, exist_ok=True)
        log(f"{label} seed {seed}: {model['store']}")
        for row in exp.rows:
            base = {"split": label, "seed": seed, "train_seed": None, "run": 0,
                    "method": row.name, "train": "ce", "scorer": row.scorer}
            record = _run_row(exp, row, base, {"ce": model}, run_dir, Store, log)
            runs.append(record)
            if on_run is not None:
                on_run(record)
    return runs


def _run_row(exp: Experiment, row: MethodRow, base: dict[str, Any],
             models: dict[str, dict[str, Any]], run_dir: Path, store_cls: Any,
             log: Log) -> dict[str, Any]:
    model = models[row.train]
    key = digest({"row": asdict(row), "model": model["key"], "tune": exp.tune_rule,
                  "select_by": exp.select_by})
    path = run_dir / "results" / f"{_slug(row.name)}.json"
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("key") == key and old.get("status") == "ok":
            log(f"  {row.name}: finished earlier, read back")
            return old
    try:
        with store_cls.open(model["store"]) as store:
            numbers = score_row(store, row, exp.tune_rule, exp.select_by)
    except FeatstoreError as exc:
        raise_if_interrupted()
        reason = f"{row.scorer}: {_error_line(exc)}"
        log(f"  {row.name}: skipped ({reason})")
        return {**base, "status": "skipped", "reason": reason}
    base_train = models.get("ce", {}).get("train_s") if exp.train.get("finetune") \
        and row.train != "ce" else None
    record = {**base, "status": "ok", "key": key, "store": model["store"],
              "model_sha256": model["store_sha256"], **numbers,
              "train_s": model["train_s"], "extract_s": model["extract_s"],
              "base_train_s": base_train}
    record = json.loads(json.dumps(record, default=float))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)
    groups = record["groups"]
    for adjustment in record.get("adjusted") or []:  # a clamped default (e.g. ViM's dim)
        log(f"  {row.name}: warning: adjusted to this store: {describe(adjustment)}")
    log(f"  {row.name}: " + "  ".join(f"{g} AUROC {v['auroc']:.2f}" for g, v in groups.items()))
    return record
