"""Fault injection, bad inputs (issue 22): strict specs (an unknown key is an error naming it,
the valid keys and the closest one), every error names its culprit in one line with the
README's exit code (1: what the command names is missing or broken; 2: the command line is
wrong) and never says "unexpected", a bad [transform] is never taken for unreadable images,
read-only stores score with the cache off and say so. References: the README's exit-code
table and the culprit planted by hand in each case."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import time
import tomllib
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image

from featstore import Store
from featstore.errors import InputError
from featstore.extraction.extract import ExtractOptions, extract
from featstore.specs.benchmark import BenchmarkSpec, SplitSpec, load_spec
from tests.helpers.cli import run_cli
from tests.helpers.cli import single_line_error as _one_line
from tests.helpers.extraction import OPTS, TRANSFORM
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent
SMALL = dict(num_classes=3, dim=8, n_train=40, n_val=20, n_test=20, n_ood=20)
DIGITS = '[[split]]\nname = "id/val"\nsource = { builtin = "digits" }\n'


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parent))



# ------------------------------------------------------------------------------ strict specs
@pytest.mark.parametrize("text,fragments", [
    ('[[split]]\nname = "id/val"\nusgae = "val"\nsource = { builtin = "digits" }\n',
     ["unknown key 'usgae'", "valid: name, usage, source", "did you mean 'usage'?"]),
    ('tranform = { crop = 8 }\n[[split]]\nname = "id/val"\nsource = { builtin = "digits" }\n',
     ["unknown key 'tranform'", "did you mean 'transform'?"]),
    ('[[split]]\nname = "id/val"\nsource = { imagelist = "l.txt", rot = "img" }\n',
     ["source: unknown key 'rot'", "valid: imagelist, root", "did you mean 'root'?"]),
    ('[[split]]\nname = "ood/x/n"\nsource = { builtin = "noise", cont = 5 }\n',
     ["unknown key 'cont'", "did you mean 'count'?"]),
    ('[[split]]\nname = "ood/x/n"\nsource = { imagefoldr = "d" }\n',
     ["unknown key 'imagefoldr'", "did you mean 'imagefolder'?"]),
    ("[transform]\ncorp = 8\n" + DIGITS,
     ["[transform]: unknown key 'corp'", "did you mean 'crop'?"]),
    ("[transform]\ncrop = 0\n" + DIGITS,
     ["crop = 0", "integer >= 1"]),
    ("[transform]\nmean = [0.5, 0.5]\n" + DIGITS,
     ["mean = [0.5, 0.5]", "3 numbers"]),
    ("[transform]\nstd = [0.2, 0, 0.2]\n" + DIGITS,
     ["std", "non-zero"]),
])
def test_spec_errors_name_the_key(tmp_path, capsys, text, fragments):
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(InputError):
        load_spec(tmp_path / "s.toml")
    _one_line(run_cli(capsys, "extract", "--model", "tests.helpers.tiny_models:tiny_cnn", "--spec",
                      tmp_path / "s.toml", "--out", tmp_path / "o"), 1, *fragments)


def test_every_key_the_demo_specs_use_is_valid():
    """The specs featstore writes itself (demo, mini-Gbench) pass the strict check."""
    from featstore.specs.benchmark import parse_spec
    from featstore.workflows.demo.gbench import gbench_spec_text
    from featstore.workflows.demo.pipeline import demo_spec_text

    for text in (demo_spec_text(), gbench_spec_text()):
        parse_spec(tomllib.loads(text), Path("."), "demo spec")


# ------------------------------------------------------------------------------ extraction
def test_bad_transform_is_named_not_taken_for_unreadable_images(tmp_path):
    """Issue 22: a 2-value mean with --skip-bad recorded every good image as unreadable and
    saved a complete 0-row split, exit 0. (The spec check stops it first; this drives the
    extraction itself with a transform no spec check saw.)"""
    spec = BenchmarkSpec(None, [SplitSpec("id/test", "test", {"builtin": "noise",
                                                               "count": 8})],
                         {"resize": 16, "crop": 16, "mean": [0.5, 0.5], "std": [0.2, 0.2]})
    opts = ExtractOptions(**{**OPTS.__dict__, "skip_bad": True})
    with pytest.raises(InputError, match=r"\[transform\].*cannot transform an image"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "out", options=opts)
    assert not (tmp_path / "out" / "splits" / "id__test.h5").exists()


def test_skip_bad_with_every_image_unreadable_saves_nothing(tmp_path):
    for cls in "abc":   # the tiny CNN's head has 3 classes: one folder each
        folder = tmp_path / "imgs" / cls
        folder.mkdir(parents=True)
        (folder / "0.png").write_bytes(b"not a png")
    spec = TRANSFORM + (f'\n[[split]]\nname = "id/test"\nsource = {{ imagefolder = '
                        f'"{tmp_path / "imgs"}" }}\n')
    (tmp_path / "s.toml").write_text(spec)
    opts = ExtractOptions(**{**OPTS.__dict__, "skip_bad": True})
    with pytest.raises(InputError, match="every one of its 3 images was unreadable"):
        extract("tests.helpers.tiny_models:tiny_cnn", tmp_path / "s.toml", tmp_path / "out",
                options=opts)
    assert "id/test" not in Store.open(tmp_path / "out").splits()


@pytest.mark.parametrize("case", ["missing_image", "corrupt_image", "missing_root",
                                  "empty_folder", "no_class_dirs"])
def test_missing_or_broken_images_exit_1(tmp_path, capsys, case):
    """Issue 22: unreadable / missing image, missing list root and an empty folder exited 2
    where the README's table says 1."""
    imgs = tmp_path / "imgs"
    for cls in "abc":   # the tiny CNN's head has 3 classes: one folder each
        (imgs / cls).mkdir(parents=True)
        Image.new("RGB", (20, 20)).save(imgs / cls / "ok.png")
    if case == "missing_image":
        (tmp_path / "l.txt").write_text("a/ok.png 0\na/gone.png 0\n")
        source, culprit = f'{{ imagelist = "{tmp_path / "l.txt"}", root = "{imgs}" }}', \
            "a/gone.png"
    elif case == "corrupt_image":
        (imgs / "a" / "bad.png").write_bytes(b"garbage")
        source, culprit = f'{{ imagefolder = "{imgs}" }}', "a/bad.png"
    elif case == "missing_root":
        (tmp_path / "l.txt").write_text("a/ok.png 0\n")
        source, culprit = f'{{ imagelist = "{tmp_path / "l.txt"}", root = "{tmp_path / "no"}" }}', \
            "root directory"
    elif case == "empty_folder":
        for cls in "abc":
            (imgs / cls / "ok.png").unlink()
        source, culprit = f'{{ imagefolder = "{imgs}" }}', "no image files"
    else:
        for cls in "abc":
            shutil.rmtree(imgs / cls)
        source, culprit = f'{{ imagefolder = "{imgs}" }}', "no image files"
    (tmp_path / "s.toml").write_text(TRANSFORM + f'\n[[split]]\nname = "id/test"\n'
                                                 f"source = {source}\n")
    _one_line(run_cli(capsys, "extract", "--model", "tests.helpers.tiny_models:tiny_cnn", "--spec",
                      tmp_path / "s.toml", "--out", tmp_path / "o", "--device", "cpu",
                      "--workers", "0"), 1, culprit)


