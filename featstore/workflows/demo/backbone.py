"""The demo's pretrained backbone (featstore.extraction.zoo.lite0: ImageNet-1k
EfficientNet-Lite0, frozen) with its linear head trained on the ID classes.

The head is trained by `fit_linear_head`: multinomial logistic regression on the frozen
features of the ID train split, i.e. (W, b) = argmin sum_i -log softmax(W h_i + b)[y_i]
+ ||W||^2 / (2 C) (scikit-learn's lbfgs solver, C = HEAD_C; deterministic). The
measurement behind "a linear head rather than a light fine-tune" is in
benchmarks/results/demo.md.
"""


from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from featstore.extraction.datasets import TransformedRows, build_transform, rows_from_source
from featstore.extraction.zoo.lite0 import (
    FEATURE_DIM,
    INPUT_SIZE,
    Lite0Classifier,
    lite0_classifier,
)
from featstore.specs.benchmark import BenchmarkSpec, load_spec
from featstore.store.fileio import atomic_write_output

logger = logging.getLogger(__name__)

#: inverse L2 strength of the logistic-regression head (scikit-learn's C)
HEAD_C = 0.1
HEAD_MAX_ITER = 3000


@torch.inference_mode()
def backbone_features(model: Lite0Classifier, images: TransformedRows,
                      count: int, batch_size: int = 128) -> np.ndarray:
    """(count, 1280) float32 penultimate features of images[0..count) (each a normalised
    (3, S, S) tensor, as featstore.extraction.datasets.TransformedRows returns at [i][0])."""
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


def train_pretrained_head(spec_path: BenchmarkSpec | Path, out_file: Path,
                          num_classes: int) -> dict[str, Any]:
    """Train the linear head on the spec's `id/train` split and save the whole classifier's
    state dict (backbone + head) to `out_file` atomically; returns the training summary."""

    spec = spec_path if isinstance(spec_path, BenchmarkSpec) else load_spec(spec_path)
    train = next(s for s in spec.splits if s.name == "id/train")
    rows = rows_from_source(train.source)
    data = TransformedRows(rows, build_transform(spec.transform),
                           (3, INPUT_SIZE, INPUT_SIZE))
    model = lite0_classifier(num_classes)
    logger.info(f"  frozen EfficientNet-Lite0 features of id/train ({len(data)} images, "
                f"{INPUT_SIZE} px)")
    feats = backbone_features(model, data, len(data))
    labels = np.asarray(rows.labels)
    w, b = fit_linear_head(feats, labels, num_classes)
    with torch.no_grad():
        model.fc.weight.copy_(torch.from_numpy(w))
        model.fc.bias.copy_(torch.from_numpy(b))
    train_acc = float(((feats @ w.T + b).argmax(1) == labels).mean() * 100)
    logger.info(f"  linear head (logistic regression, C = {HEAD_C}): train acc {train_acc:.1f}%")
    buffer = io.BytesIO()   # never through a link planted at a fixed temporary name
    torch.save(model.state_dict(), buffer)
    atomic_write_output(out_file, buffer.getvalue())
    return {"head": "logistic regression", "C": HEAD_C, "train_rows": len(data),
            "final_train_acc": train_acc}
