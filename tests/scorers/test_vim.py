"""ViM (scorers/methods/vim.py). References: Wang et al. 2022's formula transcribed here in
plain full-matrix NumPy (np.linalg.pinv / eigh, `scipy.special.logsumexp`), compared at rtol
1e-6 with the scorer run in 97-row chunks; a separate construct/fit/score per setting for
`score_grid` (rtol 1e-9); the float32 store for the float16 one."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreWarning
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit
from tests.helpers.references import ref_vim_parts
from tests.helpers.scoring import (
    assert_bad_dim_at_fit,
    assert_bad_dim_construct_and_grid,
    assert_dim_not_below_train_rows_refused,
    assert_rank_60_range_and_default,
    assert_rank_clamps_default,
)


def ref_vim(store: Store, split: str, dim: int | None = None) -> np.ndarray:
    u, ns, alpha = ref_vim_parts(store, dim)
    r = np.linalg.norm((refs.feats(store, split) - u) @ ns, axis=1)
    return refs.energy(refs.logits(store, split)) - alpha * r


@pytest.mark.parametrize("params", [{}, {"dim": 8}, {"dim": 27}],
                         ids=["default", "dim=8", "dim=27"])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the full-matrix transcription of the paper's formula, in float64
    (rtol 1e-6); the float32 default is held to the issue's bar (1e-5 relative, AUROC within
    0.01) against the same formula in tests/test_precision.py."""
    kit.assert_chunked_matches_reference(shared_store, "vim", {**params, "precision": "float64"},
                                         ref_vim_float64)


def ref_vim_float64(store: Store, split: str, dim: int | None = None,
                    precision: str = "float64") -> np.ndarray:
    return ref_vim(store, split, dim)


def test_vim_wide_default_dim_matches_reference(wide_store):
    """D=1040: the paper's rule gives dim=512 (768 <= D < 2048)."""
    scorer = kit.fitted("vim", wide_store)
    np.testing.assert_allclose(scorer.score(wide_store.split("id/test")),
                               ref_vim(wide_store, "id/test", 512), rtol=1e-6, atol=1e-10)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "vim")


def test_vim_default_grid_equals_separate_runs(wide_store):
    """ViM's raw default grid (dims up to 1000, for D = 2048) on D = 1040."""
    assert get_scorer("vim").grid == {"dim": [42, 128, 256, 512, 1000]}
    kit.assert_grid_equals_separate(wide_store, "vim", {})


@pytest.mark.parametrize("grid", [
    {"dim": [3, 16, 30]},           # V[:, 3:] (29 columns), not V[:, :30]
    {"dim": [2, 6, 9]},             # V[:, :9] (9 columns), not V[:, 2:] (30)
])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_explicit_grid_equals_separate_runs(shared_store, grid, precision):
    """float64 takes the principal side for [2, 6, 9] (bit for bit up to 1e-9); float32 always
    the residual side (to `assert_grid_close`)."""
    kit.assert_grid_equals_separate(shared_store, "vim", {"precision": precision}, grid)


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["vim"]
    assert row["defaults"] == {"dim": None, "precision": "float32"}
    assert row["grid"] == {"dim": [42, 128, 256, 512, 1000]}
    assert row["paper"]


@pytest.mark.parametrize("dim", [32, 40])
def test_bad_vim_dim_at_fit(shared_store, dim):
    assert_bad_dim_at_fit(shared_store, "vim", dim)


def test_bad_vim_dim_construct_and_grid(shared_store):
    assert_bad_dim_construct_and_grid(shared_store, "vim")


def test_vim_dim_beyond_rank_refused_when_given_clamped_when_default(tmp_path):
    """Train features spanning 3 directions (bias 0, so the origin is 0): a given dim >= 3
    leaves no residual (alpha = mean max-logit / 0) and is refused at fit, naming the rank;
    the paper's default (D // 2 = 4) is clamped to rank - 1 = 2 with a warning, and scores
    as dim = 2 given."""
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(3, 8)).astype(np.float32)
    bias = np.zeros(3, dtype=np.float32)
    x = np.zeros((50, 8), dtype=np.float32)
    x[:, :3] = np.abs(rng.normal(size=(50, 3)))
    st = Store.from_arrays(tmp_path / "s", head=(weight, bias),
                           splits={"id/train": {"features": x}, "id/test": {"features": x}})
    with pytest.raises(ValueError, match=r"dim=5 leaves no residual .*span 3 directions.*"
                                         r"valid: 1 <= dim <= 2"):
        get_scorer("vim", dim=5).fit(st)
    with pytest.warns(FeatstoreWarning, match=r"dim=4 -> dim=2 .*rank\(S\) - 1 = 2"):
        clamped = get_scorer("vim").fit(st)
    assert clamped.params["dim"] == 2
    given = get_scorer("vim", dim=2).fit(st).score(st.split("id/test"))
    assert np.isfinite(given).all()
    np.testing.assert_array_equal(clamped.score(st.split("id/test")), given)


def test_vim_rank_deficient_store_clamps_a_default_dim_to_rank(tmp_path):
    """D = 63, rank 60: dim's valid range is [1, 59] = rank - 1 (not D - 1 = 62, which leaves
    no residual: the dim OpenOOD's 256 / 1000 used to clamp to, failing the scorer); a
    default dim of 62 (a default-grid value, not the user's) is clamped to 59 by the defaults
    rule with the rank in its reason, a given dim = 62 is refused naming the rank, and the
    clamped scorer equals the plain NumPy ViM at dim = 59 (`ref_vim`, rtol 1e-6)."""
    st, params = assert_rank_60_range_and_default(tmp_path, "vim")
    with pytest.raises(ValueError, match=r"dim=62 leaves no residual .*span 60 directions"):
        get_scorer("vim", dim=62).fit(st)
    scorer = get_scorer("vim", **params).fit(st)
    for split in ("id/test", "ood/near/t"):
        np.testing.assert_allclose(scorer.score(st.split(split)), ref_vim(st, split, 59),
                                   rtol=1e-6)


def test_vim_rank_below_the_paper_rule_clamps_the_default(tmp_path):
    """D = 63, rank 20: the default dim 31 is clamped to 19 (reference: ref_vim)."""
    assert_rank_clamps_default(tmp_path, "vim", ref_vim)


def test_dim_not_below_train_rows_is_refused_before_fit(tmp_path):
    assert_dim_not_below_train_rows_refused(tmp_path, "vim")


def test_float16_store_close_to_float32(make_store):
    """The same data stored as float16 scores within 1e-3 relative of the float32 store.
    ViM's score is energy - alpha * r, a difference of two terms of similar size (it crosses
    zero), so it is compared relative to the size of those terms: float16 rounding (2^-11
    relative per entry) moves r by a few 1e-4 relative, which is what this bounds."""
    s32 = make_store("f32", dtype="float32", seed=2)
    s16 = make_store("f16", dtype="float16", seed=2)
    a = kit.fitted("vim", s32)
    b = kit.fitted("vim", s16)
    for split in kit.EVAL_SPLITS:
        x32 = a.score(s32.split(split))
        x16 = b.score(s16.split(split))
        lse = refs.energy(refs.logits(s32, split))
        terms = np.abs(lse) + np.abs(lse - x32)        # |energy| + alpha * r
        assert np.all(np.abs(x16 - x32) <= 1e-3 * terms), np.max(np.abs(x16 - x32) / terms)
