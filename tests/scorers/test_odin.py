"""ODIN without input perturbation (scorers/methods/odin.py). Reference: the log of Liang et
al. 2018's max_k softmax(l / T)_k with `scipy.special.softmax`; a separate construct/fit/score per
setting for `score_grid`; OpenOOD v1.5's odin.yml for the default grid; scikit-learn
`roc_auc_score` for the sign."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax as sp_softmax

from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

CASES = [{}, {"temperature": 1}, {"temperature": 10.0}]


def ref_odin(logit_rows: np.ndarray, temperature: float) -> np.ndarray:
    """log of Liang et al. 2018 without perturbation: log max_k softmax(l / T)_k."""
    return np.log(sp_softmax(logit_rows / temperature, axis=1).max(axis=1))


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_odin(refs.logits(store, split), params.get("temperature", 1000.0))


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("odin", CASES, reference)


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_default_grid_equals_separate_runs(shared_store, "odin")


def test_custom_grid_equals_separate_runs(make_store):
    kit.assert_custom_grid_equals_separate_runs(make_store, "odin", {"temperature": 5.0},
                                                {"temperature": [1, 2.5, 1000]})


def test_default_grid_matches_openood():
    """Reference: OpenOOD v1.5 configs/postprocessors/odin.yml postprocessor_sweep/args."""
    info = {s["name"]: s for s in list_scorers()}["odin"]
    assert info["grid"] == {"temperature": [1, 10, 100, 1000]}
    assert info["defaults"] == {"temperature": 1000.0}
    assert info["paper"] and "logits" in info["needs"]


@pytest.mark.parametrize(("params", "pattern"), [
    ({"temperature": 0}, r"temperature=0 .*> 0"),
    ({"temperature": True}, r"temperature=True .*> 0"),
])
def test_out_of_range_params(params, pattern):
    """Reference: the documented range (T > 0 finite)."""
    with pytest.raises(ValueError, match=pattern):
        get_scorer("odin", **params)