def test_bad_worker_count_is_exit_2(tmp_path, capsys):
    (tmp_path / "s.toml").write_text(TRANSFORM + '\n[[split]]\nname = "id/test"\n'
                                                 'source = { builtin = "noise", count = 4 }\n')
    _one_line(run_cli(capsys, "extract", "--model", "tests.helpers.tiny_models:tiny_cnn", "--spec",
                      tmp_path / "s.toml", "--out", tmp_path / "o", "--workers", "-1"),
              2, "--workers -1")


def test_weights_of_another_architecture_name_the_keys(tmp_path, capsys):
    """Issue 22: torch's 'Error(s) in loading state_dict for ResNet:' was cut to its first
    line; the README promises the keys are named."""
    import torch
    import torchvision

    state = torchvision.models.resnet18(num_classes=10).state_dict()
    state["layer1.0.conv1.weight"] = torch.zeros(64, 64, 1, 1)
    torch.save(state, tmp_path / "w.pth")
    (tmp_path / "s.toml").write_text(TRANSFORM + '\n[[split]]\nname = "id/test"\n'
                                                 'source = { builtin = "noise", count = 4 }\n')
    _one_line(run_cli(capsys, "extract", "--model", "resnet18", "--weights", tmp_path / "w.pth",
                      "--spec", tmp_path / "s.toml", "--out", tmp_path / "o", "--device", "cpu"),
              1, "--weights", "layer1.0.conv1.weight", "size mismatch")


