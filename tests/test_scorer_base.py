"""The scorer contract shared by every scorer (scorers/base.py, DESIGN §3): registry errors,
model-sha256 guard, fit-before-score, grid expansion. References: hand-written expectations."""

from __future__ import annotations

import numpy as np
import pytest

from featstore.errors import FeatstoreError
from scorers import REGISTRY, get_scorer, list_scorers
from scorers.base import expand_grid


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


def test_score_before_fit_and_after_a_failed_fit(structured_store):
    scorer = get_scorer("knn", K=100000)
    with pytest.raises(FeatstoreError, match="call fit"):
        scorer.score(structured_store.split("id/test"))
    with pytest.raises(ValueError, match="K=100000"):
        scorer.fit(structured_store)
    with pytest.raises(FeatstoreError, match="call fit"):
        scorer.score(structured_store.split("id/test"))


def test_expand_grid_is_the_ordered_cartesian_product():
    assert expand_grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def _scores_with_threads(store, name: str, threads: int, monkeypatch, chunk_rows: int
                         ) -> dict[str, np.ndarray]:
    monkeypatch.setenv("FEATSTORE_THREADS", str(threads))
    # nnguide's default 1% bank of 600 rows is smaller than its default K
    scorer = get_scorer(name, **({"alpha": 0.1, "K": 5} if name == "nnguide" else {}))
    scorer.chunk_rows = chunk_rows
    scorer.fit(store)
    return {s: scorer.score(store.split(s)) for s in ("id/test", "ood/far/faint")}


@pytest.mark.parametrize("name", sorted(n for n, cls in REGISTRY.items()
                                         if not any(need.startswith("extra:")
                                                    for need in cls.needs)))
def test_scores_are_bit_identical_whatever_the_thread_count(make_store, monkeypatch, name):
    """Determinism (reference: the same scorer run single-threaded): scores computed with 1
    and with 3 worker threads, in blocks of 16 rows, are equal bit for bit."""
    store = make_store(dim=48, num_classes=6)
    one = _scores_with_threads(store, name, 1, monkeypatch, chunk_rows=16)
    three = _scores_with_threads(store, name, 3, monkeypatch, chunk_rows=16)
    for split, values in one.items():
        assert np.array_equal(values, three[split]), (name, split)


def test_map_rows_blocks_cover_every_row_once_and_bad_thread_setting(make_store, monkeypatch):
    """scorers.rowmap.map_rows against a plain NumPy reference (row sums of the whole
    features array) for several chunk sizes, a 0-row result for an empty split, and a
    one-line error for a bad $FEATSTORE_THREADS."""
    from featstore.errors import UsageError
    from scorers.rowmap import map_rows

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
