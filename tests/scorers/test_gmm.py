"""GMM (scorers/methods/gmm.py). References: (1) pytorch-ood 0.4.0's own `GMM` detector
(installed; `fit_features` / `predict_features`, its outlier score negated) on the same
arrays; (2) the mixture log-likelihood by scipy.stats.multivariate_normal.logpdf per class
(np.cov(bias=True) + reg I) and scipy.special.logsumexp with weights N_k / N. Both float64:
rtol 1e-9. Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import GMM as PeerGMM
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from featstore.errors import FeatstoreError, UsageError
from scorers import get_scorer
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def scipy_mixture(train, y, test, reg) -> np.ndarray:
    parts = []
    for c in np.unique(y):
        rows = train[y == c].astype(np.float64)
        cov = np.cov(rows, rowvar=False, bias=True) + reg * np.eye(rows.shape[1])
        parts.append(np.log(len(rows) / len(train))
                     + multivariate_normal(rows.mean(axis=0), cov).logpdf(test))
    return logsumexp(np.stack(parts, axis=1), axis=1)


@pytest.mark.parametrize("reg", [1e-6, 1e-2])
def test_gmm_matches_pytorch_ood_and_scipy(shared_store, reg):
    st = shared_store
    train, y = refs.feats(st, "id/train"), refs.labels(st, "id/train")
    peer = PeerGMM(None, reg=reg).fit_features(torch.from_numpy(train.astype(np.float32)),
                                               torch.from_numpy(y))
    scorer = kit.fitted("gmm", st, reg=reg)
    for name in kit.EVAL_SPLITS:
        test = refs.feats(st, name)
        got = scorer.score(st.split(name))
        want = -peer.predict_features(torch.from_numpy(test.astype(np.float32))).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-9)
        np.testing.assert_allclose(got, scipy_mixture(train, y, test, reg), rtol=1e-9)


def test_gmm_sign(shared_store):
    kit.assert_id_above_far_ood_auroc(shared_store, "gmm")


def test_gmm_singular_class_names_class_and_reg(make_store):
    """4 rows per class in D = 32: reg = 0 leaves each class covariance singular."""
    st = make_store("few", n_train=20)
    with pytest.raises(FeatstoreError, match=r"class 0 of split 'id/train' plus reg=0.0 I is "
                                             r"not positive definite; pass a larger reg"):
        get_scorer("gmm", reg=0.0).fit(st)


@pytest.mark.parametrize("value", [-1.0, float("inf"), "x", True])
def test_gmm_bad_reg(value):
    with pytest.raises(UsageError, match="reg must be a finite number >= 0"):
        get_scorer("gmm", reg=value)


def test_gmm_refuses_covariances_over_half_the_memory(shared_store, monkeypatch):
    """5 classes x 32 x 32 float64 covariances and factors: 81,920 bytes; a machine of
    100,000 bytes gives half, 50,000: refused, naming the need and `mds`."""
    from scorers.methods import gmm

    monkeypatch.setattr(gmm, "_memory_bytes", lambda: 100_000)
    with pytest.raises(FeatstoreError, match=r"5 class covariances of 32 x 32 need 0\.0 GiB, "
                                             r"over half of this machine's memory; use `mds`"):
        get_scorer("gmm").fit(shared_store)
