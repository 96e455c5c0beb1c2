"""Users' own architectures for the extraction tests of tests/test_user_model.py, imported as
`tests.helpers.user_models:<callable>`: heads that are not "the last nn.Linear defined"."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class Trunk(nn.Module):
    """conv(3->8) + ReLU + global average pool -> (N, 8)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x))).flatten(1)


class TwoHead(nn.Module):
    """DeiT-distilled style: a class token and a distillation token, `head` and `head_dist`,
    the forward output their mean (what DeiT returns in eval mode)."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        torch.manual_seed(1)
        self.trunk = Trunk()
        self.tokens = nn.Linear(8, 16)
        self.head = nn.Linear(8, num_classes)
        self.head_dist = nn.Linear(8, num_classes)

    def forward_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.tokens(self.trunk(x))
        return t[:, :8], t[:, 8:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cls, dist = self.forward_features(x)
        return (self.head(cls) + self.head_dist(dist)) / 2


class UnusedAfterHead(nn.Module):
    """The classifier `fc`, then an unused Linear(512, 128) defined after it."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        torch.manual_seed(2)
        self.trunk = Trunk()
        self.fc = nn.Linear(8, num_classes)
        self.projector = nn.Linear(512, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.trunk(x))


class ConvClassifier(nn.Module):
    """SqueezeNet-style: a 1x1 conv classifier, ReLU, global average pool; no nn.Linear."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        torch.manual_seed(3)
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(8, num_classes, 1),
                                        nn.ReLU(), nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x)).flatten(1)


@dataclass
class ClassifierOutput:
    """A HuggingFace-style output object."""

    logits: torch.Tensor
    hidden_states: torch.Tensor


class HFStyle(nn.Module):
    """Returns an object with `.logits` (HuggingFace's ImageClassifierOutput shape)."""

    def __init__(self, num_classes: int = 3):
        super().__init__()
        torch.manual_seed(4)
        self.trunk = Trunk()
        self.classifier = nn.Linear(8, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> ClassifierOutput:
        z = self.trunk(x)
        return ClassifierOutput(logits=self.classifier(z), hidden_states=z)


class SelfLoading(nn.Module):
    """A builder that loads its own weights (from `SelfLoading.path`), as user code does."""

    path: str = ""

    def __init__(self):
        super().__init__()
        self.trunk = Trunk()
        self.fc = nn.Linear(8, 3)
        if SelfLoading.path:
            self.load_state_dict(torch.load(SelfLoading.path, weights_only=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.trunk(x))


def two_head() -> TwoHead:
    return TwoHead()


def unused_after_head() -> UnusedAfterHead:
    return UnusedAfterHead()


def conv_classifier() -> ConvClassifier:
    return ConvClassifier()


def hf_style() -> HFStyle:
    return HFStyle()


def self_loading() -> SelfLoading:
    return SelfLoading()


def timm_resnet() -> nn.Module:
    """timm's resnet18, random init (nothing downloads), 3 classes."""
    import timm  # lazy: only these tests need timm

    torch.manual_seed(5)
    return timm.create_model("resnet18", pretrained=False, num_classes=3)


def timm_deit_distilled() -> nn.Module:
    """timm's DeiT-tiny distilled (head + head_dist, eval output their mean), 32 px, 2 blocks."""
    import timm  # lazy: only these tests need timm

    torch.manual_seed(6)
    return timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, num_classes=3,
                             img_size=32, patch_size=8, depth=2)
