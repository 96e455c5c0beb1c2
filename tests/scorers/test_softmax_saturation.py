"""The softmax-probability scorers (msp, odin, odin_perturbed, godin, mcdropout msp /
logit_mean) score log max softmax and never tie rows where the probability rounds to 1.0.
Reference: mpmath at 80 digits, -log sum_j exp((l_j - max l) / T) (and, for MC-Dropout's
"msp", log of the mean of the T passes' max-class probabilities); scikit-learn
`roc_auc_score` on the exact scores for the ranking."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from featstore import Store
from scorers import get_scorer
from scorers.cache import ScoreCache
from scorers.evaluate import score_splits
from scorers.kernels.softmax import log_max_softmax, max_softmax


def _mp_log_msp(row: np.ndarray, temperature: float) -> float:
    with mp.workdps(80):
        z = [mp.mpf(float(x)) / mp.mpf(temperature) for x in row]
        top = max(range(len(z)), key=lambda k: z[k])
        # -log(1 + rest) as log1p: 1 + rest at 80 digits would round rest < 1e-80 away
        rest = mp.fsum(mp.exp(z[k] - z[top]) for k in range(len(z)) if k != top)
        return float(-mp.log1p(rest))


def _logits(scale: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    c = 5
    lid = scale * (rng.normal(size=(80, c)) + 4.0 * np.eye(c)[np.arange(80) % c])
    lood = scale * rng.normal(size=(80, c))
    return lid.astype(np.float32), lood.astype(np.float32)


@pytest.mark.parametrize(("temperature", "scale"), [(1.0, 30.0), (0.028, 1.0), (1000.0, 3e4),
                                                    (1e-4, 1.0)])
def test_log_max_softmax_matches_mpmath_where_the_probability_saturates(temperature, scale):
    """Gaps far above 36.7 T: max_softmax rounds to 1.0 and ties rows; log_max_softmax equals
    the mpmath value to 1e-12 relative and keeps the exact AUROC."""
    lid, lood = _logits(scale, np.random.default_rng(5))
    x = np.r_[lid, lood]
    ref = np.array([_mp_log_msp(r, temperature) for r in x.astype(np.float64)])
    got = log_max_softmax(x, temperature)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-300)
    prob = max_softmax(x, temperature)
    assert np.unique(prob).size < prob.size  # the probability form is saturated here
    assert np.unique(got).size == np.unique(ref).size
    y = np.r_[np.ones(80), np.zeros(80)]
    assert roc_auc_score(y, got) == roc_auc_score(y, ref)


def test_log_max_softmax_hand_values():
    """By hand: gaps 40 and 700 give -exp(-40) and -exp(-700) (not 0); a two-way tie gives
    log(1/2); a gap beyond ~745 underflows to 0 (the documented limit)."""
    x = np.array([[0.0, -40.0, -1e4], [0.0, -700.0, -800.0], [3.0, 3.0, -1e4],
                  [0.0, -800.0, -900.0]])
    got = log_max_softmax(x)
    np.testing.assert_allclose(got[:3], [-np.exp(-40.0), -np.exp(-700.0), np.log(0.5)],
                               rtol=1e-14)
    assert got[3] == 0.0


def _store(tmp_path, lid, lood, extras=None):
    rng = np.random.default_rng(0)
    c, d = lid.shape[1], 6
    w, b = rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32)
    splits = {}
    for n, lg in (("id/val", lid), ("id/test", lid), ("ood/far/x", lood)):
        e = {"features": rng.normal(size=(lg.shape[0], d)).astype(np.float32), "logits": lg}
        if n.startswith("id"):
            e["labels"] = np.arange(lg.shape[0]) % c
        if extras:
            e["extras"] = extras(lg)
        splits[n] = e
    return Store.from_arrays(tmp_path, head=(w, b), splits=splits)


@pytest.mark.parametrize(("name", "params", "temperature"), [
    ("msp", {}, 1.0), ("odin", {"temperature": 1.0}, 1.0), ("odin", {}, 1000.0),
    ("odin_perturbed", {"temperature": 1000.0, "epsilon": 0.0}, 1000.0),
    ("godin", {}, 0.5), ("mcdropout", {"variant": "logit_mean"}, 1.0)])
def test_scorers_keep_the_order_of_saturated_rows(tmp_path, name, params, temperature):
    """Each scorer on a store with huge logits (x 3e4): finite, equal to mpmath's log max
    softmax to 1e-9, AUROC equal to that of the exact scores."""
    from featstore.store.extra_keys import odin_name

    lid, lood = _logits(3e4, np.random.default_rng(9))

    def extras(lg):
        return {odin_name(1000.0, 0.0): lg, "godin_h": lg,
                "godin_g": np.full(lg.shape[0], 0.5, np.float32),
                "mc_logits": np.stack([lg, lg])}
    st = _store(tmp_path / "s", lid, lood, extras)
    s = get_scorer(name, **params).fit(st)
    got = np.r_[s.score(st.split("id/test")), s.score(st.split("ood/far/x"))]
    ref = np.array([_mp_log_msp(r, temperature) for r in np.r_[lid, lood].astype(np.float64)])
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-300)
    y = np.r_[np.ones(80), np.zeros(80)]
    assert roc_auc_score(y, got) == roc_auc_score(y, ref)
    assert s.score_form() == "log_prob"


def test_mcdropout_msp_log_of_mean_probability():
    """MC-Dropout "msp" = log of the largest mean probability over passes (log1p of minus the
    other classes' mean mass: the mean itself rounds to 1.0 at 80 digits on these rows); mpmath
    reference with passes whose probability rounds to 1.0 in float64."""
    from scorers.methods.mcdropout import mc_dropout_scores

    rng = np.random.default_rng(2)
    mc = np.stack([rng.normal(size=(30, 4)) * 40.0 for _ in range(3)])
    got = mc_dropout_scores(mc, "msp")
    with mp.workdps(80):
        ref = []
        for i in range(30):
            probs = []
            for t in range(3):
                e = [mp.exp(mp.mpf(float(v))) for v in mc[t, i]]
                s = mp.fsum(e)
                probs.append([v / s for v in e])
            mean = [mp.fsum(p[c] for p in probs) / 3 for c in range(4)]
            top = max(range(4), key=lambda c: mean[c])
            ref.append(float(mp.log1p(-mp.fsum(mean[c] for c in range(4) if c != top))))
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-300)


def test_scores_cached_in_probability_form_are_not_read_back(tmp_path):
    """A scores.h5 entry written before msp became log-space (same params, no form) is a
    miss: score_splits returns the log form, not the cached probabilities."""
    lid, lood = _logits(1.0, np.random.default_rng(1))
    st = _store(tmp_path / "c", lid, lood)
    split = st.split("id/test")
    ScoreCache(st).put("msp", {}, split, max_softmax(lid))
    got, _, _ = score_splits(st, "msp", {}, ["id/test"], True)
    np.testing.assert_allclose(got["id/test"], np.log(max_softmax(lid)), rtol=1e-12)
    again, _, _ = score_splits(st, "msp", {}, ["id/test"], True)  # now cached, log form
    np.testing.assert_array_equal(again["id/test"], got["id/test"])


def _mp_probs(row: np.ndarray) -> tuple[list, list]:
    """(p, 1 - p) of a row at the working precision, 1 - p as the sum of the other classes'
    probabilities (an identity; 1 - p itself would round to 0 at 80 digits where p is
    within 1e-80 of 1)."""
    z = [mp.mpf(float(v)) for v in row]
    top = max(z)
    e = [mp.exp(v - top) for v in z]
    s = mp.fsum(e)
    p = [v / s for v in e]
    return p, [mp.fsum(p[:k] + p[k + 1:]) for k in range(len(p))]


def _mp_gen(row: np.ndarray, gamma: float, m: int) -> float:
    """GEN at 80 digits: -sum over the top-M probabilities of (p (1 - p))^gamma."""
    with mp.workdps(80):
        p, q = _mp_probs(row)
        order = sorted(range(len(p)), key=lambda k: -p[k])[:m]
        return float(-mp.fsum((p[k] * q[k]) ** mp.mpf(gamma) for k in order))


def _mp_mcd_l1(row1: np.ndarray, row2: np.ndarray) -> float:
    """MCD's L1 discrepancy at 80 digits: -sum_c |p1_c - p2_c|, a term whose two p are above
    1/2 as |(1 - p2) - (1 - p1)| (equal in exact arithmetic; |p1 - p2| loses its digits
    where both p round to 1 at 80 digits)."""
    with mp.workdps(80):
        (p1, q1), (p2, q2) = _mp_probs(row1), _mp_probs(row2)
        return float(-mp.fsum(abs(d - c) if min(a, b) > 0.5 else abs(a - b)
                              for a, b, c, d in zip(p1, p2, q1, q2, strict=True)))


@pytest.mark.parametrize("scale", [30.0, 300.0, 3e4])
@pytest.mark.parametrize(("gamma", "m"), [(0.1, 5), (0.5, 2), (0.01, 1)])
def test_gen_keeps_the_order_where_p_rounds_to_one(scale, gamma, m):
    """GEN with logits x 30 / 300 / 3e4: equal to mpmath's value to 1e-9 relative (the top
    class's 1 - p and the tiny p's of the others from logs), AUROC equal to that of the exact
    scores; the naive float64 formula (1 - p of a p that rounds to 1.0, exp(z) underflowed) is
    off by far more than that there."""
    from scorers.kernels.softmax import gen_entropies, softmax

    lid, lood = _logits(scale, np.random.default_rng(4))
    x = np.r_[lid, lood].astype(np.float64)
    ref = np.array([_mp_gen(r, gamma, m) for r in x])
    got = gen_entropies(x, np.array([gamma]), np.array([m]))[:, 0, 0]
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-300)
    y = np.r_[np.ones(80), np.zeros(80)]
    assert roc_auc_score(y, got) == roc_auc_score(y, ref)
    top = np.sort(softmax(x), axis=1)[:, -m:]
    naive = -np.sum((top * (1.0 - top)) ** gamma, axis=1)
    if scale <= 300.0:  # beyond, gamma log(p (1 - p)) itself underflows for most rows
        assert np.any(np.abs(naive - ref) > 1e-3 * np.abs(ref))


@pytest.mark.parametrize("scale", [1.0, 30.0, 3e4])
def test_mcd_l1_keeps_the_order_where_p_rounds_to_one(tmp_path, scale):
    """MCD "l1" on a store with two heads (mostly agreeing, some not) at logits x 1 / 30 /
    3e4: equal to mpmath's -sum |p1 - p2| to 1e-9 relative, AUROC equal to that of the exact
    scores; at x 30 the naive |p1 - p2| of probabilities that round to 1.0 drops a term."""
    from scorers.kernels.softmax import softmax

    rng = np.random.default_rng(6)
    lid, lood = _logits(scale, rng)
    noise = {"id": 0.05, "ood": 1.0}

    def extras(lg):
        kind = "id" if lg is lid else "ood"
        return {"head2_logits": (lg + scale * noise[kind] * rng.normal(size=lg.shape)
                                 ).astype(np.float32)}
    st = _store(tmp_path / "s", lid, lood, extras)
    s = get_scorer("mcd").fit(st)
    got, ref, naive = [], [], []
    for name in ("id/test", "ood/far/x"):
        sp = st.split(name)
        l1 = np.asarray(sp.logits, np.float64)
        l2 = np.asarray(sp.extra("head2_logits"), np.float64)
        got.append(s.score(sp))
        ref.append([_mp_mcd_l1(a, b) for a, b in zip(l1, l2, strict=True)])
        naive.append(-np.abs(softmax(l1) - softmax(l2)).sum(axis=1))
    got_a, ref_a, naive_a = np.concatenate(got), np.concatenate(ref), np.concatenate(naive)
    np.testing.assert_allclose(got_a, ref_a, rtol=1e-9, atol=1e-300)
    y = np.r_[np.ones(len(got[0])), np.zeros(len(got[1]))]
    assert roc_auc_score(y, got_a) == roc_auc_score(y, ref_a)
    if scale == 30.0:  # the naive form drops the shared top class's term (p1 - p2 = 0)
        assert np.any(np.abs(naive_a - ref_a) > 0.4 * np.abs(ref_a))
    if scale == 1.0:  # normal logits: the scores as before (the naive form is exact here)
        np.testing.assert_allclose(got_a, naive_a, rtol=1e-12)


def test_gen_equals_the_plain_formula_on_normal_logits():
    """Normal logits (x 2, 40 classes): GEN as it was computed before (p (1 - p) of the float64
    softmax) to 1e-12 relative, for the products path (gamma 0.5, 2) and the exp path."""
    from scorers.kernels.softmax import gen_entropies, softmax

    x = 2.0 * np.random.default_rng(8).normal(size=(200, 40))
    top = np.sort(softmax(x), axis=1)
    got = gen_entropies(x, np.array([0.01, 0.1, 0.5, 2.0]), np.array([40, 10, 1]))
    for g, gamma in enumerate([0.01, 0.1, 0.5, 2.0]):
        for q, m in enumerate([40, 10, 1]):
            old = -np.sum((top[:, -m:] * (1.0 - top[:, -m:])) ** gamma, axis=1)
            np.testing.assert_allclose(got[:, g, q], old, rtol=1e-12)


def test_gen_and_mcd_scores_cached_by_the_saturating_computation_are_not_read_back(tmp_path):
    """A scores.h5 entry of gen / mcd written before the unsaturated computation (same params,
    no form) is a miss: score_splits recomputes (score_form "unsaturated" is in the key)."""
    lid, lood = _logits(300.0, np.random.default_rng(1))
    st = _store(tmp_path / "c", lid, lood, lambda lg: {"head2_logits": lg[:, ::-1].copy()})
    split = st.split("id/test")
    for name in ("gen", "mcd"):
        stale = np.zeros(split.num_rows)          # what the saturated rows used to be
        ScoreCache(st).put(name, get_scorer(name).params, split, stale)
        got, _, _ = score_splits(st, name, {}, ["id/test"], True)
        assert get_scorer(name).score_form() == "unsaturated"
        np.testing.assert_array_equal(got["id/test"],
                                      get_scorer(name).fit(st).score(split))
        assert np.any(got["id/test"] != 0.0)
