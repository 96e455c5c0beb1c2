"""Issue 21 items 5-9: random-weights warning, provenance that says what it hashed, the
transform backends, import usage flags, the smaller CLI items, and the docstrings' claims
about OpenOOD / KNN-OOD / ReAct checked against transcriptions of those sources' code.

References: hashlib over the weights file's bytes; torchvision's classic (v1) and v2
transforms called directly on a real skimage image; scipy.stats.entropy as OpenOOD's
KLMatchingPostprocessor calls it; np.percentile and a NumPy energy for ReAct."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from rich.console import Console
from rich.progress import Progress
from scipy.stats import entropy
from skimage import data as skdata
from torchvision import transforms as v1
from torchvision.transforms import v2

from featstore import Store
from featstore.errors import FeatstoreWarning, InputError, UsageError
from featstore.extraction.datasets import build_transform
from featstore.extraction.extract import ExtractOptions, loader_workers
from featstore.extraction.importer import import_arrays
from featstore.extraction.models import load_model, state_dict_sha256
from featstore.specs.benchmark import parse_spec
from featstore.workflows.report.collect import hashed_what, weights_line
from scorers import get_scorer
from scorers.kernels.softmax import softmax
from scorers.knn_index import l2_normalize
from scorers.sweep import sweep
from tests.helpers.cli import run_cli as run
from tests.helpers.stores import structured_arrays


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


# --------------------------------------------------------------------------- 5 and 6
def test_torchvision_model_without_weights_warns_random_weights():
    with pytest.warns(FeatstoreWarning, match=r"--model 'resnet18' without --weights: the "
                                              r"network has RANDOM weights"):
        loaded = load_model("resnet18")
    prov = loaded.provenance
    assert prov["weights"] is None and prov["weights_source"] == "random initialisation"
    assert prov["sha256_of"] == "state dict"
    assert prov["sha256"] == state_dict_sha256(loaded.module)


def test_provenance_says_what_it_hashed(tmp_path):
    from tests.helpers.tiny_models import TinyCNN

    path = tmp_path / "w.pth"
    torch.save(TinyCNN().state_dict(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatstoreWarning)   # no warning: weights were given
        with_file = load_model("tests.helpers.tiny_models:tiny_cnn", path).provenance
        own = load_model("tests.helpers.tiny_models:tiny_cnn").provenance
    assert with_file["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (with_file["sha256_of"], with_file["weights_source"]) == ("weights file",
                                                                       "weights file")
    assert own["weights"] is None and own["sha256_of"] == "state dict"
    assert own["weights_source"] == "the module:callable itself (no --weights)"
    # the report's labels, also for stores written before these fields existed
    assert hashed_what(with_file) == "weights file" and hashed_what(own) == "state dict"
    assert hashed_what({"kind": "callable", "weights": None}) == "state dict"
    assert hashed_what({"kind": "callable", "weights": "w.pth"}) == "weights file"
    assert hashed_what({}) == "head (W, b)"
    assert weights_line(own) == "the module:callable itself (no --weights)"
    assert weights_line(with_file) == f"weights file {path}"


def test_cli_prints_a_featstore_warning_as_one_line(capsys):
    from cli.console import _showwarning

    _showwarning(FeatstoreWarning("the network has RANDOM weights"), FeatstoreWarning, "x.py",
                 1)
    assert capsys.readouterr().err == "warning: the network has RANDOM weights\n"


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return Image.fromarray(skdata.astronaut()[:300, 40:360])


def test_transform_backends_equal_their_torchvision_pipelines(photo):
    spec = {"resize": 64, "crop": 56, "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225]}
    pil = build_transform({**spec, "backend": "pil"})(photo)
    ref_pil = v1.Compose([v1.Resize(64), v1.CenterCrop(56), v1.ToTensor(),
                          v1.Normalize(spec["mean"], spec["std"])])(photo)
    assert torch.equal(pil, ref_pil)
    tensor = build_transform(spec)(photo)
    ref_tensor = v2.Compose([v2.PILToTensor(), v2.Resize(64, antialias=True),
                             v2.CenterCrop(56), v2.ToDtype(torch.float32, scale=True),
                             v2.Normalize(spec["mean"], spec["std"])])(photo)
    assert torch.equal(tensor, ref_tensor)
    # the documented difference: the two resize kernels do not agree bit for bit
    assert tensor.shape == pil.shape and 0 < float((tensor - pil).abs().max()) < 0.5
    with pytest.raises(InputError, match=r"backend 'cv2': expected 'tensor' \(default\) or "
                                         r"'pil'"):
        parse_spec({"transform": {"backend": "cv2"}, "split": [
            {"name": "id/test", "source": {"builtin": "digits"}}]}, Path("."), "spec 'x'")


# --------------------------------------------------------------------------- 7
def _npz(path: Path, usage_key: bool) -> Path:
    arrays = structured_arrays(seed=0, n_train=60, n_val=40, n_test=40, n_ood=40)
    w, b = arrays["head"]
    flat = {"head/weight": w, "head/bias": b}
    for name, sp in arrays["splits"].items():
        flat[f"{name}/features"] = sp["features"]
        if "labels" in sp:
            flat[f"{name}/labels"] = sp["labels"]
    if usage_key:
        flat["ood/near/blend_val/usage"] = np.array("val")
    np.savez(path, **flat)
    return path


def test_import_flags_val_splits_from_the_file_or_the_command_line(tmp_path, capsys):
    st = import_arrays(_npz(tmp_path / "a.npz", True), tmp_path / "a")
    assert st.splits(role="ood", usage="val") == ["ood/near/blend_val"]
    assert sweep(st, "energy")["val_splits"]["ood"] == ["ood/near/blend_val"]
    plain = _npz(tmp_path / "b.npz", False)
    with pytest.raises(Exception, match="no OOD split flagged usage 'val'"):
        sweep(import_arrays(plain, tmp_path / "b0"), "energy")   # the failure
    code, out, err = run(capsys, "import", plain, "--out", tmp_path / "b", "--usage",
                         "ood/near/blend_val=val", "--json")
    assert code == 0, err
    assert Store.open(tmp_path / "b").splits(role="ood", usage="val") == ["ood/near/blend_val"]
    code, _, err = run(capsys, "sweep", tmp_path / "b", "--method", "energy")
    assert code == 0, err
    code, _, err = run(capsys, "import", plain, "--out", tmp_path / "c", "--usage",
                       "ood/near/nope=val")
    assert code == 2 and "has no split 'ood/near/nope'" in err
    code, _, err = run(capsys, "import", plain, "--out", tmp_path / "c", "--usage",
                       "ood/near/blend_val=validation")
    assert code == 2 and "usage must be one of train, val, test" in err
    bad = dict(np.load(plain))
    bad["ood/far/faint/usage"] = np.array("sometimes")
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(InputError, match=r"key 'ood/far/faint/usage': usage .*sometimes.* is "
                                         r"not one of train, val, test"):
        import_arrays(tmp_path / "bad.npz", tmp_path / "d")


# --------------------------------------------------------------------------- 8
def test_h5_weights_are_one_line_without_torch_advice(tmp_path, capsys):
    import h5py

    with h5py.File(tmp_path / "model.h5", "w") as fh:
        fh["dense/kernel"] = np.zeros((3, 3))
    with pytest.raises(InputError) as exc:
        load_model("tests.helpers.tiny_models:tiny_cnn", tmp_path / "model.h5")
    msg = str(exc.value)
    assert "an HDF5 file (e.g. Keras weights), not a PyTorch state dict" in msg
    assert "\n" not in msg and "weights_only` set to `False`" not in msg
    (tmp_path / "junk.pt").write_bytes(b"\x80\x02csubprocess\nPopen\nq\x00.")
    with pytest.raises(InputError, match=r"not a state dict loadable with weights_only=True "
                                         r"\(.+\); featstore never unpickles") as exc:
        load_model("tests.helpers.tiny_models:tiny_cnn", tmp_path / "junk.pt")
    assert "\n" not in str(exc.value)


def test_feature_layer_error_uses_the_right_article():
    """find_head's error names the layer's type with the right article. Since #29 (672b3f4)
    load_model takes a non-Linear --feature-layer as the feature layer of a headless store
    (features + the model's own logits, no (W, b)), so the error is find_head's own, reached
    where a Linear head is required (e.g. a method network's head layer)."""
    from featstore.extraction.heads import find_head
    from tests.helpers.tiny_models import tiny_cnn

    with pytest.raises(UsageError, match=r"feature_layer='pool': is an AdaptiveAvgPool2d, "):
        find_head(tiny_cnn(), "pool")
    with pytest.raises(UsageError, match=r"feature_layer='conv': is a Conv2d, "):
        find_head(tiny_cnn(), "conv")
    loaded = load_model("tests.helpers.tiny_models:tiny_cnn", feature_layer="pool")
    assert loaded.head is None and loaded.provenance["feature_layer"] == "pool"


def test_rate_column_in_a_pipe_shows_a_rate():
    """A bar drawn once at the end (a pipe) with the split done in one update: rich has no
    speed sample, the column falls back to rows / elapsed."""
    import io

    from cli.console import RateColumn

    # rich's clock injected (get_time), so the elapsed time is exact: the test read
    # task.elapsed on the wall clock after rendering and failed by 2% under load
    clock = [100.0]
    progress = Progress(console=Console(file=io.StringIO(), force_terminal=False),
                        get_time=lambda: clock[0])
    task_id = progress.add_task("id/test", total=64, completed=16, resumed=16)
    progress.start_task(task_id)
    clock[0] += 0.05
    progress.update(task_id, completed=64)
    task = progress.tasks[0]
    text = RateColumn().render(task).plain
    assert text.endswith(" img/s") and not text.startswith("–")
    rate = float(text.split()[0].replace(",", ""))
    assert rate == pytest.approx(48 / 0.05, rel=0.01)   # 48 rows of this run in 0.05 s: 960
    slow = progress.add_task("ood/x", total=1, completed=0, resumed=0)
    progress.start_task(slow)
    clock[0] += 0.2
    progress.update(slow, completed=1)
    text = RateColumn().render(progress.tasks[1]).plain   # < 10 img/s: not rounded to "0"
    assert not text.startswith("0 ") and 0 < float(text.split()[0]) < 10


def test_explicit_workers_are_used_even_for_a_small_split():
    default = ExtractOptions(batch_size=128)
    assert loader_workers(4, 100, default) == 0 and loader_workers(4, 300, default) == 4
    assert loader_workers(2, 100, ExtractOptions(batch_size=128, num_workers=2)) == 2


def test_import_help_lists_every_key(capsys):
    code, out, _ = run(capsys, "import", "--help")
    text = " ".join(out.split())
    assert code == 0 and "head/weight, head/bias, classes (optional)" in text
    assert ", ," not in text and "<split>/usage" in text


# --------------------------------------------------------------------------- 9
def test_kl_matching_equals_openood_one_hot_template_transcription(tmp_path):
    """OpenOOD 3c35632: classes no id/val row predicts get the one-hot template, scores are
    -min_k scipy.stats.entropy(p, d_k); the docstring says those templates never win."""
    rng = np.random.default_rng(0)
    c, d = 4, 6
    w = rng.normal(size=(c, d)).astype(np.float32)
    b = np.zeros(c, np.float32)
    val = rng.normal(size=(50, c)).astype(np.float32)
    val[:, 2] -= 10.0                                   # class 2: never predicted on id/val
    test = rng.normal(size=(30, c)).astype(np.float32)
    feats = rng.normal(size=(50, d)).astype(np.float32)
    st = Store.from_arrays(tmp_path / "s", head=(w, b), splits={
        "id/val": {"features": feats, "logits": val, "labels": np.zeros(50, np.int64)},
        "id/test": {"features": feats[:30], "logits": test,
                    "labels": np.zeros(30, np.int64)}})
    scorer = get_scorer("kl_matching").fit(st)
    assert list(scorer.template_classes) == [0, 1, 3]
    p_val = softmax(val)
    pred = val.argmax(1)
    templates = []
    for k in range(c):
        if (pred == k).any():
            templates.append(p_val[pred == k].mean(0))
        else:
            onehot = np.zeros(c)
            onehot[k] = 1
            templates.append(onehot)
    p = softmax(test)
    ref = np.array([-min(entropy(row, t) for t in templates) for row in p])
    np.testing.assert_allclose(scorer.score(st.split("id/test")), ref, rtol=1e-9)


def test_knn_normalizer_conventions():
    """featstore: x / (||x|| + 1e-10) (KNN-OOD run_cifar.py); OpenOOD / KNN-OOD
    run_imagenet.py: x / ||x|| + 1e-10, NaN on an all-zero row."""
    rng = np.random.default_rng(0)
    x = np.abs(rng.normal(size=(5, 8)))
    x[2] = 0.0
    ours = l2_normalize(x)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    np.testing.assert_allclose(ours, (x / (norm + 1e-10)).astype(np.float32), rtol=1e-6)
    with np.errstate(invalid="ignore"):
        openood = x / norm + 1e-10
    assert (ours[2] == 0).all() and np.isnan(openood[2]).all()
    keep = [0, 1, 3, 4]
    np.testing.assert_allclose(ours[keep], openood[keep], atol=1e-7)


def test_react_percentile_split_id_val_is_the_sources_convention(structured_store):
    """percentile_split='id/val' sets c = np.percentile(id/val features, 90), the authors'
    compute_threshold.py / OpenOOD convention; the default id/train differs."""
    st = structured_store
    val = np.asarray(st.split("id/val").features, dtype=np.float64)
    train = np.asarray(st.split("id/train").features, dtype=np.float64)
    scorer = get_scorer("react", percentile_split="id/val").fit(st)
    assert scorer.threshold == np.percentile(val, 90)
    assert get_scorer("react").fit(st).threshold == np.percentile(train, 90)
    w, b = (np.asarray(a, dtype=np.float64) for a in st.head)
    h = np.asarray(st.split("id/test").features, dtype=np.float64)
    z = np.minimum(h, np.percentile(val, 90)) @ w.T + b
    m = z.max(1)
    ref = m + np.log(np.exp(z - m[:, None]).sum(1))
    np.testing.assert_allclose(scorer.score(st.split("id/test")), ref, rtol=1e-6)


def test_store_json_records_weights_source(tmp_path):
    """An extraction with a module:callable and no --weights: store.json says the digest is
    of the state dict and where the weights came from."""
    from tests.helpers.images import TRANSFORM_TOML, image_folders

    train = image_folders(tmp_path / "train", ["a", "b", "c"])
    spec = tmp_path / "s.toml"
    spec.write_text(TRANSFORM_TOML + f'\n[[split]]\nname = "id/test"\nsource = {{ imagefolder = '
                    f'"{train}" }}\n')
    from featstore.extraction.extract import extract

    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "st",
                 options=ExtractOptions(device="cpu", batch_size=8, num_workers=0))
    model = json.loads((tmp_path / "st" / "store.json").read_text())["model"]
    assert model["sha256_of"] == "state dict" and model["weights"] is None
    assert model["weights_source"] == "the module:callable itself (no --weights)"
    assert st.model_sha256 == model["sha256"]


def test_knn_normalizer_rows_are_independent_and_match_the_float64_formula():
    """l2_normalize is one fused pass per row (scorers.kernels.rowfeat, no float64 copy of the
    bank). References: the whole-array float64 NumPy formula x / (||x|| + 1e-10), within one
    float32 ulp (the kernel sums the squares in a different fixed order, ~1e-16 relative), and
    the function on any row block, bit for bit (each row is computed alone); an all-zero row
    stays 0."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2560, 33)).astype(np.float32)
    x[1031] = 0.0
    x64 = x.astype(np.float64)
    want = (x64 / (np.sqrt(np.einsum("ij,ij->i", x64, x64))[:, None] + 1e-10)).astype(np.float32)
    got = l2_normalize(x)
    assert got.dtype == np.float32 and (got[1031] == 0).all()
    assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)))
    assert np.array_equal(l2_normalize(x[1000:1100]), got[1000:1100])
    assert np.array_equal(l2_normalize(x[::-1])[::-1], got)
