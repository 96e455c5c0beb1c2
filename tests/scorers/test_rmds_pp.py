"""RMDS++ (scorers/methods/rmds_pp.py). References: (1) the authors' code transcribed,
mueller-mp/maha-norm `NINCO/detection_methods.py` at 53de550,
`evaluate_Relative_Mahalanobis_norm`: normalized rows, class-wise precision of the centered
rows and the global precision of the rows about their mean (sklearn EmpiricalCovariance,
assume_centered=True), score = (-min_k MD_k) - (-MD_0); (2) explicit loops with
np.linalg.pinv of np.cov(bias=True) on the normalized rows. Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
from sklearn.covariance import EmpiricalCovariance

from tests.helpers import references as refs
from tests.helpers import scoring as kit


def unit(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def rel_maha_norm_code(train, y, test) -> np.ndarray:
    train, test = unit(train), unit(test)
    means, centered = [], []
    for c in np.unique(y):
        fs = train[y == c]
        means.append(fs.mean(axis=0))
        centered.extend(fs - means[-1])
    prec = EmpiricalCovariance(assume_centered=True).fit(np.array(centered)).precision_
    mean = np.array(means)
    m0 = train.mean(axis=0)
    prec0 = EmpiricalCovariance(assume_centered=True).fit(train - m0).precision_
    classwise = -np.array([(((f - mean) @ prec) * (f - mean)).sum(axis=-1).min() for f in test])
    glob = -np.array([((f - m0) @ prec0) @ (f - m0) for f in test])
    return classwise - glob


def test_rmds_pp_matches_authors_code_and_loops(shared_store):
    st = shared_store
    train, y = refs.feats(st, "id/train"), refs.labels(st, "id/train")
    scorer = kit.fitted("rmds_pp", st)
    for name in kit.EVAL_SPLITS:
        test = refs.feats(st, name)
        got = scorer.score(st.split(name))
        np.testing.assert_allclose(got, rel_maha_norm_code(train, y, test), rtol=1e-8)
        tr, te = unit(train), unit(test)
        md = refs.ref_class_maha(tr, y, te)
        prec0 = np.linalg.pinv(np.cov(tr, rowvar=False, bias=True))
        md0 = np.array([(x - tr.mean(0)) @ prec0 @ (x - tr.mean(0)) for x in te])
        np.testing.assert_allclose(got, (md0[:, None] - md).max(axis=1), rtol=1e-6)


def test_rmds_pp_sign(shared_store):
    kit.assert_id_above_far_ood_auroc(shared_store, "rmds_pp")
