"""RMDS (scorers/methods/rmds.py). References: Ren et al. 2021 / OpenOOD's max_k -(MD_k -
MD_0) with explicit loops for MD_k and MD_0 (np.cov bias=True, i.e. 1/N; np.linalg.pinv;
rtol 1e-6); scikit-learn EmpiricalCovariance precisions (scipy pinvh) when N < D (1e-8); sign
by the means of id/test and ood/far/faint. Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
from sklearn.covariance import EmpiricalCovariance

from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit
from tests.helpers.references import class_distances, ref_class_maha, small_store_parts

F64_RTOL = 1e-6


def ref_rmds(train, y, test) -> np.ndarray:
    """Ren et al. 2021 (OpenOOD RMDS): max_k -(MD_k(x) - MD_0(x))."""
    md = ref_class_maha(train, y, test)
    mu0 = train.mean(axis=0)
    prec0 = np.linalg.pinv(np.cov(train, rowvar=False, bias=True))
    md0 = np.array([(x - mu0) @ prec0 @ (x - mu0) for x in test])
    return (-(md - md0[:, None])).max(axis=1)


def test_rmds_matches_loops(shared_store):
    st = shared_store
    train, y = refs.feats(st, "id/train"), refs.labels(st, "id/train")
    scorer = kit.fitted("rmds", st)
    for name in kit.EVAL_SPLITS:
        np.testing.assert_allclose(scorer.score(st.split(name)),
                                   ref_rmds(train, y, refs.feats(st, name)), rtol=F64_RTOL)


def test_rmds_fewer_train_rows_than_dims(make_store):
    """N = 40 labelled id/train rows in D = 64. Reference: explicit loops with the precisions
    of sklearn EmpiricalCovariance (scipy pinvh, what OpenOOD's RMDS uses) of the
    class-centered and of the raw train features, to 1e-8."""
    st, train, means, prec = small_store_parts(make_store)
    prec0 = EmpiricalCovariance().fit(train).precision_
    mu0 = train.mean(axis=0)
    rmds = kit.fitted("rmds", st)
    for name in kit.EVAL_SPLITS:
        test = refs.feats(st, name)
        md = class_distances(test, means, prec)
        md0 = np.einsum("ij,jk,ik->i", test - mu0, prec0, test - mu0)
        np.testing.assert_allclose(rmds.score(st.split(name)), (md0[:, None] - md).max(axis=1),
                                   rtol=1e-8)


def test_sign_id_above_far_ood(shared_store):
    scorer = kit.fitted("rmds", shared_store)
    id_scores = scorer.score(shared_store.split("id/test"))
    ood_scores = scorer.score(shared_store.split("ood/far/faint"))
    assert np.all(np.isfinite(id_scores)) and np.all(np.isfinite(ood_scores))
    assert id_scores.mean() > ood_scores.mean()


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["rmds"]
    assert entry["grid"] == {}
    assert "fit:id/train" in entry["needs"] and "features" in entry["needs"]
    assert entry["paper"]
