"""MSP (scorers/methods/msp.py). Reference: Hendrycks & Gimpel 2017's formula, max_k
softmax(l)_k, transcribed here with `scipy.special.softmax` (never the module's helpers);
scikit-learn `roc_auc_score` for the sign."""

from __future__ import annotations

import numpy as np
from conftest import (
    assert_id_above_far_ood_auroc,
    assert_matches_reference,
    float16_c12_store,
    logits,
)
from scipy.special import softmax as sp_softmax

from scorers import list_scorers

CASES = [{}]


def ref_msp(logit_rows: np.ndarray) -> np.ndarray:
    """Hendrycks & Gimpel 2017: max_k softmax(l)_k."""
    return sp_softmax(logit_rows, axis=1).max(axis=1)


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_msp(logits(store, split))


def test_matches_paper_formula_structured_store(shared_store):
    """Every split of the structured store (C=5), default chunks."""
    assert_matches_reference(shared_store, "msp", CASES, reference, chunk_rows=8192)


def test_matches_paper_formula_chunked_float16(make_store):
    """A 12-class float16 store scored in 37-row chunks (uneven last chunk)."""
    assert_matches_reference(float16_c12_store(make_store), "msp", CASES, reference, 37)


def test_sign_id_scores_higher(shared_store):
    assert_id_above_far_ood_auroc(shared_store, "msp")


def test_registry_entry():
    """Reference: OpenOOD v1.5 configs/postprocessors/msp.yml (no parameters, no sweep)."""
    info = {s["name"]: s for s in list_scorers()}["msp"]
    assert info["grid"] == {} and info["defaults"] == {}
    assert info["paper"] and "logits" in info["needs"]
