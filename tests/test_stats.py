"""scorers.stats and scorers.selective against independent references: every resample walk
equals scorers.metrics.ood_metrics on the resampled rows (itself tested against sklearn);
interval endpoints equal scipy.stats.bootstrap (percentile and BCa) on the same resamples;
DeLong's variance and p-value equal an O(N^2) transcription of DeLong et al. (1988); Friedman
equals scipy.stats.friedmanchisquare; Nemenyi's q equals Demšar's (2006) Table 5; Holm and the
paired-bootstrap p-value are checked by hand; AURC/AUGRC equal a NumPy transcription of
fd-shifts' RC-curve code (Traub et al. 2024) and a hand computation; a coverage simulation
on binormal data with analytic AUROC."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from scorers.metrics import OOD_METRIC_NAMES, misclassification_auroc, ood_metrics
from scorers.selective import selective_metrics
from scorers.stats import (
    BootstrapSpec,
    Pair,
    acceleration,
    bca_interval,
    bootstrap_evaluation,
    delong_test,
    friedman,
    holm,
    nemenyi_cd,
    paired_bootstrap_p,
    percentile_interval,
    rank_methods,
)
from scorers.stats.ranking import block_ranks
from scorers.stats.resample import Stratum, add_lanes, counts_from_indices
from scorers.stats.walk import LANES


def _vec(d: dict) -> np.ndarray:
    return np.array([d[k] for k in OOD_METRIC_NAMES])


@pytest.mark.parametrize("tied", [False, True])
def test_resample_walk_equals_metrics_on_resampled_rows(tied):
    rng = np.random.default_rng(1)
    a, b = rng.normal(1, 1, 120), rng.normal(0, 1, 90)
    if tied:
        a, b = np.round(a, 1), np.round(b, 1)
    pair = Pair(a, b)
    assert np.array_equal(pair.point(), _vec(ood_metrics(a, b)))
    i, j = rng.integers(0, 120, (20, 120)), rng.integers(0, 90, (20, 90))
    dist = pair.ood(counts_from_indices(i, 120), counts_from_indices(j, 90))
    for k in range(20):
        np.testing.assert_allclose(dist[k], _vec(ood_metrics(a[i[k]], b[j[k]])),
                                   rtol=1e-12, atol=1e-12)
    jack_id, jack_ood = pair.jackknife()
    for r in (0, 17, 119):
        np.testing.assert_allclose(jack_id[r], _vec(ood_metrics(np.delete(a, r), b)),
                                   rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jack_ood[5], _vec(ood_metrics(a, np.delete(b, 5))),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tied", [False, True])
def test_resample_walk_is_bit_identical_to_metrics_on_resampled_rows(tied):
    """The SIMD resample walk and ood_metrics (itself = sklearn, test_metrics) share one step
    and the same integer-valued weights, so they agree exactly, not just to rounding; with
    resample counts that are not a multiple of the lane width (70 = 64 + 6)."""
    rng = np.random.default_rng(11)
    a, b = rng.normal(1, 1, 150), rng.normal(0, 1, 60)
    if tied:
        a, b = np.round(a, 1), np.round(b, 1)
    i, j = rng.integers(0, 150, (70, 150)), rng.integers(0, 60, (70, 60))
    dist = Pair(a, b).ood(counts_from_indices(i, 150), counts_from_indices(j, 60))
    for k in range(70):
        assert np.array_equal(dist[k], _vec(ood_metrics(a[i[k]], b[j[k]])))


def test_lane_layout_equals_counts_and_widens_past_255():
    """Stratum.lanes draws the resamples Stratum.counts draws (np.bincount of the same
    stream), laid out (chunks, rows, LANES); a row drawn more than 255 times widens the uint8
    layout to int32 instead of wrapping, and the walk on it still equals ood_metrics."""
    counts = Stratum("s", 37, 5).counts(250)
    lanes = Stratum("s", 37, 5).lanes(250)
    assert lanes.dtype == np.uint8 and lanes.shape == (-(-250 // LANES), 37, LANES)
    flat = lanes.transpose(0, 2, 1).reshape(-1, 37)
    assert np.array_equal(flat[:250], counts) and not flat[250:].any()
    idx = np.zeros((3, 300), dtype=np.int64)
    idx[1] = np.arange(300)
    out = add_lanes(np.zeros((1, 300, LANES), np.uint8), idx, 0)
    assert out.dtype == np.int32
    assert (out[0, 0, 0], out[0, 0, 1], out[0, 5, 1], out[0, 0, 2]) == (300, 1, 1, 300)
    rng = np.random.default_rng(12)
    a, b = rng.normal(1, 1, 300), rng.normal(0, 1, 20)
    j = rng.integers(0, 20, (3, 20))
    dist = Pair(a, b).ood(counts_from_indices(idx, 300), counts_from_indices(j, 20))
    for k in range(3):
        assert np.array_equal(dist[k], _vec(ood_metrics(a[idx[k]], b[j[k]])))


def _scipy_same_resamples(a, b, seed, n_boot):
    """The resamples scipy.stats.bootstrap draws with batch=None: all ID rows' indices, then
    all OOD rows' (scipy's _bootstrap_resample: rng.integers(0, n, (B, n)) per sample)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, a.size, (n_boot, a.size)), rng.integers(0, b.size, (n_boot, b.size))


