"""Issue 21 item 2: ImageFolder class folders map to the head's classes by name, wnid or an
explicit `class_map`, never silently by folder order; item 8: OOD ImageFolders may be flat.

Real images (skimage.data crops) through a real tiny CNN with a 1000-output head (an
ImageNet-1k head) and 5 ID folders. The expected labels are written out by hand from the
folder names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from featstore.errors import InputError
from featstore.extraction.classmap import map_folders
from featstore.extraction.extract import ExtractOptions, extract
from tests.helpers.images import TRANSFORM_TOML, image_folders

OPTS = ExtractOptions(device="cpu", batch_size=8, num_workers=0, part_batches=2)
HEAD_NAMES = ["tench", "goldfish", "great white shark", "tiger shark", "hammerhead"] + [
    f"class {i}" for i in range(5, 1000)]
HEAD_WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475"] + [
    f"n9{i:07d}" for i in range(5, 1000)]
# sorted folder order: 'Tiger-Shark' < 'goldfish' < 'great_white_shark' < 'hammer' < wnid
FOLDERS = ["n01440764", "goldfish", "great_white_shark", "Tiger-Shark", "hammer"]


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


def spec_file(path: Path, train: Path, extra: str = "", ood: Path | None = None) -> Path:
    text = extra + TRANSFORM_TOML
    text += f'\n[[split]]\nname = "id/train"\nsource = {{ imagefolder = "{train}" }}\n'
    text += f'\n[[split]]\nname = "id/test"\nsource = {{ imagefolder = "{train}" }}\n'
    if ood is not None:
        text += f'\n[[split]]\nname = "ood/far/flat"\nsource = {{ imagefolder = "{ood}" }}\n'
    path.write_text(text)
    return path


def toml_list(values: list[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def test_folders_map_by_name_and_wnid_with_a_1000_class_head(tmp_path):
    train = image_folders(tmp_path / "train", FOLDERS)
    classes = f"classes = {toml_list(HEAD_NAMES)}\nwnids = {toml_list(HEAD_WNIDS)}\n"
    # 'hammer' matches no class name or wnid: an error naming it (never folder order)
    with pytest.raises(InputError, match=r"split 'id/train': 1 class folder\(s\) match no class "
                                         r"name or wnid of the spec's 1000 classes: hammer; "
                                         r"map them with `class_map"):
        extract("tests.helpers.tiny_models:tiny_cnn_1000",
                spec_file(tmp_path / "a.toml", train, classes), tmp_path / "a", options=OPTS)
    assert not (tmp_path / "a").exists()
    st = extract("tests.helpers.tiny_models:tiny_cnn_1000",
                 spec_file(tmp_path / "b.toml", train, classes + 'class_map = { hammer = '
                           '"hammerhead" }\n'), tmp_path / "b", options=OPTS)
    # by hand: Tiger-Shark -> 3, goldfish -> 1, great_white_shark -> 2, hammer -> 4, wnid -> 0
    expected = np.repeat([3, 1, 2, 4, 0], 2)
    for split in ("id/train", "id/test"):
        np.testing.assert_array_equal(np.asarray(st.split(split).labels), expected)
    assert st.classes[:5] == HEAD_NAMES[:5] and len(st.classes) == 1000


def test_without_a_class_list_a_count_mismatch_says_how_to_map(tmp_path):
    train = image_folders(tmp_path / "train", FOLDERS)
    with pytest.raises(InputError) as exc:
        extract("tests.helpers.tiny_models:tiny_cnn_1000", spec_file(tmp_path / "a.toml", train),
                tmp_path / "a", options=OPTS)
    msg = str(exc.value)
    assert "split 'id/train' has 5 class folders (Tiger-Shark, goldfish" in msg
    assert "head has 1000 outputs, and the spec lists no classes" in msg
    assert "`classes = [...]`" in msg and "class_map" in msg and "spec lists 5" not in msg
    # an explicit class_map alone maps every folder
    cmap = "class_map = { n01440764 = 0, goldfish = 1, great_white_shark = 2, Tiger-Shark = 3, " \
           "hammer = 4 }\n"
    st = extract("tests.helpers.tiny_models:tiny_cnn_1000",
                 spec_file(tmp_path / "b.toml", train, cmap), tmp_path / "b", options=OPTS)
    np.testing.assert_array_equal(np.asarray(st.split("id/train").labels),
                                  np.repeat([3, 1, 2, 4, 0], 2))


def test_a_class_list_of_the_wrong_length_names_the_head(tmp_path):
    train = image_folders(tmp_path / "train", FOLDERS)
    with pytest.raises(InputError, match=r"lists 5 classes but the model's head has 1000 "
                                         r"outputs; `classes` names the head's outputs"):
        extract("tests.helpers.tiny_models:tiny_cnn_1000",
                spec_file(tmp_path / "a.toml", train, f"classes = {toml_list(FOLDERS)}\n"),
                tmp_path / "a", options=OPTS)


def test_test_folders_map_to_the_train_folders_by_name(tmp_path):
    """No class list, 3-output head, id/train has folders a, b, c; id/test only a and c: c's
    rows are class 2 (by name), not class 1 (its position among the test folders)."""
    train = image_folders(tmp_path / "train", ["a", "b", "c"])
    test = image_folders(tmp_path / "test", ["a", "c"])
    spec = tmp_path / "s.toml"
    spec.write_text(TRANSFORM_TOML + f'\n[[split]]\nname = "id/train"\nsource = {{ imagefolder = '
                    f'"{train}" }}\n\n[[split]]\nname = "id/test"\nsource = {{ imagefolder = '
                    f'"{test}" }}\n')
    st = extract("tests.helpers.tiny_models:tiny_cnn", spec, tmp_path / "s", options=OPTS)
    np.testing.assert_array_equal(np.asarray(st.split("id/test").labels), [0, 0, 2, 2])
    assert st.classes == ["a", "b", "c"]


def test_flat_ood_folder_is_read_and_flat_id_folder_is_refused(tmp_path):
    train = image_folders(tmp_path / "train", ["a", "b", "c"])
    flat = tmp_path / "flat"
    flat.mkdir()
    for j in range(3):
        Image.fromarray(np.asarray(skdata.camera())[j * 30:j * 30 + 40, :40]).convert(
            "RGB").save(flat / f"{j}.png")
    st = extract("tests.helpers.tiny_models:tiny_cnn",
                 spec_file(tmp_path / "s.toml", train, ood=flat), tmp_path / "s", options=OPTS)
    sp = st.split("ood/far/flat")
    assert sp.num_rows == 3 and (np.asarray(sp.labels) == -1).all()
    assert [i.decode() if isinstance(i, bytes) else i for i in sp.ids] == ["0.png", "1.png",
                                                                           "2.png"]
    with pytest.raises(InputError, match=r"split 'id/train': imagefolder .*flat' has no class "
                                         r"sub-directories; an ID split needs one folder"):
        extract("tests.helpers.tiny_models:tiny_cnn", spec_file(tmp_path / "t.toml", flat),
                tmp_path / "t", options=OPTS)


def test_map_folders_rules():
    names = ["crane", "crane", "tench"]      # ImageNet has two 'crane' classes
    with pytest.raises(InputError, match=r"folder\(s\) crane match several classes"):
        map_folders(["crane"], 3, split="id/train", classes=names)
    assert map_folders(["crane"], 3, split="id/train", classes=names,
                       class_map={"crane": 1}) == [1]
    assert map_folders(["n01440764 tench"[:9]], 3, split="id/train",
                       classes=["a", "b", "n01440764 tench"]) == [2]
    with pytest.raises(InputError, match=r"class_map 'x' = 7 is outside the head's 0..2"):
        map_folders(["x"], 3, split="id/val", class_map={"x": 7})
    with pytest.raises(InputError, match=r"class_map 'x' = 'crane' names 2 classes"):
        map_folders(["x"], 3, split="id/val", classes=names, class_map={"x": "crane"})
