"""Energy score (scorers/methods/energy.py). Reference: Liu et al. 2020's -E(x; T) =
T logsumexp(l / T) with `scipy.special.logsumexp`; a separate construct/fit/score per setting
for `score_grid`; OpenOOD v1.5's ebo.yml for the default grid; scikit-learn `roc_auc_score`
for the sign."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp

from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

CASES = [{}, {"temperature": 0.5}, {"temperature": 1000}]


def ref_energy(logit_rows: np.ndarray, temperature: float) -> np.ndarray:
    """Liu et al. 2020: -E(x; T) = T log sum_k exp(l_k / T)."""
    return temperature * sp_logsumexp(logit_rows / temperature, axis=1)


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_energy(refs.logits(store, split), params.get("temperature", 1.0))


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("energy", CASES, reference)


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_default_grid_equals_separate_runs(shared_store, "energy")


def test_custom_grid_equals_separate_runs(make_store):
    kit.assert_custom_grid_equals_separate_runs(make_store, "energy", {},
                                                {"temperature": [0.25, 1.0, 3, 1e4]})


def test_default_grid_matches_openood():
    """Reference: OpenOOD v1.5 configs/postprocessors/ebo.yml postprocessor_sweep/args."""
    info = {s["name"]: s for s in list_scorers()}["energy"]
    assert info["grid"] == {"temperature": [1, 10, 100, 1000]}
    assert info["defaults"] == {"temperature": 1.0}
    assert info["paper"] and "logits" in info["needs"]


@pytest.mark.parametrize(("params", "pattern"), [
    ({"temperature": 0}, r"temperature=0 .*> 0"),
    ({"temperature": -1.5}, r"temperature=-1.5 .*> 0"),
    ({"temperature": float("inf")}, r"temperature=inf .*finite"),
    ({"temperature": float("nan")}, r"temperature=nan .*> 0"),
    ({"temperature": "hot"}, r"temperature='hot' .*> 0"),
])
def test_out_of_range_params(params, pattern):
    """Reference: the documented range (T > 0 finite); the ValueError names the parameter,
    the value and the range."""
    with pytest.raises(ValueError, match=pattern):
        get_scorer("energy", **params)


def test_out_of_range_grid_values(shared_store):
    """Reference: Scorer.score_grid validates every setting before scoring."""
    scorer = get_scorer("energy").fit(shared_store)
    with pytest.raises(ValueError, match=r"temperature=0 .*> 0"):
        scorer.score_grid(shared_store.split("id/test"), {"temperature": [1, 0]})