@pytest.mark.parametrize("metric", ["auroc", "fpr95", "aupr_in", "detection_error"])
@pytest.mark.parametrize("method", ["percentile", "BCa"])
def test_intervals_equal_scipy_bootstrap(metric, method):
    rng = np.random.default_rng(7)
    a, b = np.round(rng.normal(1, 1, 45), 1), np.round(rng.normal(0, 1, 35), 1)
    seed, n_boot = 11, 300
    col = OOD_METRIC_NAMES.index(metric)

    def statistic(x, y):
        return ood_metrics(x, y)[metric]

    ref = sps.bootstrap((a, b), statistic, vectorized=False, n_resamples=n_boot,
                        method=method, rng=np.random.default_rng(seed), confidence_level=0.9)
    i, j = _scipy_same_resamples(a, b, seed, n_boot)
    pair = Pair(a, b)
    dist = pair.ood(counts_from_indices(i, a.size), counts_from_indices(j, b.size))
    np.testing.assert_allclose(dist[:, col], ref.bootstrap_distribution, rtol=1e-12)
    if method == "percentile":
        iv = percentile_interval(dist, 0.9)[col]
    else:
        iv = bca_interval(dist, pair.point(), acceleration(pair.jackknife()), 0.9)[col]
    np.testing.assert_allclose(iv, [ref.confidence_interval.low, ref.confidence_interval.high],
                               rtol=1e-10)


def test_bca_acceleration_equals_scipy_jackknife():
    """scipy's _bca_interval returns its acceleration; ours from the dedup'd jackknife."""
    from scipy.stats._resampling import _bca_interval

    rng = np.random.default_rng(3)
    a, b = np.round(rng.normal(1, 1, 30), 1), np.round(rng.normal(0, 1, 25), 1)

    def stat(x, y, axis=-1):
        xs, ys = np.atleast_2d(x), np.atleast_2d(y)
        n = max(xs.shape[0], ys.shape[0])
        xs = np.broadcast_to(xs, (n, xs.shape[-1]))
        ys = np.broadcast_to(ys, (n, ys.shape[-1]))
        out = np.array([ood_metrics(xs[k], ys[k])["aupr_out"] for k in range(n)])
        return out if np.ndim(x) > 1 or np.ndim(y) > 1 else out[0]

    col = OOD_METRIC_NAMES.index("aupr_out")
    point = Pair(a, b).point()[col]
    theta_b = np.linspace(point - 10, point + 10, 50)
    _, _, a_hat = _bca_interval((a, b), stat, axis=-1, alpha=0.05, theta_hat_b=theta_b,
                                batch=None, xp=np)
    ours = acceleration(Pair(a, b).jackknife())[col]
    np.testing.assert_allclose(ours, float(np.squeeze(a_hat)), rtol=1e-10)


