"""The scorer contract's shared machinery (scorers/base.py, scorers/rowmap.py, DESIGN §3):
registry errors, model-sha256 guard, fit-before-score, grid expansion, row blocks, the
stored-logits probe, missing extras. References: hand-written expectations; plain NumPy row
sums for map_rows. The per-scorer contract (every registered scorer) is test_contract.py."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from scorers import REGISTRY, get_scorer, list_scorers
from scorers.base import expand_grid, stored_logits_are_head
from scorers.evaluate import evaluate, supported
from scorers.rowmap import map_rows
from tests.helpers import stores


def test_unknown_scorer_and_parameter_name_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown scorer 'nope' \(valid: .*knn.*vim"):
        get_scorer("nope")
    with pytest.raises(ValueError, match=r"unknown parameter 'k' \(valid: K, bank_fraction"):
        get_scorer("knn", k=5)


def test_list_scorers_describes_every_registered_scorer():
    listed = {s["name"]: s for s in list_scorers()}
    assert set(listed) == set(REGISTRY)
    assert listed["knn"]["needs"] == ["features", "fit:id/train"]
    assert listed["knn"]["grid"]["K"] == [50, 100, 200, 500, 1000]
    assert all(s["paper"] for s in listed.values())


def test_scores_from_another_models_store_need_force(make_store):
    a = make_store("a", seed=0)
    b = make_store("b", seed=1)
    scorer = get_scorer("mds").fit(a)
    with pytest.raises(FeatstoreError, match="fitted on a store of model .* force=True"):
        scorer.score(b.split("id/test"))
    forced = scorer.score(b.split("id/test"), force=True)
    assert forced.shape == (b.split("id/test").num_rows,) and np.isfinite(forced).all()


def test_score_before_fit_and_after_a_failed_fit(shared_store):
    scorer = get_scorer("knn", K=100000)
    with pytest.raises(FeatstoreError, match="call fit"):
        scorer.score(shared_store.split("id/test"))
    with pytest.raises(ValueError, match="K=100000"):
        scorer.fit(shared_store)
    with pytest.raises(FeatstoreError, match="call fit"):
        scorer.score(shared_store.split("id/test"))


def test_expand_grid_is_the_ordered_cartesian_product():
    assert expand_grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_map_rows_blocks_cover_every_row_once_and_bad_thread_setting(make_store, monkeypatch):
    """scorers.rowmap.map_rows against a plain NumPy reference (row sums of the whole
    features array) for several chunk sizes, a 0-row result for an empty split, and a
    one-line error for a bad $FEATSTORE_THREADS."""
    store = make_store(dim=20)
    split = store.split("id/test")
    want = np.asarray(split.features, dtype=np.float64).sum(axis=1)
    for chunk_rows in (1, 7, 300, None):
        got = map_rows(split, ("features",), lambda x: x.astype(np.float64).sum(axis=1),
                       chunk_rows=chunk_rows)
        np.testing.assert_array_equal(got, want)
    pair = map_rows(split, ("features", "logits"),
                    lambda x, lg: (x.sum(axis=1), lg.max(axis=1)), outputs=2)
    np.testing.assert_allclose(pair[1], np.asarray(split.logits).max(axis=1))
    monkeypatch.setenv("FEATSTORE_THREADS", "zero")
    with pytest.raises(UsageError, match="FEATSTORE_THREADS"):
        map_rows(split, ("features",), lambda x: x.sum(axis=1))


def test_map_rows_read_buffers_are_reused_without_carrying_values(make_store):
    """The read-buffer pool of scorers.rowmap (kept between calls): reference = each split's
    whole array read with h5py through Split.read, row maxima in NumPy. A call after a call
    on a larger split, calls from two threads at once, and a pool that kept a buffer still
    give every split its own values; a kept buffer is handed out again (no fresh memory)."""
    from concurrent.futures import ThreadPoolExecutor

    from scorers import rowmap

    store = make_store(dim=20)
    splits = [store.split(n) for n in store.splits()]
    want = {s.name: s.read("logits").max(axis=1) for s in splits}
    for split in sorted(splits, key=lambda s: -s.num_rows) * 2:
        np.testing.assert_array_equal(
            map_rows(split, ("logits",), lambda lg: lg.max(axis=1)), want[split.name])
    with ThreadPoolExecutor(2) as pool:
        runs = [(s.name, pool.submit(map_rows, s, ("logits",), lambda lg: lg.max(axis=1)))
                for s in splits * 3]
        for name, job in runs:
            np.testing.assert_array_equal(job.result(), want[name])
    buffers = rowmap._ReadBuffers(limit=1 << 20)
    first = buffers.take((10, 4), np.dtype(np.float32))
    buffers.give(first)
    again = buffers.take((5, 2), np.dtype(np.float64))
    assert np.shares_memory(again, first) and again.shape == (5, 2)
    other = buffers.take((3,), np.dtype(np.float64))  # the kept one is in use: a new one
    assert not np.shares_memory(other, first)
    buffers.give(again)
    assert not np.shares_memory(buffers.take((100, 100), np.dtype(np.float64)), first)


def test_stored_logits_are_head_probe(tmp_path, make_store):
    """float32 logits = features @ W.T + b (what `Store.from_arrays` computes in float32, as
    a network's head does): True; the same logits scaled by 2 (another head's output) or
    stored as float16: False."""
    assert stored_logits_are_head(make_store("f32", seed=4)) is True
    assert stored_logits_are_head(make_store("f16", dtype="float16", seed=4)) is False
    arrays = stores.structured_arrays(seed=4)
    Store.from_arrays(tmp_path / "scaled", head=arrays["head"],
                      splits=stores.other_head_logits(arrays))
    assert stored_logits_are_head(Store.open(tmp_path / "scaled")) is False


def test_missing_extras_are_skipped_by_evaluate_and_named_by_score(shared_store):
    """A store without the training-time extras: `supported` names the extra, `score`
    names the library call that writes it (`extract with ...` / `train with ...`; the CLI's
    wording is tests/test_error_wording.py's), `evaluate` skips those scorers."""
    for name in ("confbranch", "godin", "mcd", "mcdropout", "odin_perturbed", "ip_ts_mlv"):
        ok, why = supported(shared_store, name)
        assert not ok and "extra:" in why
        with pytest.raises(FeatstoreError, match=r"(extract|train)( them)? with"):
            get_scorer(name).fit(shared_store).score(shared_store.split("id/test"))
    res = evaluate(shared_store, ["msp", "confbranch", "mcd"], use_cache=False)
    assert list(res["methods"]) == ["msp"] and set(res["skipped"]) == {"confbranch", "mcd"}
