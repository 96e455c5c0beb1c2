"""MSP (scorers/methods/msp.py). Reference: the log of Hendrycks & Gimpel 2017's formula,
log max_k softmax(l)_k (the scorer's documented log-space form), transcribed here with
`scipy.special.softmax` (never the module's helpers);
scikit-learn `roc_auc_score` for the sign."""

from __future__ import annotations

import numpy as np
from scipy.special import softmax as sp_softmax

from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

CASES = [{}]


def ref_msp(logit_rows: np.ndarray) -> np.ndarray:
    """log of Hendrycks & Gimpel 2017's max_k softmax(l)_k."""
    return np.log(sp_softmax(logit_rows, axis=1).max(axis=1))


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_msp(refs.logits(store, split))


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("msp", CASES, reference)


def test_registry_entry():
    """Reference: OpenOOD v1.5 configs/postprocessors/msp.yml (no parameters, no sweep)."""
    info = {s["name"]: s for s in list_scorers()}["msp"]
    assert info["grid"] == {} and info["defaults"] == {}
    assert info["paper"] and "logits" in info["needs"]
