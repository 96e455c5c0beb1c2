"""Relation (scorers/methods/relation.py). Reference: OpenOOD's `RelationPostprocessor`
(`openood/postprocessors/relation_postprocessor.py` at 3c35632: `normalize`, `kernel`,
`get_relation`) transcribed to NumPy float64 over the whole N_test x N_train kernel at once:
f = h / sqrt(sum h^2 + 1e-10), p = softmax(l), rel = max(f f_t^T, 0) * (p p_t^T), score =
sum over |rel| > 0.03 of sign(rel) |rel|^pow. featstore's products are float32 (as OpenOOD's
torch matmuls): rtol 1e-5. Blocked paths: 97-row chunks of scored rows, and a bank of 600
rows met in chunks of 128 (BANK_CHUNK patched)."""

from __future__ import annotations

import numpy as np
import pytest

from featstore.errors import UsageError
from scorers import get_scorer
from scorers.methods import relation
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def normalize(feat: np.ndarray) -> np.ndarray:
    feat = feat.astype(np.float64)
    return feat / np.sqrt((feat ** 2).sum(-1) + 1e-10).reshape(-1, 1)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def openood_relation(store, split, pow_) -> np.ndarray:
    feat_t, prob_t = normalize(refs.feats(store, "id/train")), softmax(refs.logits(store,
                                                                                  "id/train"))
    feat, prob = normalize(refs.feats(store, split)), softmax(refs.logits(store, split))
    rel = np.clip(feat @ feat_t.T, 0.0, None) * (prob @ prob_t.T)
    rel_mask = (np.abs(rel) > 0.03) * rel
    return (np.sign(rel_mask) * np.abs(rel_mask) ** pow_).sum(-1)


def test_relation_grid_matches_openood_in_bank_chunks(shared_store, monkeypatch):
    monkeypatch.setattr(relation, "BANK_CHUNK", 128)
    scorer = kit.fitted("relation", shared_store)
    for name in kit.EVAL_SPLITS:
        for setting, scores in scorer.score_grid(shared_store.split(name)):
            want = openood_relation(shared_store, name, setting["pow"])
            np.testing.assert_allclose(scores, want, rtol=1e-5, err_msg=f"{name} {setting}")


def test_relation_default_and_sign(shared_store):
    scorer = kit.fitted("relation", shared_store)
    np.testing.assert_allclose(scorer.score(shared_store.split("id/test")),
                               openood_relation(shared_store, "id/test", 1), rtol=1e-5)
    kit.assert_id_above_far_ood_auroc(shared_store, "relation")


@pytest.mark.parametrize("value", [0, -1, float("nan"), "2"])
def test_relation_bad_pow(value):
    with pytest.raises(UsageError, match="pow must be a number > 0"):
        get_scorer("relation", pow=value)
