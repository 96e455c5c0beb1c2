"""Temperature scaling (scorers/methods/temp_scaling.py). References: a brute-force grid
minimisation of the mean NLL of softmax(l / T) over the labelled id/val rows (Guo et al. 2017)
written here with `scipy.special.logsumexp`; the log-odds log p - log(1 - p) of
p = max_k softmax(l / T)_k from scipy's log_softmax at the fitted T for the scores; an mpmath
(80-digit) transcription for the extreme-temperature and huge-logit cases; scikit-learn
`roc_auc_score` for the sign."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_softmax as sp_log_softmax
from scipy.special import logsumexp as sp_logsumexp

from featstore import Store
from featstore.errors import FeatstoreError
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit
from tests.helpers.stores import store_without_id_val

CASES = [{}]


def ref_nll(logit_rows: np.ndarray, y: np.ndarray, temps: np.ndarray) -> np.ndarray:
    """Guo et al. 2017: mean NLL of softmax(l / T) at the true label, for every T in temps."""
    scaled = logit_rows[None, :, :] / temps[:, None, None]  # (T, n, C)
    log_probs = scaled - sp_logsumexp(scaled, axis=2, keepdims=True)
    return -log_probs[:, np.arange(len(y)), y].mean(axis=1)


def brute_force_temperature(logit_rows: np.ndarray, y: np.ndarray) -> float:
    """argmin_T NLL(T) on a log grid over [0.01, 100], refined once around the best point."""
    coarse = np.geomspace(0.01, 100.0, 401)
    i = int(np.argmin(ref_nll(logit_rows, y, coarse)))
    fine = np.linspace(coarse[max(i - 1, 0)], coarse[min(i + 1, len(coarse) - 1)], 401)
    return float(fine[int(np.argmin(ref_nll(logit_rows, y, fine)))])


def reference(params, store, scorer, split) -> np.ndarray:
    log_p = sp_log_softmax(refs.logits(store, split) / scorer.fitted_temperature,
                           axis=1).max(axis=1)
    return log_p - np.log(-np.expm1(log_p))  # log(p / (1 - p)) in log space


(test_matches_paper_formula_structured_store, test_matches_paper_formula_chunked_float16,
 test_sign_id_scores_higher) = kit.logit_reference_tests("temp_scaling", CASES, reference)


def test_registry_entry():
    """Reference: OpenOOD v1.5 configs/postprocessors/temp_scaling.yml (no sweep)."""
    info = {s["name"]: s for s in list_scorers()}["temp_scaling"]
    assert info["grid"] == {} and info["defaults"] == {}
    assert "fit:id/val" in info["needs"]
    assert info["paper"] and "logits" in info["needs"]


def test_temp_scaling_temperature_equals_brute_force(shared_store, make_store):
    """The fitted T agrees with the brute-force NLL minimum to 1e-3 relative."""
    c12 = make_store("c12", seed=7, num_classes=12, dim=16, n_train=60, n_val=400, n_test=60,
                     n_ood=40)
    for store in (shared_store, c12):
        scorer = get_scorer("temp_scaling").fit(store)
        val = store.split("id/val")
        want = brute_force_temperature(refs.logits(store, "id/val"), np.asarray(val.labels))
        assert scorer.fitted_temperature == pytest.approx(want, rel=1e-3)
        assert 0.01 < scorer.fitted_temperature < 100


def test_temp_scaling_ignores_unlabelled_rows(tmp_path):
    """Brute-force NLL minimisation over the labelled id/val rows only (label -1 rows carry
    no class and are left out of the NLL)."""
    rng = np.random.default_rng(11)
    c, d = 4, 6
    w, b = rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32)
    y = np.arange(300) % c
    logit_rows = (rng.normal(size=(300, c)) + 2.0 * np.eye(c)[y]).astype(np.float32)
    y_stored = y.copy()
    y_stored[::3] = -1
    splits = {
        "id/val": {"features": rng.normal(size=(300, d)), "logits": logit_rows,
                   "labels": y_stored},
        "id/test": {"features": rng.normal(size=(50, d)), "labels": np.arange(50) % c},
    }
    store = Store.from_arrays(tmp_path / "s", head=(w, b), splits=splits)
    scorer = get_scorer("temp_scaling")
    scorer.chunk_rows = 64
    scorer.fit(store)
    keep = y_stored >= 0
    want = brute_force_temperature(logit_rows[keep].astype(np.float64), y_stored[keep])
    assert scorer.fitted_temperature == pytest.approx(want, rel=1e-3)


def test_temp_scaling_warns_on_degenerate_fit(tmp_path):
    """When every id/val row is confidently wrong, the NLL keeps falling as T -> infinity
    (towards log C), so the optimum is the upper search bound (100) and the fit warns."""
    c, d = 3, 4
    y = np.arange(60) % c
    logit_rows = (20.0 * np.eye(c)[(y + 1) % c]).astype(np.float32)
    splits = {"id/val": {"features": np.zeros((60, d)), "logits": logit_rows, "labels": y}}
    store = Store.from_arrays(tmp_path / "s", head=(np.zeros((c, d), np.float32),
                                                    np.zeros(c, np.float32)), splits=splits)
    with pytest.warns(UserWarning, match="bound"):
        scorer = get_scorer("temp_scaling").fit(store)
    assert scorer.fitted_temperature == pytest.approx(100.0, rel=1e-2)


def test_fit_without_id_val_names_it(tmp_path):
    """Reference: DESIGN §5 needs vocabulary; a store without id/val cannot fit a scorer
    that needs `fit:id/val`."""
    with pytest.raises(FeatstoreError, match="id/val"):
        get_scorer("temp_scaling").fit(store_without_id_val(tmp_path / "s"))


def _mp_logodds(row, temperature: float) -> float:
    """80-digit mpmath transcription of log(p / (1 - p)), p = max_k softmax(l / T)_k."""
    import mpmath as mp

    with mp.workdps(80):
        z = [mp.mpf(float(x)) / mp.mpf(temperature) for x in row]
        top = max(range(len(z)), key=lambda k: z[k])
        rest = mp.fsum(mp.exp(z[k] - z[top]) for k in range(len(z)) if k != top)
        return float(-mp.log(rest))


@pytest.mark.filterwarnings("ignore:.*lies on the search bound")
@pytest.mark.parametrize(("temperature", "scale"), [(0.028, 1.0), (1.0, 1e4), (1e-4, 30.0),
                                                    (1e6, 1.0)])
def test_softmax_family_never_saturates(tmp_path, temperature, scale):
    """An extreme temperature (0.028 fitted, 1e-4, 1e6) or huge logits (x 1e4): p = max softmax
    rounds to 1.0 for many rows, yet temp_scaling keeps every row's order: the kernel and the
    scorer equal the mpmath log-odds to 1e-9 relative, stay finite, and the AUROC equals that
    of the exact scores (scikit-learn)."""
    from sklearn.metrics import roc_auc_score

    from scorers.kernels.softmax import max_softmax, max_softmax_logodds

    rng = np.random.default_rng(3)
    c, d = 5, 6
    w, b = rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32)
    lid = (scale * (rng.normal(size=(80, c)) + 4.0 * np.eye(c)[np.arange(80) % c]))
    lood = scale * rng.normal(size=(80, c))
    lid, lood = lid.astype(np.float32), lood.astype(np.float32)
    ref_id = np.array([_mp_logodds(r, temperature) for r in lid.astype(np.float64)])
    ref_ood = np.array([_mp_logodds(r, temperature) for r in lood.astype(np.float64)])
    np.testing.assert_allclose(max_softmax_logodds(lid, temperature), ref_id, rtol=1e-9,
                               atol=1e-9)
    np.testing.assert_allclose(max_softmax_logodds(lood, temperature), ref_ood, rtol=1e-9,
                               atol=1e-9)
    want = roc_auc_score(np.r_[np.ones(80), np.zeros(80)], np.r_[ref_id, ref_ood])
    prob = np.r_[max_softmax(lid, temperature), max_softmax(lood, temperature)]
    if temperature < 1 or scale > 1:  # the probability form itself is saturated here
        assert np.unique(prob).size < prob.size
    splits = {n: {"features": rng.normal(size=(80, d)).astype(np.float32), "logits": lg,
                  "labels": np.arange(80) % c if n.startswith("id") else None}
              for n, lg in (("id/val", lid), ("id/test", lid), ("ood/far/x", lood))}
    splits = {n: {k: v for k, v in e.items() if v is not None} for n, e in splits.items()}
    st = Store.from_arrays(tmp_path / "s", head=(w, b), splits=splits)
    ts = get_scorer("temp_scaling").fit(st)
    ts.fitted_temperature = temperature  # the extreme fit under test
    got = np.r_[ts.score(st.split("id/test")), ts.score(st.split("ood/far/x"))]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, np.r_[ref_id, ref_ood], rtol=1e-9, atol=1e-9)
    assert roc_auc_score(np.r_[np.ones(80), np.zeros(80)], got) == want
