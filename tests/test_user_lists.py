"""OpenOOD image-list layouts through `lists2spec`, and specs without an ID split (issue 29,
item 2). The expected split names are written out by hand from the OpenOOD v1.5 layout
`benchmark_imglist/<id>/{train,val,test}_<id>.txt` + `test_<ood>.txt`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from featstore.errors import UsageError
from featstore.extraction.extract import ExtractOptions, extract
from featstore.specs.benchmark import load_spec
from featstore.workflows.protocols.lists import lists_to_spec
from tests.helpers.cli import run_cli as run

OPTS = ExtractOptions(device="cpu", batch_size=8, num_workers=0, part_batches=2, progress=False)


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


def openood_layout(tmp_path: Path) -> tuple[Path, Path]:
    """images/ (real skimage crops) and oo/benchmark_imglist/cifar10/ with the README's lists."""
    images = tmp_path / "data"
    photos = {"a": skdata.astronaut(), "b": skdata.coffee(), "t": skdata.brick(),
              "m": skdata.camera()}
    for key, photo in photos.items():
        (images / key).mkdir(parents=True)
        for k in range(4):
            crop = photo[9 * k:9 * k + 40, 13 * k:13 * k + 40]
            crop = np.repeat(crop[..., None], 3, -1) if crop.ndim == 2 else crop
            Image.fromarray(crop).save(images / key / f"{k}.png")
    lists = tmp_path / "oo" / "benchmark_imglist" / "cifar10"
    lists.mkdir(parents=True)
    (lists / "train_cifar10.txt").write_text("a/0.png 0\nb/0.png 1\na/1.png 0\nb/1.png 1\n")
    (lists / "val_cifar10.txt").write_text("a/2.png 0\nb/2.png 1\n")
    (lists / "test_cifar10.txt").write_text("a/3.png 0\nb/3.png 1\n")
    (lists / "test_texture.txt").write_text("".join(f"t/{k}.png 0\n" for k in range(4)))
    (lists / "test_mnist.txt").write_text("".join(f"m/{k}.png 0\n" for k in range(4)))
    return images, lists


def test_openood_layout_keeps_its_id_lists(tmp_path):
    """The README's example: DIR is the ID dataset's own directory."""
    images, lists = openood_layout(tmp_path)
    result = lists_to_spec(lists, images, tmp_path / "spec.toml")
    got = {s["name"]: (s["usage"], s["rows"]) for s in result["splits"]}
    assert got == {"id/train": ("train", 4), "id/val": ("val", 2), "id/test": ("test", 2),
                   "ood/far/texture": ("test", 4), "ood/far/mnist": ("test", 4)}
    # DIR one level up: the ID name from the enclosing directory, or from --id
    for id_name in (None, "cifar10", "CIFAR10"):
        result = lists_to_spec(lists.parent, images, tmp_path / "up.toml", id_name=id_name)
        assert {s["name"] for s in result["splits"]} == set(got)


def test_openood_layout_cli_and_wrong_id(tmp_path, capsys):
    images, lists = openood_layout(tmp_path)
    code, _, err = run(capsys, "protocol", "lists2spec", str(lists), "--root", str(images),
                       "--out", str(tmp_path / "s.toml"), "--json")
    assert code == 0, err
    assert {s.name for s in load_spec(tmp_path / "s.toml").splits} >= {"id/train", "id/val",
                                                                       "id/test"}
    code, _, err = run(capsys, "protocol", "lists2spec", str(lists), "--root", str(images),
                       "--out", str(tmp_path / "w.toml"), "--id", "cifar100")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no ID list" in err and "--id 'cifar100'" in err and "cifar10, mnist, texture" in err
    assert not (tmp_path / "w.toml").exists()


def test_spec_without_id_split_is_refused_before_extraction(tmp_path):
    images, _ = openood_layout(tmp_path)
    spec = tmp_path / "ood_only.toml"
    spec.write_text(f'[[split]]\nname = "ood/far/texture"\nsource = {{imagelist = '
                    f'"{tmp_path}/oo/benchmark_imglist/cifar10/test_texture.txt", root = '
                    f'"{images}"}}\n')
    with pytest.raises(UsageError, match=r"has no id/ split \(splits: ood/far/texture\)"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "store", options=OPTS)
    assert not (tmp_path / "store").exists()
    # OOD splits added to a store that holds its ID splits are fine
    images, lists = openood_layout(tmp_path / "again")
    lists_to_spec(lists, images, tmp_path / "full.toml")
    extract("tests.helpers.tiny_models:tiny_cnn", tmp_path / "full.toml", tmp_path / "st",
            options=OPTS)
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "st", options=OPTS)
    assert "ood/far/texture" in st.splits()
