"""Residual, ViM's baseline (scorers/methods/residual.py). References: -||(x - u) @ NS||,
with u and NS from the full-matrix NumPy transcription of ViM's fit
(`tests.helpers.references.ref_vim_parts`, np.linalg.pinv / eigh), compared at rtol 1e-6 with
the scorer in 97-row chunks; a separate construct/fit/score per setting for `score_grid`
(rtol 1e-9); by-hand norms on a rank-3 store; the same transcription at the clamped dim on
rank-deficient stores (D = 63, rank 60 and 20)."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from scorers import get_scorer, list_scorers
from scorers.sweep import sweep
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


def ref_residual(store: Store, split: str, dim: int | None = None) -> np.ndarray:
    u, ns, _ = ref_vim_parts(store, dim)
    return -np.linalg.norm((refs.feats(store, split) - u) @ ns, axis=1)


@pytest.mark.parametrize("params", [{}, {"dim": 5}], ids=["default", "dim=5"])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the full-matrix transcription of the paper's formula."""
    kit.assert_chunked_matches_reference(shared_store, "residual", params, ref_residual)


def test_sign_residual(shared_store):
    """Residual fails on ood/far/faint by nature: that cluster is small-magnitude features
    close to the origin u, so every residual norm is small. It must hold on ood/near/blend,
    whose isotropic spread (1.0) exceeds the ID clusters' (0.8) outside the principal space."""
    kit.assert_id_mean_above(shared_store, "residual", "ood/near/blend")


def test_residual_default_grid_equals_separate_runs(wide_store):
    """Residual's default grid (OpenOOD dim_list [256, 1000]) needs D > 1000."""
    assert get_scorer("residual").grid == {"dim": [256, 1000]}
    kit.assert_grid_equals_separate(wide_store, "residual", {})


@pytest.mark.parametrize("grid", [{"dim": [1, 16, 31]}, {"dim": [4, 11]}])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_explicit_grid_equals_separate_runs(shared_store, grid, precision):
    kit.assert_grid_equals_separate(shared_store, "residual", {"precision": precision}, grid)


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["residual"]
    assert row["defaults"] == {"dim": None, "precision": "float32"}
    assert row["grid"] == {"dim": [256, 1000]}
    assert row["paper"]


@pytest.mark.parametrize("dim", [32, 40])
def test_bad_residual_dim_at_fit(shared_store, dim):
    assert_bad_dim_at_fit(shared_store, "residual", dim)


def test_bad_residual_dim_construct_and_grid(shared_store):
    assert_bad_dim_construct_and_grid(shared_store, "residual")


def rank3_store(path):
    """id/train features in 3 directions of D=8 (bias 0, so u = 0): S has rank 3."""
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(3, 8)).astype(np.float32)
    x = np.zeros((50, 8), dtype=np.float32)
    x[:, :3] = np.abs(rng.normal(size=(50, 3)))
    test = np.abs(rng.normal(size=(20, 8))).astype(np.float32)
    return Store.from_arrays(path, head=(weight, np.zeros(3, dtype=np.float32)),
                             splits={"id/train": {"features": x}, "id/test": {"features": test}})


def test_residual_dim_beyond_rank_is_an_error(tmp_path):
    """rank(S) = 3: dim = 3 is the train span (well defined: the score is minus the test row's
    norm outside the first 3 coordinates, computed here by hand); dim = 4 or 5 would add
    arbitrary null-space directions, and is an error naming the rank (ViM's dim = 3 leaves no
    residual on the train rows, an error too)."""
    st = rank3_store(tmp_path / "s")
    test = st.split("id/test").read("features").astype(np.float64)
    got = get_scorer("residual", dim=3).fit(st).score(st.split("id/test"))
    np.testing.assert_allclose(got, -np.linalg.norm(test[:, 3:], axis=1), rtol=1e-9)
    for dim in (4, 5):
        with pytest.raises(ValueError, match=rf"dim={dim} is more than the principal "
                           r"directions spanned by 'id/train' .*numerical rank 3.*"
                           r"valid: 1 <= dim <= 3"):
            get_scorer("residual", dim=dim).fit(st).score(st.split("id/test"))
    with pytest.raises(ValueError, match=r"dim=3 leaves no residual on 'id/train' .*"
                       r"valid: 1 <= dim <= 2"):
        get_scorer("vim", dim=3).fit(st).score(st.split("id/test"))


def test_dim_not_below_train_rows_is_refused_before_fit(tmp_path):
    assert_dim_not_below_train_rows_refused(tmp_path, "residual")


def test_residual_rank_deficient_store_clamps_a_default_dim(tmp_path):
    """D = 63, rank 60 (`stores.rank_deficient_store`): as ViM, a default dim above the rank
    (62: a default-grid value clamped to D - 1, where the scorer used to fail at scoring) is
    clamped to rank - 1 = 59 by the defaults rule with the rank in its reason; a given
    dim = 62 is refused at fit naming the rank (valid up to the rank itself, 60); the clamped
    scorer equals the plain NumPy residual at dim = 59 (`ref_residual`, rtol 1e-6), and the
    default grid [256, 1000] sweeps as dim = 59."""
    st, params = assert_rank_60_range_and_default(tmp_path, "residual")
    with pytest.raises(ValueError, match=r"dim=62 is more than the principal directions "
                       r"spanned by 'id/train' .*span 60 directions.*valid: 1 <= dim <= 60"):
        get_scorer("residual", dim=62).fit(st)
    scorer = get_scorer("residual", **params).fit(st)
    for split in ("id/test", "ood/near/t"):
        np.testing.assert_allclose(scorer.score(st.split(split)), ref_residual(st, split, 59),
                                   rtol=1e-6)
    swept = sweep(st, "residual", base_params={"precision": "float64"})
    assert [a["used"] for a in swept.adjusted] == [{"dim": 59}, {"dim": 59}]
    assert swept.chosen["params"]["dim"] == 59


def test_residual_rank_below_the_paper_rule_clamps_the_default(tmp_path):
    """D = 63, rank 20: the default dim 31 is clamped to 19 (reference: ref_residual)."""
    assert_rank_clamps_default(tmp_path, "residual", ref_residual)
