"""The store API (DESIGN §2-§3): round trips, laziness, invisibility of incomplete splits,
byte determinism, verification and bad inputs. References: the arrays written (exact
equality) and hashlib for digests."""

from __future__ import annotations

import json
import time

import h5py
import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.store.fileio import sha256_file
from featstore.store.names import parse_split_name


def _arrays(seed=0, n=50, d=6, c=3):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(c, d)).astype(np.float32)
    b = rng.normal(size=c).astype(np.float32)
    f = rng.normal(size=(n, d)).astype(np.float32)
    return w, b, f


def test_from_arrays_round_trip_is_exact(tmp_path):
    """Everything read back equals what was written; logits default to f @ W.T + b."""
    w, b, f = _arrays()
    labels = np.arange(50) % 3
    extras = {"conf": np.linspace(0, 1, 50).astype(np.float32),
              "mc_logits": np.ones((4, 50, 3), dtype=np.float32)}
    Store.from_arrays(tmp_path / "s", head=(w, b), classes=["a", "b", "c"],
                      provenance={"name": "toy"},
                      splits={"id/train": {"features": f, "labels": labels,
                                           "ids": [f"img{i}.png" for i in range(50)],
                                           "extras": extras},
                              "ood/far/x": {"features": f[:10] * 2}})
    st = Store.open(tmp_path / "s")
    assert st.splits() == ["id/train", "ood/far/x"]
    sp = st.split("id/train")
    np.testing.assert_array_equal(np.asarray(sp.features), f)
    np.testing.assert_allclose(np.asarray(sp.logits), f @ w.T + b, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(sp.labels), labels)
    assert sp.ids[3] == "img3.png"
    assert isinstance(sp.features, h5py.Dataset)  # lazy
    np.testing.assert_array_equal(np.asarray(sp.extra("conf")), extras["conf"])
    assert sp.extra_row_axis("mc_logits") == 1
    assert sp.read("extra:mc_logits", slice(0, 5)).shape == (4, 5, 3)
    wr, br = st.head
    np.testing.assert_array_equal(wr, w)
    np.testing.assert_array_equal(br, b)
    assert st.classes == ["a", "b", "c"]
    ood = st.split("ood/far/x")
    assert ood.group == "far" and ood.role == "ood"
    assert (np.asarray(ood.labels) == -1).all()
    assert st.provenance["name"] == "toy"
    manifest = json.loads((tmp_path / "s" / "store.json").read_text())
    entry = manifest["splits"]["id/train"]
    assert entry["sha256"] == sha256_file(tmp_path / "s" / entry["file"])
    assert entry["num_rows"] == 50 and entry["dims"] == {"features": 6, "logits": 3}


def test_iter_chunks_covers_all_rows_once(tmp_path):
    """Chunked reads concatenate to the full arrays (float32 out of a float16 store)."""
    w, b, f = _arrays(n=103)
    Store.from_arrays(tmp_path / "s", head=(w, b), splits={"id/test": {"features": f}},
                      dtype="float16")
    sp = Store.open(tmp_path / "s").split("id/test")
    assert sp.dtype == "float16"
    parts = [chunk for _, (chunk,) in sp.iter_chunks("features", chunk_rows=10)]
    assert len(parts) == 11 and parts[0].dtype == np.float32
    np.testing.assert_array_equal(np.concatenate(parts), f.astype(np.float16).astype(np.float32))


def test_same_arrays_give_identical_bytes(tmp_path):
    """Split files carry no timestamps: writing the same arrays twice gives the same sha256."""
    w, b, f = _arrays()
    Store.from_arrays(tmp_path / "a", head=(w, b), splits={"id/test": {"features": f}})
    time.sleep(1.1)
    Store.from_arrays(tmp_path / "b", head=(w, b), splits={"id/test": {"features": f}})
    assert (sha256_file(tmp_path / "a/splits/id__test.h5")
            == sha256_file(tmp_path / "b/splits/id__test.h5"))
    assert ((tmp_path / "a/store.json").read_bytes() == (tmp_path / "b/store.json").read_bytes())


