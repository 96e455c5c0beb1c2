"""Extraction extras (DESIGN §2; featstore/extraction/extract_extras.py) on real images and real
torch models: extra heads, MC-Dropout passes, ODIN-perturbed logits (against a direct autograd
computation), feature maps, resume, the CLI flags, and a `featstore train` checkpoint of every
wrapping method extracted back into a store."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cli.app import main
from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.extraction.datasets import build_transform
from featstore.extraction.extract import ExtractOptions, extract
from featstore.store.extra_keys import odin_name, parse_odin_grid, parse_odin_name
from tests.helpers import tiny_models
from tests.helpers.images import TRANSFORM, make_image_tree, write_spec

OPTS = dict(device="cpu", batch_size=8, num_workers=0, part_batches=2)


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


@pytest.fixture
def tree(tmp_path):
    return make_image_tree(tmp_path / "images")


@pytest.fixture
def spec(tmp_path, tree):
    return write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')])


def images_of(tree: Path) -> torch.Tensor:
    tf = build_transform(TRANSFORM)
    return torch.stack([tf(Image.open(p).convert("RGB")) for p in sorted(tree.rglob("*.png"))])


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_extra_heads_are_stored_and_equal_the_model(tmp_path, tree, spec):
    x = images_of(tree)
    for name, expect in [("tiny_confbranch", {"confidence": (18,)}),
                         ("tiny_godin", {"godin_g": (18,), "godin_h": (18, 3)}),
                         ("tiny_mcd", {"head2_logits": (18, 3)})]:
        st = extract(f"tests.helpers.tiny_models:{name}", spec, tmp_path / name,
                     options=ExtractOptions(**OPTS))
        sp = st.split("id/test")
        assert {n: sp.extra(n).shape for n in sp.extra_names()} == expect
        assert st.provenance["head_layer"] == "backbone.fc"
        w, b = st.head
        np.testing.assert_allclose(np.asarray(sp.logits), np.asarray(sp.features) @ w.T + b,
                                   rtol=1e-5, atol=1e-5)
        model = getattr(tiny_models, name)().eval()
        with torch.no_grad():
            out = model.outputs(x)
        if name == "tiny_confbranch":
            ref = torch.sigmoid(out["confidence_logit"])
            np.testing.assert_allclose(np.asarray(sp.extra("confidence")), ref, rtol=1e-5)
        elif name == "tiny_godin":
            np.testing.assert_allclose(np.asarray(sp.extra("godin_g")), out["godin_g"],
                                       rtol=1e-5)
            np.testing.assert_array_equal(np.asarray(sp.extra("godin_h")),
                                          np.asarray(sp.logits))
        else:
            np.testing.assert_allclose(np.asarray(sp.extra("head2_logits")),
                                       out["head2_logits"], rtol=1e-5, atol=1e-6)
        assert st.manifest["splits"]["id/test"]["extras"] == {k: list(v)
                                                              for k, v in expect.items()}


def test_plain_extraction_writes_no_extras(tmp_path, spec):
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "s",
                 options=ExtractOptions(**OPTS))
    assert st.split("id/test").extra_names() == []
    assert st.manifest["splits"]["id/test"]["extras"] == {}


def test_mc_dropout_passes(tmp_path, tree, spec):
    opts = ExtractOptions(**OPTS, mc_samples=4)
    st = extract("tests.helpers.tiny_models:tiny_dropout", spec, tmp_path / "a", options=opts)
    sp = st.split("id/test")
    mc = np.asarray(sp.extra("mc_logits"))
    assert mc.shape == (4, 18, 3) and sp.extra_row_axis("mc_logits") == 1
    assert not np.allclose(mc[0], mc[1])                    # dropout was on
    model = tiny_models.tiny_dropout().eval()
    with torch.no_grad():                                   # the ordinary pass: dropout off
        np.testing.assert_allclose(np.asarray(sp.logits), model(images_of(tree)),
                                   rtol=1e-5, atol=1e-6)
    # every pass is the head applied to dropped-out features: mean over passes ~ logits
    assert np.abs(mc.mean(0) - np.asarray(sp.logits)).mean() < np.abs(mc[0] - sp.logits).mean()
    # deterministic: the same extraction elsewhere writes the same bytes
    st2 = extract("tests.helpers.tiny_models:tiny_dropout", spec, tmp_path / "b", options=opts)
    assert sha(st.split("id/test").path) == sha(st2.split("id/test").path)
    with pytest.raises(UsageError, match="no dropout layer.*--method mcdropout"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "c", options=opts)


def test_odin_perturbed_logits_equal_direct_autograd(tmp_path, tree, spec):
    grid = parse_odin_grid("1000:0.0014,0;10:0.0028")
    assert grid == [(1000.0, 0.0014), (1000.0, 0.0), (10.0, 0.0028)]
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "s",
                 options=ExtractOptions(**OPTS, odin_grid=tuple(grid)))
    sp = st.split("id/test")
    assert sorted(parse_odin_name(n) for n in sp.extra_names()) == sorted(grid)
    model = tiny_models.TinyCNN().eval()
    x_all = images_of(tree)
    std = torch.tensor(TRANSFORM["std"]).view(1, 3, 1, 1)
    for temp, eps in grid:
        ref = []
        for start in range(0, len(x_all), 8):                # the extraction's batches
            x = x_all[start:start + 8].clone().requires_grad_(True)
            log_s = torch.log_softmax(model(x) / temp, dim=1).max(dim=1).values
            (grad,) = torch.autograd.grad(log_s.sum(), x)
            x_new = x.detach() - eps / std * torch.sign(-grad)
            with torch.no_grad():
                ref.append(model(x_new))
        got = np.asarray(sp.extra(odin_name(temp, eps)))
        np.testing.assert_allclose(got, torch.cat(ref).numpy(), rtol=1e-5, atol=1e-6)
        if eps == 0:
            np.testing.assert_allclose(got, np.asarray(sp.logits), rtol=1e-6, atol=1e-6)
        else:  # the perturbation raises the max softmax of (nearly) every row
            p0 = torch.softmax(torch.as_tensor(np.asarray(sp.logits)) / temp, 1).max(1).values
            p1 = torch.softmax(torch.as_tensor(got) / temp, 1).max(1).values
            assert (p1 >= p0 - 1e-9).float().mean() > 0.9


@pytest.mark.parametrize("text, match", [("1000", "names no eps"), ("x:1", "numbers"),
                                         ("0:0.1", "must be > 0"), ("1:-1", ">= 0"),
                                         ("", "expected")])
def test_bad_odin_grid(text, match):
    with pytest.raises(UsageError, match=match):
        parse_odin_grid(text)


def test_feature_maps_pool_to_the_features(tmp_path, spec):
    st = extract("tests.helpers.tiny_models:tiny_map_cnn", spec, tmp_path / "s",
                 options=ExtractOptions(**OPTS, feature_maps=True, dtype="float16"))
    sp = st.split("id/test")
    maps = np.asarray(sp.extra("feature_maps"))
    assert maps.shape == (18, 8, 16, 16) and maps.dtype == np.float16
    assert st.manifest["splits"]["id/test"]["feature_maps_layer"] == "relu"
    np.testing.assert_allclose(maps.astype(np.float32).mean((2, 3)), np.asarray(sp.features),
                               rtol=2e-3, atol=2e-3)
    from scorers import get_scorer  # the consumer: rankfeat runs on the stored maps

    assert np.isfinite(get_scorer("rankfeat").fit(st).score(sp)).all()


def test_extras_survive_an_interrupted_extraction(tmp_path, spec):
    """A write failure mid-split, then a rerun: bit-identical to an uninterrupted run, with
    MC passes (row axis 1), ODIN logits and extra heads in the parts."""
    opts = ExtractOptions(**OPTS, mc_samples=3, odin_grid=((100.0, 0.002),))
    clean = extract("tests.helpers.tiny_models:tiny_dropout", spec, tmp_path / "clean",
                    options=opts)
    from featstore.store import writer as writer_mod

    original = writer_mod.SplitWriter._write_part
    calls = {"n": 0}

    def failing(self, arrays):
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(28, "No space left on device")
        original(self, arrays)

    writer_mod.SplitWriter._write_part = failing
    try:
        with pytest.raises(FeatstoreError, match="write error"):
            extract("tests.helpers.tiny_models:tiny_dropout", spec, tmp_path / "v", options=opts)
    finally:
        writer_mod.SplitWriter._write_part = original
    parts = list((tmp_path / "v" / "splits").glob("*.parts/part-*.h5"))
    assert len(parts) == 1
    resumed = extract("tests.helpers.tiny_models:tiny_dropout", spec, tmp_path / "v", options=opts)
    assert sha(resumed.split("id/test").path) == sha(clean.split("id/test").path)
    # other extras options are another fingerprint: the split is recomputed
    more = extract("tests.helpers.tiny_models:tiny_dropout", spec, tmp_path / "v",
                   options=ExtractOptions(**OPTS, mc_samples=2))
    assert more.split("id/test").extra("mc_logits").shape == (2, 18, 3)


def test_cli_extract_flags(tmp_path, spec, capsys):
    out = tmp_path / "s"
    try:
        main(["extract", "--model", "tests.helpers.tiny_models:tiny_dropout", "--spec", str(spec),
              "--out", str(out), "--device", "cpu", "--workers", "0", "--quiet",
              "--mc-samples", "2", "--odin-grid", "1000:0.0014"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 0, capsys.readouterr().err
    sp = Store.open(out).split("id/test")
    assert sp.extra_names() == ["mc_logits", "odin_logits/1000_0.0014"]
    with pytest.raises(SystemExit) as exc:
        main(["extract", "--model", "tests.helpers.tiny_models:tiny_cnn", "--spec", str(spec),
              "--out", str(tmp_path / "t"), "--odin-grid", "1000"])
    assert exc.value.code == 2 and "names no eps" in capsys.readouterr().err


TRAIN_SPEC = """
[transform]
resize = 16
crop = 16
mean = [0.5, 0.5, 0.5]
std = [0.25, 0.25, 0.25]

