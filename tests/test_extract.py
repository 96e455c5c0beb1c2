"""Extraction (DESIGN §6) on real images and real torch models.

References: a bare torch loop (PIL decode + the same torchvision transform + the model's own
layers) for features and logits; the store invariant logits == features @ W.T + b."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.extraction.datasets import build_transform
from featstore.extraction.extract import ExtractOptions, extract
from tests.helpers.images import TRANSFORM, make_image_tree, write_spec
from tests.helpers.tiny_models import TinyCNN, TinyWithConstants

OPTS = ExtractOptions(device="cpu", batch_size=8, num_workers=0, part_batches=2)


@pytest.fixture
def tree(tmp_path):
    return make_image_tree(tmp_path / "images")


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


def test_features_and_logits_equal_a_bare_torch_loop(tmp_path, tree):
    """Hooked features/logits equal model.features(x) and model(x) of a plain loop."""
    spec = write_spec(tmp_path / "b.toml", [("id/train", f'{{ imagefolder = "{tree}" }}')])
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    split = st.split("id/train")
    model = TinyCNN().eval()
    tf = build_transform(TRANSFORM)
    paths = sorted(tree.rglob("*.png"))
    x = torch.stack([tf(Image.open(p).convert("RGB")) for p in paths])
    with torch.no_grad():
        feats, logits = model.penultimate(x).numpy(), model(x).numpy()
    np.testing.assert_allclose(np.asarray(split.features), feats, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(split.logits), logits, rtol=1e-5, atol=1e-6)
    w, b = st.head
    np.testing.assert_allclose(np.asarray(split.logits), np.asarray(split.features) @ w.T + b,
                               rtol=1e-5, atol=1e-5)
    assert list(split.ids) == [str(p.relative_to(tree)) for p in paths]
    np.testing.assert_array_equal(np.asarray(split.labels), np.repeat([0, 1, 2], 6))
    assert st.classes == ["a", "b", "c"]
    prov = st.provenance
    assert prov["transform"] == TRANSFORM and prov["torch_version"] == torch.__version__


def test_image_list_source_and_float16(tmp_path, tree):
    """OpenOOD-style `path label` lists with a root; float16 features within 1e-3."""
    lst = tmp_path / "list.txt"
    lst.write_text("".join(f"{c}/{k:02d}.png {i}\n" for i, c in enumerate("abc")
                           for k in range(3)))
    spec = write_spec(tmp_path / "b.toml",
                      [("id/test", f'{{ imagelist = "{lst}", root = "{tree}" }}'),
                       ("ood/far/list", f'{{ imagelist = "{lst}", root = "{tree}" }}')])
    opts = ExtractOptions(**{**OPTS.__dict__, "dtype": "float16"})
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=opts)
    sp = st.split("id/test")
    assert sp.dtype == "float16" and sp.num_rows == 9
    np.testing.assert_array_equal(np.asarray(sp.labels), np.repeat([0, 1, 2], 3))
    assert (np.asarray(st.split("ood/far/list").labels) == -1).all()
    w, b = st.head
    f32 = np.asarray(sp.features).astype(np.float32)
    np.testing.assert_allclose(np.asarray(sp.logits), f32 @ w.T + b, atol=1e-2)


def test_torchvision_arch_with_local_weights_and_inferred_classes(tmp_path, tree):
    """resnet18 built without download; the head size comes from the weights file."""
    model = torchvision.models.resnet18(weights=None, num_classes=3)
    torch.save(model.state_dict(), tmp_path / "r18.pth")
    spec = write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')],
                      {"resize": 32, "crop": 32, "mean": [0.5] * 3, "std": [0.5] * 3})
    st = extract("resnet18", spec, tmp_path / "store", weights=tmp_path / "r18.pth",
                 options=OPTS)
    sp = st.split("id/test")
    assert sp.dims == {"features": 512, "logits": 3}
    model.eval()
    tf = build_transform({"resize": 32, "crop": 32, "mean": [0.5] * 3, "std": [0.5] * 3})
    x = torch.stack([tf(Image.open(p).convert("RGB")) for p in sorted(tree.rglob("*.png"))])
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(np.asarray(sp.logits), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_torchscript_model(tmp_path, tree):
    """A TorchScript file with an exported penultimate(); logits equal the scripted forward."""
    scripted = torch.jit.script(TinyCNN().eval())
    scripted.save(str(tmp_path / "tiny.ts"))
    spec = write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')])
    st = extract(str(tmp_path / "tiny.ts"), spec, tmp_path / "store", options=OPTS)
    assert st.split("id/test").dims == {"features": 8, "logits": 3}
    assert st.provenance["kind"] == "torchscript"
    tf = build_transform(TRANSFORM)
    x = torch.stack([tf(Image.open(p).convert("RGB")) for p in sorted(tree.rglob("*.png"))])
    with torch.no_grad():
        ref = scripted(x).numpy()
    np.testing.assert_allclose(np.asarray(st.split("id/test").logits), ref, rtol=1e-5, atol=1e-6)


def test_rerun_skips_complete_splits(tmp_path, tree):
    spec = write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')])
    extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    path = tmp_path / "store/splits/id__test.h5"
    inode = path.stat().st_ino
    extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    assert path.stat().st_ino == inode


# ----------------------------------------------------------------- bad inputs
def test_corrupt_image_is_named_and_skip_bad_records_it(tmp_path, tree):
    bad = tree / "b" / "99.png"
    bad.write_bytes(b"not a png")
    spec = write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')])
    with pytest.raises(UsageError, match=r"cannot read image 'b/99.png'.*--skip-bad"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    assert Store.open(tmp_path / "store").splits() == []
    opts = ExtractOptions(**{**OPTS.__dict__, "skip_bad": True})
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store2", options=opts)
    assert st.split("id/test").num_rows == 18
    assert st.manifest["splits"]["id/test"]["skipped"] == ["b/99.png"]


@pytest.mark.parametrize("source, match", [
    ('{ imagefolder = "/nonexistent/dir" }', "imagefolder '/nonexistent/dir': directory not"),
    ('{ imagelist = "/nonexistent/list.txt" }', "image list '/nonexistent/list.txt': file not"),
])
def test_missing_directory_or_list(tmp_path, source, match):
    spec = write_spec(tmp_path / "b.toml", [("id/test", source)])
    with pytest.raises(UsageError, match=match):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)


def test_list_line_with_bad_label(tmp_path, tree):
    lst = tmp_path / "list.txt"
    lst.write_text("a/00.png 0\na/01.png cat\n")
    spec = write_spec(tmp_path / "b.toml",
                      [("id/test", f'{{ imagelist = "{lst}", root = "{tree}" }}')])
    with pytest.raises(UsageError, match=r"list.txt' line 2: label 'cat' is not an integer"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)


def test_label_outside_head(tmp_path, tree):
    lst = tmp_path / "list.txt"
    lst.write_text("a/00.png 0\na/01.png 7\n")
    spec = write_spec(tmp_path / "b.toml",
                      [("id/test", f'{{ imagelist = "{lst}", root = "{tree}" }}')])
    with pytest.raises(UsageError, match=r"label 7 of 'a/01.png' is outside the head's 0..2"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)


def test_store_of_another_model_is_refused_unless_overwrite(tmp_path, tree):
    spec = write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')])
    extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    other = TinyCNN()
    with torch.no_grad():
        other.fc.bias.add_(1.0)
    torch.save(other.state_dict(), tmp_path / "other.pth")
    with pytest.raises(UsageError, match="made by another model.*; pass overwrite=True"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store",
                weights=tmp_path / "other.pth",
                options=OPTS)
    opts = ExtractOptions(**{**OPTS.__dict__, "overwrite": True})
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store",
                 weights=tmp_path / "other.pth", options=opts)
    np.testing.assert_allclose(st.head[1], other.fc.bias.detach().numpy())


def test_weights_that_do_not_fit_name_the_keys(tmp_path):
    state = TinyCNN().state_dict()
    state["extra.weight"] = torch.zeros(1)
    del state["conv.bias"]
    torch.save(state, tmp_path / "w.pth")
    with pytest.raises(UsageError, match=r"missing keys \['conv.bias'\].*unexpected keys "
                                         r"\['extra.weight'\]"):
        from featstore.extraction.models import load_model
        load_model("tests.helpers.tiny_models:tiny_cnn", tmp_path / "w.pth")


def test_weights_are_loaded_without_a_random_init(tmp_path):
    """load_model builds on the meta device and assigns the weights. Reference: the same
    architecture built for real and loaded with torch's own load_state_dict. Same tensors,
    the same logits bit for bit, the head size read off the weights (6 classes), dtype cast
    to the module's (a float64 checkpoint loads as float32, as copying would); a model with
    state the file does not carry (non-persistent buffer, plain tensor attribute) is built
    for real instead."""
    from featstore.extraction.models import load_model

    torch.manual_seed(3)
    ref = torchvision.models.resnet18(num_classes=6).eval()
    state = {k: v.double() if v.is_floating_point() else v for k, v in ref.state_dict().items()}
    torch.save(state, tmp_path / "r18.pt")
    loaded = load_model("resnet18", tmp_path / "r18.pt")
    assert loaded.head.out_features == 6
    got_state = loaded.module.state_dict()
    for k, v in ref.state_dict().items():
        assert got_state[k].dtype == v.dtype and not got_state[k].is_meta
        assert torch.equal(got_state[k], v), k
    x = torch.randn(4, 3, 32, 32)
    with torch.inference_mode():
        assert torch.equal(loaded.module(x), ref(x))

    tiny = TinyWithConstants(num_classes=5).eval()
    with torch.no_grad():
        for prm in tiny.parameters():
            prm.mul_(-1.5)
    torch.save(tiny.state_dict(), tmp_path / "tiny.pt")
    loaded = load_model("tests.helpers.tiny_models:tiny_with_constants", tmp_path / "tiny.pt")
    assert loaded.head.out_features == 5
    x = torch.rand(2, 3, 8, 8)
    with torch.inference_mode():
        assert torch.equal(loaded.module(x), tiny(x))


def test_pretrained_enum_is_refused_and_no_head_is_an_error(tmp_path):
    from featstore.extraction.models import load_model
    with pytest.raises(UsageError, match="would download.*pass a local weights file"):
        load_model("resnet18", "IMAGENET1K_V1")
    with pytest.raises(UsageError, match="has no nn.Linear classifier head"):
        load_model("tests.helpers.tiny_models:no_head")
    # a layer that is not a Linear: its output is the feature, and no head is stored
    loaded = load_model("tests.helpers.tiny_models:tiny_cnn", feature_layer="conv")
    assert loaded.head is None and loaded.feature_name == "conv"
    with pytest.raises(UsageError, match="--no-head needs --feature-layer LAYER"):
        load_model("tests.helpers.tiny_models:tiny_cnn", no_head=True)


def test_bad_spec_files(tmp_path):
    (tmp_path / "bad.toml").write_text("[[split]\nname=")
    with pytest.raises(UsageError, match="invalid TOML"):
        extract("tests.helpers.tiny_models:tiny_cnn", tmp_path / "bad.toml", tmp_path / "s",
                options=OPTS)
    spec = write_spec(tmp_path / "b.toml", [("id/test", '{ nothing = 1 }')])
    with pytest.raises(UsageError, match="source needs exactly one of"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "s", options=OPTS)
    with pytest.raises(UsageError, match="file not found"):
        extract("tests.helpers.tiny_models:tiny_cnn", tmp_path / "none.toml", tmp_path / "s",
                options=OPTS)


def test_write_error_leaves_split_incomplete(tmp_path, tree):
    """A write failure (here: the parts directory made read-only) is one FeatstoreError and
    the split stays invisible; a rerun after fixing the cause completes it."""
    spec = write_spec(tmp_path / "b.toml", [("id/test", f'{{ imagefolder = "{tree}" }}')])
    store_dir = tmp_path / "store"
    from featstore.store import writer as writer_mod

    original = writer_mod.SplitWriter._write_part

    def failing(self, arrays):
        raise OSError(28, "No space left on device")

    writer_mod.SplitWriter._write_part = failing
    try:
        with pytest.raises(FeatstoreError, match="write error.*No space left on device"):
            extract("tests.helpers.tiny_models:tiny_cnn", spec, store_dir, options=OPTS)
    finally:
        writer_mod.SplitWriter._write_part = original
    assert Store.open(store_dir).splits() == []
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, store_dir, options=OPTS)
    assert st.splits() == ["id/test"]


def test_torchvision_dataset_source_on_local_disk(tmp_path, tree):
    """A torchvision dataset class reading local files (ImageFolder) gives the same rows as the
    `imagefolder` source; a dataset that is not on disk is an error that never downloads."""
    spec = write_spec(tmp_path / "b.toml",
                      [("id/test", f'{{ torchvision = "ImageFolder", root = "{tree}" }}'),
                       ("id/val", f'{{ imagefolder = "{tree}" }}')])
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    a, b = st.split("id/test"), st.split("id/val")
    np.testing.assert_array_equal(np.asarray(a.features), np.asarray(b.features))
    np.testing.assert_array_equal(np.asarray(a.labels), np.asarray(b.labels))
    missing = write_spec(tmp_path / "m.toml",
                         [("id/test", f'{{ torchvision = "CIFAR10", root = "{tmp_path}/none" }}')])
    with pytest.raises(UsageError, match="torchvision dataset 'CIFAR10'.*never downloads"):
        extract("tests.helpers.tiny_models:tiny_cnn", missing, tmp_path / "store2", options=OPTS)


# ----------------------------------------------------------------- streaming assembly
def _write_through_parts(store: Store, name: str, arrays: dict, *, part_rows: int, batch: int,
                         dtype: str, row_axes: dict, drop_part: int | None = None) -> None:
    """Feed `arrays` batch by batch to a SplitWriter (as extraction does) and finish it; the
    rows of part `drop_part` are all dropped (as --skip-bad drops unreadable rows)."""
    from featstore.store.writer import SplitWriter

    n = len(arrays["labels"])
    writer = SplitWriter(store, name, part_rows=part_rows, dtype=dtype, usage="test",
                         source={"test": 1}, fingerprint={"test": 1}, num_rows=n,
                         extra_row_axes=row_axes)
    for start in range(0, n, batch):
        rows = np.arange(start, min(start + batch, n))
        if drop_part is not None and start // part_rows == drop_part:
            rows = rows[:0]

        def take(arr, axis=0, rows=rows):
            return np.take(arr, rows, axis=axis)

        writer.append(first_row=start, source_rows=min(batch, n - start),
                      features=take(arrays["features"]), logits=take(arrays["logits"]),
                      labels=take(arrays["labels"]), ids=take(arrays["ids"]),
                      extras={k: take(v, row_axes.get(k, 0))
                              for k, v in arrays["extras"].items()})
    writer.finish()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_streamed_split_file_is_byte_identical_to_the_in_memory_writer(tmp_path, dtype):
    """SplitWriter.finish streams parts into the split file; the reference is the in-memory
    writer (Store.from_arrays -> write_split_file of the whole arrays). Parts of 96 rows
    straddle the 1 MiB row chunks (873 rows of D=300 float32); the extras include a (T, N, C)
    array chunked along axis 1 and a nested name; one part has no rows (all skipped)."""
    rng = np.random.default_rng(0)
    n, d, c, part_rows = 2000, 300, 7, 96
    dropped = 5
    ids = np.array([f"images/{'x' * (i % 23)}{i}.png" for i in range(n)])
    arrays = {"features": rng.normal(size=(n, d)).astype(dtype),
              "logits": rng.normal(size=(n, c)).astype(np.float32),
              "labels": rng.integers(-1, c, size=n), "ids": ids,
              "extras": {"mc_logits": rng.normal(size=(3, n, c)).astype(np.float32),
                         "odin_logits/1000_0.0014": rng.normal(size=(n, c)).astype(np.float32),
                         "confidence": rng.normal(size=n).astype(np.float32)}}
    row_axes = {"mc_logits": 1}
    head = (rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32))
    keep = np.ones(n, bool)
    keep[dropped * part_rows:(dropped + 1) * part_rows] = False
    ref = Store.from_arrays(tmp_path / "ref", head=head, dtype=dtype, splits={"ood/far/x": {
        "features": arrays["features"][keep], "logits": arrays["logits"][keep],
        "labels": arrays["labels"][keep], "ids": ids[keep],
        "extras": {k: np.compress(keep, v, axis=row_axes.get(k, 0))
                   for k, v in arrays["extras"].items()}}})
    store = Store.create(tmp_path / "streamed", head=head)
    _write_through_parts(store, "ood/far/x", arrays, part_rows=part_rows, batch=32, dtype=dtype,
                         row_axes=row_axes, drop_part=dropped)
    got, want = store.split("ood/far/x"), ref.split("ood/far/x")
    assert got.path.read_bytes() == want.path.read_bytes()
    assert got.entry["sha256"] == want.entry["sha256"]
    assert got.num_rows == n - part_rows
    assert not (tmp_path / "streamed/splits/ood__far__x.parts").exists()


MEMORY_SCRIPT = r"""
import json, sys
import numpy as np
from featstore import Store
from featstore.store.writer import SplitWriter

