"""The one training loop: epochs of seeded minibatches, one method step per batch.

Per epoch: a permutation of the rows drawn from `gen`; per batch (in that order): the optional
augmentation `augment(x, gen)`, the method's loss (`TrainMethod.step`), an error if the loss is
not finite, zero_grad / backward / optimiser step / schedule step, the method's `after_step`,
then the running mean loss and training accuracy (argmax of the step's logits == label, %).
Returns one `[mean loss, accuracy %]` per epoch. The model is in train mode during the loop
and in eval mode after it. Used by `trainer.train` and `ce.train_ce`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from featstore.errors import FeatstoreError
from featstore.training.config import COSINE_MIN_LR, ONECYCLE_PEAK, TrainConfig, cosine_factor
from featstore.training.methods import TrainContext, TrainMethod

#: (x, generator) -> augmented x, drawing its randomness from the generator
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
#: rows in `order` -> batches of (x, y) of at most batch_size rows, in order
Batches = Callable[[torch.Tensor], Iterable[tuple[torch.Tensor, torch.Tensor]]]


def run_epochs(model: nn.Module, method: TrainMethod, ctx: TrainContext, config: TrainConfig,
               batches: Batches, num_rows: int, gen: torch.Generator,
               augment: Augment | None = None,
               progress: Callable[[dict[str, Any]], None] | None = None,
               on_epoch: Callable[[int, float, float], None] | None = None) -> list[list[float]]:
    """Train `model` in place for `config.epochs` epochs (module docstring); `progress` gets a
    dict after every step (epoch, epochs, batch, batches, loss, acc, lr, method metrics),
    `on_epoch(epoch, loss, acc)` each finished epoch."""
    opt = make_optimizer(method.param_groups(model, ctx), config)
    per_epoch = math.ceil(num_rows / config.batch_size)
    sched = make_scheduler(opt, config, config.epochs * per_epoch)
    history: list[list[float]] = []
    model.train()
    for epoch in range(config.epochs):
        ctx.epoch = epoch
        order = torch.randperm(num_rows, generator=gen)
        seen, correct, loss_sum = 0, 0, 0.0
        for b, (x, y) in enumerate(_augmented(batches(order), augment, gen, ctx.device)):
            result = method.step(model, x, y, ctx)
            if not torch.isfinite(result.loss):
                raise FeatstoreError(f"train: the loss became {float(result.loss)} at epoch "
                                     f"{epoch + 1}, batch {b + 1}; lower --lr")
            opt.zero_grad(set_to_none=True)
            result.loss.backward()
            opt.step()
            sched.step()
            method.after_step(model, result, ctx)
            ctx.step += 1
            seen += len(y)
            loss_sum += float(result.loss.detach()) * len(y)
            correct += int((result.logits.detach().argmax(1) == y).sum())
            if progress is not None:
                progress({"epoch": epoch + 1, "epochs": config.epochs, "batch": b + 1,
                          "batches": per_epoch, "loss": loss_sum / seen,
                          "acc": 100.0 * correct / seen, "lr": opt.param_groups[0]["lr"],
                          **ctx.metrics})
        history.append([loss_sum / seen, 100.0 * correct / seen])
        if on_epoch is not None:
            on_epoch(epoch, *history[-1])
    model.eval()
    return history


def _augmented(batches: Iterable[tuple[torch.Tensor, torch.Tensor]], augment: Augment | None,
               gen: torch.Generator, device: torch.device
               ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Each batch augmented (on the host, before the copy) and moved to `device`."""
    for x, y in batches:
        if augment is not None:
            x = augment(x, gen)
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def make_optimizer(params: Iterable[Any], config: TrainConfig) -> torch.optim.SGD:
    """SGD over `params` (parameters or parameter groups) with the config's settings."""
    return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum,
                           weight_decay=config.weight_decay, nesterov=config.nesterov)


def make_scheduler(opt: torch.optim.Optimizer, config: TrainConfig,
                   total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    """The config's learning-rate schedule over `total_steps` optimiser steps (module doc)."""
    if config.schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=config.lr * ONECYCLE_PEAK,
                                                   total_steps=total_steps)
    if config.schedule == "cosine":
        min_factor = COSINE_MIN_LR / config.lr
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: cosine_factor(s, total_steps, min_factor))
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
