"""The FAISS wrapper scorers.knn_index (used by KNN and NNGuide). References: one big query
chunk for the chunked search; hand-written index lists for recall@K; scikit-learn
NearestNeighbors' exact ids (L2) and a float64 argsort of inner products (IP) for the recall
an approximate index reports; a separate construct/fit/score per setting for `score_grid`."""

from __future__ import annotations

import numpy as np
import pytest

from featstore.errors import UsageError
from scorers import list_scorers
from scorers.kernels.iptopk import exact_ip_search, exact_ip_values
from scorers.knn_index import OWN_IP_SEARCH_FRACTION, build_index, recall_at_k


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


@pytest.mark.parametrize("k", [1, 7, 12, 120])
def test_exact_ip_search_matches_a_float64_sort_and_faiss(k):
    """exact_ip_search (sgemm + argpartition, what an exact IP index answers at k >= N / 10)
    against two references: a float64 argsort of every inner product (the ids, where the
    top k has no near-tie, and the values to float32 rounding) and FAISS's IndexFlatIP
    (the values, to float32 rounding); also through KnnIndex.search with a
    block of 5 queries (OWN_IP_BLOCK_ENTRIES lowered; FAISS answers below k = N / 10)."""
    import faiss

    import scorers.kernels.iptopk as iptopk

    rng = np.random.default_rng(3)
    bank = rng.normal(size=(120, 24)).astype(np.float32)
    queries = rng.normal(size=(33, 24)).astype(np.float32)
    dist, ids = exact_ip_search(bank, queries, k)
    exact64 = queries.astype(np.float64) @ bank.T.astype(np.float64)
    want_ids = np.argsort(-exact64, axis=1, kind="stable")[:, :k]
    assert np.array_equal(ids, want_ids)
    np.testing.assert_allclose(dist, np.take_along_axis(exact64, want_ids, axis=1),
                               rtol=1e-5, atol=1e-5)
    flat = faiss.IndexFlatIP(24)
    flat.add(bank)
    # FAISS runs its sgemm in the other operand order: float32 rounding apart (atol: ~1e-6
    # of the scale, |q . b| <= 20)
    np.testing.assert_allclose(dist, flat.search(queries, k)[0], rtol=1e-6, atol=1e-5)
    index = build_index(bank, metric="ip", kind="exact")
    assert index._uses_own_ip_search(k) == (k * OWN_IP_SEARCH_FRACTION >= 120)
    old = iptopk.OWN_IP_BLOCK_ENTRIES
    iptopk.OWN_IP_BLOCK_ENTRIES = 5 * 120
    try:
        got_d, got_i = index.search(queries, k)
        got_v = index.search_values(queries, k)
    finally:
        iptopk.OWN_IP_BLOCK_ENTRIES = old
    assert np.array_equal(got_i, want_ids)  # BLAS may round a 5-row block differently
    np.testing.assert_allclose(got_d, dist, rtol=1e-6, atol=1e-5)
    assert np.array_equal(got_v, got_d)  # the values alone: the same bits
    assert np.array_equal(exact_ip_values(bank, queries, k), dist)


def test_index_refuses_bad_k_and_kind():
    bank = np.eye(4, dtype=np.float32)
    with pytest.raises(UsageError, match="kind 'kdtree'"):
        build_index(bank, kind="kdtree")
    idx = build_index(bank)
    with pytest.raises(UsageError, match=r"k=5 must satisfy 1 <= k <= 4"):
        idx.search(bank, 5)


def test_knn_index_is_not_a_scorer():
    assert "knn_index" not in {e["name"] for e in list_scorers()}
