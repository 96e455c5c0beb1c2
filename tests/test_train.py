"""`featstore train` (featstore.training.trainer) on real images and a real torch model.

References: a hand-written SGD + cross-entropy loop in plain torch (same data, order and
hyperparameters) for the trained weights; OpenOOD's cosine_annealing formula written out for
the schedule; a bare torch forward pass of the checkpoint's weights for the logits that
`featstore extract` stores from the checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from featstore import Store
from featstore.errors import UsageError
from featstore.extraction.datasets import build_transform
from featstore.training.config import TrainConfig, cosine_factor
from featstore.training.methods import get_method, list_methods
from featstore.training.trainer import load_checkpoint, train
from tests.helpers.cli import run_cli as run
from tests.helpers.images import make_rgb_tree, write_tree_spec
from tests.helpers.tiny_models import ARCH, TinyCNN

TRANSFORM = {"resize": 20, "crop": 16, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


@pytest.fixture
def tree_spec(tmp_path):
    tree = make_rgb_tree(tmp_path / "images")
    return tree, write_tree_spec(tmp_path / "spec.toml", tree)


def _images(tree: Path) -> tuple[torch.Tensor, torch.Tensor]:
    tf = build_transform(TRANSFORM)
    paths = sorted(tree.rglob("*.png"))
    x = torch.stack([tf(Image.open(p).convert("RGB")) for p in paths])
    y = torch.as_tensor([["a", "b", "c"].index(p.parent.name) for p in paths])
    return x, y


@pytest.mark.parametrize("preset, lr, nesterov", [(None, 0.05, True),
                                                  ("remote-sensing", 0.01, False)])
def test_trained_weights_equal_a_hand_written_sgd_loop(tmp_path, tree_spec, preset, lr,
                                                       nesterov):
    """Constant lr, SGD with weight decay, CE, seeded order: same weights as a bare torch loop;
    explicit Nesterov, and the remote-sensing preset (lr 0.01, momentum 0.9, wd 5e-4, plain
    momentum, constant lr: Wang et al. 2024 §2.5)."""
    from featstore.training.presets import make_config

    tree, spec = tree_spec
    if preset is None:
        cfg = TrainConfig(epochs=2, batch_size=8, lr=0.05, momentum=0.9, weight_decay=5e-4,
                          schedule="constant", nesterov=True, seed=3, device="cpu")
    else:
        cfg = make_config(preset, epochs=2, batch_size=8, seed=3, device="cpu")
        assert (cfg.lr, cfg.momentum, cfg.weight_decay, cfg.nesterov, cfg.schedule) == (
            0.01, 0.9, 5e-4, False, "constant")
        assert make_config(preset).epochs == 100
        # the trainer's own defaults are the remote-sensing setting
        assert TrainConfig() == make_config(preset)
    ckpt = train("ce", ARCH, spec, tmp_path / "m.pt", cfg)
    x, y = _images(tree)
    torch.manual_seed(3)
    model = TinyCNN(num_classes=3)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4,
                          nesterov=nesterov)
    gen = torch.Generator().manual_seed(3)
    for _ in range(2):
        order = torch.randperm(len(x), generator=gen)
        for s in range(0, len(x), 8):
            idx = order[s:s + 8]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    got = load_checkpoint(ckpt)["state_dict"]
    for k, v in model.state_dict().items():
        torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-6)


def test_cosine_schedule_is_openood_cosine_annealing():
    """lr factor = m + (1 - m) * (1 + cos(pi * step / total)) / 2 with m = 1e-6 / lr."""
    m = 1e-6 / 0.01
    for step, total in ((0, 40), (10, 40), (20, 40), (40, 40)):
        ref = m + (1 - m) * 0.5 * (1 + math.cos(step / total * math.pi))
        assert cosine_factor(step, total, m) == pytest.approx(ref, abs=1e-15)
    assert cosine_factor(0, 40, m) == 1.0 and cosine_factor(40, 40, m) == pytest.approx(m)


def test_same_seed_same_checkpoint_other_seed_differs(tmp_path, tree_spec):
    _, spec = tree_spec
    cfg = TrainConfig(epochs=1, batch_size=8, seed=5, augment="flip+crop", device="cpu")
    a = load_checkpoint(train("ce", ARCH, spec, tmp_path / "a.pt", cfg))["state_dict"]
    b = load_checkpoint(train("ce", ARCH, spec, tmp_path / "b.pt", cfg))["state_dict"]
    cfg.seed = 6
    c = load_checkpoint(train("ce", ARCH, spec, tmp_path / "c.pt", cfg))["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_streamed_data_trains_like_preloaded(tmp_path, tree_spec):
    """preload=False (DataLoader decoding per batch) gives the preloaded run's weights."""
    _, spec = tree_spec
    cfg = TrainConfig(epochs=1, batch_size=5, seed=2, augment="crop", device="cpu")
    a = load_checkpoint(train("ce", ARCH, spec, tmp_path / "a.pt", cfg))["state_dict"]
    cfg.preload = False
    b = load_checkpoint(train("ce", ARCH, spec, tmp_path / "b.pt", cfg))["state_dict"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


def test_checkpoint_is_extracted_by_featstore_extract(tmp_path, tree_spec, capsys):
    """The CLI's checkpoint loads with weights_only=True; `featstore extract --weights` stores
    exactly the logits of a bare forward pass of those weights."""
    tree, spec = tree_spec
    code, out, err = run(capsys, "train", "--method", "ce", "--arch", ARCH, "--spec", str(spec),
                         "--out", str(tmp_path / "ck.pt"), "--epochs", "1", "--batch-size", "6",
                         "--seed", "1", "--device", "cpu", "--num-classes", "3")
    assert code == 0, err
    assert "wrote" in out
    ck = torch.load(tmp_path / "ck.pt", map_location="cpu", weights_only=True)
    assert {"state_dict", "method", "arch", "num_classes", "head_layout", "config"} <= set(ck)
    assert ck["method"] == "ce" and ck["arch"] == ARCH and ck["num_classes"] == 3
    assert ck["head_layout"] == {"head": "fc", "in_features": 8, "out_features": 3,
                                 "extra_heads": []}
    assert ck["config"]["lr"] == 0.01 and ck["config"]["weight_decay"] == 5e-4
    assert ck["config"]["nesterov"] is False and ck["config"]["schedule"] == "constant"
    # the openood preset, with an explicit option overriding one of its fields
    code, _, err = run(capsys, "train", "--method", "ce", "--arch", ARCH, "--spec", str(spec),
                       "--out", str(tmp_path / "oo.pt"), "--epochs", "1", "--preset", "openood",
                       "--lr", "0.02", "--device", "cpu", "--num-classes", "3")
    assert code == 0, err
    cfg = torch.load(tmp_path / "oo.pt", map_location="cpu", weights_only=True)["config"]
    assert (cfg["lr"], cfg["nesterov"], cfg["schedule"], cfg["batch_size"], cfg["epochs"]) == (
        0.02, True, "cosine", 128, 1)
    code, _, err = run(capsys, "extract", "--model", ARCH, "--weights", str(tmp_path / "ck.pt"),
                       "--spec", str(spec), "--out", str(tmp_path / "store"), "--device", "cpu",
                       "--workers", "0", "--quiet")
    assert code == 0, err
    model = TinyCNN(num_classes=3)
    model.load_state_dict(ck["state_dict"])
    model.eval()
    x, _ = _images(tree)
    with torch.no_grad():
        ref = model(x).numpy()
    st = Store.open(tmp_path / "store")
    np.testing.assert_allclose(np.asarray(st.split("id/train").logits), ref, rtol=1e-5,
                               atol=1e-5)


def test_callable_head_size_follows_the_checkpoint(tmp_path, tree_spec):
    """A 4-class checkpoint of a module:callable loads through load_model without
    num_classes (the callable is rebuilt with num_classes from the weights)."""
    from featstore.extraction.models import load_model

    tree, spec = tree_spec
    ckpt = train("ce", ARCH, spec, tmp_path / "m.pt",
                 TrainConfig(epochs=1, batch_size=18, device="cpu"), num_classes=4)
    loaded = load_model(ARCH, ckpt)
    assert loaded.head.out_features == 4


def test_registry_and_method_params():
    assert "ce" in list_methods()
    with pytest.raises(UsageError, match=r"unknown training method \(valid: .*ce"):
        get_method("nosuch")
    with pytest.raises(UsageError, match="method 'ce': unknown parameter 'tau'"):
        get_method("ce").resolve_params({"tau": 1.0})


@pytest.mark.parametrize("args, message", [
    (["--method", "nosuch"], "unknown training method"),
    (["--epochs", "0"], "--epochs 0: must be >= 1"),
    (["--augment", "rotate"], "--augment 'rotate'"),
    (["--preset", "cifar"], "--preset 'cifar': unknown training preset (valid: remote-sensing"),
    (["--schedule", "step"], "schedule 'step': expected one of cosine, constant"),
    (["--momentum", "0", "--nesterov", "yes"], "--nesterov needs momentum > 0"),
    (["--arch", "not_an_arch"], "--arch 'not_an_arch'"),
])
def test_bad_inputs_are_one_line_errors(tmp_path, tree_spec, capsys, args, message):
    _, spec = tree_spec
    base = {"--arch": ARCH, "--spec": str(spec), "--out": str(tmp_path / "x.pt")}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    flat = [t for k, v in base.items() for t in ((k,) if v == "yes" else (k, v))]
    code, _, err = run(capsys, "train", *flat, "--quiet", "--device", "cpu")
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.pt").exists()


def test_spec_without_id_train_is_refused(tmp_path, capsys):
    tree = make_rgb_tree(tmp_path / "images", per_class=2)
    spec = write_tree_spec(tmp_path / "s.toml", tree, with_train=False)
    code, _, err = run(capsys, "train", "--arch", ARCH, "--spec", str(spec), "--out",
                       str(tmp_path / "x.pt"), "--quiet")
    assert code == 2 and "has no id/train split" in err
