"""Fault injection, values class (issue 22): NaN / inf in features or logits are an error
naming the split, the row count and the first rows, at fit time and at score time (never a
silent 50.00 AUROC or a -1.8e19 KNN score), unless --allow-nonfinite; float16 overflow on
import and extraction is an error; cached scores are used only for the split file (sha256)
and row count they were computed for; a missing, truncated or changed split file is exit 1
even when its scores are cached. References: the rows where NaN/inf were planted (chosen by
hand) and scores recomputed with --no-cache."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from featstore import Store
from featstore.errors import InputError
from featstore.store.values import NonFiniteError
from featstore.store.writer import SplitWriter
from scorers import get_scorer
from scorers.evaluate import evaluate, score_splits
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

SMALL = dict(num_classes=3, dim=8, n_train=60, n_val=24, n_test=30, n_ood=20)


def _arrays(plant: dict | None = None) -> dict:
    """structured_arrays with `value` planted at rows of column 0, for each
    {(split, field): (rows, value)} of `plant`; logits are the head's output."""
    arrays = structured_arrays(**SMALL)
    w, b = arrays["head"]
    for split in arrays["splits"].values():
        split["logits"] = split["features"] @ w.T + b
    for (split, field), (rows, value) in (plant or {}).items():
        arr = arrays["splits"][split][field]
        arr[rows, 0] = value
    return arrays


def _make(path, **plant) -> Store:
    arrays = _arrays({tuple(k.split(":")): v for k, v in plant.items()})
    Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])
    return Store.open(path)


FIT_ON_TRAIN = ["mds", "rmds", "dice", "vim", "knn", "fdbd", "residual", "react", "nci"]


@pytest.mark.parametrize("method,value", [(m, (np.nan, np.inf, -np.inf)[i % 3])
                                          for i, m in enumerate(FIT_ON_TRAIN)])
def test_nonfinite_train_features_fail_the_fit_naming_split_and_rows(tmp_path, method, value):
    st = _make(tmp_path / "s", **{"id/train:features": ([3, 17], value)})
    with pytest.raises(NonFiniteError) as info:
        get_scorer(method).fit(st)
    msg = str(info.value)
    assert "split 'id/train'" in msg and "2 of 60 rows of features" in msg
    assert "rows 3, 17" in msg
    assert msg.endswith("; pass allow_nonfinite=True to score the values as they are")


def test_vim_names_the_nan_not_an_impossible_dim_range(tmp_path, capsys):
    """Issue 22: NaN in id/train made vim say 'valid: 1 <= dim <= -1'."""
    _make(tmp_path / "s", **{"id/train:features": ([0], np.nan)})
    code, out, err = run_cli(capsys, "score", tmp_path / "s", "--method", "vim")
    assert code == 1 and "NaN or inf" in err and "dim" not in err, err


def test_nan_in_one_ood_row_fails_knn_scoring_of_that_split(tmp_path, capsys):
    """Issue 22: knn scored a NaN row -1.8e19, past eval's non-finite check."""
    st = _make(tmp_path / "s", **{"ood/far/faint:features": ([7], np.nan)})
    knn = get_scorer("knn", K=5).fit(st)
    assert np.isfinite(knn.score(st.split("ood/near/blend"))).all()
    with pytest.raises(NonFiniteError, match=r"split 'ood/far/faint': 1 of 20 rows .*rows 7\)"):
        knn.score(st.split("ood/far/faint"))
    code, _, err = run_cli(capsys, "score", tmp_path / "s", "--method", "knn", "--param", "K=5",
                           "--split", "ood/far/faint")
    assert code == 1 and "ood/far/faint" in err and "unexpected" not in err
    code, out, err = run_cli(capsys, "score", tmp_path / "s", "--method", "knn", "--param",
                             "K=5", "--split", "ood/far/faint", "--allow-nonfinite", "--json")
    assert code == 0, err   # scored as they are: the row's NaN distance gives a NaN score
    assert '"n": 20' in out


@pytest.mark.parametrize("field,method", [("logits", "msp"), ("logits", "energy"),
                                          ("features", "mds"), ("features", "rmds")])
def test_eval_never_reports_a_method_whose_inputs_are_not_finite(tmp_path, field, method):
    """Issue 22: one NaN in id features gave mds / dice / rmds exactly 50.00 AUROC. Now the
    method is not in the table and the reason names the split and rows."""
    split = "id/test" if field == "logits" else "id/train"
    st = _make(tmp_path / "s", **{f"{split}:{field}": ([2], np.nan)})
    healthy = "knn" if field == "logits" else "msp"   # reads only the other field: it runs
    result = evaluate(st, [method, healthy], params={"knn": {"K": 5}})
    assert method not in result["methods"] and healthy in result["methods"]
    assert "NaN or inf" in str(result["skipped"][method]) and split in str(
        result["skipped"][method])