def test_incomplete_split_is_invisible(tmp_path):
    """A split marked incomplete (or whose file exists without a manifest entry) is absent."""
    w, b, f = _arrays()
    st = Store.from_arrays(tmp_path / "s", head=(w, b), splits={"id/test": {"features": f}})
    st.mark_incomplete("ood/far/half", {"builtin": "noise"}, "test")
    (tmp_path / "s/splits/ood__far__orphan.h5").write_bytes(b"garbage")
    reader = Store.open(tmp_path / "s")
    assert reader.splits() == ["id/test"]
    with pytest.raises(UsageError, match="'ood/far/half' is incomplete"):
        reader.split("ood/far/half")
    with pytest.raises(UsageError, match="'ood/far/orphan' does not exist"):
        reader.split("ood/far/orphan")
    assert not list((tmp_path / "s").glob("*.tmp"))


def test_verify_detects_a_changed_split_file(tmp_path):
    """verify() recomputes sha256 and names the split whose bytes changed."""
    w, b, f = _arrays()
    Store.from_arrays(tmp_path / "s", head=(w, b), splits={"id/test": {"features": f},
                                                           "id/val": {"features": f}})
    st = Store.open(tmp_path / "s")
    assert st.verify() == []
    path = tmp_path / "s/splits/id__val.h5"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    problems = st.verify()
    assert len(problems) == 1 and "'id/val'" in problems[0]


@pytest.mark.parametrize("bad, match", [
    ({"features": np.zeros((5, 7), np.float32)}, "D=7 but the head expects D=6"),
    ({"features": np.zeros((5, 6), np.float32), "logits": np.zeros((5, 2), np.float32)},
     r"logits must be \(N=5, C=3\)"),
    ({"features": np.zeros((5, 6), np.float32), "labels": np.array([0, 1, 2, 3, 0])},
     r"labels must lie in \[-1, 2\]"),
    ({"features": np.zeros((5, 6), np.float32), "labels": np.zeros(4, int)},
     r"labels must be \(N=5,\)"),
    ({"features": np.zeros(5, np.float32)}, r"features must be \(N, D\)"),
])
def test_bad_arrays_are_refused_and_leave_no_store(tmp_path, bad, match):
    """Shape/label errors name the split and what was expected; nothing is left behind."""
    w, b, _ = _arrays()
    with pytest.raises(UsageError, match=match):
        Store.from_arrays(tmp_path / "s", head=(w, b), splits={"id/test": bad})
    assert not (tmp_path / "s").exists()


def test_existing_store_needs_overwrite_and_read_only_refuses_writes(tmp_path):
    w, b, f = _arrays()
    Store.from_arrays(tmp_path / "s", head=(w, b), splits={"id/test": {"features": f}})
    with pytest.raises(UsageError, match="already exists; pass overwrite=True to replace it"):
        Store.from_arrays(tmp_path / "s", head=(w, b), splits={"id/test": {"features": f}})
    with pytest.raises(UsageError, match="read-only"):
        Store.open(tmp_path / "s").write_split("id/val", features=f)
    with pytest.raises(UsageError, match="does not exist"):
        Store.open(tmp_path / "missing")


def test_unreadable_manifest_is_a_clear_error(tmp_path):
    w, b, f = _arrays()
    Store.from_arrays(tmp_path / "s", head=(w, b), splits={"id/test": {"features": f}})
    (tmp_path / "s/store.json").write_text("{not json")
    with pytest.raises(FeatstoreError, match="unreadable store.json"):
        Store.open(tmp_path / "s")


@pytest.mark.parametrize("name, role, group, slug", [
    ("id/train", "id", None, "id__train"),
    ("csid/blur1", "csid", None, "csid__blur1"),
    ("ood/near/ssb_hard", "ood", "near", "ood__near__ssb_hard"),
    ("ood/shift/sem3_cov1/x", "ood", "shift/sem3_cov1", "ood__shift__sem3_cov1__x"),
])
def test_split_names_parse(name, role, group, slug):
    parsed = parse_split_name(name)
    assert (parsed.role, parsed.group, parsed.slug) == (role, group, slug)


@pytest.mark.parametrize("name", ["train", "ood/x", "id/a/b", "id/a__b", "xx/y", "id/"])
def test_bad_split_names(name):
    with pytest.raises(UsageError, match="split name"):
        parse_split_name(name)


def test_readme_scorer_table_matches_the_registry():
    """The README's scorer table lists exactly the registered scorers (one registry)."""
    import re
    from pathlib import Path

    from scorers import REGISTRY

    text = (Path(__file__).parent.parent / "README.md").read_text()
    table = re.findall(r"^\| `([a-z_0-9]+)` \|", text, flags=re.M)
    assert sorted(table) == sorted(REGISTRY)
