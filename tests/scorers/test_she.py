"""SHE (scorers/methods/she.py). References: Zhang et al. 2023 / OpenOOD's inner product with
the mean of the correctly classified train rows of the predicted class, as per-class means and
a Python loop (rtol 1e-6); sign by the means of id/test and ood/far/faint. Chunks of 97 rows."""

from __future__ import annotations

import numpy as np

from featstore import Store
from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit

F64_RTOL = 1e-6


def ref_she(train, train_logits, y, test, test_logits) -> np.ndarray:
    """Zhang et al. 2023 (OpenOOD SHE, inner_product): x . mean(correct train of pred class)."""
    train_pred = train_logits.argmax(axis=1)
    patterns = {}
    for c in np.unique(y):
        patterns[c] = train[(y == c) & (train_pred == c)].mean(axis=0)
    pred = test_logits.argmax(axis=1)
    return np.array([float(np.dot(x, patterns[p])) for x, p in zip(test, pred, strict=True)])


def test_she_matches_loops(shared_store):
    st = shared_store
    train, y, tl = refs.feats(st, "id/train"), refs.labels(st, "id/train"), refs.logits(st,
                                                                                        "id/train")
    scorer = kit.fitted("she", st)
    for name in kit.EVAL_SPLITS:
        ref = ref_she(train, tl, y, refs.feats(st, name), refs.logits(st, name))
        np.testing.assert_allclose(scorer.score(st.split(name)), ref, rtol=F64_RTOL)


def test_she_falls_back_to_all_rows_of_a_class_without_correct_predictions(make_store):
    """A head whose class 0 is never predicted: its pattern is the mean of all its rows."""
    st0 = make_store("base")
    w, b = st0.head
    b = b.copy()
    b[0] = -1e6  # class 0 never wins the argmax
    splits = {n: {"features": refs.feats(st0, n).astype(np.float32),
                  "labels": refs.labels(st0, n)} for n in ("id/train", "id/test")}
    st = Store.from_arrays(st0.path.parent / "biased", head=(w, b), splits=splits)
    scorer = kit.fitted("she", st)
    assert list(scorer.fallback_classes) == [0]
    train, y = refs.feats(st, "id/train"), refs.labels(st, "id/train")
    np.testing.assert_allclose(scorer.patterns[0], train[y == 0].mean(axis=0), rtol=1e-12)
    assert np.all(np.isfinite(scorer.score(st.split("id/test"))))


def test_sign_id_above_far_ood(shared_store):
    scorer = kit.fitted("she", shared_store)
    id_scores = scorer.score(shared_store.split("id/test"))
    ood_scores = scorer.score(shared_store.split("ood/far/faint"))
    assert np.all(np.isfinite(id_scores)) and np.all(np.isfinite(ood_scores))
    assert id_scores.mean() > ood_scores.mean()


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["she"]
    assert entry["grid"] == {}
    assert "fit:id/train" in entry["needs"] and "features" in entry["needs"]
    assert entry["paper"]
