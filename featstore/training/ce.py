"""Standard cross-entropy training with SGD (defaults: lr 0.01, momentum 0.9, weight decay
5e-4, cosine learning-rate decay), deterministic from a seed.

Loss as implemented: mean over the batch of -log softmax(f(x))_y.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class TrainConfig:
    epochs: int = 15
    batch_size: int = 64
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    seed: int = 0


def train_ce(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    config: TrainConfig,
    on_epoch: Callable[[int, float, float], None] | None = None,
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
) -> list[tuple[float, float]]:
    """Train in place on in-memory tensors; returns (mean loss, accuracy %) per epoch."""
    gen = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                          weight_decay=config.weight_decay, nesterov=True)
    steps = config.epochs * int(np.ceil(len(images) / config.batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=config.lr * 10, total_steps=steps)
    loss_fn = nn.CrossEntropyLoss()
    history = []
    model.train()
    for epoch in range(config.epochs):
        order = torch.randperm(len(images), generator=gen)
        total, correct, loss_sum = 0, 0, 0.0
        for start in range(0, len(images), config.batch_size):
            idx = order[start:start + config.batch_size]
            x, y = images[idx], labels[idx]
            if augment is not None:
                x = augment(x, gen)
            logits = model(x)
            loss = loss_fn(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item() * len(idx)
            correct += int((logits.argmax(1) == y).sum())
            total += len(idx)
        history.append((loss_sum / total, 100.0 * correct / total))
        if on_epoch is not None:
            on_epoch(epoch, *history[-1])
    model.eval()
    return history


def random_shift(x: torch.Tensor, gen: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Augmentation: random translation by up to `pad` pixels (zero padding), per batch."""
    dy, dx = (int(v) for v in torch.randint(-pad, pad + 1, (2,), generator=gen))
    return torch.roll(x, shifts=(dy, dx), dims=(2, 3))
