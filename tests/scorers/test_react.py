"""ReAct (scorers/methods/react.py). References: Sun et al. 2021's formula transcribed here in
plain full-matrix NumPy (`np.percentile` over all entries, clip, `scipy.special.logsumexp`),
compared at rtol 1e-6 with the scorer in 97-row chunks; `np.percentile` (float64 'linear') for
the exact, memory-bounded radix-select threshold; a separate construct/fit/score per setting
for `score_grid` (rtol 1e-9); the float32 store for the float16 one."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreError
from scorers import get_scorer, list_scorers
from scorers.kernels.select import exact_percentiles
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def ref_react(store: Store, split: str, percentile: float = 90,
              percentile_split: str = "id/train") -> np.ndarray:
    """Sun et al. 2021: clip at the p-th percentile of all ID activations, then energy."""
    c = np.percentile(np.asarray(store.split(percentile_split).features).ravel(), percentile)
    w, b = refs.head(store)
    return refs.energy(np.minimum(refs.feats(store, split), c) @ w.T + b)


@pytest.mark.parametrize("params", [
    {}, {"percentile": 99}, {"percentile": 50, "percentile_split": "id/val"}],
    ids=["default", "p=99", "p=50-id/val"])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the full-matrix transcription of the paper's formula."""
    kit.assert_chunked_matches_reference(shared_store, "react", params, ref_react)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "react")


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "react", {})


def test_explicit_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "react", {}, {
        "percentile_split": ["id/train", "id/val"], "percentile": [10, 90]})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["react"]
    assert row["defaults"] == {"percentile": 90, "percentile_split": "id/train"}
    assert row["grid"] == {"percentile": [85, 90, 95, 99]}
    assert row["paper"]


@pytest.mark.parametrize("value", kit.BAD_PERCENTILES)
def test_bad_percentile(value):
    kit.assert_bad_percentile("react", "percentile", value)


def test_bad_percentile_split(shared_store):
    with pytest.raises(ValueError, match=r"percentile_split 'id/nope' is not a split"):
        get_scorer("react", percentile_split="id/nope").fit(shared_store)


def test_float16_store_close_to_float32(make_store):
    """The same data stored as float16 scores within 1e-3 relative of the float32 store."""
    s32 = make_store("f32", dtype="float32", seed=2)
    s16 = make_store("f16", dtype="float16", seed=2)
    a = kit.fitted("react", s32)
    b = kit.fitted("react", s16)
    for split in kit.EVAL_SPLITS:
        np.testing.assert_allclose(b.score(s16.split(split)), a.score(s32.split(split)),
                                   rtol=1e-3)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_exact_percentiles_equal_numpy(chunk):
    """The radix-select threshold equals np.percentile over all entries (float64 'linear'),
    including ties, zeros of both signs, negatives, and tiny inputs."""
    rng = np.random.default_rng(chunk)
    x = np.maximum(rng.normal(0.0, 1.0, size=(301, 13)), 0.0).astype(np.float32)
    x[::5, ::3] = np.round(x[::5, ::3], 1)             # ties
    x[1, :4] = [-0.0, -2.5, -1e-30, 3.4e38]            # signs, subnormal, huge
    ps = [0.5, 1, 25, 50, 60, 85, 90, 95, 99, 99.99]
    for data in (x, x[:1, :1], x[:1, :2], -x):
        rows = [data[i:i + chunk] for i in range(0, len(data), chunk)]
        got = exact_percentiles(lambda rows=rows: iter(rows), ps)
        want = np.percentile(data.astype(np.float64).ravel(), ps)
        assert got == list(want)


def test_exact_percentiles_refuse_nan_and_infinities_sort():
    """A NaN anywhere is an error (a percentile over it is undefined), never a silent
    threshold; +-inf are ordinary ordered values (reference: np.percentile)."""
    x = np.linspace(-3.0, 3.0, 40, dtype=np.float32).reshape(8, 5)
    x[2, 3], x[5, 0] = np.inf, -np.inf
    rows = [x[:3], x[3:]]
    assert exact_percentiles(lambda: iter(rows), [10, 50, 90]) == list(
        np.percentile(x.astype(np.float64).ravel(), [10, 50, 90]))
    x[6, 1] = np.nan
    with pytest.raises(FeatstoreError, match="features contain NaN"):
        exact_percentiles(lambda: iter([x[:3], x[3:]]), [90])
