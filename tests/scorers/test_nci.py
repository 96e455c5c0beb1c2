"""NCI (scorers/methods/nci.py). References: OpenOOD v1.5's w_c . (h - mu_G) / ||h - mu_G|| +
alpha ||h||_1 transcribed here in full-matrix NumPy, compared at rtol 1e-6 with the scorer in
97-row chunks; a separate construct/fit/score per setting for `score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from scorers import get_scorer, list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def ref_nci(store: Store, split: str, alpha: float = 0.0001) -> np.ndarray:
    """OpenOOD v1.5 NCI: w_c . (h - mu_G) / ||h - mu_G|| + alpha ||h||_1."""
    w, _ = refs.head(store)
    x, lg = refs.feats(store, split), refs.logits(store, split)
    centered = x - refs.feats(store, "id/train").mean(axis=0)
    c = lg.argmax(axis=1)
    return (np.sum(w[c] * centered, axis=1) / np.linalg.norm(centered, axis=1)
            + alpha * np.abs(x).sum(axis=1))


@pytest.mark.parametrize("params", [{}, {"alpha": 0.1}], ids=["default", "alpha=0.1"])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the full-matrix transcription of OpenOOD's formula."""
    kit.assert_chunked_matches_reference(shared_store, "nci", params, ref_nci)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "nci")


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "nci", {})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["nci"]
    assert row["defaults"] == {"alpha": 0.0001}
    assert row["grid"] == {"alpha": [0.0001, 0.001, 0.01, 0.1]}
    assert row["paper"]


def test_bad_alpha():
    with pytest.raises(ValueError, match=r"alpha must be a finite number >= 0 \(got -1\)"):
        get_scorer("nci", alpha=-1)
