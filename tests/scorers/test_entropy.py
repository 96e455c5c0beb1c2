"""Negative predictive entropy (scorers/methods/entropy.py). Reference: -H(softmax(l)) with
`scipy.stats.entropy` (natural log) of `scipy.special.softmax`; scikit-learn `roc_auc_score`
for the sign."""

from __future__ import annotations

import numpy as np
from scipy.special import softmax as sp_softmax
from scipy.stats import entropy as sp_entropy

from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

CASES = [{}]


def ref_entropy(logit_rows: np.ndarray) -> np.ndarray:
    """-H(softmax(l)) via scipy.stats.entropy (natural log)."""
    return -sp_entropy(sp_softmax(logit_rows, axis=1), axis=1)


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_entropy(refs.logits(store, split))


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("entropy", CASES, reference)


def test_registry_entry():
    info = {s["name"]: s for s in list_scorers()}["entropy"]
    assert info["grid"] == {} and info["defaults"] == {}
    assert info["paper"] and "logits" in info["needs"]
