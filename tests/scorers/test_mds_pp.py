"""Mahalanobis++ (scorers/methods/mds_pp.py). References: (1) the authors' code transcribed,
mueller-mp/maha-norm `NINCO/detection_methods.py` at 53de550, `evaluate_Mahalanobis_norm`:
x / np.linalg.norm(x), per-class means, sklearn EmpiricalCovariance(assume_centered=True) of
the class-centered rows, -min_k (x - mu_k) P (x - mu_k); (2) the paper's formula as explicit
loops with np.linalg.pinv on the normalized rows (`ref_class_maha`). Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
from sklearn.covariance import EmpiricalCovariance

from tests.helpers import references as refs
from tests.helpers import scoring as kit


def unit(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def maha_norm_code(train, y, test) -> np.ndarray:
    """`evaluate_Mahalanobis_norm` of maha-norm at 53de550 (its loop over the classes)."""
    train, test = unit(train), unit(test)
    means, centered = [], []
    for c in np.unique(y):
        fs = train[y == c]
        means.append(fs.mean(axis=0))
        centered.extend(fs - means[-1])
    prec = EmpiricalCovariance(assume_centered=True).fit(np.array(centered)).precision_
    mean = np.array(means)
    return -np.array([(((f - mean) @ prec) * (f - mean)).sum(axis=-1).min() for f in test])


def test_mds_pp_matches_authors_code_and_paper_loops(shared_store):
    st = shared_store
    train, y = refs.feats(st, "id/train"), refs.labels(st, "id/train")
    exact = kit.fitted("mds_pp", st, precision="float64")
    fast = kit.fitted("mds_pp", st)
    for name in kit.EVAL_SPLITS:
        test = refs.feats(st, name)
        want = maha_norm_code(train, y, test)
        np.testing.assert_allclose(exact.score(st.split(name)), want, rtol=1e-8)
        np.testing.assert_allclose(fast.score(st.split(name)), want, rtol=1e-5)
        loops = -refs.ref_class_maha(unit(train), y, unit(test)).min(axis=1)
        np.testing.assert_allclose(exact.score(st.split(name)), loops, rtol=1e-6)


def test_mds_pp_differs_from_mds_and_keeps_the_sign(shared_store):
    """The normalization changes the numbers (not an alias of mds); id/test above far OOD by
    scikit-learn's roc_auc_score."""
    pp = kit.fitted("mds_pp", shared_store).score(shared_store.split("id/test"))
    plain = kit.fitted("mds", shared_store).score(shared_store.split("id/test"))
    assert not np.allclose(pp, plain)
    kit.assert_id_above_far_ood_auroc(shared_store, "mds_pp")
