"""GEN (scorers/methods/gen.py). Reference: Liu, Lochman & Zach 2023's -sum over the top-M
probabilities of p^g (1 - p)^g in logs (`tests.helpers.references.gen_score`: SciPy
log_softmax, np.sort); mpmath at 80 digits where p rounds to 1.0; a separate
construct/fit/score per setting for `score_grid`; OpenOOD v1.5's gen.yml for the default grid;
scikit-learn `roc_auc_score` for the sign."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax as sp_softmax

from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

CASES = [{}, {"gamma": 0.5, "M": 3}, {"gamma": 2, "M": 1}, {"gamma": 0.01, "M": 12}]


def ref_gen(logit_rows: np.ndarray, gamma: float, m: int) -> np.ndarray:
    """Liu, Lochman & Zach 2023: -sum over the top-M probabilities of p^g (1 - p)^g."""
    return refs.gen_score(logit_rows, gamma, m)


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_gen(refs.logits(store, split), params.get("gamma", 0.1), params.get("M", 100))


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("gen", CASES, reference)


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_default_grid_equals_separate_runs(shared_store, "gen")


@pytest.mark.parametrize(("base", "grid"), [
    ({"gamma": 0.3}, {"M": [1, 5, 12, 100]}),
    ({"M": 4}, {"gamma": [0.01, 1, 10]}),
    ({}, {"M": [2, 12], "gamma": [0.5, 0.1]}),
])
def test_custom_grid_equals_separate_runs(make_store, base, grid):
    kit.assert_custom_grid_equals_separate_runs(make_store, "gen", base, grid)


def test_default_grid_matches_openood():
    """Reference: OpenOOD v1.5 configs/postprocessors/gen.yml postprocessor_sweep/args."""
    info = {s["name"]: s for s in list_scorers()}["gen"]
    assert info["grid"] == {"gamma": [0.01, 0.1, 0.5, 1, 2, 5, 10],
                            "M": [10, 50, 100, 200, 500, 1000]}
    assert info["defaults"] == {"gamma": 0.1, "M": 100}
    assert info["paper"] and "logits" in info["needs"]


@pytest.mark.parametrize(("params", "pattern"), [
    ({"M": 0}, r"M=0 .*>= 1"),
    ({"M": 2.5}, r"M=2.5 .*integer >= 1"),
    ({"gamma": -1}, r"gamma=-1 .*> 0"),
    ({"gamma": 0}, r"gamma=0 .*> 0"),
])
def test_out_of_range_params(params, pattern):
    """Reference: the documented ranges (gamma > 0, M integer >= 1)."""
    with pytest.raises(ValueError, match=pattern):
        get_scorer("gen", **params)


def test_out_of_range_grid_values(shared_store):
    """Reference: Scorer.score_grid validates every setting before scoring; unknown grid
    parameters name the valid ones."""
    split = shared_store.split("id/test")
    gen = get_scorer("gen").fit(shared_store)
    with pytest.raises(ValueError, match=r"M=0 .*>= 1"):
        gen.score_grid(split, {"M": [5, 0]})
    with pytest.raises(ValueError, match=r"'alpha'.*M, gamma"):
        gen.score_grid(split, {"alpha": [1]})


def test_gen_m_above_classes_uses_all_classes(shared_store):
    """Reference: GEN with M >= C is the sum over all C classes (paper code's [:, -M:])."""
    split = shared_store.split("ood/near/blend")
    logit_rows = refs.logits(shared_store, "ood/near/blend")
    full = get_scorer("gen", M=5).fit(shared_store).score(split)
    for m in (6, 100, 1000):
        got = get_scorer("gen", M=m).fit(shared_store).score(split)
        np.testing.assert_array_equal(got, full)
    probs = sp_softmax(logit_rows, axis=1)
    np.testing.assert_allclose(full, -np.sum((probs * (1 - probs)) ** 0.1, axis=1), rtol=1e-9)
