"""KL matching's minimum cross-entropy (scorers/kernels/mincross.py): a float32 GEMM prunes the
templates, float64 sums decide. Reference: the float64 product -(p @ log_t.T) and its row
minimum in NumPy (what kl_matching computed before the float32 pruning), on near-tied
templates chosen so that float32 cannot tell them apart."""

from __future__ import annotations

import numpy as np
from scipy.special import softmax as sp_softmax

from scorers.kernels.mincross import min_cross_entropy, prune_bounds


def _case(seed: int, rows: int = 64, classes: int = 300, templates: int = 40):
    rng = np.random.default_rng(seed)
    probs = sp_softmax(rng.normal(size=(rows, classes)) * 3.0, axis=1)
    base = sp_softmax(rng.normal(size=(templates // 2, classes)), axis=1)
    # pairs of templates 1e-9 apart (relative): float32 products cannot order them
    near = base * (1.0 + 1e-9 * rng.normal(size=base.shape))
    log_t = np.log(np.concatenate([base, near / near.sum(axis=1, keepdims=True)]))
    return probs, np.ascontiguousarray(log_t)


def test_min_cross_entropy_equals_float64_product_on_near_ties():
    for seed in range(3):
        probs, log_t = _case(seed)
        want = (-(probs @ log_t.T)).min(axis=1)
        got = min_cross_entropy(probs, log_t, np.ascontiguousarray(log_t.T, np.float32),
                                float(np.abs(log_t).max()))
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
        again = min_cross_entropy(probs, log_t, np.ascontiguousarray(log_t.T, np.float32),
                                  float(np.abs(log_t).max()))
        np.testing.assert_array_equal(got, again)  # deterministic, bit for bit


def test_float32_products_stay_inside_the_pruning_bound():
    """The bound the pruning relies on: |q32 - q| <= gamma q + tau for every entry."""
    probs, log_t = _case(7, templates=20)
    q = -(probs @ log_t.T)
    q32 = -(probs.astype(np.float32) @ np.ascontiguousarray(log_t.T, np.float32))
    gamma, tau = prune_bounds(q32, probs.shape[1], float(np.abs(log_t).max()))
    assert gamma < 1e-4
    assert np.all(np.abs(q32 - q) <= gamma / 2 * q + tau)  # the unhalved bound holds too
