"""Fault injection, import class (issue 36): `featstore import` of bad and hostile arrays.
Real .npz / .h5 files written here; references: the store's split files' sha256 before the
fault (recorded in the test), bytes of a planted secret file, labels and accuracies counted by
hand."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from featstore import Store
from tests.helpers.cli import run_cli, single_line_error

C, D = 3, 4


def _arrays(n_test: int = 40, labels_rows: int | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    flat = {"head/weight": rng.normal(size=(C, D)).astype(np.float32),
            "head/bias": np.zeros(C, np.float32)}
    for split, n in (("id/train", 30), ("id/test", n_test), ("ood/far/noise", 20)):
        flat[f"{split}/features"] = rng.normal(size=(n, D)).astype(np.float32)
        if split.startswith("id/"):
            rows = labels_rows if labels_rows and split == "id/test" else n
            flat[f"{split}/labels"] = rng.integers(0, C, size=rows)
    return flat


def _state(store: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file() and p.suffix in (".h5", ".json")}




def _one_line_error(result, *fragments: str) -> str:
    """The import failed with exit 1 and one `error:` line holding each fragment."""
    return single_line_error(result, 1, *fragments)


def test_overwrite_with_bad_arrays_keeps_the_old_store(tmp_path, capsys):
    """Issue 36 item 2: `import bad.npz --overwrite` deleted the store, then failed
    validation (labels 37 rows vs 40). Everything is validated before anything is deleted."""
    np.savez(tmp_path / "good.npz", **_arrays())
    np.savez(tmp_path / "bad.npz", **_arrays(labels_rows=37, seed=1))
    store = tmp_path / "store"
    assert run_cli(capsys, "import", tmp_path / "good.npz", "--out", store)[0] == 0
    before = _state(store)
    _one_line_error(run_cli(capsys, "import", tmp_path / "bad.npz", "--out", store,
                            "--overwrite"), "id/test", "labels")
    assert _state(store) == before
    assert sorted(Store.open(store).splits()) == ["id/test", "id/train", "ood/far/noise"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz", "good.npz", "store"]
    # a good --overwrite still replaces it, with the new arrays
    np.savez(tmp_path / "new.npz", **_arrays(n_test=10, seed=2))
    assert run_cli(capsys, "import", tmp_path / "new.npz", "--out", store,
                   "--overwrite")[0] == 0
    assert Store.open(store).split("id/test").num_rows == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz", "good.npz", "new.npz",
                                                          "store"]


def test_hdf5_external_storage_is_refused_and_never_copied(tmp_path, capsys):
    """Issue 36 item 4: a dataset with HDF5 external storage pointing at a local file made
    import copy that file's bytes into the store, exit 0."""
    secret = tmp_path / "secret"
    secret.write_bytes(np.arange(20 * D, dtype=np.float32).tobytes())
    flat = _arrays()
    with h5py.File(tmp_path / "evil.h5", "w") as fh:
        for key, value in flat.items():
            if key != "ood/far/noise/features":
                fh[key] = value
        fh.create_dataset("ood/far/noise/features", shape=(20, D), dtype=np.float32,
                          external=[(str(secret), 0, 20 * D * 4)])
    _one_line_error(run_cli(capsys, "import", tmp_path / "evil.h5", "--out", tmp_path / "s"),
                    "ood/far/noise/features", "outside the file")
    assert not (tmp_path / "s").exists()


def test_hdf5_external_link_split_is_refused_not_dropped(tmp_path, capsys):
    """Issue 36 item 4: a split whose features were an HDF5 external link silently
    disappeared from the import."""
    flat = _arrays()
    with h5py.File(tmp_path / "other.h5", "w") as fh:
        fh["f"] = flat["ood/far/noise/features"]
    with h5py.File(tmp_path / "linked.h5", "w") as fh:
        for key, value in flat.items():
            if key != "ood/far/noise/features":
                fh[key] = value
        fh["ood/far/noise/features"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "f")
    _one_line_error(run_cli(capsys, "import", tmp_path / "linked.h5", "--out", tmp_path / "s"),
                    "external link", "ood/far/noise/features")


def test_uint64_label_that_would_wrap_is_refused(tmp_path, capsys):
    """Issue 36 item 10: a uint64 label 2**64 - 1 wrapped to -1 and was accepted (id_acc over
    39 of 40 rows)."""
    flat = _arrays()
    labels = flat["id/test/labels"].astype(np.uint64)
    labels[5] = np.uint64(2**64 - 1)
    flat["id/test/labels"] = labels
    np.savez(tmp_path / "a.npz", **flat)
    _one_line_error(run_cli(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s"),
                    "id/test", str(2**64 - 1), "int64")


def test_nan_in_the_head_is_refused_at_import(tmp_path, capsys):
    """Issue 36 item 14: a NaN in the head was accepted at import."""
    flat = _arrays()
    flat["head/weight"][1, 2] = np.nan
    flat["head/bias"][0] = np.inf
    np.savez(tmp_path / "a.npz", **flat)
    _one_line_error(run_cli(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s"),
                    "head", "2 values", "NaN or inf")


def test_id_test_without_labels_evaluates_with_id_acc_null(tmp_path, capsys):
    """Issue 36 item 15: id/test imported without labels gave `unexpected ValueError: no
    labelled rows` at eval. The OOD metrics need no labels; id_acc is undefined (null)."""
    flat = _arrays()
    del flat["id/test/labels"]
    np.savez(tmp_path / "a.npz", **flat)
    assert run_cli(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s")[0] == 0
    code, out, err = run_cli(capsys, "eval", tmp_path / "s", "--method", "msp", "--json",
                             "--boot", "50")
    assert code == 0, err
    result = json.loads(out)
    assert result["id_acc"] is None
    assert 0.0 <= result["methods"]["msp"]["splits"]["ood/far/noise"]["auroc"] <= 100.0
    code, out, err = run_cli(capsys, "eval", tmp_path / "s", "--method", "msp")
    assert code == 0 and "unexpected" not in err, err


@pytest.mark.parametrize("dtype", [np.int64, np.uint8])
def test_ordinary_labels_still_import(tmp_path, capsys, dtype):
    flat = _arrays()
    flat["id/test/labels"] = flat["id/test/labels"].astype(dtype)
    np.savez(tmp_path / "a.npz", **flat)
    assert run_cli(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s")[0] == 0
    got = np.asarray(Store.open(tmp_path / "s").split("id/test").labels)
    assert got.dtype == np.int64 and np.array_equal(got, flat["id/test/labels"].astype(np.int64))
