"""`featstore info` and `featstore import` as a user runs them (in-process CLI), and the
round trip of every accepted array format. Reference: the arrays written."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from featstore import Store
from tests.helpers.cli import run_cli as run


def _flat(seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(3, 4)).astype(np.float32)
    b = rng.normal(size=3).astype(np.float32)
    f = rng.normal(size=(20, 4)).astype(np.float32)
    return {"head/weight": w, "head/bias": b, "classes": np.array(["x", "y", "z"]),
            "id/train/features": f, "id/train/labels": np.arange(20) % 3,
            "ood/far/n/features": f[:5] + 3.0}


def _check_store(path, flat):
    st = Store.open(path)
    assert st.splits() == ["id/train", "ood/far/n"]
    np.testing.assert_array_equal(np.asarray(st.split("id/train").features),
                                  flat["id/train/features"])
    np.testing.assert_array_equal(np.asarray(st.split("id/train").labels),
                                  flat["id/train/labels"])
    w, b = st.head
    np.testing.assert_allclose(np.asarray(st.split("ood/far/n").logits),
                               flat["ood/far/n/features"] @ w.T + b, rtol=1e-6)
    assert st.classes == ["x", "y", "z"]


def test_import_npz_npy_pt_h5(tmp_path, capsys):
    flat = _flat()
    np.savez(tmp_path / "a.npz", **flat)
    (tmp_path / "npy").mkdir()
    for k, v in flat.items():
        np.save(tmp_path / "npy" / (k.replace("/", "__") + ".npy"), v)
    torch.save({k: torch.as_tensor(v) for k, v in flat.items() if k != "classes"},
               tmp_path / "a.pt")
    with h5py.File(tmp_path / "a.h5", "w") as fh:
        for k, v in flat.items():
            fh[k] = v.astype("S") if k == "classes" else v
    for src in ("a.npz", "npy", "a.h5"):
        code, out, err = run(capsys, "import", str(tmp_path / src), "--out",
                             str(tmp_path / f"s_{src}"))
        assert code == 0, err
        assert "id/train" in out
        _check_store(tmp_path / f"s_{src}", flat)
    code, _, err = run(capsys, "import", str(tmp_path / "a.pt"), "--out", str(tmp_path / "s_pt"))
    assert code == 0, err
    assert Store.open(tmp_path / "s_pt").split("id/train").num_rows == 20


def test_import_errors(tmp_path, capsys):
    flat = _flat()
    del flat["head/bias"]
    np.savez(tmp_path / "nobias.npz", **flat)
    code, _, err = run(capsys, "import", str(tmp_path / "nobias.npz"), "--out", str(tmp_path / "s"))
    assert code == 1 and "'head/weight' without 'head/bias'" in err
    assert len(err.strip().splitlines()) == 1
    flat = _flat()
    flat["id/train/features"] = np.zeros((20, 5), np.float32)
    np.savez(tmp_path / "dim.npz", **flat)
    code, _, err = run(capsys, "import", str(tmp_path / "dim.npz"), "--out", str(tmp_path / "s"))
    assert code == 1 and "D=5 but the head expects D=4" in err
    assert not (tmp_path / "s").exists()
    missing = str(tmp_path / "nothing.npz")
    code, _, err = run(capsys, "import", missing, "--out", str(tmp_path / "s"))
    assert code == 1 and "no such file" in err


def test_info_table_json_and_verify(tmp_path, capsys):
    flat = _flat()
    np.savez(tmp_path / "a.npz", **flat)
    run(capsys, "import", str(tmp_path / "a.npz"), "--out", str(tmp_path / "s"), "--quiet")
    code, out, _ = run(capsys, "info", str(tmp_path / "s"))
    assert code == 0 and "ood/far/n" in out and "float32" in out
    code, out, _ = run(capsys, "info", str(tmp_path / "s"), "--json", "--verify")
    data = json.loads(out)
    assert code == 0 and data["verify"]["ok"] is True
    assert [s["num_rows"] for s in data["splits"]] == [20, 5]
    path = tmp_path / "s" / "splits" / "ood__far__n.h5"
    raw = bytearray(path.read_bytes())
    raw[-50] ^= 0xFF
    path.write_bytes(bytes(raw))
    code, out, err = run(capsys, "info", str(tmp_path / "s"), "--verify")
    assert code == 1 and "'ood/far/n': sha256" in err


@pytest.mark.parametrize("args, fragment", [
    (["info", "/nonexistent/store"], "does not exist"),
    (["extract", "--model", "resnet18", "--spec", "/nonexistent.toml", "--out", "/tmp/x"],
     "file not found"),
])
def test_missing_input_is_one_line_exit_1(capsys, args, fragment):
    code, _, err = run(capsys, *args)
    assert code == 1
    assert fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
