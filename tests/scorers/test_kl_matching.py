"""KL matching (scorers/methods/kl_matching.py). Reference: Hendrycks et al. 2022's templates
(mean softmax of the id/val rows predicted as each class) and -min_k KL(p || d_k), written
here as OpenOOD's per-row loop (sum where p != 0 of p log(p / q)) with
`scipy.special.softmax`; scikit-learn `roc_auc_score` for the sign."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax as sp_softmax

from featstore import Store
from featstore.errors import FeatstoreError
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit
from tests.helpers.stores import store_without_id_val

CASES = [{}]


def ref_kl_templates(val_logits: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Hendrycks et al. 2022: d_k = mean softmax of id/val rows predicted as k (k predicted)."""
    probs = sp_softmax(val_logits, axis=1)
    pred = np.argmax(probs, axis=1)
    classes = [k for k in range(probs.shape[1]) if np.any(pred == k)]
    return np.array(classes), [probs[pred == k].mean(axis=0) for k in classes]


def ref_kl_matching(logit_rows: np.ndarray, templates: list[np.ndarray]) -> np.ndarray:
    """-min_k KL(p || d_k), KL written as in OpenOOD: sum where p != 0 of p log(p / q)."""
    probs = sp_softmax(logit_rows, axis=1)
    out = np.empty(len(probs))
    for i, p in enumerate(probs):
        kls = []
        for q in templates:
            with np.errstate(divide="ignore", invalid="ignore"):
                kls.append(np.sum(np.where(p != 0, p * np.log(p / q), 0.0)))
        out[i] = -min(kls)
    return out


def reference(params, store, scorer, split) -> np.ndarray:
    _, templates = ref_kl_templates(refs.logits(store, "id/val"))
    return ref_kl_matching(refs.logits(store, split), templates)


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("kl_matching", CASES, reference)


def test_registry_entry():
    """Reference: OpenOOD v1.5 configs/postprocessors/klm.yml (no sweep)."""
    info = {s["name"]: s for s in list_scorers()}["kl_matching"]
    assert info["grid"] == {} and info["defaults"] == {}
    assert "fit:id/val" in info["needs"]
    assert info["paper"] and "logits" in info["needs"]


def test_fit_without_id_val_names_it(tmp_path):
    """Reference: DESIGN §5 needs vocabulary (`fit:id/val`)."""
    with pytest.raises(FeatstoreError, match="id/val"):
        get_scorer("kl_matching").fit(store_without_id_val(tmp_path / "s"))


def test_kl_matching_skips_never_predicted_classes(tmp_path):
    """Templates computed here by a per-class loop; a class never predicted on id/val has no
    template and is left out of the minimum (documented)."""
    rng = np.random.default_rng(2)
    c, d = 5, 4
    val_logits = rng.normal(size=(200, c))
    val_logits[:, 4] -= 10.0  # class 4 is never the argmax on id/val
    test_logits = rng.normal(size=(80, c)) * 2.0
    splits = {
        "id/val": {"features": np.zeros((200, d)), "logits": val_logits.astype(np.float32),
                   "labels": np.arange(200) % c},
        "id/test": {"features": np.zeros((80, d)), "logits": test_logits.astype(np.float32),
                    "labels": np.arange(80) % c},
    }
    store = Store.from_arrays(tmp_path / "s", head=(np.zeros((c, d), np.float32),
                                                    np.zeros(c, np.float32)), splits=splits)
    scorer = get_scorer("kl_matching")
    scorer.chunk_rows = 30
    scorer.fit(store)
    classes, templates = ref_kl_templates(refs.logits(store, "id/val"))
    assert list(classes) == [0, 1, 2, 3]
    np.testing.assert_array_equal(scorer.template_classes, classes)
    np.testing.assert_allclose(scorer.templates, np.stack(templates), rtol=1e-12)
    got = scorer.score(store.split("id/test"))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref_kl_matching(refs.logits(store, "id/test"), templates),
                               rtol=1e-6, atol=1e-12)