n, d, part_rows, batch = 8192, 2048, 512, 128       # features: 64 MiB of float32
st = Store.create(sys.argv[1], head=(np.zeros((4, d), np.float32), np.zeros(4, np.float32)))
w = SplitWriter(st, "ood/far/big", part_rows=part_rows, dtype="float32", usage="test",
                source={}, fingerprint={}, num_rows=n)
for start in range(0, n, batch):
    rng = np.random.default_rng(start)
    w.append(first_row=start, source_rows=batch,
             features=rng.normal(size=(batch, d)).astype(np.float32),
             logits=rng.normal(size=(batch, 4)).astype(np.float32),
             labels=np.full(batch, -1), ids=np.arange(start, start + batch).astype(str))
def status(key):                                    # bytes, from /proc/self/status
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

def growth(fn):  # peak RSS during fn() minus RSS before it; writing 5 to clear_refs resets
    # VmHWM to the current RSS (ru_maxrss would carry the forking parent's peak)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = status("VmRSS")
    out = fn()
    return out, status("VmHWM") - base

split, finish = growth(w.finish)
loaded, load_all = growth(lambda: np.asarray(split.features))  # calibration: one copy
json.dump({"finish": finish, "load_all": load_all, "data": loaded.nbytes,
           "rows": split.num_rows}, sys.stdout)
"""


def test_streamed_assembly_peak_memory_is_about_one_part(tmp_path):
    """Measured in a fresh process: the growth of the peak resident set (VmHWM) during
    finish() is under half the split's data (64 MiB of features; ~12 MiB measured: one 4 MiB
    part, the chunk cache, the sha256 block), whereas holding the data once (the calibration
    line; the former concatenate path held it twice) grows it by about the data size."""
    import json
    import subprocess

    env = {"PYTHONPATH": str(Path(__file__).parent.parent), "OMP_NUM_THREADS": "1",
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(tmp_path / "store")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads(proc.stdout)
    assert m["rows"] == 8192 and m["data"] == 8192 * 2048 * 4
    assert m["load_all"] > 0.9 * m["data"], m        # the measure sees a copy of the data
    assert m["finish"] < m["data"] / 2, m            # finish held far less than one copy
