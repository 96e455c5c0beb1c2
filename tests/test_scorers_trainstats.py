"""Tests for the training-set-statistics scorers: knn, mds, rmds, she, nnguide, oodl, and the
FAISS wrapper scorers.knn_index.

References (each test's docstring says which one it uses):
- the papers' formulas transcribed independently here with NumPy / SciPy / scikit-learn
  (sklearn NearestNeighbors for KNN, explicit per-class loops with np.linalg.pinv and sklearn
  EmpiricalCovariance for MDS/RMDS, a brute-force full similarity matrix for NNGuide, sklearn
  StandardScaler + OneClassSVM for OODL), never the modules' helpers;
- the base class's refit-per-setting path (a separate construct/fit/score per setting) for
  `score_grid`;
- the exact flat index for the approximate ones (recall@K, scores).

Tolerances: rtol 1e-6 where the scorer computes in float64 (mds, rmds, she, oodl); rtol 1e-5
where it uses FAISS's float32 distances or inner products (knn, nnguide). `score_grid` must
equal the separate runs to rtol 1e-9, atol 1e-12. Every scorer reads in chunks of 97 rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp
from sklearn.covariance import EmpiricalCovariance
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import SGDOneClassSVM
from sklearn.neighbors import NearestNeighbors
from sklearn.preprocessing import StandardScaler
from sklearn.svm import OneClassSVM

from featstore import Store
from featstore.errors import UsageError
from scorers import get_scorer, list_scorers
from scorers.base import expand_grid
from scorers.knn_index import build_index, recall_at_k

CHUNK = 97
FAISS_RTOL = 1e-5
F64_RTOL = 1e-6
EVAL_SPLITS = ["id/test", "ood/near/blend", "ood/far/faint"]
N_TRAIN = 600  # structured_arrays default


# --------------------------------------------------------------------------- helpers
def feats(store: Store, name: str) -> np.ndarray:
    return np.asarray(store.split(name).features, dtype=np.float64)


def logits(store: Store, name: str) -> np.ndarray:
    return np.asarray(store.split(name).logits, dtype=np.float64)


def labels(store: Store, name: str) -> np.ndarray:
    return np.asarray(store.split(name).labels)


def normalize(x: np.ndarray) -> np.ndarray:
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-10)


def fitted(store: Store, name: str, **params):
    scorer = get_scorer(name, **params)
    scorer.chunk_rows = CHUNK
    return scorer.fit(store)


# --------------------------------------------------------------------------- references
def ref_knn(train: np.ndarray, test: np.ndarray, k: int) -> np.ndarray:
    """Sun et al. 2022: -(Euclidean distance of normalized z to its k-th normalized train
    neighbour), sklearn NearestNeighbors (brute force, float64)."""
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(normalize(train))
    dist, _ = nn.kneighbors(normalize(test))
    return -dist[:, k - 1]


def class_means_and_cov(train: np.ndarray, y: np.ndarray):
    """OpenOOD's MDS setup: per-class means; EmpiricalCovariance of class-centered features."""
    classes = np.unique(y)
    means = {}
    centered = []
    for c in classes:
        rows = train[y == c]
        means[c] = rows.mean(axis=0)
        centered.append(rows - means[c])
    cov = EmpiricalCovariance(assume_centered=False).fit(np.concatenate(centered)).covariance_
    return means, cov


def ref_class_maha(train: np.ndarray, y: np.ndarray, test: np.ndarray) -> np.ndarray:
    """(n, C) squared Mahalanobis distances to each class mean, explicit loops, np.linalg.pinv."""
    means, cov = class_means_and_cov(train, y)
    prec = np.linalg.pinv(cov)
    out = np.empty((test.shape[0], len(means)))
    for j, c in enumerate(sorted(means)):
        for i, x in enumerate(test):
            d = x - means[c]
            out[i, j] = d @ prec @ d
    return out


def ref_mds(train, y, test) -> np.ndarray:
    """Lee et al. 2018 (OpenOOD MDS): max_k -(x-mu_k)^T Sigma^+ (x-mu_k)."""
    return (-ref_class_maha(train, y, test)).max(axis=1)


