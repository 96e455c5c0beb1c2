"""Fault injection, "wrong number with exit 0" class (issue 36 items 9, 11, 12): identical
id/train rows under Mahalanobis scorers, features scaled by 1e-30 under cosine scorers, an
all-NaN LAID matrix. Real stores and .npy files. References: the unscaled store's AUROC (a
cosine scorer is scale-free, so the scaled store must give it to 0.01 points) and the README's
exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from featstore import Store
from scorers.knn_index import l2_normalize
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

SMALL = dict(num_classes=3, dim=8, n_train=60, n_val=20, n_test=30, n_ood=30)


def _error_line(result, code: int, *fragments: str) -> str:
    got, _out, err = result
    assert got == code, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "unexpected" not in err, err
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


@pytest.mark.parametrize("method", ["mds", "rmds"])
def test_identical_train_rows_are_refused_by_mahalanobis_scorers(tmp_path, capsys, method):
    """Issue 36 item 9: identical id/train rows gave AUROC 50.00 [50.0, 50.0] from all-equal
    scores, without a word."""
    arrays = structured_arrays(**SMALL)
    train = arrays["splits"]["id/train"]
    train["features"] = np.repeat(train["features"][:1], len(train["features"]), axis=0)
    train.pop("logits", None)   # computed from the (identical) features by the head
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    _error_line(run_cli(capsys, "eval", tmp_path / "s", "--method", method, "--boot", "20"),
                1, "id/train", "covariance is zero")
    code, out, err = run_cli(capsys, "eval", tmp_path / "s", "--method", method, "--method",
                             "msp", "--json", "--boot", "20")
    assert code == 1 or method not in json.loads(out)["methods"], err


@pytest.mark.parametrize("method", ["knn", "nnguide"])
def test_cosine_scorers_do_not_depend_on_the_feature_scale(tmp_path, capsys, method):
    """Issue 36 item 11: features scaled by 1e-30 (finite in float32) gave knn far AUROC 99.91
    against 82.78 unscaled."""
    arrays = structured_arrays(**SMALL)
    w, b = arrays["head"]
    for s in arrays["splits"].values():   # the same logits in both stores (NNGuide's
        s["logits"] = s["features"] @ w.T + b   # confidence reads them)
    Store.from_arrays(tmp_path / "a", head=arrays["head"], splits=arrays["splits"])
    tiny = {name: {**s, "features": (s["features"] * np.float32(1e-30)).astype(np.float32)}
            for name, s in arrays["splits"].items()}
    Store.from_arrays(tmp_path / "b", head=arrays["head"], splits=tiny)
    got = []
    for store in ("a", "b"):
        code, out, err = run_cli(capsys, "eval", tmp_path / store, "--method", method,
                                 "--json", "--no-cache", "--boot", "20")
        assert code == 0, err
        got.append({s: v["auroc"] for s, v in json.loads(out)["methods"][method]["splits"]
                    .items()})
    assert got[0].keys() == got[1].keys()
    for split in got[0]:
        assert abs(got[0][split] - got[1][split]) <= 0.01, (split, got)


def test_l2_normalize_is_scale_free():
    """The kernel divides by the float64 norm alone: x * 1e-30 normalizes to x's unit rows
    (NumPy float64 reference, one float32 ulp); a zero row stays zero."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 16)).astype(np.float32)
    x[7] = 0
    x64 = x.astype(np.float64)
    norm = np.linalg.norm(x64, axis=1, keepdims=True)
    want = np.divide(x64, norm, out=np.zeros_like(x64), where=norm > 0).astype(np.float32)
    for scale in (1.0, 1e-30, 1e30):
        got = l2_normalize((x64 * scale).astype(np.float32))
        assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)) * 2), scale
        assert (got[7] == 0).all()


def test_all_nan_laid_matrix_is_refused(tmp_path, capsys):
    """Issue 36 item 12: `protocol shift-degrees --laid` with an all-NaN matrix wrote 60 NaN
    degrees, exit 0."""
    arrays = structured_arrays(**SMALL)
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    np.save(tmp_path / "w.npy", np.full((8, 8), np.nan))
    _error_line(run_cli(capsys, "protocol", "shift-degrees", tmp_path / "s", "--laid",
                        tmp_path / "w.npy", "--out", tmp_path / "d.npz"),
                1, "--laid", "64 of 64 values are NaN or inf")
    assert not (tmp_path / "d.npz").exists()
