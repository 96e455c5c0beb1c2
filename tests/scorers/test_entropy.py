"""Negative predictive entropy (scorers/methods/entropy.py). Reference: -H(softmax(l)) with
`scipy.stats.entropy` (natural log) of `scipy.special.softmax`; scikit-learn `roc_auc_score`
for the sign."""

from __future__ import annotations

import numpy as np
from conftest import (
    assert_id_above_far_ood_auroc,
    assert_matches_reference,
    float16_c12_store,
    logits,
)
from scipy.special import softmax as sp_softmax
from scipy.stats import entropy as sp_entropy

from scorers import list_scorers

CASES = [{}]


def ref_entropy(logit_rows: np.ndarray) -> np.ndarray:
    """-H(softmax(l)) via scipy.stats.entropy (natural log)."""
    return -sp_entropy(sp_softmax(logit_rows, axis=1), axis=1)


def reference(params, store, scorer, split) -> np.ndarray:
    return ref_entropy(logits(store, split))


def test_matches_paper_formula_structured_store(shared_store):
    """Every split of the structured store (C=5), default chunks."""
    assert_matches_reference(shared_store, "entropy", CASES, reference, chunk_rows=8192)


def test_matches_paper_formula_chunked_float16(make_store):
    """A 12-class float16 store scored in 37-row chunks (uneven last chunk)."""
    assert_matches_reference(float16_c12_store(make_store), "entropy", CASES, reference, 37)


def test_sign_id_scores_higher(shared_store):
    assert_id_above_far_ood_auroc(shared_store, "entropy")


def test_registry_entry():
    info = {s["name"]: s for s in list_scorers()}["entropy"]
    assert info["grid"] == {} and info["defaults"] == {}
    assert info["paper"] and "logits" in info["needs"]
