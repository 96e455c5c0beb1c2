"""CARef (scorers/methods/caref.py). References: (1) a NumPy transcription of the formula,
-||m_c - x||_1 / ||x||_1 with m_c the mean of the id/train rows predicted as c; (2) the
authors' own computation, `ood_methods/CARef.py` and `utils/get_stat.py` of LingAndZero/
CADRef at 121f74b, transcribed line for line in torch (float32, as they run it), compared at
rtol 1e-5 and AUROC within 0.01."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def predicted_means(store) -> np.ndarray:
    x, lg = refs.feats(store, "id/train"), refs.logits(store, "id/train")
    pred = lg.argmax(axis=1)
    return np.stack([x[pred == k].mean(axis=0) for k in range(lg.shape[1])])


def ref_caref(store, split: str) -> np.ndarray:
    """NumPy: -||m_c - x||_1 / ||x||_1."""
    x, lg = refs.feats(store, split), refs.logits(store, split)
    m = predicted_means(store)[lg.argmax(axis=1)]
    return -np.abs(m - x).sum(axis=1) / np.abs(x).sum(axis=1)


def authors_caref(store, split: str) -> np.ndarray:
    """LingAndZero/CADRef@121f74b: get_features groups train features by output.argmax(1);
    CARef.get_mean_feature stacks features[i].mean(dim=0); CARef.eval scores
    -(tm - feature).norm(p=1) / feature.norm(p=1) with class_ids from argmax(softmax)."""
    tx = torch.from_numpy(np.asarray(store.split("id/train").features, dtype=np.float32))
    tl = torch.from_numpy(np.asarray(store.split("id/train").logits, dtype=np.float32))
    groups = [[] for _ in range(tl.shape[1])]
    for i, p in enumerate(tl.argmax(1).tolist()):
        groups[p].append(tx[i])
    train_mean = torch.stack([torch.stack(g).mean(dim=0) for g in groups])
    feature = torch.from_numpy(np.asarray(store.split(split).features, dtype=np.float32))
    logit = torch.from_numpy(np.asarray(store.split(split).logits, dtype=np.float32))
    class_ids = torch.argmax(torch.softmax(logit, dim=1), dim=1).numpy()
    tm = train_mean[class_ids]
    score = (tm - feature).norm(dim=1, p=1) / feature.norm(dim=1, p=1)
    return -score.numpy().astype(np.float64)


def test_matches_numpy_formula(shared_store):
    kit.assert_chunked_matches_reference(shared_store, "caref", {}, ref_caref)


def test_matches_authors_code(shared_store):
    scorer = kit.fitted("caref", shared_store)
    ids = scorer.score(shared_store.split("id/test"))
    for split in kit.EVAL_SPLITS:
        got, want = scorer.score(shared_store.split(split)), authors_caref(shared_store, split)
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=split)
    ood = scorer.score(shared_store.split("ood/near/blend"))
    ood_ref = authors_caref(shared_store, "ood/near/blend")
    y = np.r_[np.ones(len(ids)), np.zeros(len(ood))]
    a = roc_auc_score(y, np.r_[ids, ood])
    b = roc_auc_score(y, np.r_[authors_caref(shared_store, "id/test"), ood_ref])
    assert abs(a - b) < 0.01


def test_sign_and_catalogue(shared_store):
    kit.assert_id_mean_above(shared_store, "caref")
    row = {r["name"]: r for r in list_scorers()}["caref"]
    assert row["defaults"] == {} and row["paper_meta"]["code"].endswith("LingAndZero/CADRef")


def test_class_without_predicted_rows_takes_train_mean(tmp_path):
    """Class 2 is never predicted on id/train: its reference is the id/train mean."""
    from featstore import Store

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6)).astype(np.float32) + 3
    lg = np.zeros((40, 3), np.float32)
    lg[np.arange(40), np.arange(40) % 2] = 1.0
    t = rng.normal(size=(7, 6)).astype(np.float32)
    tl = np.zeros((7, 3), np.float32)
    tl[:, 2] = 1.0
    st = Store.from_arrays(tmp_path / "s", head=None, splits={
        "id/train": {"features": x, "logits": lg}, "id/test": {"features": t, "logits": tl}})
    scorer = kit.fitted("caref", st)
    assert scorer.diagnostics["classes_without_predicted_rows"] == [2]
    t64 = t.astype(np.float64)
    want = -np.abs(x.astype(np.float64).mean(axis=0) - t64).sum(axis=1) / np.abs(t64).sum(axis=1)
    np.testing.assert_allclose(scorer.score(st.split("id/test")), want, rtol=1e-12)
