"""The fused softmax row kernels (scorers/kernels/rowexp.py behind softmax.py). References:
np.exp (glibc) for the exp, `scipy.special.softmax` / `logsumexp` in float64 for the row
functions, and GEN's np.sort transcription of Liu, Lochman & Zach 2023 (in logs)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp
from scipy.special import softmax as sp_softmax

from scorers.kernels import rowexp
from scorers.kernels import softmax as sm
from tests.helpers import references as refs


def _logits(rows: int = 60, classes: int = 37, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, classes)) * 4.0
    x[0] *= 300.0  # probabilities underflow to 0 and to subnormals
    x[1, :5] = x[1].max() + 1.0  # ties at the max
    x[2] = 0.0  # all equal
    return x.astype(np.float32)


def test_exp_within_one_ulp_of_numpy():
    """Reference: np.exp; every z <= 0 down to below the subnormal range, -inf and NaN."""
    z = np.concatenate([-np.random.default_rng(1).random(20000) * 60.0,
                        -np.linspace(700.0, 760.0, 6001), [0.0, -0.0, -5e-324, -np.inf]])
    got = np.empty_like(z)
    rowexp.exp_array(z, got)
    want = np.exp(z)
    normal = want >= np.finfo(np.float64).tiny
    assert np.all(np.abs(got[normal] - want[normal]) <= np.spacing(want[normal]))
    assert np.max(np.abs(got[~normal] - want[~normal])) <= 5e-324  # one subnormal unit
    assert got[-4] == 1.0 and got[-1] == 0.0
    nan_out = np.empty(1)
    rowexp.exp_array(np.array([np.nan]), nan_out)
    assert np.isnan(nan_out[0])


def test_log_within_two_ulp_of_numpy():
    """Reference: np.log; (0, 1] with subnormals, 0 -> -inf (GEN's log(p (1 - p)))."""
    x = np.concatenate([np.random.default_rng(2).random(20000),
                        np.random.default_rng(3).random(2000) * 1e-300,
                        [5e-324, 1e-310, np.finfo(np.float64).tiny, 0.25, 0.5, 1.0, 0.0]])
    got = np.empty_like(x)
    rowexp.log_array(x, got)
    with np.errstate(divide="ignore"):
        want = np.log(x)
    assert got[-1] == -np.inf
    assert np.all(np.abs(got[:-1] - want[:-1]) <= 2 * np.spacing(np.abs(want[:-1])))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("temperature", [1.0, 0.37, 1000.0])
def test_row_functions_match_scipy(dtype, temperature):
    """Reference: scipy.special softmax / logsumexp of the float64 logits / T."""
    x = _logits().astype(dtype)
    z = x.astype(np.float64) / temperature
    probs = sp_softmax(z, axis=1)
    np.testing.assert_allclose(sm.softmax(x, temperature), probs, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(sm.logsumexp(x, temperature), sp_logsumexp(z, axis=1),
                               rtol=1e-14)
    np.testing.assert_allclose(sm.max_softmax(x, temperature), probs.max(axis=1), rtol=1e-14)
    if temperature == 1.0:
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.sum(np.where(probs > 0, probs * np.log(probs), 0.0), axis=1)
        np.testing.assert_allclose(sm.neg_entropy(x), plogp, rtol=1e-12, atol=1e-14)
        p, got = sm.softmax_plogp(x)
        np.testing.assert_array_equal(got, sm.neg_entropy(x))
        np.testing.assert_array_equal(p, sm.softmax(x))


def test_rows_are_independent_bit_for_bit():
    """Determinism: a row's result does not depend on the rows scored with it."""
    x = _logits(rows=50)
    for fn in (sm.logsumexp, sm.max_softmax, sm.neg_entropy, sm.softmax):
        whole = fn(x)
        np.testing.assert_array_equal(np.concatenate([fn(x[:17]), fn(x[17:])]), whole)
    table = sm.gen_entropies(x, np.array([0.1, 2.0]), np.array([20, 3]))
    np.testing.assert_array_equal(sm.gen_entropies(x[9:], np.array([0.1, 2.0]),
                                                   np.array([20, 3])), table[9:])


def _ref_gen(x: np.ndarray, gamma: float, m: int) -> np.ndarray:
    return refs.gen_score(x, gamma, m)  # in logs: no term saturates (rows 0.. hold gaps ~470)


@pytest.mark.parametrize("classes", [37, 700])
def test_gen_entropies_match_sorted_reference(classes):
    """Reference: the paper's -sum over np.sort's top M of p^g (1 - p)^g (float64); ties,
    underflow, M = C and nested M; 700 classes take the sampled-pivot selection."""
    x = _logits(rows=40, classes=classes, seed=classes)
    x[3, ::2] = 1.5  # many ties at the selection thresholds
    if classes >= 256:  # rows whose strided sample (every C // 64-th entry) misleads the
        x[4, :: classes // 64] = 40.0  # bracket at M = 100: too high, and too low; both
        x[5, :: classes // 64] = -40.0  # fall back to the exact selection
    gammas = np.array([0.01, 0.5, 2.0, 10.0, 2.5])  # 0.5, 2, 10, 2.5: products and sqrt
    ms = np.array([classes, classes // 2, 10, 1])
    got = sm.gen_entropies(x, gammas, ms)
    for g, gamma in enumerate(gammas):
        for q, m in enumerate(ms):
            np.testing.assert_allclose(got[:, g, q], _ref_gen(x, gamma, int(m)),
                                       rtol=1e-11, atol=1e-300, err_msg=f"{gamma} {m}")
    single = sm.gen_entropies(x, gammas[1:2], ms[2:3])[:, 0, 0]
    np.testing.assert_allclose(single, got[:, 1, 2], rtol=1e-13)
    for m in (10, min(100, classes)):  # largest M < C: the sampled bracket (700 classes;
        single = sm.gen_entropies(x, gammas[:2], np.array([m]))  # rows 4, 5 miss it at 100)
        for g in range(2):
            np.testing.assert_allclose(single[:, g, 0], _ref_gen(x, gammas[g], m),
                                       rtol=1e-11, atol=1e-300, err_msg=f"M={m}")


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="classes >= 1"):
        sm.logsumexp(np.zeros((3, 0), np.float32))
    x = np.zeros((2, 5), np.float32)
    for ms in ([6], [2, 3], [0], [3, 3], []):  # above C, increasing, below 1, repeated, none
        with pytest.raises(ValueError, match=r"M values .* in \[1, 5\]"):
            sm.gen_entropies(x, np.array([0.5]), np.array(ms, dtype=np.int64))
    for gammas in ([0.0], [0.5, 0.5]):
        with pytest.raises(ValueError, match="gammas must be distinct and > 0"):
            sm.gen_entropies(x, np.array(gammas), np.array([2]))