def ref_rmds(train, y, test) -> np.ndarray:
    """Ren et al. 2021 (OpenOOD RMDS): max_k -(MD_k(x) - MD_0(x))."""
    md = ref_class_maha(train, y, test)
    mu0 = train.mean(axis=0)
    prec0 = np.linalg.pinv(np.cov(train, rowvar=False, bias=True))
    md0 = np.array([(x - mu0) @ prec0 @ (x - mu0) for x in test])
    return (-(md - md0[:, None])).max(axis=1)


def ref_she(train, train_logits, y, test, test_logits) -> np.ndarray:
    """Zhang et al. 2023 (OpenOOD SHE, inner_product): x . mean(correct train of pred class)."""
    train_pred = train_logits.argmax(axis=1)
    patterns = {}
    for c in np.unique(y):
        patterns[c] = train[(y == c) & (train_pred == c)].mean(axis=0)
    pred = test_logits.argmax(axis=1)
    return np.array([float(np.dot(x, patterns[p])) for x, p in zip(test, pred, strict=True)])


def ref_nnguide(train, train_logits, test, test_logits, k: int) -> np.ndarray:
    """Park et al. 2023 (OpenOOD NNGuide, whole bank): mean top-k of <z, z_i E_i> times E(x)."""
    bank = normalize(train) * sp_logsumexp(train_logits, axis=1)[:, None]
    sims = normalize(test) @ bank.T
    topk = -np.sort(-sims, axis=1)[:, :k]
    return topk.mean(axis=1) * sp_logsumexp(test_logits, axis=1)


def ref_oodl(train, test, nu: float) -> np.ndarray:
    """OODL (official build_one_class_svm): StandardScaler + OneClassSVM(rbf, gamma='scale')."""
    ss = StandardScaler().fit(train)
    clf = OneClassSVM(kernel="rbf", gamma="scale", nu=nu).fit(ss.transform(train))
    return clf.decision_function(ss.transform(test))


# --------------------------------------------------------------------------- (1) references
def test_knn_matches_sklearn_neighbors(structured_store):
    """Reference: sklearn NearestNeighbors on normalized float64 features (rtol 1e-5: FAISS
    float32 squared distances)."""
    st = structured_store
    train = feats(st, "id/train")
    for k in (1, 50, 200):
        scorer = fitted(st, "knn", K=k)
        assert scorer.bank_size == N_TRAIN
        for name in EVAL_SPLITS:
            got = scorer.score(st.split(name))
            assert got.dtype == np.float64 and got.shape == (st.split(name).num_rows,)
            np.testing.assert_allclose(got, ref_knn(train, feats(st, name), k),
                                       rtol=FAISS_RTOL)


def test_knn_train_duplicates_give_zero_distance_not_nan(structured_store):
    """Scoring the bank itself: K=1 distances are (clipped) 0, never NaN from a negative
    float32 squared distance."""
    st = structured_store
    got = fitted(st, "knn", K=1).score(st.split("id/train"))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, 0.0, atol=1e-3)


def test_mds_matches_loops(structured_store):
    """Reference: explicit per-class loops, sklearn EmpiricalCovariance (1/N), np.linalg.pinv."""
    st = structured_store
    train, y = feats(st, "id/train"), labels(st, "id/train")
    scorer = fitted(st, "mds")
    for name in EVAL_SPLITS:
        np.testing.assert_allclose(scorer.score(st.split(name)),
                                   ref_mds(train, y, feats(st, name)), rtol=F64_RTOL)


def test_rmds_matches_loops(structured_store):
    """Reference: explicit loops for MD_k and MD_0 (np.cov bias=True, i.e. 1/N; np.linalg.pinv);
    OpenOOD's max over all classes of -(MD_k - MD_0)."""
    st = structured_store
    train, y = feats(st, "id/train"), labels(st, "id/train")
    scorer = fitted(st, "rmds")
    for name in EVAL_SPLITS:
        np.testing.assert_allclose(scorer.score(st.split(name)),
                                   ref_rmds(train, y, feats(st, name)), rtol=F64_RTOL)