def _delong_quadratic(x: np.ndarray, y: np.ndarray):
    """DeLong et al. (1988) as written: psi(X, Y) = 1, 1/2, 0; V10, V01 by explicit sums."""
    m, n = x.shape[1], y.shape[1]
    k = x.shape[0]
    psi = [(x[r][:, None] > y[r][None, :]) + 0.5 * (x[r][:, None] == y[r][None, :])
           for r in range(k)]
    aucs = np.array([p.sum() / (m * n) for p in psi])
    v10 = np.array([p.sum(axis=1) / n for p in psi])
    v01 = np.array([p.sum(axis=0) / m for p in psi])
    s10 = np.array([[((v10[r] - aucs[r]) * (v10[s] - aucs[s])).sum() / (m - 1)
                     for s in range(k)] for r in range(k)])
    s01 = np.array([[((v01[r] - aucs[r]) * (v01[s] - aucs[s])).sum() / (n - 1)
                     for s in range(k)] for r in range(k)])
    cov = s10 / m + s01 / n
    var = cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]
    z = (aucs[0] - aucs[1]) / np.sqrt(var)
    return aucs, cov, z, 2 * sps.norm.sf(abs(z))


@pytest.mark.parametrize("tied", [False, True])
def test_delong_equals_quadratic_transcription(tied):
    rng = np.random.default_rng(5)
    m, n = 80, 60
    base_x, base_y = rng.normal(1, 1, m), rng.normal(0, 1, n)
    xa, ya = base_x + rng.normal(0, 0.5, m), base_y + rng.normal(0, 0.5, n)
    xb, yb = base_x + rng.normal(0, 0.8, m), base_y + rng.normal(0, 0.8, n)
    if tied:
        xa, ya, xb, yb = (np.round(v, 0) for v in (xa, ya, xb, yb))
    res = delong_test(xa, ya, xb, yb)
    aucs, cov, z, p = _delong_quadratic(np.stack([xa, xb]), np.stack([ya, yb]))
    np.testing.assert_allclose(res.aucs, aucs, rtol=1e-12)
    np.testing.assert_allclose(res.cov, cov, rtol=1e-10)
    np.testing.assert_allclose([res.z, res.p_value], [z, p], rtol=1e-9)
    assert res.aucs[0] * 100 == pytest.approx(ood_metrics(xa, ya)["auroc"], rel=1e-12)


def test_delong_identical_scorers_and_bad_input():
    x, y = np.arange(5.0), np.arange(4.0) - 1
    res = delong_test(x, y, x, y)
    assert res.z == 0.0 and res.p_value == 1.0
    with pytest.raises(ValueError, match="same rows"):
        delong_test(x, y, x[:4], y)


def test_friedman_equals_scipy_and_nemenyi_equals_demsar():
    rng = np.random.default_rng(2)
    table = np.round(rng.normal(0, 1, (9, 5)) + np.arange(5), 0)   # with ties
    ranks = block_ranks(table, "max")
    stat, p = friedman(ranks)
    ref = sps.friedmanchisquare(*table.T)
    assert stat == pytest.approx(ref.statistic, rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-10)
    # Demšar (2006), Table 5(a): q_0.05 = 2.569 for k = 4; CD = q sqrt(k (k+1) / (6 N))
    assert nemenyi_cd(4, 14) == pytest.approx(2.569 * np.sqrt(20 / 84), abs=1e-3)
    assert nemenyi_cd(10, 30) == pytest.approx(3.164 * np.sqrt(110 / 180), abs=1e-3)
    res = rank_methods(table, list("abcde"), "max")
    assert res.mean_ranks[4] < res.mean_ranks[0]           # e has the highest values
    assert res.nemenyi_p.shape == (5, 5) and np.allclose(np.diag(res.nemenyi_p), 1.0)
    # lower-is-better metrics rank the other way round
    assert np.array_equal(block_ranks(-table, "min"), ranks)


