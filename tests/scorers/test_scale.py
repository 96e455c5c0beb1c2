"""SCALE (scorers/methods/scale.py). References: Xu et al. 2024's h * exp(sum(h) / sum of the
top-k activations), then energy, transcribed here in full-matrix NumPy with
`scipy.special.logsumexp`, compared at rtol 1e-6 with the scorer in 97-row chunks (1e-9 when
the scorer multiplies the features with W itself); a separate construct/fit/score per setting
for `score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit
from tests.helpers import stores


def ref_scale(store: Store, split: str, percentile: float = 85) -> np.ndarray:
    """Xu et al. 2024: h * exp(sum(h) / sum of the top-k activations), then energy."""
    w, b = refs.head(store)
    x = refs.feats(store, split)
    d = x.shape[1]
    k = d - int(np.round(d * percentile / 100.0))
    s2 = np.array([np.sort(row)[::-1][:k].sum() for row in x])
    return refs.energy((x * np.exp(x.sum(axis=1) / s2)[:, None]) @ w.T + b)


@pytest.mark.parametrize("params", [{}, {"percentile": 65}], ids=["default", "p=65"])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the full-matrix transcription of the paper's formula."""
    kit.assert_chunked_matches_reference(shared_store, "scale", params, ref_scale)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "scale")


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "scale", {})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["scale"]
    assert row["defaults"] == {"percentile": 85}
    assert row["grid"] == {"percentile": [65, 70, 75, 80, 85, 90, 95]}
    assert row["paper"]


@pytest.mark.parametrize("value", kit.BAD_PERCENTILES)
def test_bad_percentile(value):
    kit.assert_bad_percentile("scale", "percentile", value)


def test_empty_keep(shared_store):
    kit.assert_keeps_no_activation("scale", shared_store)


@pytest.mark.parametrize("percentile", [65, 85])
def test_scale_from_features_when_logits_are_not_the_head(tmp_path, percentile):
    """SCALE reads z = l - b off the stored logits only when they are the head's output; with
    logits of another head (scaled by 2) it multiplies the features with W and matches the
    float64 transcription (ref_scale) to 1e-9; with the head's own float32 logits, to 1e-6."""
    arrays = stores.structured_arrays(seed=6)
    Store.from_arrays(tmp_path / "own", head=arrays["head"], splits=arrays["splits"])
    Store.from_arrays(tmp_path / "other", head=arrays["head"],
                      splits=stores.other_head_logits(arrays))
    for name, rtol in (("own", 1e-6), ("other", 1e-9)):
        st = Store.open(tmp_path / name)
        scorer = kit.fitted("scale", st, percentile=percentile)
        assert scorer.logits_are_head is (name == "own")
        for split in kit.EVAL_SPLITS:
            np.testing.assert_allclose(scorer.score(st.split(split)),
                                       ref_scale(st, split, percentile), rtol=rtol, atol=1e-12,
                                       err_msg=f"{name} {split}")