def test_extras_with_nonfinite_values_fail_their_scorer(tmp_path):
    arrays = _arrays()
    mc = np.ones((4, 30, 3), np.float32)
    mc[1, 5, 0] = np.nan
    arrays["splits"]["id/test"]["extras"] = {"mc_logits": mc}
    Store.from_arrays(tmp_path / "s", head=arrays["head"], splits=arrays["splits"])
    st = Store.open(tmp_path / "s")
    assert st.split("id/test").nonfinite_record() == {"extra:mc_logits": [1, [5]]}
    with pytest.raises(NonFiniteError, match="extra:mc_logits"):
        get_scorer("mcdropout").fit(st).score(st.split("id/test"))


def test_nonfinite_record_matches_a_direct_count(tmp_path):
    """The manifest's record (made at commit by streaming) against np.isfinite on the whole
    array (the reference)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 8)).astype(np.float32)
    rows = np.sort(rng.choice(500, 37, replace=False))
    x[rows, rng.integers(0, 8, 37)] = rng.choice([np.nan, np.inf, -np.inf], 37)
    arrays = structured_arrays(**SMALL)
    st = Store.from_arrays(tmp_path / "s", head=arrays["head"],
                           splits={"ood/far/x": {"features": x}})
    logits = x @ arrays["head"][0].T + arrays["head"][1]
    count, first = Store.open(st.path).split("ood/far/x").nonfinite_record()["features"]
    assert count == 37 == int((~np.isfinite(x)).any(axis=1).sum())
    assert first == rows[:5].tolist()
    lcount, _ = Store.open(st.path).split("ood/far/x").nonfinite_record()["logits"]
    assert lcount == int((~np.isfinite(logits)).any(axis=1).sum())


# ------------------------------------------------------------------------------ float16
def test_float16_import_overflow_is_an_error(tmp_path, capsys):
    """Issue 22: `import --dtype float16` of values around 1e5 made half the entries inf."""
    arrays = structured_arrays(**SMALL)
    x = arrays["splits"]["id/test"]["features"].copy()
    x[4, 2], x[9, 1] = 1.0e5, -7.0e4
    np.savez(tmp_path / "a.npz", **{"head/weight": arrays["head"][0],
                                    "head/bias": arrays["head"][1], "id/test/features": x})
    code, _, err = run_cli(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s",
                           "--dtype", "float16")
    assert code == 1 and "exceed float16's range" in err and "rows 4, 9" in err, err
    assert not (tmp_path / "s" / "store.json").exists()
    code, _, err = run_cli(capsys, "import", tmp_path / "a.npz", "--out", tmp_path / "s",
                           "--quiet")
    assert code == 0, err   # float32 holds them
    assert float(np.asarray(Store.open(tmp_path / "s").split("id/test").features)[4, 2]) == 1e5


def test_float16_overflow_during_extraction_is_an_error(tmp_path):
    head = (np.eye(3, 4, dtype=np.float32), np.zeros(3, np.float32))
    st = Store.create(tmp_path / "s", head=head)
    writer = SplitWriter(st, "ood/far/x", part_rows=8, dtype="float16", usage="test",
                         source={}, fingerprint={}, num_rows=8)
    x = np.ones((8, 4), np.float32)
    x[6, 3] = 65520.0   # rounds to inf in float16 (max 65504)
    with pytest.raises(InputError, match=r"1 features value\(s\) in 1 row\(s\) \(rows 6\)"):
        writer.append(first_row=0, source_rows=8, features=x, logits=x[:, :3],
                      labels=np.full(8, -1), ids=np.arange(8).astype(str))
    x[6, 3] = 65504.0   # the largest float16: fine
    writer.append(first_row=0, source_rows=8, features=x, logits=x[:, :3],
                  labels=np.full(8, -1), ids=np.arange(8).astype(str))
    assert np.isfinite(np.asarray(writer.finish().features)).all()


# ------------------------------------------------------------------------------ score cache
def test_cached_scores_cut_short_are_recomputed(tmp_path):
    st = _make(tmp_path / "s")
    fresh, _, _ = score_splits(st, "energy", {}, ["id/test"], use_cache=False)
    score_splits(st, "energy", {}, ["id/test"])
    with h5py.File(tmp_path / "s" / "scores.h5", "r+") as fh:
        key = next(k for k in _datasets(fh) if k.endswith("id__test"))
        attrs = dict(fh[key].attrs)
        del fh[key]
        fh[key] = np.zeros(10)                       # 10 rows for a 30-row split
        fh[key].attrs.update(attrs)
    again, fit_s, score_s = score_splits(Store.open(st.path), "energy", {}, ["id/test"])
    np.testing.assert_array_equal(again["id/test"], fresh["id/test"])
    assert again["id/test"].shape == (30,)


def _datasets(fh) -> list[str]:
    out: list[str] = []
    fh.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return out


def test_cache_of_a_rewritten_split_is_not_reused(tmp_path):
    st = _make(tmp_path / "s")
    score_splits(st, "msp", {}, ["ood/far/faint"])
    writer = Store.open(st.path, mode="a")
    new = np.full((20, SMALL["dim"]), 3.0, np.float32)
    writer.write_split("ood/far/faint", features=new)
    got, _, _ = score_splits(Store.open(st.path), "msp", {}, ["ood/far/faint"])
    want, _, _ = score_splits(Store.open(st.path), "msp", {}, ["ood/far/faint"],
                              use_cache=False)
    np.testing.assert_array_equal(got["ood/far/faint"], want["ood/far/faint"])


def _flip_feature_byte(path) -> None:
    with h5py.File(path, "r") as fh:
        ds = fh["features"]
        offset = ds.id.get_offset() if ds.chunks is None else \
            ds.id.get_chunk_info(0).byte_offset
    data = bytearray(path.read_bytes())
    data[offset + 5] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["deleted", "truncated", "bit_flip"])
@pytest.mark.parametrize("cache", [True, False])
def test_damaged_split_is_exit_1_even_with_cached_scores(tmp_path, capsys, damage, cache):
    """Issue 22: with a split file deleted or truncated, score / eval exited 0 from the score
    cache; with a flipped bit, `score --no-cache` exited 0 with changed scores."""
    _make(tmp_path / "s")
    code, _, err = run_cli(capsys, "score", tmp_path / "s", "--method", "msp", "--quiet")
    assert code == 0, err
    path = tmp_path / "s" / "splits" / "ood__far__faint.h5"
    if damage == "deleted":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:2000])
    else:
        _flip_feature_byte(path)
    flags = [] if cache else ["--no-cache"]
    for command in (["score", tmp_path / "s", "--method", "msp"], ["eval", tmp_path / "s",
                                                                   "--method", "msp"]):
        code, out, err = run_cli(capsys, *command, *flags)
        assert code == 1, (command, err)
        assert "split 'ood/far/faint'" in err and "re-extract" in err
        assert "unexpected" not in err and "Traceback" not in err


def test_resume_reextracts_exactly_the_damaged_split(tmp_path, monkeypatch):
    """Issue 22: re-running extract over a store whose split file was deleted or truncated
    exited 0 and re-extracted nothing. Now the damaged split is redone (byte-identical to
    the first run: same sha256) and the intact one is kept (same inode)."""
    from tests.helpers.extraction import extract_small

    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parents[1]))
    out = extract_small(tmp_path, ["keep", "hurt"])
    manifest = Store.open(out).manifest
    keep_inode = (out / "splits" / "ood__far__keep.h5").stat().st_ino
    for damage in ("deleted", "truncated", "bit_flip"):
        hurt = out / "splits" / "ood__far__hurt.h5"
        if damage == "deleted":
            hurt.unlink()
        elif damage == "truncated":
            hurt.write_bytes(hurt.read_bytes()[:1000])
        else:
            _flip_feature_byte(hurt)
        assert Store.open(out).verify() != []
        extract_small(tmp_path, ["keep", "hurt"])
        st = Store.open(out)
        assert st.verify() == [], damage
        assert st.manifest["splits"]["ood/far/hurt"]["sha256"] == \
            manifest["splits"]["ood/far/hurt"]["sha256"]
        assert (out / "splits" / "ood__far__keep.h5").stat().st_ino == keep_inode


def test_sweep_names_the_nan_before_any_data_dependent_range(tmp_path):
    """A sweep fits on id/train too: NaN there is the error, not an empty dim range."""
    from scorers.sweep import sweep

    st = _make(tmp_path / "s", **{"id/train:features": ([5], np.nan)})
    with pytest.raises(NonFiniteError, match=r"split 'id/train': 1 of 60 rows .*rows 5\)"):
        sweep(st, "vim")
