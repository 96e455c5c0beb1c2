"""The kernels behind MDS / RMDS / ViM / Residual's fits and MDS / RMDS's class term:
`scorers.kernels.minsqdist` (float32-pruned, float64-exact min_k ||z - c_k||^2),
`scorers.kernels.gram.GramSum` (dsyrk Gram sums of chunks) and
`scorers.kernels.classstats.add_class_sums` (labelled row sums), and ViM / Residual's origin
`scorers.kernels.subspace.head_origin` and eigendecomposition `PrincipalSpace.from_upper`.
References: numpy.linalg.pinv with the same cutoff (rtol 1e-9) for the origin;
numpy.linalg.eigh of the full symmetric x.T @ x / n for the space (eigenvalues 1e-12 of the
largest, top-k projectors 1e-10); a float64
NumPy brute force over every center (rtol 1e-12), x.T @ x of the whole array in float64
(rtol 1e-12), per-class masked NumPy sums."""

from __future__ import annotations

import numpy as np

from scorers.kernels import subspace
from scorers.kernels.classstats import add_class_sums
from scorers.kernels.gram import GramSum
from scorers.kernels.minsqdist import PrunedMinSq
from scorers.kernels.subspace import PrincipalSpace, head_origin


def brute_min_sq(z: np.ndarray, centers: np.ndarray) -> np.ndarray:
    return ((z[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2).min(axis=1)


def test_pruned_min_equals_the_float64_brute_force():
    """Centers with near-ties (pairs 1e-7 apart: the float32 products cannot separate them,
    the float64 pass must), rows near a center, far rows (large ||z||), a zero row; r = 37
    (not a multiple of 4)."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(40, 37)) * 3.0
    centers[20:] = centers[:20] + 1e-7 * rng.normal(size=(20, 37))
    z = np.concatenate([centers[rng.integers(0, 40, 100)] + 0.01 * rng.normal(size=(100, 37)),
                        rng.normal(size=(50, 37)) * 1e3, np.zeros((1, 37))])
    got = PrunedMinSq(centers)(z)
    np.testing.assert_allclose(got, brute_min_sq(z, centers), rtol=1e-12, atol=1e-12)


def test_pruned_min_with_a_float32_overflow_falls_back_to_float64():
    """||z|| ~ 1e30: every float32 product overflows (inf), so every center is a candidate
    and the float64 distances decide; identical centers (ties) give the same minimum."""
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(6, 9))
    centers[3] = centers[1]
    z = rng.normal(size=(4, 9)) * 1e30
    np.testing.assert_allclose(PrunedMinSq(centers)(z), brute_min_sq(z, centers), rtol=1e-12)


def test_pruned_min_is_the_same_bits_for_any_row_block():
    rng = np.random.default_rng(2)
    centers = rng.normal(size=(30, 64))
    z = rng.normal(size=(200, 64))
    pruned = PrunedMinSq(centers)
    whole = pruned(z)
    assert np.array_equal(np.concatenate([pruned(z[:7]), pruned(z[7:150]), pruned(z[150:])]),
                          whole)


def test_gram_sum_of_chunks_equals_the_whole_product():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1000, 33))
    gram = GramSum(33)
    for lo, hi in ((0, 0), (0, 512), (512, 513), (513, 1000)):  # an empty and a 1-row chunk
        gram.add(x[lo:hi])
    got = gram.matrix(2.0)
    np.testing.assert_allclose(got, 0.5 * (x.T @ x), rtol=1e-12, atol=1e-9)
    assert np.array_equal(got, got.T) and got.flags["C_CONTIGUOUS"]


def test_add_class_sums_skips_labels_outside_the_classes():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 13)).astype(np.float32)
    labels = rng.integers(-2, 7, size=300)
    sums, counts = np.zeros((5, 13)), np.zeros(5, dtype=np.int64)
    add_class_sums(sums, counts, x, labels)
    for k in range(5):
        assert counts[k] == (labels == k).sum()
        np.testing.assert_allclose(sums[k], x[labels == k].astype(np.float64).sum(axis=0),
                                   rtol=1e-12, atol=1e-12)


def test_head_origin_equals_pinv_with_its_cutoff():
    """u = -pinv(W) b for a wide head (C < D), a tall one (C > D) and a rank-deficient one
    (a repeated row and a zero row: the dropped singular values), against numpy's SVD pinv
    with rcond = max(C, D) * eps32 (the cutoff head_origin documents); an all-zero head gives
    u = 0."""
    rng = np.random.default_rng(5)
    eps32 = float(np.finfo(np.float32).eps)
    wide = rng.normal(size=(7, 19))
    tall = rng.normal(size=(23, 6))
    deficient = rng.normal(size=(9, 15))
    deficient[4] = deficient[1]
    deficient[7] = 0.0
    for w in (wide, tall, deficient):
        b = rng.normal(size=w.shape[0])
        want = -(np.linalg.pinv(w, rcond=max(w.shape) * eps32) @ b)
        np.testing.assert_allclose(head_origin(w, b), want, rtol=1e-9, atol=1e-12)
    assert np.array_equal(head_origin(np.zeros((3, 5)), np.ones(3)), np.zeros(5))


def test_principal_space_from_upper_matches_numpy_eigh(monkeypatch):
    """PrincipalSpace.from_upper on a GramSum's accumulator (only its upper triangle read:
    the lower one is set to NaN first) against numpy.linalg.eigh of the full symmetric
    x.T @ x / n, eigenpairs reversed: the eigenvalues, the top-k projectors V_k V_k^T (signs
    of eigenvectors are LAPACK's choice), sqrt(trace S), the rank, a C-contiguous
    orthonormal basis. Shapes: an odd D, D = 130 (not a multiple of the 64-column tiles of
    the in-place transpose) and N < D (rank N); and the same through numpy's eigh of the
    mirrored triangle where D exceeds the 32-bit LAPACK limit (lowered to 100 here)."""
    rng = np.random.default_rng(6)
    for n, d in ((400, 37), (600, 130), (50, 130)):
        x = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=d)
        gram = GramSum(d)
        gram.add(x[: n // 2])
        gram.add(x[n // 2:])
        upper = gram.upper_matrix(n)
        upper[np.tril_indices(d, -1)] = np.nan
        space = PrincipalSpace.from_upper(np.zeros(d), upper, n)
        want_vals, want_vecs = np.linalg.eigh(x.T @ x / n)
        want_vals, want_vecs = want_vals[::-1], want_vecs[:, ::-1]
        top = float(want_vals[0])
        np.testing.assert_allclose(space.eigvals, want_vals, rtol=0, atol=1e-12 * top)
        basis = space.basis
        assert basis.flags["C_CONTIGUOUS"] and basis.shape == (d, d)
        np.testing.assert_allclose(basis.T @ basis, np.eye(d), rtol=0, atol=1e-12)
        for k in (1, min(n, d) // 2, min(n, d) - 1):
            got_p = basis[:, :k] @ basis[:, :k].T
            want_p = want_vecs[:, :k] @ want_vecs[:, :k].T
            np.testing.assert_allclose(got_p, want_p, rtol=0, atol=1e-10)
        assert space.rank == min(n, d)
        np.testing.assert_allclose(space.rms_norm, np.sqrt((x * x).sum() / n), rtol=1e-12)
    # above the 32-bit LAPACK limit (lowered here to 100) numpy's eigh of the mirrored triangle
    monkeypatch.setattr(subspace, "LAPACK32_MAX_ORDER", 100)
    gram = GramSum(130)
    gram.add(x)
    space = PrincipalSpace.from_upper(np.zeros(130), gram.upper_matrix(50), 50)
    np.testing.assert_allclose(space.eigvals, want_vals, rtol=0, atol=1e-12 * top)
    k = 25
    np.testing.assert_allclose(space.basis[:, :k] @ space.basis[:, :k].T,
                               want_vecs[:, :k] @ want_vecs[:, :k].T, rtol=0, atol=1e-10)
    assert space.basis.flags["C_CONTIGUOUS"]
