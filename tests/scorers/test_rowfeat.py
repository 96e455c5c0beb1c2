"""The fused per-row feature kernels (scorers/kernels/rowfeat.py) and the streamed class sums
(scorers/kernels/classstats.py add_column_sums, add_class_sums_by_correctness). References:
straightforward float64 NumPy transcriptions of each formula (rtol 1e-12: only the order of
the float64 sums differs), numpy's own axis-0 sum bit for bit (the same sequential order),
and the kernels on row subsets bit for bit (each row is computed alone)."""

from __future__ import annotations

import numpy as np
import pytest

from scorers.kernels.classstats import add_class_sums_by_correctness, add_column_sums
from scorers.kernels.rowfeat import (
    fdbd_rows,
    inverse_boundary_table,
    l2_normalize_rows,
    nci_rows,
    pattern_dot_rows,
)

TINY = np.finfo(np.float64).tiny


def arrays(rows: int = 301, dim: int = 37, classes: int = 11, seed: int = 0):
    """Float32 features and logits (dim and classes not multiples of 4: the tails of the
    four-accumulator loops run), float64 class tables, a zero feature row."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, dim)).astype(np.float32)
    x[min(5, rows - 1)] = 0.0
    logits = rng.normal(size=(rows, classes)).astype(np.float32)
    table = rng.normal(size=(classes, dim))
    mean = rng.normal(size=dim)
    return x, logits, logits.argmax(axis=1), table, mean


def test_pattern_dot_rows_is_the_gathered_dot():
    x, _, pred, table, _ = arrays()
    out = np.empty(len(x))
    pattern_dot_rows(x, pred, table, out)
    want = np.einsum("nd,nd->n", x.astype(np.float64), table[pred])
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    part = np.empty(50)
    pattern_dot_rows(x[100:150], pred[100:150], table, part)
    assert np.array_equal(part, out[100:150])


def test_nci_rows_is_proximity_and_l1():
    x, _, pred, weight, mean = arrays()
    prox, l1 = np.empty(len(x)), np.empty(len(x))
    nci_rows(x, pred, weight, mean, prox, l1)
    x64 = x.astype(np.float64)
    centered = x64 - mean
    dist = np.maximum(np.linalg.norm(centered, axis=1), TINY)
    np.testing.assert_allclose(prox, np.einsum("nd,nd->n", weight[pred], centered) / dist,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(l1, np.abs(x64).sum(axis=1), rtol=1e-12)
    assert l1[5] == 0.0


def test_nci_rows_clamps_a_zero_distance():
    """A row equal to the mean: proximity 0 (0 / tiny), never NaN."""
    x, _, pred, weight, _ = arrays(rows=3)
    prox, l1 = np.empty(3), np.empty(3)
    nci_rows(x, pred, weight, x[1].astype(np.float64), prox, l1)
    assert prox[1] == 0.0 and np.isfinite(prox).all()


@pytest.mark.parametrize("centered, plain", [(True, True), (True, False), (False, True)])
def test_fdbd_rows_is_boundary_sum_and_norms(centered, plain):
    x, logits, pred, _, mean = arrays()
    rng = np.random.default_rng(1)
    inv = np.abs(rng.normal(size=(logits.shape[1],) * 2))
    np.fill_diagonal(inv, 0.0)
    boundary, nc, npl = (np.full(len(x), -1.0) for _ in range(3))
    fdbd_rows(x, logits, pred, inv, mean, centered, plain, boundary, nc, npl)
    l64 = logits.astype(np.float64)
    gap = np.abs(l64 - l64[np.arange(len(x)), pred][:, None])
    want = np.einsum("nc,nc->n", gap, inv[pred]) / (logits.shape[1] - 1)
    np.testing.assert_allclose(boundary, want, rtol=1e-12)
    x64 = x.astype(np.float64)
    if centered:
        np.testing.assert_allclose(nc, np.linalg.norm(x64 - mean, axis=1), rtol=1e-12)
    else:
        assert (nc == -1.0).all()  # not asked: untouched
    if plain:
        want_plain = np.maximum(np.linalg.norm(x64, axis=1), TINY)
        np.testing.assert_allclose(npl, want_plain, rtol=1e-12)
        assert npl[5] == TINY
    else:
        assert (npl == -1.0).all()


def test_l2_normalize_rows_into_float32():
    """Reference: NumPy x / ||x|| in float64 (no additive epsilon: a cosine score does not
    depend on the features' scale), rounded to float32; an all-zero row stays 0."""
    x, *_ = arrays()
    x = x.copy()
    x[3] = 0.0
    out = np.empty(x.shape, dtype=np.float32)
    l2_normalize_rows(x, out)
    x64 = x.astype(np.float64)
    norms = np.linalg.norm(x64, axis=1, keepdims=True)
    want = np.divide(x64, norms, out=np.zeros_like(x64), where=norms > 0)
    assert np.all(np.abs(out - want.astype(np.float32)) <= np.spacing(np.abs(want)).astype(
        np.float32))
    assert (out[5] == 0.0).all()


def test_column_sums_equal_numpys_axis0_sum_bit_for_bit():
    x, *_ = arrays(rows=1000)
    x *= np.float32(1e3)
    out = np.zeros(x.shape[1])
    add_column_sums(x, out)
    assert np.array_equal(out, x.astype(np.float64).sum(axis=0))


def test_class_sums_by_correctness():
    """Reference: per-class masked sums in NumPy; out-of-range labels (-1, C) are skipped."""
    x, _, pred, _, _ = arrays(rows=400, classes=5)
    labels = np.random.default_rng(2).integers(-1, 6, size=len(x))
    sums = [np.zeros((5, x.shape[1])) for _ in range(2)]
    counts = [np.zeros(5, dtype=np.int64) for _ in range(2)]
    add_class_sums_by_correctness(x, pred, labels, sums[0], counts[0], sums[1], counts[1])
    x64 = x.astype(np.float64)
    for c in range(5):
        right = (labels == c) & (pred == c)
        wrong = (labels == c) & (pred != c)
        assert counts[0][c] == right.sum() and counts[1][c] == wrong.sum()
        np.testing.assert_allclose(sums[0][c], x64[right].sum(axis=0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(sums[1][c], x64[wrong].sum(axis=0), rtol=1e-12, atol=1e-12)


def test_inverse_boundary_table_equals_the_numpy_form_bit_for_bit():
    """Reference: the NumPy form fDBD's fit had (the same operations in the same order), on a
    head with a duplicated class row (no boundary: 0) and a near-duplicate one."""
    rng = np.random.default_rng(4)
    w = rng.normal(size=(9, 37))
    w[3] = w[1]
    w[5] = w[2] * (1 + 1e-9)
    gram = w @ w.T
    sq = np.einsum("cd,cd->c", w, w)
    dist2 = sq[:, None] + sq[None, :] - 2.0 * gram
    want = np.zeros_like(dist2)
    np.divide(1.0, np.sqrt(np.maximum(dist2, 0.0)), out=want,
              where=dist2 > 1e-12 * (sq[:, None] + sq[None, :]))
    np.fill_diagonal(want, 0.0)
    got = np.empty_like(gram)
    inverse_boundary_table(gram, sq, 1e-12, got)
    assert np.array_equal(got, want)
    assert got[1, 3] == 0.0 and got[3, 1] == 0.0 and np.all(np.diag(got) == 0.0)
