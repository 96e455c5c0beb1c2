"""`Detector.score_images` and `featstore predict` on real images (skimage.data photographs)
through a real torch model (tests/helpers/tiny_models.py TinyCNN, extracted by `featstore extract`).

References: `featstore score --save` on the store extracted from the same images (the scores a
saved detector must reproduce) and the extracted store's own features/logits. Tolerance: the
detector's forward runs the images in other batch shapes than extraction did, so conv/GEMM
kernels may round differently: features, logits and scores are compared with rtol 1e-5,
atol 1e-6, and decisions wherever the score is further than 1e-5 from the threshold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data as skdata

import featstore
from featstore.errors import InputError, UsageError
from featstore.extraction.extract import ExtractOptions, extract
from featstore.extraction.extract_images import image_outputs, image_paths
from tests.helpers.cli import run_cli
from tests.helpers.tiny_models import TinyCNN

TESTS = Path(__file__).parent

TRANSFORM = ("[transform]\nresize = 20\ncrop = 16\nmean = [0.5, 0.5, 0.5]\n"
             "std = [0.25, 0.25, 0.25]\n")
OPTS = ExtractOptions(device="cpu", batch_size=8, num_workers=0, part_batches=2, progress=False)
RTOL, ATOL = 1e-5, 1e-6


def crops(image: np.ndarray, n: int, offset: int) -> list[np.ndarray]:
    rgb = image if image.ndim == 3 else np.stack([image] * 3, axis=-1)
    return [rgb[offset + 17 * k:offset + 17 * k + 48, offset + 23 * k:offset + 23 * k + 48]
            for k in range(n)]


def write_images(root: Path, images: list[np.ndarray]) -> Path:
    root.mkdir(parents=True)
    for k, image in enumerate(images):
        Image.fromarray(np.ascontiguousarray(image[..., :3])).save(root / f"{k:02d}.png")
    return root


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """A store of photographs (ID: astronaut / coffee / brick crops; OOD: camera, moon and
    rocket crops), extracted with TinyCNN from a weights file."""
    root = tmp_path_factory.mktemp("images")
    sources = {"a": skdata.astronaut(), "b": skdata.coffee(), "c": skdata.brick()}
    for split, offset in (("train", 0), ("val", 9)):
        for cls, image in sources.items():
            write_images(root / split / cls, crops(image, 8, offset))
    write_images(root / "ood", crops(skdata.camera(), 6, 3) + crops(skdata.moon(), 6, 5)
                 + crops(skdata.rocket(), 6, 1))
    weights = root / "tiny.pt"
    torch.save(TinyCNN().state_dict(), weights)
    spec = root / "spec.toml"
    spec.write_text(TRANSFORM + "".join(
        f'\n[[split]]\nname = "{name}"\nsource = {{ imagefolder = "{root / folder}" }}\n'
        for name, folder in (("id/train", "train"), ("id/val", "val"),
                             ("ood/far/photos", "ood"))))
    store = extract("tests.helpers.tiny_models:tiny_cnn", spec, root / "store", weights=weights,
                    options=OPTS)
    return store, root


def test_image_outputs_equal_the_extracted_split(extracted):
    store, root = extracted
    det = featstore.Detector.fit(store, "msp")
    loaded = det.load_model("tests.helpers.tiny_models:tiny_cnn")
    paths = image_paths(root / "ood")
    feats, logits = image_outputs(loaded, det.model["transform"], paths,
                                  device=torch.device("cpu"), batch_size=5)
    split = store.split("ood/far/photos")
    assert [str(p.relative_to(root / "ood")) for p in paths] == list(split.ids)
    np.testing.assert_allclose(feats, np.asarray(split.features), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(logits, np.asarray(split.logits), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("method", ["vim", "knn"])
def test_saved_detector_scores_images_like_featstore_score(extracted, tmp_path, capsys,
                                                           method):
    store, root = extracted
    det = featstore.Detector.fit(store, method, target_tpr=0.9)
    artifact = det.save(tmp_path / "det.h5")
    code, _, err = run_cli(capsys, "score", store.path, "--method", method, "--split",
                           "ood/far/photos", "--split", "id/val", "--save",
                           tmp_path / "cli.npz", "--json")
    assert code == 0, err
    saved = np.load(tmp_path / "cli.npz")
    want = np.concatenate([saved["ood__far__photos"], saved["id__val"]])
    listing = tmp_path / "val.txt"  # an image list of the id/val images, relative paths
    listing.write_text("".join(f"{root / 'val' / i} 0\n" for i in store.split("id/val").ids))
    script = ("import json, sys, numpy as np, featstore\n"
              f"d = featstore.Detector.load({str(artifact)!r})\n"
              f"s, ok = d.score_images([{str(root / 'ood')!r}, {str(listing)!r}], "
              "model='tests.helpers.tiny_models:tiny_cnn', device='cpu', batch_size=7)\n"
              f"np.save({str(tmp_path / 'got.npy')!r}, s)\n"
              "print(json.dumps({'t': d.threshold, 'ok': ok.tolist()}))\n")
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env)
    assert run.returncode == 0, run.stderr
    got = np.load(tmp_path / "got.npy")
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    out = json.loads(run.stdout)
    assert out["t"] == det.threshold
    clear = np.abs(want - det.threshold) > 1e-5
    assert np.array_equal(np.asarray(out["ok"])[clear], (want >= det.threshold)[clear])
    assert 0 < np.sum(out["ok"]) < len(want)  # both decisions occur on these images


def test_predict_command(extracted, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS.parent))
    store, root = extracted
    det = featstore.Detector.fit(store, "energy", target_tpr=0.8)
    artifact = det.save(tmp_path / "det.h5")
    images = sorted((root / "ood").glob("*.png"))[:3]
    code, out, err = run_cli(capsys, "predict", artifact, *images, "--model",
                             "tests.helpers.tiny_models:tiny_cnn", "--device", "cpu", "--json")
    assert code == 0, err
    result = json.loads(out)
    want, decisions = det.score_features(np.asarray(store.split("ood/far/photos").features)[:3],
                                         np.asarray(store.split("ood/far/photos").logits)[:3])
    assert [r["image"] for r in result["rows"]] == [str(p) for p in images]
    np.testing.assert_allclose([r["score"] for r in result["rows"]], want, rtol=RTOL,
                               atol=ATOL)
    assert result["scorer"] == "energy" and result["threshold"] == det.threshold
    assert result["num_id"] + result["num_ood"] == 3
    code, out, err = run_cli(capsys, "predict", artifact, images[0], "--model",
                             "tests.helpers.tiny_models:tiny_cnn", "--device", "cpu")
    assert code == 0 and "energy detector" in out and images[0].name in out


def test_model_code_is_never_loaded_from_the_artifact(extracted, tmp_path, capsys):
    store, root = extracted
    artifact = featstore.Detector.fit(store, "msp").save(tmp_path / "det.h5")
    det = featstore.Detector.load(artifact)
    with pytest.raises(UsageError, match="tests.helpers.tiny_models:tiny_cnn.*is code.*name it"):
        det.score_images(root / "ood")
    code, _, err = run_cli(capsys, "predict", artifact, root / "ood")
    assert code == 2 and "--model tests.helpers.tiny_models:tiny_cnn" in err


def test_wrong_model_weights_or_images(extracted, tmp_path, capsys):
    store, root = extracted
    det = featstore.Detector.load(featstore.Detector.fit(store, "msp").save(tmp_path / "d.h5"))
    with pytest.raises(InputError, match="architecture 'TinyMapCNN', the detector's is 'TinyCNN'"):
        det.score_images(root / "ood", model="tests.helpers.tiny_models:tiny_map_cnn")
    other = TinyCNN()
    with torch.no_grad():
        other.fc.bias += 1.0
    torch.save(other.state_dict(), tmp_path / "other.pt")
    with pytest.raises(InputError, match="sha256 .* differs"):
        det.score_images(root / "ood", model="tests.helpers.tiny_models:tiny_cnn",
                         weights=tmp_path / "other.pt")
    with pytest.raises(InputError, match="weights file .*nowhere.pt.* is not there"):
        det.score_images(root / "ood", model="tests.helpers.tiny_models:tiny_cnn",
                         weights=tmp_path / "nowhere.pt")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match="cannot read image .*broken.png"):
        det.score_images([tmp_path / "broken.png"], model="tests.helpers.tiny_models:tiny_cnn")
    with pytest.raises(InputError, match="missing.png.*no such file or folder"):
        det.score_images([tmp_path / "missing.png"], model="tests.helpers.tiny_models:tiny_cnn")
    arrays = featstore.ArrayStore(store.head, splits={
        s: {"features": np.asarray(store.split(s).features), "labels":
            np.asarray(store.split(s).labels)} for s in ("id/train", "id/val")})
    with pytest.raises(UsageError, match="records no model"):
        featstore.Detector.fit(arrays, "msp").score_images(root / "ood")


def test_featstore_demo_model_loads_by_its_recorded_name(extracted, tmp_path):
    """A detector on a store extracted with featstore's own demo model
    (`featstore.extraction.zoo.demo_resnet:demo_resnet`, code of the installed package) loads it by
    the recorded name, no `model=` needed, and reproduces the store's scores (reference: the
    extracted split scored by the same fitted scorer; tolerance as above)."""
    from featstore.extraction.zoo.demo_resnet import DemoResNet

    store, root = extracted
    torch.manual_seed(1)
    torch.save(DemoResNet(num_classes=3).state_dict(), tmp_path / "demo.pt")
    demo = extract("featstore.extraction.zoo.demo_resnet:demo_resnet", root / "spec.toml",
                   tmp_path / "store", weights=tmp_path / "demo.pt", options=OPTS)
    det = featstore.Detector.load(featstore.Detector.fit(demo, "energy").save(tmp_path / "d.h5"))
    scores, _ = det.score_images(root / "ood", device="cpu", batch_size=5)
    split = demo.split("ood/far/photos")
    want, _ = det.score_features(np.asarray(split.features), np.asarray(split.logits))
    np.testing.assert_allclose(scores, want, rtol=RTOL, atol=ATOL)
