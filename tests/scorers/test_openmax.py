"""OpenMax (scorers/methods/openmax.py, scorers/kernels/weibull.py). References: (1) libMR's
FitHigh / W_score against scipy.stats.weibull_min (fit with floc=0: SciPy's own solution of
the likelihood equations; cdf); (2) OpenOOD's `openmax_postprocessor.py` at 3c35632
transcribed (`compute_train_score_and_mavs_and_dists` on the correctly classified id/train
rows, `fit_weibull` with libMR replaced by scipy's Weibull fit of the tail shifted as libMR's
FitHigh shifts it, `openmax` / `compute_openmax_prob` per row, conf = -P(unknown)), compared
as P(unknown) = 1 / (1 + exp(score)), rtol 1e-5 (the likelihood is flat in the shape, k ~
1e4-1e5: two exact solvers of its equation agree to ~1e-6, and so do the w-scores); (3)
pytorch-ood 0.4.0's own `OpenMax` (installed) on float64 logits of a split where every class
is some row's argmax (its distances are computed only for those classes), to 2e-4 absolute in
log-odds: its Weibull fit is scipy's exponweib.fit simplex search, whose shape agrees to
~3e-7."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_ood.detector import OpenMax as PeerOpenMax
from scipy.stats import weibull_min

from featstore.errors import FeatstoreError, UsageError
from scorers import get_scorer
from scorers.kernels.weibull import fit_high
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def test_fit_high_is_scipys_weibull_mle():
    rng = np.random.default_rng(1)
    for spread in (0.1, 1.0, 30.0):
        tail = np.sort(np.abs(rng.normal(3.0, spread, 300)))[-20:]
        model = fit_high(tail)
        shifted = tail + 10000.0 - tail.min()
        shape, _, scale = weibull_min.fit(shifted, floc=0)
        np.testing.assert_allclose(model.shape, shape, rtol=2e-6)
        np.testing.assert_allclose(model.scale, scale, rtol=1e-9)
        loglik = weibull_min(model.shape, scale=model.scale).logpdf(shifted).sum()
        assert loglik >= weibull_min(shape, scale=scale).logpdf(shifted).sum() - 1e-8
        d = np.linspace(tail.min() - 1, tail.max() + 1, 50)
        np.testing.assert_allclose(model.cdf(d),
                                   weibull_min.cdf(d + 10000.0 - tail.min(), shape,
                                                   scale=scale), atol=1e-5)


def test_fit_high_refuses_a_tail_without_spread():
    with pytest.raises(FeatstoreError, match="at least two distinct values"):
        fit_high(np.array([2.0, 2.0, 2.0]), "class 3")


def openood_openmax(store, split, tailsize, alpha, rank_weights="code") -> np.ndarray:
    """P(unknown) of every row of `split`, OpenOOD's computation (see the module doc)."""
    train, y = refs.logits(store, "id/train"), refs.labels(store, "id/train")
    c = train.shape[1]
    weibull = {}
    for k in range(c):
        rows = train[(y == k) & (train.argmax(axis=1) == k)]
        mav = rows.mean(axis=0)
        dists = np.array([np.linalg.norm(mav - r) for r in rows])
        tail = np.sort(dists)[-tailsize:]
        shape, _, scale = weibull_min.fit(tail + 10000.0 - tail.min(), floc=0)
        weibull[k] = (mav, tail.min(), shape, scale)
    out = []
    for score in refs.logits(store, split):
        ranked = score.argsort()[::-1][:alpha]
        weights = [((alpha + 1 - i) if rank_weights == "code" else (alpha - i)) / alpha
                   for i in range(1, alpha + 1)]
        omega = np.zeros(c)
        omega[ranked] = weights
        modified, unknown = [], []
        for k in range(c):
            mav, small, shape, scale = weibull[k]
            wscore = weibull_min.cdf(np.linalg.norm(score - mav) + 10000.0 - small, shape,
                                     scale=scale)
            modified.append(score[k] * (1 - wscore * omega[k]))
            unknown.append(score[k] - modified[-1])
        channel_unknown = np.exp(np.sum(unknown))
        out.append(channel_unknown / (np.sum(np.exp(modified)) + channel_unknown))
    return np.array(out)


@pytest.mark.parametrize("params", [{}, {"tailsize": 40, "alpha": 5, "rank_weights": "paper"}])
def test_openmax_matches_openood(shared_store, params):
    full = {**get_scorer("openmax").params, **params}
    scorer = kit.fitted("openmax", shared_store, **params)
    for name in kit.EVAL_SPLITS:
        got = 1.0 / (1.0 + np.exp(scorer.score(shared_store.split(name))))
        want = openood_openmax(shared_store, name, full["tailsize"], full["alpha"],
                               full["rank_weights"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-15)


def test_openmax_matches_pytorch_ood(shared_store):
    train = refs.logits(shared_store, "id/train").astype(np.float64)
    peer = PeerOpenMax(None, tailsize=25, alpha=2, euclid_weight=0.5).fit_logits(
        torch.from_numpy(train), torch.from_numpy(refs.labels(shared_store, "id/train")))
    scorer = kit.fitted("openmax", shared_store, tailsize=25, alpha=2, euclid_weight=0.5,
                        fit_rows="all")
    test = refs.logits(shared_store, "id/test").astype(np.float64)
    assert len(np.unique(test.argmax(axis=1))) == test.shape[1]
    p_unknown = peer.predict_logits(torch.from_numpy(test)).numpy()
    np.testing.assert_allclose(scorer.score(shared_store.split("id/test")),
                               np.log1p(-p_unknown) - np.log(p_unknown), atol=2e-4)


def test_openmax_sign(shared_store):
    kit.assert_id_above_far_ood_auroc(shared_store, "openmax")


@pytest.mark.parametrize("params, words", [
    ({"tailsize": 1}, "tailsize must be an integer >= 2"),
    ({"alpha": 0}, "alpha must be an integer >= 1"),
    ({"euclid_weight": 1.5}, r"euclid_weight must be a number in \[0, 1\]"),
    ({"fit_rows": "some"}, "fit_rows='some' is not one of correct, all"),
])
def test_openmax_bad_parameters(params, words):
    with pytest.raises(UsageError, match=words):
        get_scorer("openmax", **params)


def test_openmax_alpha_above_classes_refused(shared_store):
    with pytest.raises(UsageError, match="alpha=6 exceeds the 5 classes"):
        get_scorer("openmax", alpha=6).fit(shared_store)


def test_openmax_class_without_weibull_gets_w_score_one(make_store):
    """A class with two fit rows (equidistant from their mean: no likelihood maximum) has no
    Weibull model: its w-score is 1 (pytorch-ood's treatment of a class it has no model of),
    listed in diagnostics; the reference is the openmax formula by hand with w = 1."""
    st = make_store("two", n_train=10)           # 2 rows per class, both correct or not
    scorer = get_scorer("openmax", alpha=1, fit_rows="all").fit(st)
    assert scorer.diagnostics["classes_without_weibull"] == [0, 1, 2, 3, 4]
    v = refs.logits(st, "id/test").astype(np.float64)
    top = v.argmax(axis=1)
    revised = v.copy()
    revised[np.arange(len(v)), top] = 0.0            # v_k (1 - 1 * 1)
    want = np.log(np.exp(revised).sum(axis=1)) - v.max(axis=1)
    np.testing.assert_allclose(scorer.score(st.split("id/test")), want, rtol=1e-12)