def test_mds_rmds_fewer_train_rows_than_dims(make_store):
    """N = 40 labelled id/train rows in D = 64 (the covariances have rank < N; the fit takes
    the thin-SVD route, `whitener_from_rows`). Reference: explicit loops with the precisions
    of sklearn EmpiricalCovariance (scipy pinvh, what OpenOOD's MDS/RMDS use) of the
    class-centered and of the raw train features."""
    st = make_store("small", dim=64, n_train=40)
    train, y = feats(st, "id/train"), labels(st, "id/train")
    means, _ = class_means_and_cov(train, y)
    centered = train - np.stack([means[c] for c in y])
    prec = EmpiricalCovariance().fit(centered).precision_
    prec0 = EmpiricalCovariance().fit(train).precision_
    mu0 = train.mean(axis=0)
    mds, rmds = fitted(st, "mds"), fitted(st, "rmds")
    for name in EVAL_SPLITS:
        test = feats(st, name)
        md = np.stack([np.einsum("ij,jk,ik->i", test - means[c], prec, test - means[c])
                       for c in sorted(means)], axis=1)
        md0 = np.einsum("ij,jk,ik->i", test - mu0, prec0, test - mu0)
        np.testing.assert_allclose(mds.score(st.split(name)), -md.min(axis=1), rtol=1e-8)
        np.testing.assert_allclose(rmds.score(st.split(name)), (md0[:, None] - md).max(axis=1),
                                   rtol=1e-8)


@pytest.mark.parametrize(("rows", "rank"), [(30, 30), (30, 12)])
def test_whitener_from_rows_equals_scipy_pinvh(rows: int, rank: int) -> None:
    """scorers.kernels.classstats.whitener_from_rows(r, n) = L with L L^T =
    scipy.linalg.pinvh(r.T @ r / n), for n < D rows of full and of lower rank, to 1e-8; L has
    rank(r) columns."""
    import scipy.linalg

    from scorers.kernels.classstats import whitener_from_rows

    rng = np.random.default_rng(rows + rank)
    r = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, 50))
    want = scipy.linalg.pinvh(r.T @ r / rows)
    got = whitener_from_rows(r, rows)
    assert got.shape == (50, rank)
    np.testing.assert_allclose(got @ got.T, want, rtol=1e-8, atol=1e-8 * np.abs(want).max())


def test_she_matches_loops(structured_store):
    """Reference: per-class means of correctly classified train rows, dot with the predicted
    class's pattern in a Python loop."""
    st = structured_store
    train, y, tl = feats(st, "id/train"), labels(st, "id/train"), logits(st, "id/train")
    scorer = fitted(st, "she")
    for name in EVAL_SPLITS:
        ref = ref_she(train, tl, y, feats(st, name), logits(st, name))
        np.testing.assert_allclose(scorer.score(st.split(name)), ref, rtol=F64_RTOL)


def test_she_falls_back_to_all_rows_of_a_class_without_correct_predictions(make_store):
    """A head whose class 0 is never predicted: its pattern is the mean of all its rows."""
    st0 = make_store("base")
    w, b = st0.head
    b = b.copy()
    b[0] = -1e6  # class 0 never wins the argmax
    splits = {n: {"features": feats(st0, n).astype(np.float32),
                  "labels": labels(st0, n)} for n in ("id/train", "id/test")}
    st = Store.from_arrays(st0.path.parent / "biased", head=(w, b), splits=splits)
    scorer = fitted(st, "she")
    assert list(scorer.fallback_classes) == [0]
    train, y = feats(st, "id/train"), labels(st, "id/train")
    np.testing.assert_allclose(scorer.patterns[0], train[y == 0].mean(axis=0), rtol=1e-12)
    assert np.all(np.isfinite(scorer.score(st.split("id/test"))))


def test_nnguide_matches_bruteforce(structured_store):
    """Reference: the full float64 similarity matrix with the whole bank (alpha=1), sorted top-K
    mean times energy (rtol 1e-5: FAISS float32 inner products)."""
    st = structured_store
    train, tl = feats(st, "id/train"), logits(st, "id/train")
    for k in (1, 10, 100):
        scorer = fitted(st, "nnguide", K=k, alpha=1.0)
        for name in EVAL_SPLITS:
            ref = ref_nnguide(train, tl, feats(st, name), logits(st, name), k)
            np.testing.assert_allclose(scorer.score(st.split(name)), ref, rtol=FAISS_RTOL)


