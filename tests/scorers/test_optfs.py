"""OptFS (scorers/methods/optfs.py). References: (1) a NumPy transcription of the formula in
float64 with full-matrix masks; (2) the authors' own computation, `detector/ours.py` of
Qinyu-Allen-Zhao/OptFSOOD at c09a85e (`setup` with np.quantile / np.arange on the float32
features, `get_lc_fv_list`, `postprocess` in torch; "vanilla" = their default, "energy" =
`use_ood_score='energy'`), run as they run it (float32 features), compared at rtol 1e-5 and
AUROC within 0.01; (3) score_grid against separate fits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def ref_optfs(store, split: str, variant: str = "vanilla") -> np.ndarray:
    """NumPy float64: theta from I_k on id/train, shaped features, vanilla / energy."""
    w, b = refs.head(store)
    xt, pt = refs.feats(store, "id/train"), refs.logits(store, "id/train").argmax(axis=1)
    lo, hi = np.quantile(xt, 1e-3), np.quantile(xt, 1 - 1e-3)
    width = (hi - lo) / 100.0
    edges = np.arange(lo, hi, width)
    contrib = np.array([np.mean(np.sum(((xt >= e) & (xt < e + width)) * w[pt] * xt, axis=1))
                        for e in edges])
    theta = contrib / np.linalg.norm(contrib) * 1000
    x, lg = refs.feats(store, split), refs.logits(store, split)
    shaped = sum(((x >= e) & (x < e + width)) * x * t for e, t in zip(edges, theta, strict=True))
    if variant == "vanilla":
        return np.sum(w[lg.argmax(axis=1)] * shaped, axis=1)
    return refs.energy(shaped @ w.T + b)


def authors_optfs(store, splits, variant: str) -> list[np.ndarray]:
    """OptFSOOD@c09a85e detector/ours.py: setup (float32 NumPy, as extracted) and
    postprocess (torch float32)."""
    w_np = np.asarray(store.head[0], dtype=np.float32)
    feature = np.asarray(store.split("id/train").features, dtype=np.float32)
    pred = np.asarray(store.split("id/train").logits).argmax(axis=1)
    left_b, right_b = np.quantile(feature, 1e-3), np.quantile(feature, 1 - 1e-3)
    width = (right_b - left_b) / 100.0
    left_boundary = np.arange(left_b, right_b, width)
    lc = w_np[pred] * feature
    lc_fv_list = np.array([np.mean(np.sum(((feature >= e) & (feature < e + width)) * lc, axis=1))
                           for e in left_boundary])
    theta = torch.from_numpy((lc_fv_list / np.linalg.norm(lc_fv_list, 2) * 1000)[None, :])
    w = torch.from_numpy(w_np)
    bias = torch.from_numpy(np.asarray(store.head[1], dtype=np.float32))
    out = []
    for split in splits:
        feat = torch.from_numpy(np.asarray(store.split(split).features, dtype=np.float32))
        output = torch.from_numpy(np.asarray(store.split(split).logits, dtype=np.float32))
        _, p = torch.max(torch.softmax(output, dim=1), dim=1)
        feat_p = torch.zeros_like(feat)
        for i, x in enumerate(left_boundary):
            mask = (feat >= x) & (feat < x + width)
            feat_p += mask * feat * theta[0][i]
        if variant == "energy":
            conf = torch.logsumexp(feat_p @ w.T + bias, dim=1)
        else:
            conf = torch.sum(w[p] * feat_p, dim=1)
        out.append(conf.double().numpy())
    return out


@pytest.mark.parametrize("variant", ["vanilla", "energy"])
def test_matches_numpy_formula(shared_store, variant):
    kit.assert_chunked_matches_reference(shared_store, "optfs", {"variant": variant}, ref_optfs)


@pytest.mark.parametrize("variant", ["vanilla", "energy"])
def test_matches_authors_code(shared_store, variant):
    scorer = kit.fitted("optfs", shared_store, variant=variant)
    splits = ["id/test", "ood/near/blend", "ood/far/faint"]
    want = authors_optfs(shared_store, splits, variant)
    got = [scorer.score(shared_store.split(s)) for s in splits]
    for s, g, w in zip(splits, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4 * np.abs(w).max(), err_msg=s)
    for k in (1, 2):
        y = np.r_[np.ones(len(got[0])), np.zeros(len(got[k]))]
        assert abs(roc_auc_score(y, np.r_[got[0], got[k]])
                   - roc_auc_score(y, np.r_[want[0], want[k]])) < 0.01


def test_grid_sign_and_catalogue(shared_store):
    kit.assert_grid_equals_separate(shared_store, "optfs", {})
    kit.assert_id_mean_above(shared_store, "optfs")
    row = {r["name"]: r for r in list_scorers()}["optfs"]
    assert row["defaults"] == {"variant": "vanilla"}
    assert row["grid"] == {"variant": ["vanilla", "energy"]}
    with pytest.raises(ValueError, match=r"variant='v' is not one of vanilla, energy"):
        get_scorer("optfs", variant="v")


def test_constant_features_refused(make_store):
    """Every id/train entry equal: no bins, a one-line error naming the split."""
    from featstore import Store
    from featstore.errors import FeatstoreError

    st = make_store("c", num_classes=3, dim=4, n_train=20, n_val=5, n_test=5, n_ood=5)
    path = st.path.parent / "const"
    w, b = st.head
    Store.from_arrays(path, head=(w, b), splits={
        "id/train": {"features": np.ones((20, 4), np.float32)},
        "id/test": {"features": np.ones((5, 4), np.float32)}})
    with pytest.raises(FeatstoreError, match=r"quantiles of split 'id/train' are equal"):
        get_scorer("optfs").fit(Store.open(path))
