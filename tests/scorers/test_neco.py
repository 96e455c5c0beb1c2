"""NECO (scorers/methods/neco.py). Reference: the authors' `neco()` transcribed (the function
as the NECO code and the Mahalanobis++ authors' copy, mueller-mp/maha-norm
`NINCO/detection_methods.py` at 53de550, compute it): sklearn StandardScaler fitted on
id/train, PCA(D) fitted on the scaled id/train rows, score = ||PCA.transform(z)[:, :dim]|| /
||z||, times the max logit where `maxlogit`; with scaler=False z is the raw feature (the
paper's ||P h|| / ||h||, PCA still centering by the train mean). float64 inputs to sklearn:
rtol 1e-8. Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from featstore.errors import UsageError
from scorers import get_scorer
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def authors_neco(store, split, dim, maxlogit, scaler) -> np.ndarray:
    train = refs.feats(store, "id/train").astype(np.float64)
    test = refs.feats(store, split).astype(np.float64)
    if scaler:
        ss = StandardScaler()
        train, test = ss.fit_transform(train), ss.transform(test)
    pca = PCA(train.shape[1]).fit(train)
    reduced = pca.transform(test)[:, :dim]
    score = np.linalg.norm(reduced, axis=1) / np.linalg.norm(test, axis=1)
    return score * refs.logits(store, split).max(axis=-1) if maxlogit else score


@pytest.mark.parametrize("params", [
    {"dim": 10},
    {"dim": 4, "maxlogit": False},
    {"dim": 7, "scaler": False, "maxlogit": False},
])
def test_neco_matches_authors_code(shared_store, params):
    full = {**get_scorer("neco").params, **params}
    scorer = kit.fitted("neco", shared_store, **params)
    for name in kit.EVAL_SPLITS:
        want = authors_neco(shared_store, name, full["dim"], full["maxlogit"], full["scaler"])
        np.testing.assert_allclose(scorer.score(shared_store.split(name)), want, rtol=1e-8)


def test_neco_grid_every_dim(shared_store):
    scorer = kit.fitted("neco", shared_store, dim=10)
    grid = {"dim": [1, 5, 31], "maxlogit": [True, False]}
    for setting, scores in scorer.score_grid(shared_store.split("ood/near/blend"), grid):
        want = authors_neco(shared_store, "ood/near/blend", setting["dim"],
                            setting["maxlogit"], True)
        np.testing.assert_allclose(scores, want, rtol=1e-8, err_msg=str(setting))


def test_neco_given_dim_above_range_refused(shared_store):
    with pytest.raises(UsageError, match=r"dim=32 is out of range \(1 <= dim < min\(D, N\)"):
        get_scorer("neco", dim=32).fit(shared_store)


def test_neco_default_dim_clamped_and_sign(shared_store):
    """dim = 100 on D = 32 is clamped (31, listed as adjusted); id/test above far OOD by
    scikit-learn's roc_auc_score."""
    with pytest.warns(Warning, match="dim"):
        scorer = get_scorer("neco").fit(shared_store)
    assert scorer.params["dim"] == 31
    id_s = scorer.score(shared_store.split("id/test"))
    ood_s = scorer.score(shared_store.split("ood/far/faint"))
    y = np.r_[np.ones(len(id_s)), np.zeros(len(ood_s))]
    assert roc_auc_score(y, np.r_[id_s, ood_s]) > 0.5


@pytest.mark.parametrize("params, words", [
    ({"dim": 0}, "dim must be an integer >= 1"),
    ({"maxlogit": "yes"}, "maxlogit must be true or false"),
])
def test_neco_bad_parameters(params, words):
    with pytest.raises(UsageError, match=words):
        get_scorer("neco", **params)