def test_train_init_errors_name_init(tmp_path):
    import torch

    from featstore.training.trainer import _load_init
    from tests.helpers.tiny_models import TinyCNN

    with pytest.raises(InputError, match="--init .*file not found"):
        _load_init(TinyCNN(), str(tmp_path / "none.pt"))
    torch.save({"conv.weight": torch.zeros(8, 3, 5, 5)}, tmp_path / "bad.pt")
    with pytest.raises(InputError, match="--init .*size mismatch for conv.weight"):
        _load_init(TinyCNN(), str(tmp_path / "bad.pt"))


# ------------------------------------------------------------------------------ broken stores
def _store(path: Path) -> Path:
    arrays = structured_arrays(**SMALL)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return path


def _rewrite_split(store: Path, split: str, edit) -> None:
    """Edit a split file and make the manifest's sha256 / size agree (a consistent store
    whose file is wrong in shape: only the structure checks catch it)."""
    import hashlib

    path = store / "splits" / f"{split.replace('/', '__')}.h5"
    with h5py.File(path, "r+") as fh:
        edit(fh)
    manifest = json.loads((store / "store.json").read_text())
    manifest["splits"][split]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest["splits"][split]["size_bytes"] = path.stat().st_size
    (store / "store.json").write_text(json.dumps(manifest))


def _replace(key, value):
    def edit(fh):
        del fh[key]
        fh[key] = value
    return edit


def _drop(key):
    def edit(fh):
        del fh[key]
    return edit


def _manifest(edit):
    def apply(store: Path) -> None:
        manifest = json.loads((store / "store.json").read_text())
        edit(manifest)
        (store / "store.json").write_text(json.dumps(manifest))
    return apply


