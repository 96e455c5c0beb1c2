"""`featstore protocol osr` as one call: the OSR protocol of the remote-sensing benchmark (Wang
et al. 2024 §2.6.1) as an experiment of `featstore run`, with the command's defaults.

Training defaults (`osr_train_settings`): on the demo digits 6 epochs, batch 32, SGD lr 0.05,
Nesterov, cosine schedule, random-shift crops; on file data the `remote-sensing` preset (SGD
0.01, momentum 0.9, wd 5e-4, constant lr, 100 epochs), batch 128, flip + crop. A value the
user gives overrides the default; the whole configuration is checked
(`training.presets.make_config`) before anything runs. OE and MCD read their outliers from
`aux` (an ImageFolder), on the digits by default the demo's scikit-image crops."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from featstore.errors import UsageError
from featstore.training.presets import make_config
from featstore.workflows.experiments.config import RUN_SEED_STRIDE
from featstore.workflows.experiments.presets import (
    AUX_SOURCE,
    osr_experiment,
    select_rows,
    ten_method_rows,
)
from featstore.workflows.experiments.runner import run_experiment
from featstore.workflows.protocols.osr import parse_ratios

DIGITS_TRAIN: dict[str, Any] = {"epochs": 6, "batch_size": 32, "lr": 0.05, "augment": "crop",
                                "nesterov": True, "schedule": "cosine"}


def osr_train_settings(digits: bool, preset: str | None = None, epochs: int | None = None,
                       lr: float | None = None, batch_size: int | None = None,
                       augment: str | None = None) -> dict[str, Any]:
    """The training settings of the OSR command (module docstring), checked."""
    if digits:
        train = dict(DIGITS_TRAIN)
    else:
        train = {"preset": preset or "remote-sensing", "batch_size": 128, "augment": "flip+crop"}
    if preset is not None:
        train["preset"] = preset
    train.update({k: v for k, v in (("epochs", epochs), ("lr", lr), ("batch_size", batch_size),
                                    ("augment", augment)) if v is not None})
    make_config(**train)  # a bad value is an error before anything runs
    return train


def run_osr(data: str, out: Path, *, ratios: str = "7/3,6/4,5/5", seeds: int = 5,
            runs: int = 1, methods: str = "msp,vim,knn",
            params: Mapping[str, Mapping[str, Any]] | None = None,
            train: Mapping[str, Any] | None = None, arch: str | None = None,
            root: Path | None = None, image_size: int | None = None, aux: Path | None = None,
            tune: bool = True, device: str = "auto", val_open: str = "heldout",
            log: Callable[[str], None] | None = None,
            train_progress: Callable[[str], Any] | None = None,
            executor: Any = None) -> dict[str, Any]:
    """Build the OSR experiment (`presets.osr_experiment`: class divisions per ratio and seed;
    the rows of `methods` with `params[scorer]` merged into each row's parameters) and run it
    (`runner.run_experiment`, resumable); the runner's result plus "seconds". `train`:
    `osr_train_settings(data == "digits")` when not given. `executor` runs the units
    (`executors.make_executor`; None: here, in order)."""
    ratio_list = parse_ratios(ratios)
    if runs < 1:
        raise UsageError(f"--runs {runs}: must be >= 1")
    if runs > 1 and seeds > RUN_SEED_STRIDE:
        raise UsageError(f"--seeds {seeds} with --runs {runs}: at most {RUN_SEED_STRIDE} "
                         f"divisions (training seeds are seed + {RUN_SEED_STRIDE} r)")
    rows = select_rows(methods, ten_method_rows(finetune=False), allow_scorers=True)
    params = params or {}
    rows = [replace(r, params={**r.params, **params.get(r.scorer, {})}) for r in rows]
    digits = data == "digits"
    train = dict(train) if train is not None else osr_train_settings(digits)
    aux_source = ({"imagefolder": str(Path(aux).resolve())} if aux is not None
                  else dict(AUX_SOURCE) if digits else None)
    exp = osr_experiment(data, ratio_list, seeds, rows, train, arch=arch,
                         root=str(root) if root else None, image_size=image_size,
                         aux=aux_source, device=device, tune_rule="paper" if tune else "none",
                         val_open=val_open)
    exp.runs = runs
    start = time.perf_counter()
    result = run_experiment(exp, out, log=log, train_progress=train_progress,
                            executor=executor)
    result["seconds"] = time.perf_counter() - start
    return result


__all__ = ["DIGITS_TRAIN", "osr_train_settings", "run_osr"]
