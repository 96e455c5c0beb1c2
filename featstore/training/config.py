"""One `TrainConfig` for every training run, and the optimiser and schedule it describes.

Both ways featstore trains use it: `featstore train` (`trainer.train`, a spec's id/train
split, any registered method) and the demo's in-memory cross-entropy (`ce.train_ce`). The
optimiser is SGD (`momentum`, `weight_decay`, `nesterov`); the learning-rate schedule, stepped
once per optimiser step over `total = epochs * batches per epoch` steps, is one of

- `constant`: lr throughout;
- `cosine`: OpenOOD v1.5's `cosine_annealing(step, total, 1, 1e-6 / lr)`:
  lr_t = lr * (m + (1 - m) * (1 + cos(pi * t / total)) / 2), m = 1e-6 / lr;
- `onecycle`: `torch.optim.lr_scheduler.OneCycleLR(max_lr=10 * lr, total_steps=total)` with
  PyTorch's defaults (30% warm-up from max_lr / 25, cosine annealing to max_lr / 25e4,
  momentum cycled between 0.85 and 0.95) — the demo network's recipe.

The defaults equal the remote-sensing preset (`featstore.training.presets`). This module
imports without torch (presets and experiment files are parsed without it); the optimiser and
the schedule are built in `featstore.training.loop` (`make_optimizer`, `make_scheduler`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from featstore.errors import UsageError

AUGMENTS = ("none", "flip", "crop", "flip+crop")
SCHEDULES = ("cosine", "constant", "onecycle")
#: OpenOOD's cosine schedule ends at this absolute learning rate
COSINE_MIN_LR = 1e-6
#: the one-cycle schedule peaks at this multiple of `lr`
ONECYCLE_PEAK = 10.0


@dataclass
class TrainConfig:
    """Hyperparameters of one training run (stored in the checkpoint)."""

    epochs: int = 100
    batch_size: int = 128
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    nesterov: bool = False
    schedule: str = "constant"
    seed: int = 0
    augment: str = "none"
    device: str = "auto"
    num_workers: int = 0
    preload: bool | None = None
    method_params: dict[str, Any] = field(default_factory=dict)
    #: warm start: weights (state dict or `ce` checkpoint) loaded strictly into the backbone
    #: before the method wraps it, e.g. to fine-tune a CE model with a training-time method
    init: str | None = None

    def validate(self) -> None:
        """UsageError naming the first option out of range: every number of the run must be
        of its type and finite (a NaN weight decay or learning rate trains a NaN model that
        saves and scores with exit 0), counts >= 1, rates and factors >= 0."""
        for name in ("epochs", "batch_size", "seed", "num_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError("must be an integer", param=name, value=value)
        for name in ("lr", "momentum", "weight_decay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value):
                raise UsageError("must be a finite number", param=name, value=value)
        if self.epochs < 1:
            raise UsageError("must be >= 1", param="epochs", value=self.epochs)
        if self.batch_size < 1:
            raise UsageError("must be >= 1", param="batch_size", value=self.batch_size)
        if not self.lr > 0:
            raise UsageError("must be a positive number", param="lr", value=self.lr)
        for name in ("momentum", "weight_decay", "num_workers", "seed"):
            if getattr(self, name) < 0:
                raise UsageError("must be >= 0", param=name, value=getattr(self, name))
        if self.nesterov and self.momentum <= 0:
            raise UsageError("--nesterov needs momentum > 0")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"schedule {self.schedule!r}: expected one of {', '.join(SCHEDULES)}")
        if self.augment not in AUGMENTS:
            raise UsageError(f"expected one of {', '.join(AUGMENTS)}", param="augment",
                             value=self.augment)


def cosine_factor(step: int, total: int, min_factor: float) -> float:
    """OpenOOD's `cosine_annealing(step, total, 1, min_factor)`: 1 at step 0, min at the end."""
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(step / total * math.pi))
