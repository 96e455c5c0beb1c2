"""Fault injection, image-source class (issue 36 items 7, 16, 19): a dangling symlink in an
ImageFolder, a FIFO named by an image list, a file name that is not UTF-8. Real files, links and
FIFOs; the tiny CNN of tests/helpers/tiny_models.py. References: the README's exit code (1,
naming the image) and the ids counted by hand."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from featstore import Store
from tests.helpers.cli import last_line_error as _one_line
from tests.helpers.cli import run_cli

HERE = Path(__file__).parent
TRANSFORM = ("[transform]\nresize = 16\ncrop = 16\nmean = [0.5, 0.5, 0.5]\n"
             "std = [0.25, 0.25, 0.25]\n")


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parent))


def _folder(root: Path, n: int = 3) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        Image.new("RGB", (20, 20), (40 * i, 0, 0)).save(root / f"{i}.png")
    return root


def _extract(capsys, tmp_path: Path, source: str):
    """Extract an id/test folder (one image per class of the tiny CNN) and `source` as
    ood/far/x."""
    for cls in "abc":
        (tmp_path / "idimgs" / cls).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (20, 20)).save(tmp_path / "idimgs" / cls / "ok.png")
    (tmp_path / "s.toml").write_text(
        TRANSFORM + f'\n[[split]]\nname = "id/test"\nsource = {{ imagefolder = '
        f'"{tmp_path / "idimgs"}" }}\n[[split]]\nname = "ood/far/x"\nsource = {source}\n')
    return run_cli(capsys, "extract", "--model", "tests.helpers.tiny_models:tiny_cnn", "--spec",
                   tmp_path / "s.toml", "--out", tmp_path / "o", "--device", "cpu",
                   "--workers", "0")



def test_dangling_symlink_in_an_imagefolder_is_a_missing_image(tmp_path, capsys):
    """Issue 36 item 7: an OOD folder with a dangling symlink lost.png gave 3 rows,
    `skipped: []`, exit 0."""
    imgs = _folder(tmp_path / "imgs")
    (imgs / "lost.png").symlink_to(tmp_path / "nowhere.png")
    _one_line(_extract(capsys, tmp_path, f'{{ imagefolder = "{imgs}" }}'), 1, "lost.png")


def test_fifo_in_an_image_list_is_refused_not_waited_on(tmp_path, capsys):
    """Issue 36 item 19: an image-list line naming a FIFO made extract block forever in
    open(). A watchdog thread writes to the FIFO after 120 s so that a regression fails the
    test instead of hanging it."""
    imgs = _folder(tmp_path / "imgs")
    os.mkfifo(imgs / "pipe.png")
    (tmp_path / "l.txt").write_text("0.png\npipe.png\n1.png\n")
    stop = threading.Event()

    def unblock():
        if not stop.wait(120):
            with open(imgs / "pipe.png", "wb") as fh:
                fh.write(b"x")

    watchdog = threading.Thread(target=unblock, daemon=True)
    watchdog.start()
    try:
        result = _extract(capsys, tmp_path,
                          f'{{ imagelist = "{tmp_path / "l.txt"}", root = "{imgs}" }}')
    finally:
        stop.set()
    _one_line(result, 1, "pipe.png", "not a regular file")


def test_non_utf8_file_name_is_stored_with_an_escape(tmp_path, capsys):
    """Issue 36 item 16: an image file named with non-UTF-8 bytes gave `unexpected
    UnicodeEncodeError`. The id keeps the bytes visible as \\xNN."""
    imgs = _folder(tmp_path / "imgs", n=2)
    Image.new("RGB", (20, 20)).save(os.fsdecode(bytes(imgs) + b"/caf\xe9.png"))
    code, _out, err = _extract(capsys, tmp_path, f'{{ imagefolder = "{imgs}" }}')
    assert code == 0, err
    ids = [str(i) for i in np.asarray(Store.open(tmp_path / "o").split("ood/far/x").ids)]
    assert sorted(ids) == ["0.png", "1.png", "caf\\xe9.png"]


@pytest.mark.parametrize("as_json", [True, False])
def test_predict_on_a_folder_with_a_non_utf8_file_name(tmp_path, capsys, as_json):
    """Issue 43 item 3: `predict` on a folder holding a file named with non-UTF-8 bytes
    ended in `unexpected UnicodeEncodeError` (the name went out as a surrogate). Its row is
    named as extraction names it (\\xNN), in the table and in JSON."""
    import json

    import featstore

    imgs = _folder(tmp_path / "imgs", n=1)
    Image.new("RGB", (20, 20)).save(os.fsdecode(bytes(imgs) + b"/caf\xe9.png"))
    code, _out, err = _extract(capsys, tmp_path, f'{{ imagefolder = "{imgs}" }}')
    assert code == 0, err
    det = featstore.Detector.fit(Store.open(tmp_path / "o"), "msp", threshold_split="id/test")
    artifact = det.save(tmp_path / "d.h5")
    code, out, err = run_cli(capsys, "predict", artifact, imgs, "--model",
                             "tests.helpers.tiny_models:tiny_cnn", "--device", "cpu",
                             *(["--json"] if as_json else []))
    assert code == 0 and "unexpected" not in err, err
    if as_json:
        names = [Path(r["image"]).name for r in json.loads(out)["rows"]]
        assert sorted(names) == ["0.png", "caf\\xe9.png"]
    else:
        assert "caf\\xe9.png" in out
