"""Shared fixtures: small structured stores written as real HDF5 files.

`structured_arrays` draws Gaussian class clusters through a ReLU (non-negative, sparse-ish
features like a CNN's penultimate layer), a linear head aligned with the class means, and two
OOD clusters (one near the ID classes, one far from them).
"""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store


def structured_arrays(seed: int = 0, num_classes: int = 5, dim: int = 32, n_train: int = 600,
                      n_val: int = 200, n_test: int = 300, n_ood: int = 250) -> dict:
    """Arrays for a structured store: head (W, b) and splits {name: {features, labels}}."""
    rng = np.random.default_rng(seed)
    means = np.maximum(rng.normal(0.0, 2.0, size=(num_classes, dim)), 0.0) + 0.2

    def id_rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(n) % num_classes
        x = np.maximum(means[y] + rng.normal(0.0, 0.8, size=(n, dim)), 0.0)
        return x.astype(np.float32), y.astype(np.int64)

    centered = means - means.mean(axis=0)
    weight = (centered / np.linalg.norm(centered, axis=1, keepdims=True)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=num_classes).astype(np.float32)
    near_mean = means.mean(axis=0)
    far_mean = np.maximum(rng.normal(0.0, 1.0, size=dim), 0.0) * 0.5

    def ood_rows(center: np.ndarray, spread: float, n: int) -> np.ndarray:
        return np.maximum(center + rng.normal(0.0, spread, size=(n, dim)), 0.0).astype(np.float32)

    splits = {}
    for name, n in (("id/train", n_train), ("id/val", n_val), ("id/test", n_test)):
        x, y = id_rows(n)
        splits[name] = {"features": x, "labels": y}
    splits["ood/near/blend"] = {"features": ood_rows(near_mean, 1.0, n_ood)}
    splits["ood/near/blend_val"] = {"features": ood_rows(near_mean, 1.0, n_ood // 2),
                                    "usage": "val"}
    splits["ood/far/faint"] = {"features": ood_rows(far_mean, 0.5, n_ood)}
    return {"head": (weight, bias), "splits": splits}


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Run the real CLI entry point (`cli.app.main`) in-process: (exit code, stdout, stderr)."""
    from cli.app import main

    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def structured_store(tmp_path) -> Store:
    """A real on-disk store from `structured_arrays(seed=0)`."""
    arrays = structured_arrays(seed=0)
    Store.from_arrays(tmp_path / "store", head=arrays["head"], splits=arrays["splits"])
    return Store.open(tmp_path / "store")


@pytest.fixture
def make_store(tmp_path):
    """Factory: make_store(name="s", **structured_arrays kwargs) -> opened Store."""

    def _make(name: str = "s", dtype: str = "float32", **kwargs) -> Store:
        arrays = structured_arrays(**kwargs)
        Store.from_arrays(tmp_path / name, head=arrays["head"], splits=arrays["splits"],
                          dtype=dtype)
        return Store.open(tmp_path / name)

    return _make


#: the test session's demo runs at this share of the demo's evaluation images (`featstore demo
#: --scale`; id/train stays whole): the default pretrained backbone with ~2,500 instead of
#: ~4,000 extracted images
DEMO_TEST_SCALE = 0.5


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """The real demo (the default backbone: frozen ImageNet EfficientNet-Lite0 + a linear head
    trained on the digits; extracted store) at DEMO_TEST_SCALE, built once per test session.
    CLI tests that rerun `featstore demo` on it pass `--scale DEMO_TEST_SCALE` (reusing it)."""
    from featstore.demo.pipeline import run_demo

    out = tmp_path_factory.mktemp("demo")
    run_demo(out, scale=DEMO_TEST_SCALE, log=lambda m: None)
    return out