def test_nnguide_alpha_subsample_is_deterministic_and_sized(structured_store):
    """alpha=0.5: ceil(0.5 * 600) = 300 bank rows; equal to the reference on those rows."""
    st = structured_store
    a = fitted(st, "nnguide", K=20, alpha=0.5, seed=3)
    b = fitted(st, "nnguide", K=20, alpha=0.5, seed=3)
    assert a.bank_size == b.bank_size == 300
    split = st.split("id/test")
    np.testing.assert_array_equal(a.score(split), b.score(split))
    rows = np.sort(np.random.default_rng(3).choice(N_TRAIN, size=300, replace=False))
    ref = ref_nnguide(feats(st, "id/train")[rows], logits(st, "id/train")[rows],
                      feats(st, "id/test"), logits(st, "id/test"), 20)
    np.testing.assert_allclose(a.score(split), ref, rtol=FAISS_RTOL)


@pytest.mark.parametrize("nu", [0.001, 0.1, 0.5])
def test_oodl_matches_sklearn(structured_store, nu):
    """Reference: sklearn StandardScaler + OneClassSVM(rbf, gamma='scale', nu) on all train rows
    (max_train >= N)."""
    st = structured_store
    train = feats(st, "id/train")
    scorer = fitted(st, "oodl", nu=nu)
    assert scorer.num_fit_rows == N_TRAIN
    for name in EVAL_SPLITS:
        np.testing.assert_allclose(scorer.score(st.split(name)),
                                   ref_oodl(train, feats(st, name), nu), rtol=F64_RTOL,
                                   atol=1e-9)


def test_oodl_nystroem_matches_sklearn(structured_store):
    """Reference: StandardScaler, Nystroem(rbf, gamma = 1/(D Var)), SGDOneClassSVM, same seed."""
    st = structured_store
    train, test = feats(st, "id/train"), feats(st, "id/test")
    scorer = fitted(st, "oodl", nu=0.1, approx="nystroem", n_components=128, seed=5)
    ss = StandardScaler().fit(train)
    xs = ss.transform(train)
    ny = Nystroem(kernel="rbf", gamma=1.0 / (xs.shape[1] * xs.var()), n_components=128,
                  random_state=5)
    z = ny.fit_transform(xs)
    clf = SGDOneClassSVM(nu=0.1, random_state=5).fit(z)
    ref = clf.decision_function(ny.transform(ss.transform(test)))
    np.testing.assert_allclose(scorer.score(st.split("id/test")), ref, rtol=F64_RTOL, atol=1e-9)


def test_oodl_max_train_subsample(structured_store):
    """max_train=250: 250 rows drawn with the seed; deterministic; equal to the reference on
    those rows (scaler still fitted on every train row)."""
    st = structured_store
    a = fitted(st, "oodl", nu=0.1, max_train=250, seed=1)
    b = fitted(st, "oodl", nu=0.1, max_train=250, seed=1)
    assert a.num_fit_rows == 250
    split = st.split("id/test")
    np.testing.assert_array_equal(a.score(split), b.score(split))
    train = feats(st, "id/train")
    rows = np.sort(np.random.default_rng(1).choice(N_TRAIN, size=250, replace=False))
    ss = StandardScaler().fit(train)
    clf = OneClassSVM(kernel="rbf", gamma="scale", nu=0.1).fit(ss.transform(train[rows]))
    ref = clf.decision_function(ss.transform(feats(st, "id/test")))
    np.testing.assert_allclose(a.score(split), ref, rtol=F64_RTOL, atol=1e-9)


# --------------------------------------------------------------------------- (2) sign
SIGN_CASES = [
    ("knn", {}),
    ("knn", {"index": "hnsw"}),
    ("mds", {}),
    ("rmds", {}),
    ("she", {}),
    ("nnguide", {"alpha": 1.0}),
    ("nnguide", {"alpha": 0.5, "K": 50}),
    ("oodl", {}),
    ("oodl", {"nu": 0.1, "approx": "nystroem", "n_components": 200}),
]


