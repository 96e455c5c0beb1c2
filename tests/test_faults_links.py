"""Fault injection, security class (issue 22): a store and its folder are untrusted input.
Writers never follow a symbolic link (the file a link points to is byte-for-byte unchanged
afterwards); readers refuse HDF5 soft and external links, external dataset storage and
manifest paths outside the store, even when a hostile manifest records the tampered file's
sha256 and size; `verify` covers model.h5. Reference: the outside file's bytes before and
after, compared exactly."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreError, InputError
from featstore.store.writer import SplitWriter
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

SMALL = dict(num_classes=3, dim=8, n_train=40, n_val=20, n_test=20, n_ood=20)


def _store(path: Path) -> Store:
    arrays = structured_arrays(**SMALL)
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path, mode="a")


@pytest.fixture
def outside(tmp_path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious bytes outside the store\n")
    return victim


def _x(n: int = 6) -> np.ndarray:
    return np.linspace(0, 1, n * SMALL["dim"], dtype=np.float32).reshape(n, SMALL["dim"])


@pytest.mark.parametrize("name", ["store.json.tmp", "splits/ood__far__new.h5.tmp",
                                  "splits/ood__far__new.h5", ".featstore.stat.tmp"])
def test_writer_never_writes_through_a_planted_link(tmp_path, outside, name):
    st = _store(tmp_path / "s")
    before = outside.read_bytes()
    (tmp_path / "s" / name).symlink_to(outside)
    st.write_split("ood/far/new", features=_x())
    assert outside.read_bytes() == before
    fresh = Store.open(tmp_path / "s")
    assert "ood/far/new" in fresh.splits() and fresh.verify() == []
    np.testing.assert_array_equal(np.asarray(fresh.split("ood/far/new").features), _x())


def test_part_tmp_and_fingerprint_links_are_not_followed(tmp_path, outside):
    st = _store(tmp_path / "s")
    before = outside.read_bytes()
    parts = tmp_path / "s" / "splits" / "ood__far__p.parts"
    parts.mkdir()
    (parts / "fingerprint.json").symlink_to(outside)
    writer = SplitWriter(st, "ood/far/p", part_rows=4, dtype="float32", usage="test",
                         source={}, fingerprint={"v": 1}, num_rows=6)
    (writer.parts_dir / "part-000000.h5.tmp").symlink_to(outside)
    x = _x()
    w, b = st.head
    for lo, hi in ((0, 4), (4, 6)):
        writer.append(first_row=lo, source_rows=hi - lo, features=x[lo:hi],
                      logits=x[lo:hi] @ w.T + b, labels=np.full(hi - lo, -1),
                      ids=np.arange(lo, hi).astype(str))
    writer.finish()
    assert outside.read_bytes() == before


def test_a_linked_splits_directory_is_refused(tmp_path):
    st = _store(tmp_path / "s")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    real = tmp_path / "s" / "splits"
    real.rename(tmp_path / "s" / "splits_real")
    real.symlink_to(elsewhere)
    with pytest.raises(OSError, match="symbolic link"):
        st.write_split("ood/far/new", features=_x())
    assert list(elsewhere.iterdir()) == []


def test_a_linked_scores_file_is_refused_not_written(tmp_path, outside, capsys):
    _store(tmp_path / "s")
    before = outside.read_bytes()
    (tmp_path / "s" / "scores.h5").symlink_to(outside)
    code, out, err = run_cli(capsys, "score", tmp_path / "s", "--method", "msp")
    assert code == 1 and "scores.h5 is a symbolic link" in err and "unexpected" not in err
    assert outside.read_bytes() == before
    code, _, err = run_cli(capsys, "score", tmp_path / "s", "--method", "msp", "--no-cache")
    assert code == 0, err


def test_a_split_file_replaced_by_a_link_is_refused(tmp_path, capsys):
    _store(tmp_path / "s")
    target = tmp_path / "copy.h5"
    split_file = tmp_path / "s" / "splits" / "id__test.h5"
    target.write_bytes(split_file.read_bytes())   # same bytes: the sha256 would still match
    split_file.unlink()
    split_file.symlink_to(target)
    with pytest.raises(InputError, match="symbolic link"):
        Store.open(tmp_path / "s").split("id/test").features  # noqa: B018
    assert any("symbolic link" in p for p in Store.open(tmp_path / "s").verify())
    code, _, err = run_cli(capsys, "info", tmp_path / "s", "--verify")
    assert code == 1 and "symbolic link" in err


def _tamper(store_dir: Path, split: str, edit) -> None:
    """Edit a split file, then make the manifest agree with it (a consistent hostile store:
    only the link checks can catch it)."""
    slug = split.replace("/", "__")
    path = store_dir / "splits" / f"{slug}.h5"
    with h5py.File(path, "r+") as fh:
        edit(fh)
    manifest = json.loads((store_dir / "store.json").read_text())
    entry = manifest["splits"][split]
    entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    entry["size_bytes"] = path.stat().st_size
    (store_dir / "store.json").write_text(json.dumps(manifest))
    (store_dir / ".featstore.stat").unlink(missing_ok=True)


def _external_link(tmp_path: Path):
    outside = tmp_path / "outside.h5"
    with h5py.File(outside, "w") as fh:
        fh["features"] = np.ones((20, SMALL["dim"]), np.float32)

    def edit(fh):
        del fh["features"]
        fh["features"] = h5py.ExternalLink(str(outside), "features")
    return edit


def _soft_link(tmp_path: Path):
    def edit(fh):
        fh["elsewhere"] = fh["features"][()]
        del fh["features"]
        fh["features"] = h5py.SoftLink("/elsewhere")
    return edit


def _external_storage(tmp_path: Path):
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.ones((20, SMALL["dim"]), np.float32).tobytes())

    def edit(fh):
        del fh["features"]
        fh.create_dataset("features", shape=(20, SMALL["dim"]), dtype=np.float32,
                          external=[(str(raw), 0, raw.stat().st_size)])
    return edit


@pytest.mark.parametrize("make", [_external_link, _soft_link, _external_storage],
                         ids=["external_link", "soft_link", "external_storage"])
def test_hdf5_links_out_of_a_split_file_are_refused(tmp_path, capsys, make):
    _store(tmp_path / "s")
    _tamper(tmp_path / "s", "id/test", make(tmp_path))
    with pytest.raises(InputError, match="never follows links"):
        Store.open(tmp_path / "s").split("id/test").read("features")
    problems = Store.open(tmp_path / "s").verify()
    assert any("id/test" in p and "link" in p or "outside the file" in p for p in problems)
    code, _, err = run_cli(capsys, "score", tmp_path / "s", "--method", "msp", "--no-cache")
    assert code == 1 and "id/test" in err and "unexpected" not in err, err


@pytest.mark.parametrize("file", ["/etc/passwd", "../outside.h5", "splits/../../x.h5",
                                  "splits/id__train.h5"])
def test_manifest_paths_outside_the_store_or_of_another_split_are_refused(tmp_path, capsys,
                                                                          file):
    _store(tmp_path / "s")
    manifest = json.loads((tmp_path / "s" / "store.json").read_text())
    manifest["splits"]["id/test"]["file"] = file
    (tmp_path / "s" / "store.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="must be 'splits/id__test.h5' inside the store"):
        Store.open(tmp_path / "s")
    code, _, err = run_cli(capsys, "info", tmp_path / "s")
    assert code == 1 and repr(file) in err


def test_verify_covers_model_file(tmp_path, capsys):
    _store(tmp_path / "s")
    assert Store.open(tmp_path / "s").verify() == []
    model = tmp_path / "s" / "model.h5"
    data = bytearray(model.read_bytes())
    model.unlink()
    code, _, err = run_cli(capsys, "info", tmp_path / "s", "--verify")
    assert code == 1 and "model.h5 is missing" in err, err
    data[-8] ^= 0xFF
    model.write_bytes(bytes(data))
    problems = Store.open(tmp_path / "s").verify()
    assert any("model.h5" in p for p in problems)


def test_model_file_with_a_link_or_wrong_head_is_refused(tmp_path):
    st = _store(tmp_path / "s")
    model = tmp_path / "s" / "model.h5"
    with h5py.File(model, "r+") as fh:
        del fh["head/bias"]
        fh["head/bias"] = h5py.SoftLink("/head/weight")
    with pytest.raises(FeatstoreError, match="soft link"):
        Store.open(st.path).head  # noqa: B018


def test_lock_file_link_is_refused(tmp_path, outside):
    st = _store(tmp_path / "s")
    before = outside.read_bytes()
    lock = tmp_path / "s" / ".featstore.lock"
    lock.unlink()
    lock.symlink_to(outside)
    with pytest.raises(FeatstoreError, match="symbolic link"):
        st.write_split("ood/far/new", features=_x())
    assert outside.read_bytes() == before


def test_report_markdown_escapes_names(tmp_path):
    from featstore.workflows.report import write_report

    arrays = structured_arrays(**SMALL)
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"],
                      provenance={"name": "<script>alert(1)</script>",
                                  "architecture": "<img src=x onerror=alert(1)>"})
    html_path, md_path = write_report(tmp_path / "s", tmp_path / "r.html", methods=["msp"])
    for path in (html_path, md_path):
        text = path.read_text()
        assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md_path.read_text()
    assert os.path.getsize(md_path) > 0
