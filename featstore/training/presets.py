"""Named training presets: each paper's stated optimiser and schedule, in one registry.

A preset fills `TrainConfig` fields; explicit values (CLI options, experiment-file keys)
override it. Every field a preset sets is what its source states, nothing is inferred:

    remote-sensing   Wang et al., Remote Sensing 16(9):1501, 2024, §2.5: "SGD optimizer with a
                     learning rate of 0.01, momentum of 0.9, and weight decay of 0.0005 for 100
                     epochs". The paper states no schedule and no Nesterov momentum, so the
                     learning rate stays constant and momentum is plain (heavy-ball).
    openood          OpenOOD v1.5 `configs/pipelines/train/baseline.yml` (`optimizer: lr 0.1,
                     momentum 0.9, weight_decay 0.0005, nesterov True, num_epochs 100`), batch
                     128, with its per-step cosine decay to 1e-6 (`BaseTrainer`).

`TrainConfig`'s own defaults equal the remote-sensing preset (the benchmark's setting), so a
bare `featstore train` departs from no stated setting silently.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from featstore.errors import UsageError
from featstore.training.config import TrainConfig

TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "remote-sensing": {"epochs": 100, "lr": 0.01, "momentum": 0.9, "weight_decay": 5e-4,
                       "nesterov": False, "schedule": "constant"},
    "openood": {"epochs": 100, "batch_size": 128, "lr": 0.1, "momentum": 0.9,
                "weight_decay": 5e-4, "nesterov": True, "schedule": "cosine"},
}
PRESET_SOURCES = {
    "remote-sensing": "Wang et al., Remote Sensing 2024, §2.5",
    "openood": "OpenOOD v1.5 training configs",
}


def preset_values(name: str | None) -> dict[str, Any]:
    """The fields preset `name` sets ({} for None); an unknown name is a UsageError."""
    if name is None:
        return {}
    if name not in TRAIN_PRESETS:
        raise UsageError(f"unknown training preset (valid: {', '.join(TRAIN_PRESETS)})",
                         param="preset", value=name)
    return dict(TRAIN_PRESETS[name])


def make_config(preset: str | None = None, **overrides: Any) -> TrainConfig:
    """A validated `TrainConfig`: its defaults, then the preset's fields, then every override
    that is not None. An unknown field is a UsageError naming the valid ones."""
    valid = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise UsageError(f"training setting {unknown[0]!r} is unknown (valid: "
                         f"{', '.join(sorted(valid))})")
    values = {**preset_values(preset), **{k: v for k, v in overrides.items() if v is not None}}
    config = TrainConfig(**values)
    config.validate()
    return config
