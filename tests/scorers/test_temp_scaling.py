"""Temperature scaling (scorers/methods/temp_scaling.py). References: a brute-force grid
minimisation of the mean NLL of softmax(l / T) over the labelled id/val rows (Guo et al. 2017)
written here with `scipy.special.logsumexp`; ODIN's max_k softmax(l / T)_k (`test_odin.ref_odin`,
scipy) at the fitted T for the scores; scikit-learn `roc_auc_score` for the sign."""

from __future__ import annotations

import conftest as kit
import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp
from test_odin import ref_odin

from featstore import Store
from featstore.errors import FeatstoreError
from scorers import get_scorer, list_scorers

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
    return ref_odin(kit.logits(store, split), scorer.fitted_temperature)


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
        want = brute_force_temperature(kit.logits(store, "id/val"), np.asarray(val.labels))
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


def store_without_id_val(path) -> Store:
    """id/train, id/test and an OOD split, no id/val (C=3, D=5)."""
    rng = np.random.default_rng(0)
    c, d = 3, 5
    head = (rng.normal(size=(c, d)).astype(np.float32), np.zeros(c, np.float32))
    splits = {
        "id/train": {"features": rng.normal(size=(40, d)), "labels": np.arange(40) % c},
        "id/test": {"features": rng.normal(size=(30, d)), "labels": np.arange(30) % c},
        "ood/far/noise": {"features": rng.normal(size=(20, d))},
    }
    return Store.from_arrays(path, head=head, splits=splits)


def test_fit_without_id_val_names_it(tmp_path):
    """Reference: DESIGN §5 needs vocabulary; a store without id/val cannot fit a scorer
    that needs `fit:id/val`."""
    with pytest.raises(FeatstoreError, match="id/val"):
        get_scorer("temp_scaling").fit(store_without_id_val(tmp_path / "s"))
