"""`featstore protocol ten-methods` as one call: the remote-sensing benchmark's ten methods
(Wang et al., Remote Sensing 16(9):1501, 2024, Tables 11-16: "nine OOD benchmarks ...
calculated over seven runs") on the user's own OOD benchmarks, one benchmark spec per
dataset, as experiments of `featstore run`.

Per dataset (`LABEL=SPEC`, the label naming its rows and its folder `OUT/<LABEL>`): an
experiment with the rows of `presets.ten_method_rows` (the paper's four families; MCD
scored by eq. 14; ViM and KNN tuned on the val splits by AUROC over five values each, used as
they are: §2.5's "five most common values", tuning rule "paper", `presets`), R training
seeds 0 .. R-1 (`runs`: each seed trains every method once: the paper's seven runs), the
spec's own OOD groups (`ood/<group>/<name>` test splits: "simi", "near", "far" in the paper;
any names the spec uses), written to `OUT/<LABEL>/experiment.toml` and run by
`runner.run_experiment` into `OUT/<LABEL>` (resumable: a rerun reads back what finished;
`featstore run OUT/<LABEL>/experiment.toml --out OUT/<LABEL>` is the same run).

Training defaults are `protocol osr`'s for file data (`osr_run.osr_train_settings`: the
`remote-sensing` preset, SGD 0.01, momentum 0.9, wd 5e-4, 100 epochs, batch 128, flip +
crop) and ResNet-50 (§2.5); OE and MCD train on `aux` (an ImageFolder of auxiliary outliers)
or on a spec split with role ood and usage "train".

Everything is checked before the first training step, for every dataset: the label (a
folder name, unique), the spec (loads; has id/train, id/val and id/test; at least one OOD
group of test splits; with tuning, an OOD split with usage "val" when a row is tuned), the
rows and their settings (`config.check_experiment`) and the outliers OE / MCD need.

Outputs: each dataset's `results.json` / `results.md` (the runner's), `OUT/datasets.json`
(label -> results file, read by `featstore table OUT`) and `OUT/results.paper.md`: the
paper's layout over all datasets (`paper_layout`: rows dataset x group).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from featstore.errors import InputError, UsageError
from featstore.specs.benchmark import load_spec
from featstore.specs.labels import labelled_paths
from featstore.store.fileio import atomic_write_json, atomic_write_output
from featstore.store.names import parse_split_name
from featstore.store.textsafe import one_line
from featstore.workflows.experiments.config import (
    OUTLIER_METHODS,
    Experiment,
    MethodRow,
    check_experiment,
)
from featstore.workflows.experiments.osr_run import osr_train_settings
from featstore.workflows.experiments.paper_layout import (
    DATASETS_FILE,
    PAPER_FILE,
    RESULTS_FILE,
    write_paper,
)
from featstore.workflows.experiments.presets import select_rows, ten_method_rows
from featstore.workflows.experiments.runner import run_experiment
from scorers import REGISTRY

#: the architecture of the paper's benchmark (§2.5: "we uniformly used ResNet-50")
DEFAULT_ARCH = "resnet50"
#: the paper's OOD benchmarks average seven runs (Tables 11-16)
DEFAULT_RUNS = 7
EXPERIMENT_FILE = "experiment.toml"
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
#: names a dataset's label cannot take: OUT's own files (lower case)
OUTPUT_NAMES = frozenset(n.lower() for n in (DATASETS_FILE, PAPER_FILE, ".featstore.lock"))


def parse_datasets(items: Sequence[str]) -> dict[str, Path]:
    """`[LABEL=]SPEC` items -> {label: spec path} (`featstore.specs.labels`: the label
    defaults to the spec's file name less .toml). A label is a folder name (letters, digits,
    `_.+-`), used once."""
    if not items:
        raise UsageError("--spec: give at least one benchmark spec (LABEL=bench.toml)")
    out: dict[str, Path] = {}
    for (label, path), item in zip(labelled_paths(items, "--spec"), items, strict=True):
        if not _LABEL.fullmatch(label):
            raise UsageError(f"--spec {item!r}: label {label!r} must match "
                             "[A-Za-z0-9][A-Za-z0-9_.+-]* (it names OUT/<LABEL>)")
        if label.lower() in OUTPUT_NAMES:
            raise UsageError(f"--spec {item!r}: label {label!r} is the name of an output file "
                             f"of OUT ({', '.join(sorted(OUTPUT_NAMES))}); choose another")
        if not Path(path).is_file():
            raise InputError(f"--spec {item!r}: spec {path!r}: file not found")
        out[label] = Path(path).resolve()
    return out


def check_outputs(out: Path, labels: Sequence[str]) -> None:
    """InputError before any work when a dataset's folder `OUT/<LABEL>` or one of OUT's own
    files is taken by something of the other kind (a file where a folder goes, a folder
    where a file goes): the run would fail there after training everything before it."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {str(out)!r}: exists and is not a directory")
    for label in labels:
        folder = out / label
        if folder.exists() and not folder.is_dir():
            raise InputError(f"--out {str(out)!r}: {label!r} (the dataset's folder) exists "
                             "and is not a directory; move it or choose another label")
    for name in (DATASETS_FILE, PAPER_FILE):
        if (out / name).is_dir():
            raise InputError(f"--out {str(out)!r}: {name!r} (an output file) is a directory")


def _tuned(row: MethodRow) -> bool:
    grid = row.grid if row.grid is not None else REGISTRY[row.scorer].grid
    return any(k not in row.params for k in grid)