def test_rank_methods_bad_input():
    with pytest.raises(ValueError, match="at least 2 blocks"):
        rank_methods(np.ones((1, 3)), list("abc"))
    with pytest.raises(ValueError, match="non-finite"):
        rank_methods(np.array([[1, np.nan, 2], [1, 2, 3]]), list("abc"))
    with pytest.raises(ValueError, match="at least 3 methods"):
        rank_methods(np.ones((4, 2)), list("ab"))


def test_holm_and_paired_p_by_hand():
    # p = (0.01, 0.04, 0.03, 0.5): sorted 0.01*4=0.04, 0.03*3=0.09, 0.04*2=0.08->0.09, 0.5
    np.testing.assert_allclose(holm(np.array([0.01, 0.04, 0.03, 0.5])),
                               [0.04, 0.09, 0.09, 0.5])
    np.testing.assert_allclose(holm(np.array([0.2, np.nan, 0.6])), [0.4, np.nan, 0.6])
    # d = a - b = (1, 2, 3, -1): #(d<=0) = 1, #(d>=0) = 3: p = 2 * (1+1)/5 = 0.8
    assert paired_bootstrap_p(np.array([1.0, 2, 3, -1]), np.zeros(4)) == pytest.approx(0.8)
    assert paired_bootstrap_p(np.ones(9), np.zeros(9)) == pytest.approx(0.2)
    assert paired_bootstrap_p(np.ones(9), np.ones(9)) == 1.0


def _fdshifts_transcription(conf: np.ndarray, residuals: np.ndarray) -> tuple[float, float]:
    """fd-shifts rc_stats_utils.{selective,generalized}_risk_stats + evaluate_auc, as loops:
    RC points from coverage 1 down; AUGRC = trapezoid with (0, 0); AURC = per segment
    E_p - E_n + (E_n C_p - E_p C_n) ln(C_p / C_n) / (C_p - C_n), plus E_last, over n."""
    n = len(residuals)
    idx = np.argsort(conf, kind="stable")
    r, c = residuals[idx], conf[idx]
    cov, err = n, float(r.sum())
    covs, errs = [float(n)], [err]
    for i in range(n - 1):
        cov -= 1
        err -= r[i]
        if c[i] != c[i + 1]:
            covs.append(float(cov))
            errs.append(err)
    covs_a, errs_a = np.array(covs), np.array(errs)
    gr_cov = np.r_[covs_a / n, 0.0]
    gr = np.r_[errs_a / n, 0.0]
    augrc = float(-np.trapezoid(gr, gr_cov))
    aurc = 0.0
    for k in range(len(covs) - 1):
        cp, cn, ep, en = covs[k], covs[k + 1], errs[k], errs[k + 1]
        aurc += ep - en + (en * cp - ep * cn) * np.log(cp / cn) / (cp - cn)
    aurc += errs[-1]
    return 100 * aurc / n, 100 * augrc


