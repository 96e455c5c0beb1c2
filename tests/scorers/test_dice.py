"""DICE (scorers/methods/dice.py). References: Sun & Li 2022's masked head (keep the weights
whose contribution mean(h) * W is above the p-th `np.percentile` of all C*D contributions),
energy by `scipy.special.logsumexp`, transcribed here in full-matrix NumPy, compared at rtol
1e-6 with the scorer in 97-row chunks; a separate construct/fit/score per setting for
`score_grid` (rtol 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from featstore import Store
from scorers import list_scorers
from tests.helpers import references as refs
from tests.helpers import scoring as kit


def ref_dice(store: Store, split: str, p: float = 90) -> np.ndarray:
    """Sun & Li 2022: keep the head weights whose contribution mean(h) * W is above the p-th
    percentile of all C*D contributions."""
    w, b = refs.head(store)
    contrib = refs.feats(store, "id/train").mean(axis=0)[None, :] * w
    mask = contrib > np.percentile(contrib, p)
    return refs.energy(refs.feats(store, split) @ (w * mask).T + b)


@pytest.mark.parametrize("params", [{}, {"p": 50}], ids=["default", "p=50"])
def test_matches_reference(shared_store, params):
    """Chunked scorer == the full-matrix transcription of the paper's formula."""
    kit.assert_chunked_matches_reference(shared_store, "dice", params, ref_dice)


def test_sign_id_above_far_ood(shared_store):
    kit.assert_id_mean_above(shared_store, "dice")


def test_default_grid_equals_separate_runs(shared_store):
    kit.assert_grid_equals_separate(shared_store, "dice", {})


def test_default_grid_and_defaults_are_documented():
    row = {r["name"]: r for r in list_scorers()}["dice"]
    assert row["defaults"] == {"p": 90} and row["grid"] == {"p": [10, 30, 50, 70, 90]}
    assert row["paper"]


@pytest.mark.parametrize("value", kit.BAD_PERCENTILES)
def test_bad_percentile(value):
    kit.assert_bad_percentile("dice", "p", value)
