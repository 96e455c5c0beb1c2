"""Recall calibration of the approximate FAISS indexes (scorers.knn_index `recall_target`,
issue 19). Reference for every recall: scikit-learn NearestNeighbors(algorithm="brute")
exact neighbour ids on the same float32 arrays, computed here independently of FAISS.
Data: a seeded Gaussian mixture (40 classes, D = 32, 3,000 bank rows), calibration queries
and held-out queries drawn from the same mixture."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from featstore.errors import UsageError
from scorers import get_scorer
from scorers.knn_index import (
    build_index,
    calibrate_width,
    query_recalls,
    recall_at_k,
    recall_lower_bound,
)
from tests.helpers import references as refs
from tests.helpers import scoring as kit

K = 20
TARGET = 0.95


def mixture(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bank 3000, calibration queries 200, held-out queries 300), float32, 40 classes."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, 32)) * 1.5

    def draw(n: int) -> np.ndarray:
        return (centres[rng.integers(0, 40, n)] + rng.normal(size=(n, 32))).astype(np.float32)

    return draw(3000), draw(200), draw(300)


def sk_ids(bank: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    return NearestNeighbors(n_neighbors=k, algorithm="brute").fit(bank).kneighbors(queries)[1]


@pytest.fixture(scope="module")
def data():
    return mixture()


@pytest.mark.parametrize("kind", ["ivf_flat", "hnsw"])
def test_calibrated_index_reaches_the_target_on_held_out_queries(data, kind):
    """The recorded recall is the calibration queries' mean recall against sklearn's exact
    ids (>= target, as its lower bound is); on 300 held-out queries the recall is >= the
    target too."""
    bank, calib, held = data
    index = build_index(bank, kind=kind, recall_queries=calib, recall_k=K,
                        recall_target=TARGET)
    width = "ef_search" if kind == "hnsw" else "nprobe"
    assert index.options["recall_target"] == TARGET and index.options["recall_k"] == K
    assert index.recall >= TARGET
    assert index.recall == pytest.approx(recall_at_k(index.search(calib, K)[1],
                                                     sk_ids(bank, calib)), abs=1e-9)
    assert recall_at_k(index.search(held, K)[1], sk_ids(bank, held)) >= TARGET
    assert index.options[width] >= (K if kind == "hnsw" else 1)


def test_ivf_calibration_picks_the_smallest_nprobe(data):
    """IVF recall cannot fall as nprobe grows (a superset of lists is scanned), so the chosen
    nprobe is the smallest whose 95% lower bound (mean - 1.645 sd / sqrt(n) of the
    per-query recalls against sklearn's ids) reaches the target: at the chosen nprobe the
    bound is >= the target, one list fewer it is below; the fixed default nprobe differs."""
    bank, calib, _ = data
    index = build_index(bank, kind="ivf_flat", recall_queries=calib, recall_k=K,
                        recall_target=TARGET)
    nprobe = index.options["nprobe"]
    assert 1 < nprobe < index.options["nlist"]
    exact = sk_ids(bank, calib)
    assert recall_lower_bound(query_recalls(index.search(calib, K)[1], exact)) >= TARGET
    fewer = build_index(bank, kind="ivf_flat", nprobe=nprobe - 1)
    assert recall_lower_bound(query_recalls(fewer.search(calib, K)[1], exact)) < TARGET
    fixed = build_index(bank, kind="ivf_flat")
    assert fixed.options["nprobe"] != nprobe


def test_calibration_is_deterministic(data):
    """Two builds: the same width, and bit-identical distances and ids."""
    bank, calib, held = data
    a = build_index(bank, kind="ivf_flat", recall_queries=calib, recall_k=K,
                    recall_target=0.99)
    b = build_index(bank, kind="ivf_flat", recall_queries=calib, recall_k=K,
                    recall_target=0.99)
    assert a.options == b.options and a.recall == b.recall
    da, ia = a.search(held, K)
    db, ib = b.search(held, K)
    np.testing.assert_array_equal(da, db)
    np.testing.assert_array_equal(ia, ib)


def test_calibrate_width_doubles_then_bisects():
    """Hand-computed: recall(w) = w / 37 reaches 0.95 first at w = 36 (35.15 -> 36); the
    doubling visits 1, 2, 4, 8, 16, 32, 64 and the bisection 48, 40, 36, 34, 35; an
    unreachable target returns (hi, recall(hi))."""
    calls: list[int] = []

    def recall(w: int) -> float:
        calls.append(w)
        return min(1.0, w / 37)

    assert calibrate_width(recall, 1, 100, 0.95) == (36, 36 / 37)
    assert calls == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 34, 35]
    assert calibrate_width(lambda w: 0.5, 1, 10, 0.95) == (10, 0.5)
    assert calibrate_width(lambda w: 1.0, 3, 10, 0.95) == (3, 1.0)


def test_recall_lower_bound_by_hand():
    """Per-query recalls [1, 0.5]: mean 0.75, sd (ddof 1) sqrt(0.125), so the bound is
    0.75 - 1.645 * sqrt(0.125) / sqrt(2) = 0.75 - 1.645 * 0.25 = 0.33875; one query: itself;
    query_recalls counts hits per row (the -1 "not found" never a hit)."""
    assert recall_lower_bound(np.array([1.0, 0.5])) == pytest.approx(0.33875, abs=1e-12)
    assert recall_lower_bound(np.array([0.8])) == pytest.approx(0.8)
    got = query_recalls(np.array([[0, 1], [5, -1]]), np.array([[1, 0], [5, 6]]))
    np.testing.assert_array_equal(got, [1.0, 0.5])


@pytest.mark.parametrize(("options", "needle"), [
    ({"recall_target": 0.0}, r"recall_target=0.0 must satisfy 0 < recall_target <= 1"),
    ({"recall_target": 1.5}, r"recall_target=1.5 must satisfy"),
    ({"recall_target": True}, r"recall_target=True must satisfy"),
    ({"recall_target": 0.9, "recall_queries": None}, r"recall_target needs recall_queries"),
    ({"recall_target": 0.9, "nprobe": 4}, r"nprobe=4 and recall_target=0.9 are exclusive"),
    ({"train_points_per_list": 10}, r"train_points_per_list=10 must be >= 39"),
])
def test_bad_calibration_options_are_one_line_errors(data, options, needle):
    bank, calib, _ = data
    kwargs = {"recall_queries": calib, "recall_k": K, **options}
    with pytest.raises(UsageError, match=needle):
        build_index(bank, kind="ivf_flat", **kwargs)


def test_hnsw_target_excludes_an_explicit_ef_search(data):
    bank, calib, _ = data
    with pytest.raises(UsageError, match=r"ef_search=64 and recall_target=0.9 are exclusive"):
        build_index(bank, kind="hnsw", ef_search=64, recall_queries=calib, recall_k=K,
                    recall_target=0.9)


def test_knn_scorer_calibrates_by_default(shared_store):
    """knn with index=ivf_flat: recall_target 0.95 by default, recorded with the chosen
    nprobe; recall_target=null keeps the fixed default nprobe max(8, nlist // 16); a bad
    target is refused naming the parameter."""
    st = shared_store
    scorer = kit.fitted("knn", st, K=10, index="ivf_flat")
    diag = scorer.diagnostics
    assert diag["index_options"]["recall_target"] == 0.95 and diag["recall_at_k"] >= 0.95
    q = refs.normalize(refs.feats(st, "id/val")).astype(np.float32)
    bank = refs.normalize(refs.feats(st, "id/train")).astype(np.float32)
    assert diag["recall_at_k"] == pytest.approx(
        recall_at_k(scorer.index.search(q, 10)[1], sk_ids(bank, q, 10)), abs=0.01)
    fixed = kit.fitted("knn", st, K=10, index="ivf_flat", recall_target=None)
    nlist = fixed.diagnostics["index_options"]["nlist"]
    assert fixed.diagnostics["index_options"]["nprobe"] == min(nlist, max(8, nlist // 16))
    assert "recall_target" not in fixed.diagnostics["index_options"]
    with pytest.raises(UsageError, match=r"scorer 'knn': recall_target=0 must satisfy"):
        get_scorer("knn", index="ivf_flat", recall_target=0)