BROKEN = {
    "non_utf8_manifest": (lambda s: (s / "store.json").write_bytes(b'{"a": "\xff\xfe"}'),
                          "not UTF-8"),
    "manifest_without_num_classes": (_manifest(lambda m: m.pop("num_classes")),
                                     "'num_classes' is missing"),
    "split_without_num_rows": (_manifest(lambda m: m["splits"]["id/test"].pop("num_rows")),
                               "'num_rows' is missing"),
    "split_dims_not_ints": (_manifest(lambda m: m["splits"]["id/test"].update(
        dims={"features": "8"})), "'dims'"),
    "head_width_mismatch": (_manifest(lambda m: m["splits"]["id/test"].update(
        dims={"features": 9, "logits": 3})), "width 8, the manifest says 9"),
    "logit_rows_differ": (lambda s: _rewrite_split(s, "id/test", _replace(
        "logits", np.zeros((19, 3), np.float32))), "'logits' has 19 rows"),
    "one_d_features": (lambda s: _rewrite_split(s, "id/test", _replace(
        "features", np.zeros(20, np.float32))), "'features' is 1-D"),
    "vlen_features": (lambda s: _rewrite_split(s, "id/test", _replace(
        "features", np.array(["a"] * 20, dtype=h5py.string_dtype()))), "'features'"),
    "missing_dataset": (lambda s: _rewrite_split(s, "id/test", _drop("labels")),
                        "'labels' is missing"),
    "labels_out_of_range": (lambda s: _rewrite_split(s, "id/test", _replace(
        "labels", np.full(20, 7, np.int64))), "outside -1..2"),
    "garbage_split_file": (lambda s: _rewrite_split(s, "id/test", lambda fh: None) or (
        s / "splits" / "id__test.h5").write_bytes(b"\x00" * (s / "splits" / "id__test.h5")
                                                  .stat().st_size), "id/test"),
    "missing_model_file": (lambda s: (s / "model.h5").unlink(), "model.h5"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_store_is_one_line_exit_1(tmp_path, capsys, case):
    """Issue 22: 18 cases ended in the generic "unexpected X"."""
    store = _store(tmp_path / "s")
    damage, fragment = BROKEN[case]
    damage(store)
    _one_line(run_cli(capsys, "score", store, "--method", "msp", "--no-cache"), 1, fragment)
    code, _, err = run_cli(capsys, "eval", store, "--method", "energy", "--no-cache")
    assert code == 1 and "unexpected" not in err and "Traceback" not in err, err


# ------------------------------------------------------------------------------ read-only
class ReadOnly:
    """Make a directory read-only for this process: a read-only bind mount of it onto itself
    when running as root (root writes through any permission bits), else chmod a-w."""

    def __init__(self, path: Path):
        self.path, self.mounted = path, False

    def __enter__(self) -> ReadOnly:
        if os.geteuid() == 0:
            subprocess.run(["mount", "--bind", str(self.path), str(self.path)], check=True)
            self.mounted = True
            subprocess.run(["mount", "-o", "remount,bind,ro", str(self.path)], check=True)
        else:
            for path in [self.path, *self.path.rglob("*")]:
                os.chmod(path, 0o555 if path.is_dir() else 0o444)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.mounted:
            # "target is busy" was seen once in a full run (an HDF5 handle not yet collected):
            # collect, retry briefly, then detach lazily; the mount never outlives the test
            for _ in range(5):
                gc.collect()
                if subprocess.run(["umount", str(self.path)], capture_output=True).returncode == 0:
                    return
                time.sleep(0.2)
            subprocess.run(["umount", "--lazy", str(self.path)], check=True)
        else:
            for path in [self.path, *self.path.rglob("*")]:
                os.chmod(path, 0o755 if path.is_dir() else 0o644)


def test_read_only_store_scores_with_the_cache_off_and_says_so(tmp_path, capsys):
    """Issue 22: score / eval / report on a read-only store failed with "unexpected OSError
    ... scores.h5" (and report had no --no-cache). Reference: the scores of the same store,
    writable, with --no-cache."""
    store = _store(tmp_path / "s")
    code, want, err = run_cli(capsys, "score", store, "--method", "energy", "--json",
                              "--no-cache")
    assert code == 0, err
    with ReadOnly(store):
        code, got, err = run_cli(capsys, "score", store, "--method", "energy", "--json")
        assert code == 0, err
        assert "read-only: scoring with the score cache off" in err
        assert json.loads(got)["splits"] == json.loads(want)["splits"]
        code, _, err = run_cli(capsys, "eval", store, "--method", "msp", "--json")
        assert code == 0 and "cache off" in err, err
        code, _, err = run_cli(capsys, "report", store, "--method", "msp", "--no-cache",
                               "--out", tmp_path / "r2.html")
        assert code == 0 and "cache off" not in err, err
        code, _, err = run_cli(capsys, "import", tmp_path / "none.npz", "--out", store)
        assert code != 0 and "unexpected" not in err
    assert not (store / "scores.h5").exists()


def test_an_output_path_the_filesystem_refuses_is_named(tmp_path, capsys):
    """An OSError from the user's filesystem (here: --out in a directory that does not
    exist) is one line naming the path, exit 1, never "unexpected OSError"."""
    store = _store(tmp_path / "s")
    target = tmp_path / "no" / "such" / "dir" / "results.json"
    code, out, err = run_cli(capsys, "eval", store, "--method", "msp", "--out", target,
                             "--quiet")
    _one_line((code, "", err), 1, str(target), "No such file or directory")
