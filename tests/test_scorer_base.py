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