@pytest.mark.parametrize(("name", "params"), SIGN_CASES)
def test_sign_id_above_far_ood(structured_store, name, params):
    """Higher = more ID: mean id/test score above mean ood/far/faint score."""
    st = structured_store
    scorer = fitted(st, name, **params)
    id_scores = scorer.score(st.split("id/test"))
    ood_scores = scorer.score(st.split("ood/far/faint"))
    assert np.all(np.isfinite(id_scores)) and np.all(np.isfinite(ood_scores))
    assert id_scores.mean() > ood_scores.mean()


# --------------------------------------------------------------------------- (3) score_grid
GRID_CASES = [
    ("knn", {}, {"K": [1, 5, 50, 200, 600]}),
    ("knn", {}, {"K": [5, 50], "bank_fraction": [1.0, 0.5]}),
    ("knn", {"index": "hnsw"}, {"K": [10, 50, 300]}),   # two HNSW beam widths (ef 256)
    ("knn", {"index": "ivf_flat"}, {"K": [10, 100]}),
    ("nnguide", {"alpha": 1.0}, {"K": [1, 10, 100, 600]}),
    ("nnguide", {}, {"K": [5, 50], "alpha": [1.0, 0.25]}),
    ("oodl", {}, {"nu": [0.01, 0.1, 0.5]}),
    ("oodl", {"approx": "nystroem", "n_components": 64}, {"nu": [0.05, 0.2]}),
]


