"""Tiny real torch models for extraction tests (imported as `tiny_models:<callable>`)."""

from __future__ import annotations

import torch
from torch import nn


class TinyCNN(nn.Module):
    """conv(3->8) + ReLU + global average pool -> 8-dim feature -> Linear(8, 3)."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, num_classes)

    @torch.jit.export
    def penultimate(self, x: torch.Tensor) -> torch.Tensor:
        """The 8-dim feature the head sees (exported for TorchScript extraction)."""
        return self.pool(torch.relu(self.conv(x))).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.penultimate(x))


class NoHead(nn.Module):
    """A model without any nn.Linear layer."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))


def tiny_cnn() -> TinyCNN:
    return TinyCNN()


def no_head() -> NoHead:
    return NoHead()