def spec_groups(path: Path, label: str, rows: Sequence[MethodRow], tune: bool,
                has_aux: bool = False) -> list[str]:
    """The spec's OOD groups (of its test splits, in order), after the module docstring's
    checks of the spec; InputError naming the dataset and the spec otherwise."""
    spec = load_spec(path)
    where = f"--spec {label}={str(path)!r}"
    names = {s.name for s in spec.splits}
    missing = [n for n in ("id/train", "id/val", "id/test") if n not in names]
    if missing:
        raise InputError(f"{where}: no {', '.join(missing)} split (the ten methods train on "
                         "id/train, fit and tune on id/val, test on id/test)")
    groups: list[str] = []
    for s in spec.splits:
        if s.role == "ood" and s.usage == "test":
            group = parse_split_name(s.name).group or ""
            groups += [group] if group not in groups else []
    if not groups:
        raise InputError(f"{where}: no OOD test split: name them ood/<group>/<name> (e.g. "
                         "ood/simi/..., ood/near/..., ood/far/...)")
    tuned = [r.name for r in rows if _tuned(r)]
    if tune and tuned and not any(s.role == "ood" and s.usage == "val" for s in spec.splits):
        raise InputError(f"{where}: {', '.join(tuned)} is tuned on val (the paper's §2.5) "
                         "but the spec has no OOD split with usage = \"val\"; add one or pass "
                         "--no-tune")
    if not any(s.role == "ood" and s.usage == "train" for s in spec.splits):
        needing = [r.name for r in rows if r.train in OUTLIER_METHODS]
        if needing and not has_aux:
            raise InputError(f"{where}: {', '.join(needing)} train on auxiliary outliers: "
                             "give --aux DIR (an ImageFolder) or a spec split with role ood "
                             "and usage = \"train\", or leave them out with --methods")
    return groups


def ten_methods_experiments(specs: Mapping[str, Path], rows: Sequence[MethodRow],
                            train: Mapping[str, Any], *, runs: int = DEFAULT_RUNS,
                            arch: str = DEFAULT_ARCH, aux: Path | None = None,
                            tune: bool = True, device: str = "auto"
                            ) -> dict[str, Experiment]:
    """{label: Experiment} of every dataset, each checked (module docstring)."""
    if runs < 1:
        raise UsageError(f"--runs {runs}: must be >= 1")
    if aux is not None and not Path(aux).is_dir():
        raise InputError(f"--aux {str(aux)!r}: not a directory (an ImageFolder of outliers)")
    out = {}
    for label, path in specs.items():
        spec_groups(path, label, rows, tune, aux is not None)
        exp = Experiment(name=f"Ten OOD methods on {label} (Wang et al. 2024, Tables 11-16)",
                         arch=arch, seeds=list(range(runs)), rows=list(rows), spec=str(path),
                         aux={"imagefolder": str(Path(aux).resolve())} if aux else None,
                         device=device, train=dict(train),
                         tune_rule="paper" if tune else "none", select_by="auroc")
        out[label] = check_experiment(exp, f"ten-methods {label}")
    return out


def run_ten_methods_bench(specs: Sequence[str], out: Path, *, runs: int = DEFAULT_RUNS,
                          methods: str = "all",
                          params: Mapping[str, Mapping[str, Any]] | None = None,
                          train: Mapping[str, Any] | None = None, arch: str | None = None,
                          aux: Path | None = None, tune: bool = True, device: str = "auto",
                          log: Callable[[str], None] | None = None,
                          train_progress: Callable[[str], Any] | None = None,
                          executor: Any = None) -> dict[str, Any]:
    """Check every dataset, then run each (`runner.run_experiment`, resumable) and write the
    paper's tables; {"datasets": {label: results}, "out", "paper", "seconds"}. `params`:
    {scorer: {k: v}} merged into the rows of that scorer; `executor` runs the units
    (`executors.make_executor`; None: here, in order)."""
    datasets = parse_datasets(specs)
    rows = select_rows(methods, ten_method_rows(finetune=False), allow_scorers=True)
    rows = [replace(r, params={**r.params, **(params or {}).get(r.scorer, {})}) for r in rows]
    settings = dict(train) if train is not None else osr_train_settings(False)
    exps = ten_methods_experiments(datasets, rows, settings, runs=runs,
                                   arch=arch or DEFAULT_ARCH, aux=aux, tune=tune,
                                   device=device)
    out = Path(out).resolve()
    check_outputs(out, list(exps))
    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for label, exp in exps.items():
        folder = out / label
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_output(folder / EXPERIMENT_FILE, exp.to_toml(one_line(
            f"featstore protocol ten-methods: dataset {label}; the same run: featstore run "
            f"{folder / EXPERIMENT_FILE} --out {folder}")))
        if log is not None:
            log(f"dataset {label}: {exp.spec}")
        results[label] = run_experiment(exp, folder, log=log, train_progress=train_progress,
                                        executor=executor)
    atomic_write_json(out / DATASETS_FILE, {"datasets": {
        label: f"{label}/{RESULTS_FILE}" for label in results}})
    paper = write_paper(list(results.items()), out / PAPER_FILE,
                        title="Ten OOD methods (Wang et al. 2024 layout)")
    return {"datasets": results, "out": str(out), "paper": str(paper),
            "seconds": time.perf_counter() - start}


__all__ = ["DEFAULT_ARCH", "DEFAULT_RUNS", "PAPER_FILE", "parse_datasets",
           "run_ten_methods_bench", "spec_groups", "ten_methods_experiments"]