@pytest.mark.parametrize(("name", "params", "grid"), GRID_CASES)
def test_score_grid_equals_separate_runs(structured_store, name, params, grid):
    """Reference: a separate construct/fit/score per setting (what the base class does)."""
    st = structured_store
    base = {**params}
    if name == "nnguide" and "alpha" not in params:
        base["alpha"] = 1.0
    scorer = fitted(st, name, **base)
    for split_name in ("id/test", "ood/far/faint"):
        split = st.split(split_name)
        results = scorer.score_grid(split, grid)
        assert [s for s, _ in results] == expand_grid(grid)
        for setting, scores in results:
            separate = fitted(st, name, **{**base, **setting}).score(split)
            np.testing.assert_allclose(scores, separate, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{name} {setting} on {split_name}")


def test_default_grids_run(structured_store):
    """The default grids are valid on a 600-row bank for knn (K up to 600 needs a cap: the
    default grid includes K=1000 > 600, which is refused naming K and the bank size)."""
    st = structured_store
    knn = fitted(st, "knn")
    with pytest.raises(ValueError, match=r"K=1000.*600"):
        knn.score_grid(st.split("id/test"))
    oodl = fitted(st, "oodl")
    out = oodl.score_grid(st.split("id/test"))
    assert [s["nu"] for s, _ in out] == [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]


# --------------------------------------------------------------------------- (4) K too large
@pytest.mark.parametrize(("name", "params", "k", "bank"), [
    ("knn", {}, 601, 600),
    ("knn", {"bank_fraction": 0.5}, 301, 300),
    ("nnguide", {"alpha": 1.0}, 601, 600),
    ("nnguide", {}, 100, 6),          # OpenOOD's defaults: alpha 0.01 of 600 rows = 6 rows
])
def test_k_larger_than_bank_is_refused(structured_store, name, params, k, bank):
    st = structured_store
    scorer = get_scorer(name, K=k, **params)
    with pytest.raises(ValueError, match=rf"K={k}\b.*\b{bank} rows"):
        scorer.fit(st)
    ok = fitted(st, name, **{**params, "K": bank})
    with pytest.raises(ValueError, match=rf"K={bank + 1}\b.*valid: 1 <= K <= {bank}"):
        ok.score_grid(st.split("id/test"), {"K": [1, bank + 1]})


@pytest.mark.parametrize(("name", "params", "needle"), [
    ("knn", {"K": 0}, "K=0"),
    ("knn", {"K": 2.5}, "K=2.5"),
    ("knn", {"bank_fraction": 0.0}, "bank_fraction=0.0"),
    ("knn", {"bank_fraction": 1.5}, "bank_fraction=1.5"),
    ("knn", {"index": "annoy"}, "index='annoy'"),
    ("nnguide", {"alpha": 0}, "alpha=0"),
    ("nnguide", {"index": "lsh"}, "index='lsh'"),
    ("oodl", {"nu": 0.0}, "nu=0.0"),
    ("oodl", {"nu": 1.2}, "nu=1.2"),
    ("oodl", {"max_train": 0}, "max_train=0"),
    ("oodl", {"approx": "rff"}, "approx='rff'"),
])
def test_invalid_params_name_value_and_range(name, params, needle):
    with pytest.raises(UsageError, match=rf"{needle}.*(must|not one of)"):
        get_scorer(name, **params)


# --------------------------------------------------------------------------- (5) approx
@pytest.mark.parametrize("kind", ["ivf_flat", "hnsw"])
def test_approximate_index_recall_and_scores(structured_store, kind):
    """recall@50 >= 0.9 against the exact flat index on the fixture's test/OOD queries; the
    approximate K-th distance is never below the exact one and close to it."""
    st = structured_store
    bank = normalize(feats(st, "id/train")).astype(np.float32)
    exact = build_index(bank, kind="exact")
    approx = build_index(bank, kind=kind)
    exact_scorer = fitted(st, "knn", K=50)
    approx_scorer = fitted(st, "knn", K=50, index=kind)
    for name in EVAL_SPLITS:
        q = normalize(feats(st, name)).astype(np.float32)
        _, ei = exact.search(q, 50)
        _, ai = approx.search(q, 50)
        assert recall_at_k(ai, ei) >= 0.9, (kind, name)
        e = exact_scorer.score(st.split(name))
        a = approx_scorer.score(st.split(name))
        assert np.all(a <= e + 1e-5)
        assert np.abs(a - e).mean() < 0.01 * np.abs(e).mean()


def test_ivf_pq_builds_and_ranks(structured_store):
    """ivf_pq: builds deterministically with the seed and keeps the sign."""
    st = structured_store
    a = fitted(st, "knn", K=50, index="ivf_pq")
    b = fitted(st, "knn", K=50, index="ivf_pq")
    split = st.split("id/test")
    np.testing.assert_array_equal(a.score(split), b.score(split))
    assert a.score(split).mean() > a.score(st.split("ood/far/faint")).mean()


def test_bank_fraction_half_is_deterministic_and_uses_half(structured_store):
    """bank_fraction=0.5: 300 bank rows, same scores twice, equal to brute force on the rows
    drawn by default_rng(seed), different from the full bank."""
    st = structured_store
    a = fitted(st, "knn", K=50, bank_fraction=0.5)
    b = fitted(st, "knn", K=50, bank_fraction=0.5)
    assert a.bank_size == b.bank_size == 300 and a.index.ntotal == 300
    split = st.split("id/test")
    sa = a.score(split)
    np.testing.assert_array_equal(sa, b.score(split))
    rows = np.sort(np.random.default_rng(0).choice(N_TRAIN, size=300, replace=False))
    np.testing.assert_allclose(sa, ref_knn(feats(st, "id/train")[rows], feats(st, "id/test"), 50),
                               rtol=FAISS_RTOL)
    assert not np.allclose(sa, fitted(st, "knn", K=50).score(split))
    c = fitted(st, "knn", K=50, bank_fraction=0.5, seed=1)
    assert not np.array_equal(sa, c.score(split))


# --------------------------------------------------------------------------- knn_index
def test_recall_at_k_helper():
    exact = np.array([[0, 1, 2], [3, 4, 5]])
    assert recall_at_k(exact, exact) == 1.0
    assert recall_at_k(np.array([[2, 1, 9], [-1, -1, -1]]), exact) == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="same shape"):
        recall_at_k(exact[:, :2], exact)


@pytest.mark.parametrize("kind", ["exact", "ivf_flat", "hnsw"])
@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_index_search_is_chunked_consistently(kind, metric):
    """Searching in chunks of 7 queries returns what one big chunk returns."""
    rng = np.random.default_rng(0)
    bank = rng.normal(size=(500, 16)).astype(np.float32)
    queries = rng.normal(size=(40, 16)).astype(np.float32)
    small = build_index(bank, metric=metric, kind=kind, query_chunk=7)
    big = build_index(bank, metric=metric, kind=kind, query_chunk=1000)
    ds, is_ = small.search(queries, 10)
    db, ib = big.search(queries, 10)
    np.testing.assert_allclose(ds, db, rtol=1e-5, atol=1e-5)
    assert recall_at_k(is_, ib) >= 0.99
    order = np.diff(ds, axis=1)
    assert np.all(order >= -1e-5) if metric == "l2" else np.all(order <= 1e-5)


