"""Tiny real torch models for extraction tests (imported as
`tests.helpers.tiny_models:<callable>`)."""

from __future__ import annotations

import torch
from torch import nn

#: TinyCNN as `--arch` / `train()` name it
ARCH = "tests.helpers.tiny_models:TinyCNN"


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


class TinyMapCNN(nn.Module):
    """conv(3->8) + nn.ReLU + global average pool -> Linear(8, 3): the ReLU is a module, so
    the (N, 8, H, W) map whose pool is the feature is visible to `--feature-maps`."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.relu(self.conv(x))).flatten(1))


def tiny_map_cnn() -> TinyMapCNN:
    return TinyMapCNN()


def tiny_confbranch() -> nn.Module:
    """TinyCNN wrapped by ConfBranch (extra `confidence_head`)."""
    from featstore.extraction.heads import ConfBranchNet

    return ConfBranchNet(TinyCNN())


def tiny_godin() -> nn.Module:
    """TinyCNN wrapped by G-ODIN (extra `godin_g`), with non-trivial BatchNorm statistics."""
    from featstore.extraction.heads import GodinNet

    model = GodinNet(TinyCNN())
    bn = model.godin_g[1]
    with torch.no_grad():
        bn.running_mean.fill_(0.1)
        bn.running_var.fill_(0.5)
        bn.weight.fill_(1.5)
        bn.bias.fill_(-0.2)
    return model


def tiny_mcd() -> nn.Module:
    """TinyCNN wrapped by MCD (extra `head2`)."""
    from featstore.extraction.heads import MCDNet

    return MCDNet(TinyCNN())


def tiny_dropout() -> nn.Module:
    """TinyCNN with dropout (p = 0.5) on its head's input (MC-Dropout)."""
    from featstore.extraction.heads import DropoutNet

    return DropoutNet(TinyCNN(), p=0.5)


class TinyWithConstants(TinyCNN):
    """TinyCNN plus state the weights file does not carry: a non-persistent buffer and a
    plain tensor attribute (both built in __init__, both used in forward)."""

    def __init__(self, num_classes: int = 3):
        super().__init__(num_classes)
        self.register_buffer("shift", torch.full((3, 1, 1), 0.25), persistent=False)
        self.scale = torch.tensor(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.penultimate(x * self.scale - self.shift))


def tiny_with_constants(num_classes: int = 3) -> TinyWithConstants:
    return TinyWithConstants(num_classes)


def tiny_cnn_1000() -> TinyCNN:
    """TinyCNN with an ImageNet-1k-sized head (1000 outputs)."""
    return TinyCNN(num_classes=1000)


def tiny_cnn10() -> TinyCNN:
    """TinyCNN with CIFAR-10's ten outputs (the miniature OpenOOD tree's model)."""
    return TinyCNN(10)


class TinyBlocks(nn.Module):
    """Two conv blocks (block1: conv 3->6 + ReLU module; block2: conv 6->8, stride 2, + ReLU)
    -> global average pool -> Linear(8, 3); `act` is one ReLU module called twice (a shared
    activation, which `--feature-layers` refuses)."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.block1 = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(6, 8, 3, stride=2, padding=1), nn.ReLU())
        self.act = nn.Identity()
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.block1(x))
        x = self.act(self.block2(x))
        return self.fc(x.mean((2, 3)))


def tiny_blocks() -> TinyBlocks:
    return TinyBlocks()
