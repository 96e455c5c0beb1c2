"""Exact inner-product top-k by float32 sgemm + partition: what `scorers.knn_index.KnnIndex`
answers for an exact inner-product search on the CPU at k >= N / 10 (NNGuide's bank), where
FAISS's per-query k-heaps cost more than the sgemm.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

OWN_IP_BLOCK_ENTRIES = 1 << 24  # products held per block of queries (64 MiB of float32)


def _ip_blocks(bank: np.ndarray, queries: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, queries[rows] @ bank.T) per block of queries: one float32 sgemm each, the
    block's (rows, N) products at most ~OWN_IP_BLOCK_ENTRIES."""
    rows = max(1, OWN_IP_BLOCK_ENTRIES // bank.shape[0])
    for lo in range(0, queries.shape[0], rows):
        yield lo, queries[lo:lo + rows] @ bank.T


def exact_ip_search(bank: np.ndarray, queries: np.ndarray,
                    k: int) -> tuple[np.ndarray, np.ndarray]:
    """(inner products (n, k) float32, ids (n, k) int64) of the k largest q . b per query,
    best first: the products by block (`_ip_blocks`), np.argpartition at k, a stable sort of
    the k (ties: the lower position in the partition first). The values are FAISS
    IndexFlatIP's up to float32 rounding (its sgemm runs in the other operand order)."""
    n, total = queries.shape[0], bank.shape[0]
    dist = np.empty((n, k), dtype=np.float32)
    ids = np.empty((n, k), dtype=np.int64)
    for lo, sims in _ip_blocks(bank, queries):
        if k < total:
            top = np.argpartition(sims, total - k, axis=1)[:, total - k:]
        else:
            top = np.broadcast_to(np.arange(total), sims.shape)
        vals = np.take_along_axis(sims, top, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        dist[lo:lo + len(sims)] = np.take_along_axis(vals, order, axis=1)
        ids[lo:lo + len(sims)] = np.take_along_axis(top, order, axis=1)
    return dist, ids


def exact_ip_values(bank: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """The values of `exact_ip_search` alone, (n, k) float32 best first, the same bits (the
    same products; the k largest of a row are one multiset whatever the ids of ties), by
    np.partition + np.sort (no index arrays: far cheaper than the sort of the ids)."""
    n, total = queries.shape[0], bank.shape[0]
    dist = np.empty((n, k), dtype=np.float32)
    for lo, sims in _ip_blocks(bank, queries):
        top = np.partition(sims, total - k, axis=1)[:, total - k:] if k < total else sims
        dist[lo:lo + len(sims)] = np.sort(top, axis=1)[:, ::-1]
    return dist