def _logits_for(correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels = np.zeros(correct.size, dtype=np.int64)
    logits = np.zeros((correct.size, 2))
    logits[:, 0] = np.where(correct, 1.0, -1.0)
    return logits, labels


def test_aurc_augrc_by_hand_and_against_fdshifts_transcription():
    logits, labels = _logits_for(np.array([True, False, True, False]))
    res = selective_metrics(np.array([0.9, 0.8, 0.7, 0.6]), logits, labels)
    # by hand: AUGRC = 0.25*0.25/2 + 0.25*0.25 + 0.25*0.75/2 = 0.1875;
    # AURC = (0 + (1 - ln 2) + (3 - 2) ln 1.5 + (1 - 2 ln(4/3))) / 4
    assert res["augrc"] == pytest.approx(18.75, rel=1e-12)
    hand = (1 - np.log(2) + np.log(1.5) + 1 - 2 * np.log(4 / 3)) / 4
    assert res["aurc"] == pytest.approx(100 * hand, rel=1e-12)
    rng = np.random.default_rng(4)
    for tied in (False, True):
        s = rng.normal(0, 1, 300)
        correct = rng.random(300) < 1 / (1 + np.exp(-2 * s - 1))
        if tied:
            s = np.round(s, 1)
        logits, labels = _logits_for(correct)
        res = selective_metrics(s, logits, labels)
        aurc, augrc = _fdshifts_transcription(s, (~correct).astype(float))
        assert res["aurc"] == pytest.approx(aurc, rel=1e-10)
        assert res["augrc"] == pytest.approx(augrc, rel=1e-10)
        if not tied:  # Traub et al.: AUGRC = ((1 - AUROC_f) acc + err / 2) err
            acc, auc = correct.mean(), misclassification_auroc(s, logits, labels) / 100
            assert res["augrc"] == pytest.approx(100 * ((1 - auc) * acc + (1 - acc) / 2)
                                                 * (1 - acc), rel=1e-10)


def test_coverage_of_auroc_intervals_on_binormal_data():
    """1000 datasets (100 ID ~ N(1, 1), 100 OOD ~ N(0, 1)): true AUROC = Phi(1 / sqrt 2);
    the 95% percentile interval from 300 stratified resamples covers it 93-97% of the time."""
    truth = 100 * sps.norm.cdf(1 / np.sqrt(2))
    rng = np.random.default_rng(2024)
    covered = 0
    n_sets = 1000
    for k in range(n_sets):
        a, b = rng.normal(1, 1, 100), rng.normal(0, 1, 100)
        cp = Stratum("id", 100, k).counts(300)
        cq = Stratum("ood", 100, k).counts(300)
        lo, hi = percentile_interval(Pair(a, b).ood(cp, cq)[:, :1], 0.95)[0]
        covered += lo <= truth <= hi
    print(f"coverage {covered / n_sets:.3f}")
    assert 0.93 <= covered / n_sets <= 0.97


def test_bootstrap_evaluation_groups_determinism_and_spec_errors():
    rng = np.random.default_rng(8)
    n_id = 80
    scores = {m: {"id/test": rng.normal(1 + i, 1, n_id), "ood/near/a": rng.normal(0, 1, 50),
                  "ood/near/b": rng.normal(0, 1, 40), "ood/far/c": rng.normal(-1, 1, 30)}
              for i, m in enumerate(["m1", "m2"])}
    groups = {"near": ["ood/near/a", "ood/near/b"], "far": ["ood/far/c"]}
    correct = rng.random(n_id) < 0.8
    labelled = np.ones(n_id, dtype=bool)
    spec = BootstrapSpec(0.95, 200, "bca", seed=3)
    dist, iv = bootstrap_evaluation(spec, "id/test", scores, groups, correct, labelled)
    g = dist.groups["m1"]["near"]
    np.testing.assert_allclose(g, (dist.splits["m1"]["ood/near/a"]
                                   + dist.splits["m1"]["ood/near/b"]) / 2)
    lo, hi = iv["methods"]["m1"]["groups"]["near"]["auroc"]
    point = np.mean([ood_metrics(scores["m1"]["id/test"], scores["m1"][s])["auroc"]
                     for s in groups["near"]])
    assert lo < point < hi
    lo, hi = iv["id_acc"]
    assert lo < 100 * correct.mean() < hi
    assert set(iv["methods"]["m2"]["misc"]) == {"misclassification_auroc", "aurc", "augrc"}
    dist2, iv2 = bootstrap_evaluation(spec, "id/test", scores, groups, correct, labelled)
    assert iv2 == iv and np.array_equal(dist2.splits["m2"]["ood/far/c"],
                                        dist.splits["m2"]["ood/far/c"])
    # a split's resamples do not depend on which other splits take part
    dist3, _ = bootstrap_evaluation(spec, "id/test", scores, {"far": ["ood/far/c"]},
                                    correct, labelled)
    assert np.array_equal(dist3.splits["m1"]["ood/far/c"], dist.splits["m1"]["ood/far/c"])
    with pytest.raises(ValueError, match="--ci"):
        BootstrapSpec(level=1.5)
    with pytest.raises(ValueError, match="--boot"):
        BootstrapSpec(n_boot=1)
    with pytest.raises(ValueError, match="--ci-method"):
        BootstrapSpec(method="basic")
