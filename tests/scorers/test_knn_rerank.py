"""IVF-PQ with exact re-ranking (`scorers.knn_index`, `rerank_factor`).

References: distances and neighbours recomputed in float64 NumPy from the bank (squared L2
||q - x||^2 and inner products q . x; the exact top k by a stable argsort); the recall by
counting the common ids by hand. Data: 64-dim class-clustered rows (40 centres), as small as
keeps each build under a second.
"""

from __future__ import annotations

import numpy as np
import pytest

from featstore.errors import FeatstoreWarning, UsageError
from scorers.knn_index import DEFAULT_RERANK_FACTOR, build_index, query_recalls

DIM, ROWS, K = 64, 6000, 10


def clustered(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((40, DIM)) * 2.0
    x = centres[rng.integers(0, 40, rows)] + rng.standard_normal((rows, DIM))
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bank, 256 calibration queries, 100 held-out queries)."""
    return clustered(ROWS, 0), clustered(256, 1), clustered(100, 2)


def exact_l2(bank: np.ndarray, queries: np.ndarray, ids: np.ndarray) -> np.ndarray:
    diff = queries.astype(np.float64)[:, None, :] - bank.astype(np.float64)[ids]
    return np.einsum("qkd,qkd->qk", diff, diff)


def exact_top(bank: np.ndarray, queries: np.ndarray, k: int, metric: str) -> np.ndarray:
    b, q = bank.astype(np.float64), queries.astype(np.float64)
    if metric == "ip":
        return np.argsort(-(q @ b.T), axis=1, kind="stable")[:, :k]
    d = (q * q).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * q @ b.T
    return np.argsort(d, axis=1, kind="stable")[:, :k]


def test_reranked_distances_are_exact_and_recall_meets_the_target(data):
    bank, cal, held = data
    index = build_index(bank, kind="ivf_pq", nlist=32, recall_queries=cal, recall_k=K,
                        recall_target=0.95)
    assert index.options["rerank_factor"] == DEFAULT_RERANK_FACTOR == 10
    assert index.options["pq_m"] == DIM // 8 and index.options["recall_target"] == 0.95
    assert 1 <= index.options["nprobe"] <= 32 and index.recall >= 0.95
    dist, ids = index.search(held, K)
    assert (ids >= 0).all()
    np.testing.assert_allclose(dist, exact_l2(bank, held, ids), rtol=1e-5, atol=1e-4)
    assert np.all(np.diff(dist, axis=1) >= 0)
    truth = exact_top(bank, held, K, "l2")
    hits = np.mean([len(set(a) & set(t)) / K for a, t in zip(ids, truth, strict=True)])
    assert hits >= 0.9
    np.testing.assert_allclose(query_recalls(ids, truth).mean(), hits)
    again = build_index(bank, kind="ivf_pq", nlist=32, recall_queries=cal, recall_k=K,
                        recall_target=0.95)
    d2, i2 = again.search(held, K)
    np.testing.assert_array_equal(i2, ids)
    np.testing.assert_array_equal(d2, dist)


def test_without_reranking_distances_stay_quantized(data):
    """rerank_factor = 0: PQ distances (not exact), no calibration even with a target."""
    bank, cal, held = data
    index = build_index(bank, kind="ivf_pq", nlist=32, rerank_factor=0, recall_queries=cal,
                        recall_k=K, recall_target=0.95)
    assert "recall_target" not in index.options and index.options["rerank_factor"] == 0
    dist, ids = index.search(held, K)
    exact = exact_l2(bank, held, ids)
    assert np.max(np.abs(dist - exact) / exact) > 1e-3


def test_reranked_inner_products_are_exact(data):
    bank, cal, held = data
    index = build_index(bank, metric="ip", kind="ivf_pq", nlist=32, recall_queries=cal,
                        recall_k=K, recall_target=0.95)
    dist, ids = index.search(held, K)
    want = np.einsum("qd,qkd->qk", held.astype(np.float64), bank.astype(np.float64)[ids])
    np.testing.assert_allclose(dist, want, rtol=1e-5, atol=1e-4)
    assert np.all(np.diff(dist, axis=1) <= 0)
    truth = exact_top(bank, held, K, "ip")
    assert query_recalls(ids, truth).mean() >= 0.9


def test_candidates_beyond_the_bank_still_return_k_neighbours():
    """k x rerank_factor > N (300 rows, k = 50, factor 10): every probed list is searched
    at nprobe = nlist and all k neighbours come back, exact."""
    bank = clustered(300, 3)
    queries = clustered(5, 4)
    index = build_index(bank, kind="ivf_pq", nlist=4, nprobe=4)
    dist, ids = index.search(queries, 50)
    np.testing.assert_array_equal(np.sort(ids, axis=1),
                                  np.sort(exact_top(bank, queries, 50, "l2"), axis=1))
    np.testing.assert_allclose(dist, exact_l2(bank, queries, ids), rtol=1e-5, atol=1e-4)


def test_unreachable_target_warns():
    """Near-isotropic rows and factor 1: the exact top 10 is not among PQ's top 10 even at
    nprobe = nlist, so the index says so instead of claiming the target."""
    rng = np.random.default_rng(5)
    bank = rng.standard_normal((3000, DIM)).astype(np.float32)
    cal = rng.standard_normal((64, DIM)).astype(np.float32)
    with pytest.warns(FeatstoreWarning, match="stays below the recall_target 0.99"):
        index = build_index(bank, kind="ivf_pq", nlist=16, rerank_factor=1,
                            recall_queries=cal, recall_k=K, recall_target=0.99)
    assert index.options["nprobe"] == 16 and index.recall < 0.99


@pytest.mark.parametrize("value", [-1, 1.5, True, "4"])
def test_bad_rerank_factor_is_refused(value):
    with pytest.raises(UsageError, match="rerank_factor=.* must be an integer >= 0"):
        build_index(clustered(100, 0), kind="ivf_pq", nlist=2, rerank_factor=value)


def test_rerank_factor_applies_to_ivf_pq_only():
    with pytest.raises(UsageError, match="rerank_factor=2 applies to ivf_pq only"):
        build_index(clustered(100, 0), kind="ivf_flat", nlist=2, rerank_factor=2)
