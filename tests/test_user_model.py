"""The user's own model (issue 29, item 1): the stored logits are the model's forward output,
on real architectures — torchvision, timm (random init, nothing downloads), a DeiT-style
two-head model, a 1x1-conv classifier, a HuggingFace-style output object, an unused Linear
after the head. Reference: a bare torch loop (PIL decode + the spec's transform + the model's
own forward and layers), as in tests/test_extract.py."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from skimage import data as skdata

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.extraction.datasets import build_transform
from featstore.extraction.extract import ExtractOptions, extract
from featstore.extraction.models import load_model

TRANSFORM = {"resize": 36, "crop": 32, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
OPTS = ExtractOptions(device="cpu", batch_size=4, num_workers=0, part_batches=2, progress=False)


@pytest.fixture(autouse=True)
def _user_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    """ImageFolder of real photo crops (a = astronaut, b = coffee, c = brick), 3 x 3 images."""
    root = tmp_path_factory.mktemp("user") / "images"
    for cls, image in {"a": skdata.astronaut(), "b": skdata.coffee(),
                       "c": skdata.brick()}.items():
        (root / cls).mkdir(parents=True)
        for k in range(3):
            crop = image[25 * k:25 * k + 48, 35 * k:35 * k + 48]
            crop = np.repeat(crop[..., None], 3, -1) if crop.ndim == 2 else crop
            Image.fromarray(crop).save(root / cls / f"{k}.png")
    lines = ["[transform]"] + [f"{k} = {v!r}".replace("'", '"') for k, v in TRANSFORM.items()]
    lines += ["", "[[split]]", 'name = "id/test"', f'source = {{ imagefolder = "{root}" }}']
    path = root.parent / "spec.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def images(spec: Path) -> torch.Tensor:
    root = spec.parent / "images"
    tf = build_transform(TRANSFORM)
    return torch.stack([tf(Image.open(p).convert("RGB")) for p in sorted(root.rglob("*.png"))])


def bare(model: torch.nn.Module, x: torch.Tensor, feature_fn) -> tuple[np.ndarray, np.ndarray]:
    """(features, logits) of a plain loop: feature_fn(model, x) and the forward output."""
    model.eval()
    with torch.no_grad():
        out = model(x)
        logits = out.logits if hasattr(out, "logits") else out
        return feature_fn(model, x).numpy(), logits.numpy()


def assert_equal_to(st: Store, feats: np.ndarray, logits: np.ndarray) -> None:
    split = st.split("id/test")
    np.testing.assert_allclose(np.asarray(split.logits), logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(split.features), feats, rtol=1e-5, atol=1e-5)


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_two_head_model_is_refused_then_extracted_without_a_head(spec, tmp_path):
    from tests.helpers import user_models
    with pytest.raises(FeatstoreError) as exc:
        extract("tests.helpers.user_models:two_head", spec, tmp_path / "s", options=OPTS)
    text = one_line(exc)
    assert "head Linear 'head_dist' differs from the model's output" in text
    assert "head (8->3), head_dist (8->3)" in text and "--feature-layer LAYER --no-head" in text
    assert not (tmp_path / "s" / "store.json").exists()
    # naming one of the two heads does not make its logits the model's
    with pytest.raises(FeatstoreError, match="head Linear 'head' differs"):
        extract("tests.helpers.user_models:two_head", spec, tmp_path / "s", options=OPTS,
                feature_layer="head")
    st = extract("tests.helpers.user_models:two_head", spec, tmp_path / "s", options=OPTS,
                 feature_layer="head", no_head=True)
    feats, logits = bare(user_models.TwoHead(), images(spec),
                         lambda m, x: m.forward_features(x)[0])
    assert_equal_to(st, feats, logits)
    assert not st.has_head and st.manifest["has_head"] is False
    assert st.provenance["head_layer"] is None and st.provenance["feature_layer"] == "head"
    with pytest.raises(FeatstoreError, match="has no classifier head"):
        st.head  # noqa: B018


def test_unused_linear_after_the_head(spec, tmp_path):
    """The head is the Linear whose output the model returns, not the last one defined."""
    from tests.helpers import user_models
    st = extract("tests.helpers.user_models:unused_after_head", spec, tmp_path / "s", options=OPTS)
    model = user_models.UnusedAfterHead()
    feats, logits = bare(model, images(spec), lambda m, x: m.trunk(x))
    assert_equal_to(st, feats, logits)
    assert st.provenance["head_layer"] == "fc" and st.head[0].shape == (3, 8)
    np.testing.assert_array_equal(st.head[0], model.fc.weight.detach().numpy())


def test_conv_classifier(spec, tmp_path):
    from tests.helpers import user_models
    with pytest.raises(UsageError, match=r"no nn.Linear classifier head \(e.g. a 1x1-conv "
                                         r"classifier\); pass feature_layer='LAYER' naming "):
        extract("tests.helpers.user_models:conv_classifier", spec, tmp_path / "s", options=OPTS)
    st = extract("tests.helpers.user_models:conv_classifier", spec, tmp_path / "s", options=OPTS,
                 feature_layer="features")
    feats, logits = bare(user_models.ConvClassifier(), images(spec),
                         lambda m, x: m.features(x).mean(dim=(2, 3)))
    assert_equal_to(st, feats, logits)
    assert not st.has_head and st.manifest["feature_dim"] == 8


def test_hf_style_output_and_a_head_without_bias(spec, tmp_path):
    from tests.helpers import user_models
    st = extract("tests.helpers.user_models:hf_style", spec, tmp_path / "s", options=OPTS)
    model = user_models.HFStyle()
    feats, logits = bare(model, images(spec), lambda m, x: m.trunk(x))
    assert_equal_to(st, feats, logits)
    w, b = st.head
    np.testing.assert_array_equal(b, np.zeros(3, np.float32))
    np.testing.assert_allclose(feats @ w.T, logits, rtol=1e-5, atol=1e-6)


def test_torchvision_checkpoint(spec, tmp_path):
    torch.manual_seed(7)
    model = torchvision.models.resnet18(num_classes=3)
    torch.save(model.state_dict(), tmp_path / "r18.pth")
    st = extract("resnet18", spec, tmp_path / "s", options=OPTS, weights=tmp_path / "r18.pth")

    def pooled(m, x):
        body = torch.nn.Sequential(*list(m.children())[:-1])
        return body(x).flatten(1)

    assert_equal_to(st, *bare(model, images(spec), pooled))
    assert st.provenance["head_layer"] == "fc"


def test_timm_models(spec, tmp_path):
    from tests.helpers import user_models
    pytest.importorskip("timm")
    st = extract("tests.helpers.user_models:timm_resnet", spec, tmp_path / "r", options=OPTS)
    model = user_models.timm_resnet()
    feats, logits = bare(model, images(spec),
                         lambda m, x: m.forward_head(m.forward_features(x), pre_logits=True))
    assert_equal_to(st, feats, logits)
    assert st.provenance["head_layer"] == "fc"
    # timm's distilled DeiT: two heads, the output their mean
    with pytest.raises(FeatstoreError, match="head Linear 'head_dist' differs"):
        extract("tests.helpers.user_models:timm_deit_distilled", spec, tmp_path / "d", options=OPTS)
    st = extract("tests.helpers.user_models:timm_deit_distilled", spec, tmp_path / "d",
                 options=OPTS, feature_layer="head", no_head=True)
    deit = user_models.timm_deit_distilled()
    feats, logits = bare(deit, images(spec), lambda m, x: m.forward_features(x)[:, 0])
    assert_equal_to(st, feats, logits)


def test_self_loading_callable_is_quiet(tmp_path):
    """A module:callable that loads its own weights, with --weights: no meta-device flood."""
    from tests.helpers import user_models
    user_models.SelfLoading.path = ""
    torch.manual_seed(8)
    trained = user_models.SelfLoading()
    torch.save(trained.state_dict(), tmp_path / "w.pth")
    user_models.SelfLoading.path = str(tmp_path / "w.pth")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = load_model("tests.helpers.user_models:self_loading", tmp_path / "w.pth")
    finally:
        user_models.SelfLoading.path = ""
    assert [str(w.message) for w in caught] == []
    for key, value in trained.state_dict().items():
        torch.testing.assert_close(loaded.module.state_dict()[key], value, rtol=0, atol=0)
