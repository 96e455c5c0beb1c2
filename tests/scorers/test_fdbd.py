"""fDBD (scorers/methods/fdbd.py). References: Liu & Qin 2024's mean over j != c of
|l_c - l_j| / ||w_c - w_j||, over ||h - mu|| (or ||h||), as an explicit per-row loop in
NumPy, compared at rtol 1e-6 with the scorer in 97-row chunks; a separate construct/fit/score
per setting for `score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def ref_fdbd(store: Store, split: str, distance_as_normalizer: bool = True) -> np.ndarray:
    """Liu & Qin 2024: mean over j != c of |l_c - l_j| / ||w_c - w_j||, over ||h - mu||."""
    w, _ = refs.head(store)
    x, lg = refs.feats(store, split), refs.logits(store, split)
    mu = refs.feats(store, "id/train").mean(axis=0)
    num_classes = w.shape[0]
    out = np.empty(len(x))
    for i in range(len(x)):
        c = int(np.argmax(lg[i]))
        total = sum(abs(lg[i, c] - lg[i, j]) / np.linalg.norm(w[c] - w[j])
                    for j in range(num_classes) if j != c)
        norm = np.linalg.norm(x[i] - mu) if distance_as_normalizer else np.linalg.norm(x[i])
        out[i] = total / (num_classes - 1) / norm
    return out


@pytest.mark.parametrize("normalizer", [True, False])
def test_matches_reference(shared_store, normalizer):
    """Chunked scorer == the per-row loop transcription of the paper's formula."""
    kit.assert_chunked_matches_reference(shared_store, "fdbd",
                                         {"distance_as_normalizer": normalizer}, ref_fdbd)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "fdbd")


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "fdbd", {})


def test_explicit_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "fdbd", {},
                                    {"distance_as_normalizer": [False, True]})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["fdbd"]
    assert row["defaults"] == {"distance_as_normalizer": True}
    assert row["grid"] == {"distance_as_normalizer": [True, False]}
    assert row["paper"]


def test_bad_normalizer():
    with pytest.raises(ValueError, match=r"distance_as_normalizer must be True or False"):
        get_scorer("fdbd", distance_as_normalizer="yes")