def test_index_refuses_bad_k_and_kind():
    bank = np.eye(4, dtype=np.float32)
    with pytest.raises(UsageError, match="kind 'kdtree'"):
        build_index(bank, kind="kdtree")
    idx = build_index(bank)
    with pytest.raises(UsageError, match=r"k=5 must satisfy 1 <= k <= 4"):
        idx.search(bank, 5)


# --------------------------------------------------------------------------- registry
def test_registry_entries():
    entries = {e["name"]: e for e in list_scorers()}
    expected_grids = {
        "knn": {"K": [50, 100, 200, 500, 1000]},
        "mds": {},
        "rmds": {},
        "she": {},
        "nnguide": {"K": [100], "alpha": [0.01]},
        "oodl": {"nu": [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]},
    }
    for name, grid in expected_grids.items():
        entry = entries[name]
        assert entry["grid"] == grid
        assert "fit:id/train" in entry["needs"] and "features" in entry["needs"]
        assert entry["paper"]
    assert entries["knn"]["defaults"]["K"] == 50
    assert entries["nnguide"]["defaults"] == {"K": 100, "alpha": 0.01, "seed": 0,
                                              "index": "exact"}
    assert "knn_index" not in entries


@pytest.mark.parametrize("rank", [40, 25])
def test_whitener_equals_scipy_pinvh(rank: int) -> None:
    """scorers.kernels.classstats.whitener(cov) = L with L L^T = scipy.linalg.pinvh(cov) (the
    reference EmpiricalCovariance uses) on a full-rank and a rank-deficient covariance, to 1e-8."""
    import scipy.linalg

    from scorers.kernels.classstats import whitener

    rng = np.random.default_rng(rank)
    x = rng.standard_normal((200, rank)) @ rng.standard_normal((rank, 40))
    cov = x.T @ x / 200
    want = scipy.linalg.pinvh(cov)
    got = whitener(cov)
    assert got.shape == (40, rank)
    np.testing.assert_allclose(got @ got.T, want, rtol=1e-8, atol=1e-8 * np.abs(want).max())


@pytest.mark.parametrize("name,kind", [("knn", "ivf_pq"), ("knn", "hnsw"),
                                       ("nnguide", "ivf_flat")])
def test_approximate_index_reports_its_recall(structured_store, name, kind):
    """An approximate index reports recall@K at fit (issue 8): the figure equals recall_at_k
    of the built index's ids against sklearn NearestNeighbors' exact ids (the reference) on
    the first 256 id/val rows; an exact index reports no recall."""
    st = structured_store
    params = {"K": 20, "index": kind} if name == "knn" else {"K": 5, "alpha": 0.5,
                                                              "index": kind}
    scorer = fitted(st, name, **params)
    diag = scorer.diagnostics
    assert diag["recall_split"] == "id/val" and diag["recall_queries"] == 200
    assert diag["recall_k"] == params["K"]
    q = normalize(feats(st, "id/val")).astype(np.float32)
    _, approx_ids = scorer.index.search(q, params["K"])
    bank = np.ascontiguousarray(faiss_bank(scorer))
    if name == "knn":
        exact_ids = NearestNeighbors(n_neighbors=params["K"]).fit(bank).kneighbors(q)[1]
    else:  # inner-product search: the K largest q . b
        exact_ids = np.argsort(-(q.astype(np.float64) @ bank.T.astype(np.float64)),
                               axis=1, kind="stable")[:, :params["K"]]
    assert diag["recall_at_k"] == pytest.approx(recall_at_k(approx_ids, exact_ids), abs=0.01)
    assert 0.0 < diag["recall_at_k"] <= 1.0
    assert "recall_at_k" not in fitted(st, name, **{**params, "index": "exact"}).diagnostics


def faiss_bank(scorer) -> np.ndarray:
    """The bank vectors, read back from an exact index built by the same scorer class."""
    exact = type(scorer)(**{**scorer.params, "index": "exact"}).fit(scorer.store)
    return exact.index._cpu_index.reconstruct_n(0, exact.index.ntotal)
