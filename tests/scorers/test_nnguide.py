"""NNGuide (scorers/methods/nnguide.py). References: Park et al. 2023 / OpenOOD's mean top-K
of <z, z_i E_i> times E(x) from the full float64 similarity matrix with
`scipy.special.logsumexp` (rtol 1e-5: FAISS float32 inner products); a separate
construct/fit/score per setting for `score_grid` (rtol 1e-9). Chunks of 97 rows."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp

from featstore.errors import UsageError
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit
from tests.helpers.scoring import assert_grid_cases, assert_reports_recall

FAISS_RTOL = 1e-5


def ref_nnguide(train, train_logits, test, test_logits, k: int) -> np.ndarray:
    """Park et al. 2023 (OpenOOD NNGuide, whole bank): mean top-k of <z, z_i E_i> times E(x)."""
    bank = refs.normalize(train) * sp_logsumexp(train_logits, axis=1)[:, None]
    sims = refs.normalize(test) @ bank.T
    topk = -np.sort(-sims, axis=1)[:, :k]
    return topk.mean(axis=1) * sp_logsumexp(test_logits, axis=1)


def test_nnguide_matches_bruteforce(shared_store):
    """The whole bank (alpha=1), K in 1, 10, 100."""
    st = shared_store
    train, tl = refs.feats(st, "id/train"), refs.logits(st, "id/train")
    for k in (1, 10, 100):
        scorer = kit.fitted("nnguide", st, K=k, alpha=1.0)
        for name in kit.EVAL_SPLITS:
            ref = ref_nnguide(train, tl, refs.feats(st, name), refs.logits(st, name), k)
            np.testing.assert_allclose(scorer.score(st.split(name)), ref, rtol=FAISS_RTOL)


def test_nnguide_alpha_subsample_is_deterministic_and_sized(shared_store):
    """alpha=0.5: ceil(0.5 * 600) = 300 bank rows; equal to the reference on those rows."""
    st = shared_store
    a = kit.fitted("nnguide", st, K=20, alpha=0.5, seed=3)
    b = kit.fitted("nnguide", st, K=20, alpha=0.5, seed=3)
    assert a.bank_size == b.bank_size == 300
    split = st.split("id/test")
    np.testing.assert_array_equal(a.score(split), b.score(split))
    rows = np.sort(np.random.default_rng(3).choice(kit.N_TRAIN, size=300, replace=False))
    ref = ref_nnguide(refs.feats(st, "id/train")[rows], refs.logits(st, "id/train")[rows],
                      refs.feats(st, "id/test"), refs.logits(st, "id/test"), 20)
    np.testing.assert_allclose(a.score(split), ref, rtol=FAISS_RTOL)


@pytest.mark.parametrize("params", [{"alpha": 1.0}, {"alpha": 0.5, "K": 50}])
def test_sign_id_above_far_ood(shared_store, params):
    scorer = kit.fitted("nnguide", shared_store, **params)
    id_scores = scorer.score(shared_store.split("id/test"))
    ood_scores = scorer.score(shared_store.split("ood/far/faint"))
    assert np.all(np.isfinite(id_scores)) and np.all(np.isfinite(ood_scores))
    assert id_scores.mean() > ood_scores.mean()


@pytest.mark.parametrize(("params", "grid"), [
    ({"alpha": 1.0}, {"K": [1, 10, 100, 600]}),
    ({"alpha": 1.0}, {"K": [5, 50], "alpha": [1.0, 0.25]}),
])
def test_score_grid_equals_separate_runs(shared_store, params, grid):
    assert_grid_cases(shared_store, "nnguide", params, grid)


@pytest.mark.parametrize(("params", "k", "bank"), [
    ({"alpha": 1.0}, 601, 600),
    ({}, 100, 6),          # OpenOOD's defaults: alpha 0.01 of 600 rows = 6 rows
])
def test_k_larger_than_bank_is_refused(shared_store, params, k, bank):
    scorer = get_scorer("nnguide", K=k, **params)
    with pytest.raises(ValueError, match=rf"K={k}\b.*\b{bank} rows"):
        scorer.fit(shared_store)
    ok = kit.fitted("nnguide", shared_store, **{**params, "K": bank})
    with pytest.raises(ValueError, match=rf"K={bank + 1}\b.*valid: 1 <= K <= {bank}"):
        ok.score_grid(shared_store.split("id/test"), {"K": [1, bank + 1]})


@pytest.mark.parametrize(("params", "needle"), [
    ({"alpha": 0}, "alpha=0"),
    ({"index": "lsh"}, "index='lsh'"),
])
def test_invalid_params_name_value_and_range(params, needle):
    with pytest.raises(UsageError, match=rf"{needle}.*(must|not one of)"):
        get_scorer("nnguide", **params)


def test_approximate_index_reports_its_recall(shared_store):
    assert_reports_recall(shared_store, "nnguide", "ivf_flat")


def test_registry_entry():
    entry = {e["name"]: e for e in list_scorers()}["nnguide"]
    assert entry["grid"] == {"K": [100], "alpha": [0.01]}
    assert "fit:id/train" in entry["needs"] and "features" in entry["needs"]
    assert entry["paper"]
    assert entry["defaults"] == {"K": 100, "alpha": 0.01, "seed": 0, "index": "exact",
                                 "recall_target": 0.95}
