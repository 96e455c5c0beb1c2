"""OODL (scorers/methods/oodl.py). References: scikit-learn StandardScaler + OneClassSVM(rbf,
gamma='scale', nu) as the official build_one_class_svm (rtol 1e-6); StandardScaler +
Nystroem + SGDOneClassSVM with the same seed for the approximation; a separate
construct/fit/score per setting for `score_grid` (rtol 1e-9). Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import SGDOneClassSVM
from sklearn.preprocessing import StandardScaler
from sklearn.svm import OneClassSVM

from featstore.errors import FeatstoreError, UsageError
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit
from tests.helpers.scoring import assert_grid_cases
from tests.helpers.views import view_store

F64_RTOL = 1e-6


def ref_oodl(train, test, nu: float) -> np.ndarray:
    """OODL (official build_one_class_svm): StandardScaler + OneClassSVM(rbf, gamma='scale')."""
    ss = StandardScaler().fit(train)
    clf = OneClassSVM(kernel="rbf", gamma="scale", nu=nu).fit(ss.transform(train))
    return clf.decision_function(ss.transform(test))


@pytest.mark.parametrize("nu", [0.001, 0.1, 0.5])
def test_oodl_matches_sklearn(shared_store, nu):
    """All train rows (max_train >= N)."""
    st = shared_store
    train = refs.feats(st, "id/train")
    scorer = kit.fitted("oodl", st, nu=nu)
    assert scorer.num_fit_rows == kit.N_TRAIN
    for name in kit.EVAL_SPLITS:
        np.testing.assert_allclose(scorer.score(st.split(name)),
                                   ref_oodl(train, refs.feats(st, name), nu), rtol=F64_RTOL,
                                   atol=1e-9)


def test_oodl_nystroem_matches_sklearn(shared_store):
    """Reference: StandardScaler, Nystroem(rbf, gamma = 1/(D Var)), SGDOneClassSVM, same seed."""
    st = shared_store
    train, test = refs.feats(st, "id/train"), refs.feats(st, "id/test")
    scorer = kit.fitted("oodl", st, nu=0.1, approx="nystroem", n_components=128, seed=5)
    ss = StandardScaler().fit(train)
    xs = ss.transform(train)
    ny = Nystroem(kernel="rbf", gamma=1.0 / (xs.shape[1] * xs.var()), n_components=128,
                  random_state=5)
    z = ny.fit_transform(xs)
    clf = SGDOneClassSVM(nu=0.1, random_state=5).fit(z)
    ref = clf.decision_function(ny.transform(ss.transform(test)))
    np.testing.assert_allclose(scorer.score(st.split("id/test")), ref, rtol=F64_RTOL, atol=1e-9)


def test_oodl_max_train_subsample(shared_store):
    """max_train=250: 250 rows drawn with the seed; deterministic; equal to the reference on
    those rows (scaler still fitted on every train row)."""
    st = shared_store
    a = kit.fitted("oodl", st, nu=0.1, max_train=250, seed=1)
    b = kit.fitted("oodl", st, nu=0.1, max_train=250, seed=1)
    assert a.num_fit_rows == 250
    split = st.split("id/test")
    np.testing.assert_array_equal(a.score(split), b.score(split))
    train = refs.feats(st, "id/train")
    rows = np.sort(np.random.default_rng(1).choice(kit.N_TRAIN, size=250, replace=False))
    ss = StandardScaler().fit(train)
    clf = OneClassSVM(kernel="rbf", gamma="scale", nu=0.1).fit(ss.transform(train[rows]))
    ref = clf.decision_function(ss.transform(refs.feats(st, "id/test")))
    np.testing.assert_allclose(a.score(split), ref, rtol=F64_RTOL, atol=1e-9)


@pytest.mark.parametrize("params", [
    {}, {"nu": 0.1, "approx": "nystroem", "n_components": 200}], ids=["exact", "nystroem"])
def test_sign_id_above_far_ood(shared_store, params):
    scorer = kit.fitted("oodl", shared_store, **params)
    id_scores = scorer.score(shared_store.split("id/test"))
    ood_scores = scorer.score(shared_store.split("ood/far/faint"))
    assert np.all(np.isfinite(id_scores)) and np.all(np.isfinite(ood_scores))
    assert id_scores.mean() > ood_scores.mean()


@pytest.mark.parametrize(("params", "grid"), [
    ({}, {"nu": [0.01, 0.1, 0.5]}),
    ({"approx": "nystroem", "n_components": 64}, {"nu": [0.05, 0.2]}),
])
def test_score_grid_equals_separate_runs(shared_store, params, grid):
    assert_grid_cases(shared_store, "oodl", params, grid)


def test_fit_with_the_grid_fits_every_announced_nu_on_one_gram(shared_store):
    """fit(store, grid) fits the models of the grid's nu (same preparation) at fit, so
    score_grid fits none; reference: the scores of a plain fit + score_grid, bit for bit
    (scores never depend on the announced grid). A setting with another max_train is not
    fitted at fit (another preparation)."""
    grid = {"nu": [0.01, 0.1, 0.5]}
    split = shared_store.split("id/test")
    told = get_scorer("oodl")
    told.chunk_rows = kit.CHUNK  # the blocks of kit.fitted: the same BLAS calls
    told.fit(shared_store, grid)
    assert sorted(told.prep.models) == [0.001, 0.01, 0.1, 0.5]
    plain = kit.fitted("oodl", shared_store)
    assert sorted(plain.prep.models) == [0.001]
    for (s1, a), (s2, b) in zip(told.score_grid(split, grid), plain.score_grid(split, grid),
                                strict=True):
        assert s1 == s2 and np.array_equal(a, b)
    other = get_scorer("oodl").fit(shared_store, {"nu": [0.1], "max_train": [50]})
    assert sorted(other.prep.models) == [0.001]


def test_default_grid_runs(shared_store):
    oodl = kit.fitted("oodl", shared_store)
    out = oodl.score_grid(shared_store.split("id/test"))
    assert [s["nu"] for s, _ in out] == [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]


@pytest.mark.parametrize(("params", "needle"), [
    ({"nu": 0.0}, "nu=0.0"),
    ({"nu": 1.2}, "nu=1.2"),
    ({"max_train": 0}, "max_train=0"),
    ({"approx": "rff"}, "approx='rff'"),
])
def test_invalid_params_name_value_and_range(params, needle):
    with pytest.raises(UsageError, match=rf"{needle}.*(must|not one of)"):
        get_scorer("oodl", **params)


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["oodl"]
    assert entry["grid"] == {"nu": [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]}
    assert "fit:id/train" in entry["needs"] and "features" in entry["needs"]
    assert entry["paper"]


def test_oodl_on_an_early_layer_matches_sklearn(tmp_path):
    """`layer` reads the `--feature-layers` view layer_features/<layer> (OODL's early layer,
    FACETS' hyperparameter): sklearn's StandardScaler + OneClassSVM(rbf, gamma="scale") on that
    view's id/train rows, decision_function on the scored split's view (the OODL code's
    recipe)."""
    st, _ = view_store(tmp_path / "v")
    view = "layer_features/l1"
    x = np.asarray(st.split("id/train").extra(view), dtype=np.float64)
    scaler = StandardScaler().fit(x)
    svm = OneClassSVM(kernel="rbf", gamma="scale", nu=0.1).fit(scaler.transform(x))
    got = get_scorer("oodl", layer="l1", nu=0.1).fit(st)
    for name in ("id/test", "ood/far/x"):
        rows = np.asarray(st.split(name).extra(view), dtype=np.float64)
        want = svm.decision_function(scaler.transform(rows))
        np.testing.assert_allclose(got.score(st.split(name)), want, rtol=1e-9,
                                   atol=1e-9 * np.abs(want).max())
    with pytest.raises(FeatstoreError, match="no 'layer_features' view of layer 'l7'"):
        get_scorer("oodl", layer="l7").fit(st)
