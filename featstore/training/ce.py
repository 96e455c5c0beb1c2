"""Cross-entropy training on in-memory tensors (the demo network's trainer).

Loss as implemented: mean over the batch of -log softmax(f(x))_y (the `ce` method's step),
through the one training loop (`featstore.training.loop.run_epochs`) with the caller's
`TrainConfig`; the demo passes SGD with Nesterov momentum and the one-cycle schedule
(`schedule="onecycle"`: peak 10 x lr), deterministic from `config.seed`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from featstore.training.config import TrainConfig
from featstore.training.loop import Augment, run_epochs
from featstore.training.methods import TrainContext, get_method


def train_ce(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    config: TrainConfig,
    on_epoch: Callable[[int, float, float], None] | None = None,
    augment: Augment | None = None,
) -> list[tuple[float, float]]:
    """Train in place on in-memory tensors (on their device); returns (mean loss, accuracy %)
    per epoch. The epoch permutations and `augment` draw from a generator seeded with
    `config.seed`, and the global torch seed is set to it before the first step."""
    config.validate()
    method = get_method("ce")
    gen = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    ctx = TrainContext(config=config, params=method.resolve_params(config.method_params),
                       device=images.device, generator=torch.Generator(),
                       num_classes=int(labels.max()) + 1)

    def batches(order: torch.Tensor):
        for start in range(0, len(order), config.batch_size):
            idx = order[start:start + config.batch_size]
            yield images[idx], labels[idx]

    history = run_epochs(model, method, ctx, config, batches, len(images), gen,
                         augment=augment, on_epoch=on_epoch)
    return [(loss, acc) for loss, acc in history]


def random_shift(x: torch.Tensor, gen: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Augmentation: one random cyclic shift (torch.roll) by up to `pad` pixels along each of
    height and width, the same for the whole batch."""
    dy, dx = (int(v) for v in torch.randint(-pad, pad + 1, (2,), generator=gen))
    return torch.roll(x, shifts=(dy, dx), dims=(2, 3))