[[split]]
name = "id/train"
source = { builtin = "digits", classes = [0, 1, 2], part = "train" }

[[split]]
name = "id/test"
source = { builtin = "digits", classes = [0, 1, 2], part = "test" }

[[split]]
name = "ood/aux/noise"
usage = "train"
source = { builtin = "noise", kind = "uniform", count = 64 }
"""


@pytest.mark.parametrize("method, extras", [("confbranch", ["confidence"]),
                                            ("godin", ["godin_g", "godin_h"]),
                                            ("mcd", ["head2_logits"]),
                                            ("mcdropout", ["mc_logits"]),
                                            ("oe", [])])
def test_train_checkpoint_extracts_with_its_heads(tmp_path, method, extras):
    """`featstore train` -> checkpoint -> `featstore extract --weights CKPT`: the method's
    wrapper is rebuilt from the checkpoint, its state dict loads strictly, extras land."""
    from featstore.training.config import TrainConfig
    from featstore.training.trainer import train

    spec = tmp_path / "spec.toml"
    spec.write_text(TRAIN_SPEC)
    params = {"warmup_fraction": 0.0} if method == "mcd" else {}
    ckpt = train(method, "tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "m.pt",
                 TrainConfig(epochs=1, batch_size=64, device="cpu", method_params=params))
    opts = ExtractOptions(**OPTS, mc_samples=2 if method == "mcdropout" else 0)
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", weights=ckpt,
                 options=opts)
    assert st.provenance["training_method"] == method
    sp = st.split("id/test")
    assert sp.extra_names() == extras
    w, b = st.head
    np.testing.assert_allclose(np.asarray(sp.logits), np.asarray(sp.features) @ w.T + b,
                               rtol=1e-4, atol=1e-4)
    assert st.split("ood/aux/noise").usage == "train"
