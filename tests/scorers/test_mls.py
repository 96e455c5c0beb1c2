"""MLS / MaxLogit (scorers/methods/mls.py). Reference: Hendrycks et al. 2022's formula,
max_k l_k, in NumPy on the stored logits; scikit-learn `roc_auc_score` for the sign."""

from __future__ import annotations

import numpy as np

from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

CASES = [{}]


def ref_mls(logit_rows: np.ndarray) -> np.ndarray:
    """Hendrycks et al. 2022: max_k l_k."""
    return logit_rows.max(axis=1)


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_mls(refs.logits(store, split))


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("mls", CASES, reference)


def test_registry_entry():
    """Reference: OpenOOD v1.5 configs/postprocessors/mls.yml (no parameters, no sweep)."""
    info = {s["name"]: s for s in list_scorers()}["mls"]
    assert info["grid"] == {} and info["defaults"] == {}
    assert info["paper"] and "logits" in info["needs"]
